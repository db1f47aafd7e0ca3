#!/usr/bin/env python3
"""Import graph of the workspace's Rust crates and of the Python package:
reports import circles and layer breaks.

For every file of a crate (`src/` of the module, `client/src` of the client,
`python/src` of the Python bindings) it derives the modules the file refers
to through `crate::…` and `super::…` paths (in `use` declarations and inline
paths, comments and strings left out), then
  - reports every circle (a strongly connected set of two files or more), and
  - checks the layer rule: a file under a crate's `core/` folder (the pure rules)
    refers to nothing outside `core/` in the same crate.
A file's references to its own submodules (`lib.rs` and `mod.rs` registering
and re-exporting them) and a `tests` submodule's `super::*` are not counted:
they are the module tree, not a dependency between subsystems. Doc comments
are left out too.

For a Python package (a folder with `__init__.py`, `python/pysrc/redlock_fenced`)
it reads every module's imports of the package's own modules with `ast`: every
`import` and `from … import` anywhere in the file, at the top, inside a
function (a deferred import is still a dependency) or under
`if TYPE_CHECKING:` (the type checker follows it), relative or absolute.
`from . import name` counts as an import of the submodule `name` when there is
one, else of `__init__`. Circles are reported as for a crate.

Exit status 1 when it finds a circle or a layer break; `make lint` runs it,
after `--self-check`, which plants circles in scratch copies (a Rust crate, a
Python package with a deferred and a type-only import) and fails unless each
is reported and the circle-free versions pass.

Usage: scripts/import-cycles.py [--graph] [--self-check] [root ...]
  --graph        also print every file's edges
  --self-check   only check that planted circles are caught
"""

import ast
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CRATES = ["src", "client/src", "python/src", "python/pysrc/redlock_fenced"]
PURE = "core"
RAW = re.compile(r'b?r(#*)"')


def strip(text):
    """The source with comments, string and char literals blanked out."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif (
            c in "br"
            and RAW.match(text, i)
            and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
        ):
            # A raw string (r"…", r#"…"#, br"…"): no escapes inside.
            m = RAW.match(text, i)
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            i = n if j < 0 else j + len(close)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                i += len(m.group(0))
                out.append("' '")
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_files(crate_dir):
    """Maps module path (tuple of names) to the file that holds it."""
    mods = {}
    for dirpath, _, files in os.walk(crate_dir):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), crate_dir)
            parts = rel[:-3].split(os.sep)
            if parts[0] == "bin":
                continue
            if parts == ["lib"] or parts == ["main"]:
                path = ()
            elif parts[-1] == "mod":
                path = tuple(parts[:-1])
            else:
                path = tuple(parts)
            mods[path] = os.path.join(dirpath, f)
    return mods


def use_paths(tree):
    """Expands a use tree (`crate::{a, b::{self, C as D}}`) into its paths."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)

    def expand(s):
        if not s:
            return []
        brace = s.find("{")
        if brace < 0:
            return [s]
        prefix = s[:brace]
        inner = s[brace + 1 : s.rfind("}")]
        parts, depth, cur = [], 0, ""
        for ch in inner:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        result = []
        for p in parts:
            for sub in expand(p):
                result.append(prefix.rstrip(":") if sub == "self" else prefix + sub)
        return result

    return expand(tree)


def references(text, here):
    """Absolute module paths (tuples) referred to from a file whose module is `here`."""
    code = strip(text)
    refs = []
    # Inline `mod name {` blocks change what `super` means.
    opens = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code):
        opens.append((m.end() - 1, m.group(1)))

    def inline_mods(pos):
        stack = []
        for start, name in opens:
            if start > pos:
                break
            depth, j = 0, start
            while j < len(code):
                if code[j] == "{":
                    depth += 1
                elif code[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if start < pos < j:
                stack.append(name)
        return stack

    def resolve(path, pos):
        segs = [s for s in path.split("::") if s]
        if not segs:
            return None
        if segs[0] in ("crate", "$crate"):
            return tuple(segs[1:])
        if segs[0] == "super":
            base = list(here) + inline_mods(pos)
            while segs and segs[0] == "super":
                if not base:
                    return None
                base.pop()
                segs = segs[1:]
            return tuple(base + segs)
        return None

    for m in re.finditer(r"\buse\s+([^;]*);", code):
        for p in use_paths(m.group(1)):
            r = resolve(p, m.start())
            if r is not None:
                refs.append(r)
    scrubbed = re.sub(r"\buse\s+[^;]*;", lambda m: " " * len(m.group(0)), code)
    for m in re.finditer(r"(\$?crate|\bsuper)((?:::(?:super|\w+))+)", scrubbed):
        r = resolve(m.group(0), m.start())
        if r is not None:
            refs.append(r)
    return refs


def graph(crate_dir):
    if os.path.exists(os.path.join(crate_dir, "__init__.py")):
        return python_graph(crate_dir)
    mods = module_files(crate_dir)
    edges = {path: set() for path in mods}
    for here, file in mods.items():
        with open(file, encoding="utf-8") as f:
            text = f.read()
        for ref in references(text, here):
            # The longest prefix that is a module file is the file depended on.
            target = None
            for k in range(len(ref), -1, -1):
                if ref[:k] in mods:
                    target = ref[:k]
                    break
            if target is None or target == here:
                continue
            # A file referring to its own inline or file submodules, or a
            # child to its parent through `super::*` in tests, is not a
            # dependency between subsystems.
            if target[: len(here)] == here or (
                here[: len(target)] == target and here[-1] == "tests"
            ):
                continue
            edges[here].add(target)
    return mods, edges


def python_modules(package_dir):
    """Maps module path (tuple of names below the package) to its file;
    `()` is the package's `__init__.py`. A module present only as a stub
    (`_native.pyi`, a compiled extension) is a module too."""
    mods = {}
    for dirpath, _, files in os.walk(package_dir):
        if not os.path.exists(os.path.join(dirpath, "__init__.py")):
            continue
        for f in sorted(files):
            stem, ext = os.path.splitext(f)
            if ext not in (".py", ".pyi"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, stem), package_dir)
            parts = tuple(p for p in rel.split(os.sep) if p != ".")
            path = parts[:-1] if parts[-1] == "__init__" else parts
            # The .py file is the module; its stub, if any, describes it.
            if path not in mods or ext == ".py":
                mods[path] = os.path.join(dirpath, f)
    return mods


def python_references(text, here, is_package, package):
    """Module paths (tuples below the package) that the source `text` of the
    module `here` imports, anywhere in the file."""
    refs = []
    tree = ast.parse(text)
    # The package a relative import starts from.
    base = list(here) if is_package else list(here[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == package:
                    refs.append((tuple(parts[1:]), None))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                start = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                if node.level - 1 > len(base):
                    continue
                mod = start + (node.module.split(".") if node.module else [])
            else:
                parts = (node.module or "").split(".")
                if parts[0] != package:
                    continue
                mod = parts[1:]
            for alias in node.names:
                refs.append((tuple(mod), alias.name))
    return refs


def python_graph(package_dir):
    mods = python_modules(package_dir)
    package = os.path.basename(os.path.normpath(package_dir))
    edges = {path: set() for path in mods}
    for here, file in mods.items():
        with open(file, encoding="utf-8") as f:
            text = f.read()
        is_package = os.path.basename(file).startswith("__init__.")
        for mod, name_ in python_references(text, here, is_package, package):
            # `from pkg import sub` imports the submodule `sub`.
            target = mod + (name_,) if name_ is not None and mod + (name_,) in mods else mod
            while target not in mods and target:
                target = target[:-1]
            if target in mods and target != here:
                edges[here].add(target)
    return mods, edges


def sccs(edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def one_cycle(comp, edges):
    """A shortest circle through the first file of a strongly connected set."""
    members = set(comp)
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def _name(path, python=False):
    if python:
        return ".".join(path) if path else "__init__"
    return "::".join(path) if path else "lib"


def check(crate, crate_dir, show=False, out=print):
    """Checks one crate or package and reports through `out`; True when it
    has a circle or a layer break."""
    mods, edges = graph(crate_dir)
    python = os.path.exists(os.path.join(crate_dir, "__init__.py"))

    def name(path):
        return _name(path, python)

    n_edges = sum(len(e) for e in edges.values())
    if show:
        for v in sorted(edges):
            out(f"{crate}: {name(v)} -> {', '.join(name(w) for w in sorted(edges[v])) or '-'}")
    circles = [c for c in sccs(edges) if len(c) > 1]
    breaks = [
        (v, w)
        for v in sorted(edges)
        for w in sorted(edges[v])
        if not python and v[:1] == (PURE,) and w[:1] != (PURE,)
    ]
    for comp in circles:
        cyc = one_cycle(comp, edges)
        out(
            f"{crate}: import circle among {len(comp)} files: "
            + " -> ".join(name(p) for p in cyc)
            + f" (all: {', '.join(sorted(name(p) for p in comp))})"
        )
    for v, w in breaks:
        out(f"{crate}: layer break: {name(v)} (pure, {PURE}/) refers to {name(w)}")
    if circles or breaks:
        return True
    out(f"{crate}: {len(mods)} files, {n_edges} imports, no circles, no layer breaks")
    return False


# Planted circles for --self-check: (description, {file: text}, circle expected).
PLANTED = [
    (
        "Rust crate, a <-> b through use and an inline path",
        {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
        },
        True,
    ),
    (
        "Rust crate, a -> b only (a string and a comment naming crate::a do not count)",
        {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B; // crate::a::A\nconst S: &str = \"crate::a::A\";\n",
        },
        False,
    ),
    (
        "Rust crate, a core/ file referring to host/",
        {
            "lib.rs": "mod core;\nmod host;\n",
            "core/mod.rs": "pub mod rule;\n",
            "core/rule.rs": "use crate::host::glue;\n",
            "host/mod.rs": "pub mod glue;\n",
            "host/glue.rs": "pub fn glue() {}\n",
        },
        True,
    ),
    (
        "Python package, sync -> shared at the top, shared -> sync inside a function",
        {
            "__init__.py": "from .sync import Lock\n",
            "shared.py": "def make():\n    from .sync import Lock\n    return Lock()\n",
            "sync.py": "from . import shared\nclass Lock: ...\n",
        },
        True,
    ),
    (
        "Python package, a type-only import back (if TYPE_CHECKING)",
        {
            "__init__.py": "",
            "low.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.high import High\n"
            ),
            "high.py": "from .low import *\nclass High: ...\n",
        },
        True,
    ),
    (
        "Python package, a submodule importing the package's __init__, which imports it",
        {
            "__init__.py": "from .api import f\n",
            "api.py": "import pkg\ndef f(): ...\n",
        },
        True,
    ),
    (
        "Python package, one way only (and an absolute import of another package)",
        {
            "__init__.py": "from .high import High\n",
            "low.py": "import asyncio\nfrom asyncio import Future\n",
            "high.py": "from .low import Future\nfrom . import low\nclass High: ...\n",
        },
        False,
    ),
]


def self_check():
    """Plants each case of PLANTED in a scratch folder; True when every
    circle or layer break is reported and every clean case passes."""
    ok = True
    for description, files, expected in PLANTED:
        with tempfile.TemporaryDirectory(prefix="import-cycles-") as tmp:
            root = os.path.join(tmp, "pkg")
            for rel, text in files.items():
                path = os.path.join(root, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            lines = []
            found = check("planted", root, out=lines.append)
        if found != expected:
            ok = False
            print(f"self-check FAILED: {description}: expected "
                  f"{'a report' if expected else 'no report'}, got: {'; '.join(lines)}")
    if ok:
        print(f"self-check: {len(PLANTED)} planted cases, each reported as expected")
    return ok


def main(argv):
    show = "--graph" in argv
    if "--self-check" in argv:
        return 0 if self_check() else 1
    crates = [a for a in argv if not a.startswith("--")] or DEFAULT_CRATES
    failed = False
    for crate in crates:
        failed |= check(crate, os.path.join(ROOT, crate), show)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
