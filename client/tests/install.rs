//! What operators install: `make install-files` and `make deb-files` (the
//! recipes of `make install` and `make deb` after their build step), run on
//! the release module that `make test` builds and on this CLI build. The
//! installed module is loaded by a fresh redis-server through the installed
//! modules.conf, the installed CLI takes, inspects and releases a lock on it,
//! and every place that shows the version agrees: `MODULE LIST` `ver`,
//! `INFO redlock` `redlock_version`, `redlock --version` and the package.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use redlock_testkit::{workspace_dir, Node};
use serde_json::Value;

/// The workspace version: every crate takes `[workspace.package] version`.
const VERSION: &str = env!("CARGO_PKG_VERSION");
const CLI: &str = env!("CARGO_BIN_EXE_redlock");

/// `VERSION` as Redis encodes module versions: major·10000 + minor·100 + patch.
fn module_list_version() -> i64 {
    let core = VERSION.split(['-', '+']).next().unwrap_or(VERSION);
    let parts: Vec<i64> = core
        .split('.')
        .map(|p| p.parse().expect("numeric version part"))
        .collect();
    assert_eq!(parts.len(), 3, "version {VERSION}");
    parts[0] * 10_000 + parts[1] * 100 + parts[2]
}

/// The release module: `REDLOCK_RELEASE_MODULE` (make test sets it), or
/// target/release/libredlock.so.
fn release_module() -> PathBuf {
    let path = std::env::var_os("REDLOCK_RELEASE_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_dir().join("target/release/libredlock.so"));
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --release -p redlock-module` (make test does)",
        path.display()
    );
    std::path::absolute(path).expect("absolute module path")
}

/// Runs `make -C <workspace> ARGS` with the module and CLI to ship, and
/// `PKGDIR` in `scratch`; panics with its output when it fails.
fn make(scratch: &Path, args: &[&str]) -> Output {
    let module = release_module();
    let out = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_dir())
        .args(args)
        .arg(format!("MODULE_SO={}", module.display()))
        .arg(format!("CLI_BIN={CLI}"))
        .arg(format!("PKGDIR={}", scratch.join("pkg").display()))
        // Not the jobserver of a `make test` this may run under.
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .stdin(Stdio::null())
        .output()
        .expect("run make");
    assert!(
        out.status.success(),
        "make {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn run(program: &Path, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `loadmodule` lines of a config file.
fn loadmodule_lines(conf: &str) -> Vec<&str> {
    conf.lines()
        .filter(|l| l.starts_with("loadmodule "))
        .collect()
}

/// `MODULE LIST`'s `ver` of the module named `redlock`.
fn module_list_ver(node: &Node) -> i64 {
    let modules: Vec<HashMap<String, redis::Value>> = redis::cmd("MODULE")
        .arg("LIST")
        .query(&mut node.connection())
        .expect("MODULE LIST");
    let redlock = modules
        .iter()
        .find(|m| {
            m.get("name")
                .and_then(|n| redis::from_redis_value::<String>(n.clone()).ok())
                .is_some_and(|n| n == "redlock")
        })
        .unwrap_or_else(|| panic!("MODULE LIST has no redlock module: {modules:?}"));
    redis::from_redis_value(redlock["ver"].clone()).expect("ver")
}

/// `INFO redlock`'s `redlock_version`.
fn info_version(node: &Node) -> String {
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut node.connection())
        .expect("INFO redlock");
    info.lines()
        .find_map(|l| l.strip_prefix("redlock_version:"))
        .unwrap_or_else(|| panic!("no redlock_version in {info}"))
        .trim()
        .to_string()
}

/// Every place that shows the version agrees with the workspace's.
fn assert_versions_agree(node: &Node, cli: &Path) {
    assert_eq!(
        module_list_ver(node),
        module_list_version(),
        "MODULE LIST ver"
    );
    assert_eq!(info_version(node), VERSION, "INFO redlock_version");
    assert_eq!(
        text(&run(cli, &["--version"])),
        format!("redlock {VERSION}\n")
    );
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)))
}

/// acquire, inspect, release and inspect again with the installed CLI.
fn lock_cycle(cli: &Path, node: &Node) {
    let nodes = format!("--nodes={}", node.url());
    let acquired = json(&run(
        cli,
        &[&nodes, "--json", "acquire", "installed", "--ttl", "30s"],
    ));
    let token = acquired["token"].as_u64().expect("token");
    assert!(token >= 1, "{acquired}");
    let owner = acquired["owner"].as_str().expect("owner").to_string();
    let held = json(&run(cli, &[&nodes, "--json", "inspect", "installed"]));
    assert_eq!(held["held_on"], 1, "{held}");
    assert_eq!(held["nodes"][0]["token"].as_u64(), Some(token), "{held}");
    let released = json(&run(
        cli,
        &[&nodes, "--json", "release", "installed", "--owner", &owner],
    ));
    assert_eq!(released["released"], true, "{released}");
    let free = json(&run(cli, &[&nodes, "--json", "inspect", "installed"]));
    assert_eq!(free["held_on"], 0, "{free}");
    assert_eq!(free["nodes"][0]["held"], false, "{free}");
}

/// A node that loads the module through `conf` (an `include`), with the
/// restart guard off so that the first ACQUIRE is granted.
fn node_through(conf: &Path) -> Node {
    Node::builder()
        .without_module()
        .config("include", &conf.display().to_string())
        .config("redlock.restart-grace-ms", "0")
        .start()
}

#[test]
fn make_install_puts_a_module_that_loads_through_its_modules_conf_and_a_working_cli() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let prefix = scratch.path().join("prefix");
    make(
        scratch.path(),
        &["install-files", &format!("PREFIX={}", prefix.display())],
    );
    let module = prefix.join("lib/redis/modules/libredlock.so");
    let cli = prefix.join("bin/redlock");
    let conf = prefix.join("etc/redlock/modules.conf");
    assert_eq!(
        loadmodule_lines(&read(&conf)),
        [format!("loadmodule {}", module.display())]
    );
    let man = prefix.join("share/man/man1");
    for page in [
        "redlock",
        "redlock-acquire",
        "redlock-release",
        "redlock-inspect",
        "redlock-run",
    ] {
        let roff = read(&man.join(format!("{page}.1")));
        assert!(roff.contains(&format!(".TH {page} 1")), "{page}: {roff}");
    }
    // The man page is the --help text: every option is in it.
    let page = read(&man.join("redlock.1"));
    for option in ["nodes", "cluster", "tls\\-ca", "json", "node\\-timeout"] {
        assert!(
            page.contains(&format!("\\-\\-{option}")),
            "--{option} missing"
        );
    }
    let bash = read(&prefix.join("share/bash-completion/completions/redlock"));
    assert!(bash.contains("complete -F _redlock") && bash.contains("acquire"));
    let zsh = read(&prefix.join("share/zsh/site-functions/_redlock"));
    assert!(zsh.starts_with("#compdef redlock"));
    let fish = read(&prefix.join("share/fish/vendor_completions.d/redlock.fish"));
    assert!(fish.contains("complete -c redlock"));
    assert!(!format!("{bash}{zsh}{fish}{page}").contains("generate-docs"));

    let node = node_through(&conf);
    assert_versions_agree(&node, &cli);
    lock_cycle(&cli, &node);
}

#[test]
fn make_install_with_destdir_stages_files_that_name_their_final_paths() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dest = scratch.path().join("dest");
    make(
        scratch.path(),
        &["install-files", &format!("DESTDIR={}", dest.display())],
    );
    let root = dest.join("usr/local");
    for file in [
        "lib/redis/modules/libredlock.so",
        "bin/redlock",
        "share/man/man1/redlock.1",
        "share/bash-completion/completions/redlock",
        "share/zsh/site-functions/_redlock",
        "share/fish/vendor_completions.d/redlock.fish",
    ] {
        assert!(root.join(file).is_file(), "{file} not staged");
    }
    let conf = read(&root.join("etc/redlock/modules.conf"));
    assert_eq!(
        loadmodule_lines(&conf),
        ["loadmodule /usr/local/lib/redis/modules/libredlock.so"]
    );
    assert!(conf.contains("include /usr/local/etc/redlock/modules.conf"));
}

#[test]
fn make_deb_builds_a_package_whose_module_loads_and_reports_the_version() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let out = make(scratch.path(), &["deb-files", "DEB_OPTS=-Zgzip -z1"]);
    let deb = PathBuf::from(text(&out).lines().last().expect("the .deb path").trim());
    assert!(
        deb.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("redlock_{VERSION}_")) && n.ends_with(".deb")),
        "{}",
        deb.display()
    );
    let dpkg_deb = Path::new("dpkg-deb");
    let deb_arg = deb.display().to_string();

    let contents = text(&run(dpkg_deb, &["-c", &deb_arg]));
    for file in [
        "./usr/lib/redis/modules/libredlock.so",
        "./usr/bin/redlock",
        "./etc/redis/redlock.conf",
        "./usr/share/man/man1/redlock.1.gz",
        "./usr/share/man/man1/redlock-acquire.1.gz",
        "./usr/share/bash-completion/completions/redlock",
        "./usr/share/zsh/vendor-completions/_redlock",
        "./usr/share/fish/vendor_completions.d/redlock.fish",
        "./usr/share/doc/redlock/changelog.gz",
        "./usr/share/doc/redlock/copyright",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(file)),
            "{file} not in the package:\n{contents}"
        );
    }
    let field = |name: &str| {
        text(&run(dpkg_deb, &["-f", &deb_arg, name]))
            .trim()
            .to_string()
    };
    assert_eq!(field("Package"), "redlock");
    assert_eq!(field("Version"), VERSION);
    let depends = field("Depends");
    assert!(depends.contains("libc6 (>= 2."), "Depends: {depends}");
    assert_eq!(field("Recommends"), "redis-server (>= 5:7.0)");

    let control = scratch.path().join("control");
    run(dpkg_deb, &["-e", &deb_arg, &control.display().to_string()]);
    assert_eq!(
        read(&control.join("conffiles")).trim(),
        "/etc/redis/redlock.conf"
    );

    let root = scratch.path().join("root");
    run(dpkg_deb, &["-x", &deb_arg, &root.display().to_string()]);
    assert_eq!(
        loadmodule_lines(&read(&root.join("etc/redis/redlock.conf"))),
        ["loadmodule /usr/lib/redis/modules/libredlock.so"]
    );
    let node = Node::builder()
        .module(root.join("usr/lib/redis/modules/libredlock.so"))
        .start();
    assert_versions_agree(&node, &root.join("usr/bin/redlock"));
    lock_cycle(&root.join("usr/bin/redlock"), &node);
}
