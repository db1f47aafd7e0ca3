//! `redlock elect` and `redlock leader` on real nodes: the epoch reaches the
//! child, leadership passes to the next host when the child exits or when
//! the leader's nodes pause past its lease, and `--again` campaigns again.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{five, urls, Frozen};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_redlock");

fn start(nodes: &str, args: &[&str]) -> Child {
    Command::new(BIN)
        .env("REDLOCK_NODES", nodes)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock")
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

fn redlock(nodes: &str, args: &[&str]) -> Output {
    wait_bounded(start(nodes, args), Duration::from_secs(20))
}

/// `redlock leader NAME --json`, polled until `until` accepts it.
fn leader_until(nodes: &str, name: &str, until: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = redlock(nodes, &["leader", name, "--json"]);
        let value: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if until(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "leader never became as expected; last: {value} / {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_numbers(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("redlock-elect-{name}-"))
        .tempdir()
        .unwrap()
}

/// Host A leads and proclaims its value; host B waits; when A's command
/// exits, B leads with a higher epoch, each child saw its own epoch in
/// REDLOCK_EPOCH, and `leader` reports nobody once both are done.
#[test]
fn elect_hands_over_when_the_command_exits() {
    let nodes = five();
    let nodes = urls(&nodes).join(",");
    let dir = scratch("handover");
    let (file_a, file_b) = (dir.path().join("a"), dir.path().join("b"));
    let script = |file: &Path, pause: &str| {
        format!("echo $REDLOCK_EPOCH > {}; sleep {pause}", file.display())
    };
    let a = start(
        &nodes,
        &[
            "elect",
            "jobs",
            "--ttl",
            "5s",
            "--value",
            "host-a",
            "--",
            "sh",
            "-c",
            &script(&file_a, "1"),
        ],
    );
    let seen = leader_until(&nodes, "jobs", |v| {
        v["leader"]["value"].as_str() == Some("host-a")
    });
    let b = start(
        &nodes,
        &[
            "elect",
            "jobs",
            "--ttl",
            "5s",
            "--value",
            "host-b",
            "--",
            "sh",
            "-c",
            &script(&file_b, "0"),
        ],
    );
    let (a, b) = (
        wait_bounded(a, Duration::from_secs(20)),
        wait_bounded(b, Duration::from_secs(20)),
    );
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let (epoch_a, epoch_b) = (read_numbers(&file_a), read_numbers(&file_b));
    assert_eq!(epoch_a.len(), 1);
    assert_eq!(epoch_b.len(), 1);
    assert_eq!(seen["leader"]["epoch"].as_u64(), Some(epoch_a[0]));
    assert!(epoch_b[0] > epoch_a[0], "{epoch_a:?} then {epoch_b:?}");
    let none = redlock(&nodes, &["leader", "jobs"]);
    assert_eq!(none.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&none.stdout).contains("nobody leads"));
}

/// The leader's nodes pause past its lease: its command is terminated and
/// it exits with code 4; once they resume, another host leads with a higher
/// epoch.
#[test]
fn elect_stops_the_command_when_leadership_is_lost() {
    let nodes = five();
    let list = urls(&nodes).join(",");
    let dir = scratch("lost");
    let file_a = dir.path().join("a");
    let a = start(
        &list,
        &[
            "elect",
            "jobs",
            "--ttl",
            "1500ms",
            "--kill-after",
            "1s",
            "--",
            "sh",
            "-c",
            &format!("echo $REDLOCK_EPOCH > {}; exec sleep 60", file_a.display()),
        ],
    );
    let seen = leader_until(&list, "jobs", |v| v["leader"]["epoch"].is_u64());
    let frozen = Frozen::new(&nodes[..3]);
    let a = wait_bounded(a, Duration::from_secs(20));
    drop(frozen);
    assert_eq!(
        a.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert!(String::from_utf8_lossy(&a.stderr).contains("lost the leadership"));
    let epoch_a = read_numbers(&file_a);
    assert_eq!(Some(epoch_a[0]), seen["leader"]["epoch"].as_u64());
    let b = redlock(
        &list,
        &[
            "elect",
            "jobs",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo $REDLOCK_EPOCH",
        ],
    );
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let epoch_b: u64 = String::from_utf8_lossy(&b.stdout).trim().parse().unwrap();
    assert!(epoch_b > epoch_a[0]);
}

/// `--again` campaigns again after each term until a stop signal; every
/// term's epoch is higher than the last.
#[test]
fn elect_again_campaigns_after_each_term() {
    let nodes = five();
    let list = urls(&nodes).join(",");
    let dir = scratch("again");
    let file = dir.path().join("epochs");
    let child = start(
        &list,
        &[
            "elect",
            "jobs",
            "--ttl",
            "2s",
            "--again",
            "--",
            "sh",
            "-c",
            &format!("echo $REDLOCK_EPOCH >> {}; sleep 0.05", file.display()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while read_numbers(&file).len() < 3 {
        assert!(Instant::now() < deadline, "fewer than 3 terms");
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let out = wait_bounded(child, Duration::from_secs(20));
    // The signal was passed on (or came while campaigning): 128 + SIGTERM.
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let epochs = read_numbers(&file);
    assert!(epochs.len() >= 3);
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs did not grow: {epochs:?}"
    );
}

/// `leader --watch --json` prints each leader as it comes, in order, until
/// a stop signal.
#[test]
fn leader_watch_prints_each_change() {
    let nodes = five();
    let list = urls(&nodes).join(",");
    let watch = start(&list, &["leader", "jobs", "--watch", "--json"]);
    let mut epochs = Vec::new();
    for value in ["first", "second"] {
        let out = redlock(
            &list,
            &[
                "elect",
                "jobs",
                "--ttl",
                "2s",
                "--value",
                value,
                "--",
                "sh",
                "-c",
                "echo $REDLOCK_EPOCH; sleep 1",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        epochs.push(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u64>()
                .unwrap(),
        );
    }
    let killed = Command::new("kill")
        .arg("-TERM")
        .arg(watch.id().to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let out = wait_bounded(watch, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Each term shows up with its value, in order (a term may also show up
    // once before its value was proclaimed).
    let with_values: Vec<(u64, String)> = lines
        .iter()
        .filter_map(|l| {
            let leader = &l["leader"];
            Some((
                leader["epoch"].as_u64()?,
                leader["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    assert_eq!(
        with_values,
        vec![
            (epochs[0], "first".to_string()),
            (epochs[1], "second".to_string())
        ],
        "{lines:?}"
    );
    let all: Vec<u64> = lines
        .iter()
        .filter_map(|l| l["leader"]["epoch"].as_u64())
        .collect();
    assert!(all.windows(2).all(|w| w[0] <= w[1]), "{all:?}");
}

/// A command that cannot start: exit 127 with a message, and the
/// leadership is given up at once (nobody leads afterwards).
#[test]
fn elect_with_a_missing_command_exits_127_and_resigns() {
    let nodes = five();
    let list = urls(&nodes).join(",");
    let out = redlock(
        &list,
        &[
            "elect",
            "jobs",
            "--ttl",
            "30s",
            "--",
            "/nonexistent/command",
        ],
    );
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot run \"/nonexistent/command\""), "{err}");
    assert_eq!(err.matches("cannot run").count(), 1, "{err}");
    let leader = redlock(&list, &["leader", "jobs"]);
    assert_eq!(leader.status.code(), Some(5));
}
