//! Acceptance test 9: the `redlock` binary as a real subprocess.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{five, Frozen};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_redlock");

fn nodes_arg(nodes: &[redlock_testkit::Node]) -> String {
    common::urls(nodes).join(",")
}

/// Runs `redlock ARGS` and waits at most 20 s.
fn redlock(nodes: &str, args: &[&str]) -> Output {
    let child = Command::new(BIN)
        .env("REDLOCK_NODES", nodes)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock");
    wait_bounded(child, Duration::from_secs(20))
}

fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "redlock did not exit within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", stdout(o), stderr(o)))
}

#[test]
fn acquire_inspect_release() {
    let nodes = five();
    let urls = nodes_arg(&nodes);

    let out = redlock(&urls, &["--json", "acquire", "deploy", "--ttl", "20s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let token = v["token"].as_u64().expect("token");
    let owner = v["owner"].as_str().expect("owner").to_string();
    assert_eq!(v["key"], "deploy");
    assert!(v["validity_ms"].as_u64().unwrap() > 19_000);
    assert_eq!(owner.len(), 36);

    // Held by someone else: exit code 3, one line saying what to do.
    let out = redlock(&urls, &["acquire", "deploy", "--ttl", "20s"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("held by another owner"), "{err}");
    let out = redlock(&urls, &["--json", "acquire", "deploy"]);
    assert_eq!(out.status.code(), Some(3));
    let e: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(e["error"], "busy");

    // Human output of acquire shows the token and the owner.
    let out = redlock(&urls, &["acquire", "other", "--ttl", "5s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("  token  "), "{text}");
    assert!(text.contains("  owner  "), "{text}");
    assert!(text.contains("redlock release other --owner "), "{text}");

    // Inspect, side by side; --nodes works as well as REDLOCK_NODES.
    let out = Command::new(BIN)
        .args(["--nodes", &urls, "inspect", "deploy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("held on 5 of 5 nodes: locked"), "{text}");
    assert_eq!(text.matches(&format!("  {token}\n")).count(), 5, "{text}");
    for n in &nodes {
        assert!(text.contains(&format!("127.0.0.1:{}", n.port())), "{text}");
    }
    let v = json(&redlock(&urls, &["--json", "inspect", "deploy"]));
    assert_eq!(v["held_on"], 5);
    for node in v["nodes"].as_array().unwrap() {
        assert_eq!(node["held"], true, "{node}");
        assert_eq!(node["token"].as_u64(), Some(token), "{node}");
        assert!(node["pttl_ms"].as_u64().unwrap() > 15_000, "{node}");
    }

    // Release with the owner id; a second release says it was not held.
    let out = redlock(&urls, &["release", "deploy", "--owner", &owner]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("released \"deploy\""));
    let out = redlock(&urls, &["--json", "release", "deploy", "--owner", &owner]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(json(&out)["released"], false);
    let v = json(&redlock(&urls, &["--json", "inspect", "deploy"]));
    assert_eq!(v["held_on"], 0);
    let out = redlock(&urls, &["--json", "inspect", "never-used"]);
    assert_eq!(json(&out)["nodes"][0]["exists"], false);

    // Usage errors: exit code 2.
    let out = Command::new(BIN)
        .env_remove("REDLOCK_NODES")
        .args(["inspect", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no nodes"), "{}", stderr(&out));
    let out = redlock(&urls, &["acquire", "x", "--ttl", "30"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn run_passes_the_token_and_exits_with_the_child_status() {
    let nodes = five();
    let urls = nodes_arg(&nodes);
    let out = redlock(
        &urls,
        &[
            "run",
            "job",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo \"token=$REDLOCK_TOKEN key=$REDLOCK_KEY\"; exit 7",
        ],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let text = stdout(&out);
    let token: u64 = text
        .trim()
        .strip_prefix("token=")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {text:?}"));
    assert!(token > 0);
    assert!(text.contains("key=job"), "{text}");

    // Released at the end: the next run gets a higher token and exit 0.
    let out = redlock(
        &urls,
        &["run", "job", "--", "sh", "-c", "echo $REDLOCK_TOKEN"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let next: u64 = stdout(&out).trim().parse().unwrap();
    assert!(next > token);

    // Runs longer than its TTL thanks to the extensions.
    let out = redlock(
        &urls,
        &[
            "run",
            "job",
            "--ttl",
            "1s",
            "--",
            "sh",
            "-c",
            "sleep 2.2; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));

    // Busy: the command does not run.
    let held = redlock(&urls, &["--json", "acquire", "job", "--ttl", "20s"]);
    assert_eq!(held.status.code(), Some(0));
    let out = redlock(&urls, &["run", "job", "--", "sh", "-c", "echo ran"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(!stdout(&out).contains("ran"));

    // A command that cannot be started.
    let out = redlock(&urls, &["run", "job2", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still count.
    Path::new(&format!("/proc/{pid}")).exists()
}

fn read_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The lock is lost while the command runs: SIGTERM, exit code 4.
#[test]
fn run_terminates_the_child_when_the_lock_is_lost() {
    let nodes = five();
    let urls = nodes_arg(&nodes);
    let dir = std::env::temp_dir().join(format!("redlock-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    for (name, script, kill_after) in [
        // Exits on SIGTERM.
        ("term", "echo $$ > \"$0\"; exec sleep 30", "5s"),
        // Ignores SIGTERM: killed after --kill-after.
        (
            "kill",
            "trap '' TERM; echo $$ > \"$0\"; while :; do sleep 0.05; done",
            "300ms",
        ),
    ] {
        let pidfile = dir.join(name);
        let _ = std::fs::remove_file(&pidfile);
        let child = Command::new(BIN)
            .env("REDLOCK_NODES", &urls)
            .args([
                "--node-timeout",
                "100ms",
                "run",
                name,
                "--ttl",
                "900ms",
                "--kill-after",
                kill_after,
                "--",
                "sh",
                "-c",
                script,
                pidfile.to_str().unwrap(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = read_pid(&pidfile);
        assert!(alive(pid));
        let started = Instant::now();
        let frozen = Frozen::new(&nodes[..3]);
        let out = wait_bounded(child, Duration::from_secs(15));
        drop(frozen);
        assert_eq!(out.status.code(), Some(4), "{name}: {}", stderr(&out));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{name}: took {:?}",
            started.elapsed()
        );
        let err = stderr(&out);
        assert!(err.contains("lost the lock on"), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(!alive(pid), "{name}: the command still runs");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
