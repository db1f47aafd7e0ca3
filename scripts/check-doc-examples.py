#!/usr/bin/env python3
"""Checks the shell and redis-cli examples of the README and the guide (docs/).

Always (no build needed):
  - every ```sh block parses (`bash -n`);
  - every `make TARGET` it runs is a target of the Makefile;
  - every ```sql statement keeps the fencing rule on sqlite3 (a newer or equal
    token writes, an older one changes nothing);
  - the package name and module version it shows (redlock_X.Y.Z_amd64.deb,
    `ver NNN (= X.Y.Z)`) are the workspace's version.
With --cli PATH (a built `redlock`):
  - every `redlock [GLOBAL…] SUBCOMMAND --flag` it runs names a subcommand and
    flags the CLI has, and every REDLOCK_* variable it exports is one the CLI
    reads (its --help texts).
With --module PATH (a built libredlock.so):
  - the quick start's `redis-server --loadmodule …` lines start a server with the
    module, and every redis-cli session (```text blocks of `127.0.0.1:6379> `
    prompts) replays on its scratch node (`--redlock.restart-grace-ms 0`) with the replies shown (a lease's pttl within the
    lease);
  - every redis.conf of the guide (a text block from a `loadmodule` line) starts a
    server that loads the module and sets the configs the lines name, but the
    TLS setup's (its ACL line is client/tests/tls_acl.rs's).

Servers listen on free loopback ports, keep nothing on disk and are stopped by
their own pid. Exits 1 naming each example that differs."""
import argparse
import re
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# redis-cli's prompt, in full or shortened to "> ".
PROMPT = re.compile(r"^(127\.0\.0\.1:6379)?> ")
BLOCK = re.compile(r"^```([a-z,_]*)\n(.*?)^```", re.S | re.M)


def pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(lang):
    """(page, block text) of every fenced block of the language `lang`."""
    for page in pages():
        for found_lang, text in BLOCK.findall(page.read_text()):
            if found_lang.split(",")[0] == lang:
                yield page.relative_to(ROOT), text


def command_lines(text):
    """The block's commands: comment-only lines dropped, continuations joined, comments cut."""
    joined = re.sub(r"\\\n\s*", " ", text)
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            yield words


def workspace_version():
    cargo = (ROOT / "Cargo.toml").read_text()
    section = cargo[cargo.index("[workspace.package]"):]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)


def make_targets():
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))


def check_shell_static(errors):
    targets = make_targets()
    version = workspace_version()
    major, minor, patch = (int(p) for p in version.split("."))
    module_ver = major * 10000 + minor * 100 + patch
    count = 0
    for page, text in blocks("sh"):
        count += 1
        syntax = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
        if syntax.returncode != 0:
            errors.append(f"{page}: a sh block does not parse: {syntax.stderr.strip()}")
        for words in command_lines(text):
            if words[0] == "make":
                for target in (w for w in words[1:] if not w.startswith("-") and "=" not in w):
                    if target not in targets:
                        errors.append(f"{page}: `make {target}` is no Makefile target")
        for deb in re.findall(r"redlock_([0-9.]+)_amd64\.deb", text):
            if deb != version:
                errors.append(f"{page}: redlock_{deb}_amd64.deb, the version is {version}")
        for ver, dotted in re.findall(r"ver (\d+) \(= ([0-9.]+)\)", text):
            if (int(ver), dotted) != (module_ver, version):
                errors.append(f"{page}: `ver {ver} (= {dotted})`, the module is ver {module_ver} (= {version})")
    return count


def check_sql(errors):
    """Each SQL fencing statement keeps the rule: run on a row written under token 10 (sqlite3,
    `$1` the token, `$2` the value, `$3` the row), a newer token (11) and the same one update
    the row, an older one (9) updates nothing and leaves the newer write in place."""
    count = 0
    for page, text in blocks("sql"):
        for statement in (l for l in text.splitlines() if l.strip() and not l.startswith("--")):
            count += 1
            db = sqlite3.connect(":memory:")
            db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER, fence_token INTEGER)")
            db.execute("INSERT INTO accounts VALUES (1, 100, 10)")
            got = tuple(db.execute(statement, {"1": token, "2": value, "3": 1}).rowcount
                        for token, value in ((11, 200), (11, 300), (9, 999)))
            row = db.execute("SELECT balance, fence_token FROM accounts").fetchone()
            if got != (1, 1, 0) or row != (300, 11):
                errors.append(f"{page}: `{statement}` updated {got} rows for tokens 11, 11, 9 "
                              f"and left {row}, not (1, 1, 0) and (300, 11)")
    return count


def cli_help(cli, *args):
    out = subprocess.run([cli, *args, "--help"], capture_output=True, text=True, timeout=30)
    return out.returncode, out.stdout + out.stderr


def check_cli(cli, errors):
    code, top = cli_help(cli)
    if code != 0:
        errors.append(f"{cli} --help failed: {top}")
        return 0
    helps = {"": top}
    for sub in ("run", "fenced", "acquire"):
        helps[sub] = cli_help(cli, sub)[1]
    count = 0
    for page, text in blocks("sh"):
        for words in command_lines(text):
            for name, _, _ in (w.partition("=") for w in words if "=" in w and words[0] == "export"):
                if name.startswith("REDLOCK_"):
                    count += 1
                    if name not in "".join(helps.values()):
                        errors.append(f"{page}: exports {name}, which the CLI does not read")
            # The CLI's own lines, and the ones that `sh -c` runs under `redlock run`.
            lines = [words] + [shlex.split(w) for w in words if w.startswith("redlock ")]
            for line in lines:
                if not line or line[0] != "redlock":
                    continue
                count += 1
                args = line[1:]
                while args and args[0].startswith("--"):  # global options, each with a value
                    flag = args[0].split("=")[0]
                    if flag not in top:
                        errors.append(f"{page}: `redlock {flag}` is no option of the CLI")
                    args = args[1 if "=" in args[0] else 2:]
                if not args:
                    continue
                sub = args[0]
                code, text_help = cli_help(cli, sub)
                if code != 0:
                    errors.append(f"{page}: `redlock {sub}` is no subcommand: {text_help.strip()[:200]}")
                    continue
                helps[sub] = text_help
                for flag in (a.split("=")[0] for a in args[1:]):
                    if flag == "--":
                        break
                    if flag.startswith("--") and flag not in text_help:
                        errors.append(f"{page}: `redlock {sub} {flag}` is no option of `redlock {sub}`")
    return count


# Redis refuses a cluster-enabled port above this (its bus port is the port + 10000).
CLUSTER_PORT_MAX = 55535


def free_port():
    """A free loopback port that a cluster-enabled example may use too: the
    kernel's ephemeral range reaches past CLUSTER_PORT_MAX, and a guide
    example with `cluster-enabled yes` then fails to start."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= CLUSTER_PORT_MAX:
            return port
    raise RuntimeError(f"no free port at or below {CLUSTER_PORT_MAX}")


class Server:
    """A redis-server started from an example's arguments, on a free port, nothing on disk."""

    def __init__(self, args, workdir):
        self.port = free_port()
        self.log = Path(workdir) / f"server-{self.port}.log"
        self.proc = subprocess.Popen(
            [*args, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir, "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while self.cli("PING") != "PONG":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = self.log.read_text()[-2000:] if self.log.exists() else ""
                raise RuntimeError(f"{shlex.join(args)} did not start:\n{log}")
            time.sleep(0.05)

    def cli(self, *command):
        out = subprocess.run(["redis-cli", "--no-raw", "-p", str(self.port), *command],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.rstrip("\n")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sessions():
    """(page, [(command words, expected reply lines)]) of every redis-cli session."""
    for page, text in blocks("text"):
        if not PROMPT.match(text):
            continue
        steps = []
        for line in text.splitlines():
            prompt = PROMPT.match(line)
            if prompt:
                steps.append((line[prompt.end():].split(), []))
            elif steps:
                steps[-1][1].append(line)
        yield page, steps


def reply_matches(expected, actual):
    if len(expected) != len(actual):
        return False
    for i, (want, got) in enumerate(zip(expected, actual)):
        if i > 0 and expected[i - 1].endswith('"pttl"'):
            # A lease's remaining time: positive and within the session's 30 s lease (a
            # loaded machine takes longer between the commands than the page shows).
            shown = re.fullmatch(r"(\d+\) \(integer\) )(\d+)", want)
            num = re.fullmatch(r"(\d+\) \(integer\) )(\d+)", got)
            if not (shown and num and shown.group(1) == num.group(1)
                    and 0 < int(num.group(2)) <= 30000):
                return False
        elif want != got:
            return False
    return True


def quick_start_server_lines(module):
    """The quick start's `redis-server --loadmodule …` lines, with this build's module."""
    found = []
    for page, text in blocks("sh"):
        if page.name != "quick-start.md":
            continue
        for words in command_lines(text):
            if words[0] == "redis-server" and "--loadmodule" in words:
                i = words.index("--loadmodule")
                found.append([*words[:i + 1], module, *words[i + 2:]])
    return found


def check_module(module, errors):
    count = 0
    lines = quick_start_server_lines(module)
    scratch = [args for args in lines if args[-2:] == ["--redlock.restart-grace-ms", "0"]]
    if not scratch:
        errors.append("docs/guide/quick-start.md: no scratch node line "
                      "(`redis-server --loadmodule … --redlock.restart-grace-ms 0`)")
        return 0
    with tempfile.TemporaryDirectory(prefix="redlock-doc-") as workdir:
        for args in lines:
            server = Server(args, workdir)
            try:
                count += 1
                if "redlock" not in server.cli("MODULE", "LIST"):
                    errors.append(f"the quick start's `{shlex.join(args)}` did not load the module")
            finally:
                server.stop()
        # The sessions run on the scratch node, as the commands page says.
        server = Server(scratch[0], workdir)
        try:
            for page, steps in sessions():
                for command, expected in steps:
                    count += 1
                    actual = server.cli(*command).splitlines()
                    if not reply_matches(expected, actual):
                        errors.append(
                            f"{page}: `{' '.join(command)}` answers {actual!r}, the page shows {expected!r}")
        finally:
            server.stop()
        # Every redis.conf of the guide: a text block's lines from its `loadmodule` line to
        # the first blank one. Files of TLS setups and ACL users are left to the TLS tests.
        for page, text in blocks("text"):
            lines = text.splitlines()
            at = next((i for i, l in enumerate(lines) if l.startswith("loadmodule ")), None)
            if at is None:
                continue
            conf = []
            for line in lines[at:]:
                if not line.strip():
                    break
                if not line.startswith("#"):
                    conf.append(line.split())
            if any(w[0].startswith("tls-") or w[0] == "user" for w in conf):
                continue
            count += 1
            conf[0] = ["loadmodule", module, *conf[0][2:]]
            expected = dict(zip(conf[0][2::2], conf[0][3::2]))
            expected.update({w[0][len("redlock."):]: w[1] for w in conf[1:]
                             if w[0].startswith("redlock.") and len(w) == 2})
            conf_dir = tempfile.mkdtemp(dir=workdir)
            conf_file = Path(conf_dir) / "redis.conf"
            conf_file.write_text("".join(" ".join(w) + "\n" for w in conf))
            shown = " / ".join(" ".join(w) for w in conf[1:]) or "loadmodule"
            try:
                server = Server(["redis-server", str(conf_file)], conf_dir)
            except RuntimeError as failed:
                errors.append(f"{page}: a server with the redis.conf lines {shown} did not start: {failed}")
                continue
            try:
                if "redlock" not in server.cli("MODULE", "LIST"):
                    errors.append(f"{page}: the redis.conf lines {shown} did not load the module")
                for name, value in expected.items():
                    got = server.cli("CONFIG", "GET", f"redlock.{name}").splitlines()
                    if got[-1:] != [f'2) "{value}"']:
                        errors.append(f"{page}: the redis.conf lines {shown} left redlock.{name} at {got}")
            finally:
                server.stop()
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", help="a built libredlock.so: replay the redis-cli sessions")
    parser.add_argument("--cli", help="a built redlock CLI: check its commands and flags")
    opts = parser.parse_args()
    if opts.module:  # the server changes to its --dir before it loads modules
        opts.module = str(Path(opts.module).resolve())
    errors = []
    summary = [f"{check_shell_static(errors)} sh blocks parsed",
               f"{check_sql(errors)} SQL statements run"]
    if opts.cli:
        summary.append(f"{check_cli(opts.cli, errors)} CLI lines and variables checked")
    if opts.module:
        if not shutil.which("redis-server") or not shutil.which("redis-cli"):
            errors.append("redis-server and redis-cli are needed with --module")
        else:
            summary.append(f"{check_module(opts.module, errors)} redis-cli commands replayed")
    for e in errors:
        print(e)
    print(", ".join(summary) + f", {len(errors)} difference(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
