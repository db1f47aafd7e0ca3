//! Nothing the module writes from a timer may be propagated while clients
//! are paused: Redis asserts it (7.0 `server.c` `propagateNow`: "the
//! dataset should be fixed during client pause, otherwise data may be lost
//! during a failover") and stops. The node record's announcement after a
//! raise of `redlock.max-ttl-ms` runs from a 0 ms timer
//! (`host::node::announce_soon`), and `CONFIG SET` is not a write, so it
//! runs inside a `CLIENT PAUSE … WRITE`.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn log_assertions(node: &Node) -> String {
    std::fs::read_to_string(node.dir().join("redis.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ASSERTION") || l.contains("==> "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A raise of `max-ttl-ms` during a write pause: the server keeps running,
/// and the node record reaches the AOF once the pause ends.
#[test]
fn a_max_ttl_raise_during_a_client_pause_is_announced_after_it() {
    let node = Node::builder()
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut con = node.connection();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_000)
        .arg("WRITE")
        .query(&mut con)
        .unwrap();
    let raised: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg(600_000)
        .query(&mut con);
    assert!(
        raised.is_ok(),
        "{raised:?}; the server's log says:\n{}",
        log_assertions(&node)
    );
    // Reads answer during a write pause: the server must still be up.
    std::thread::sleep(Duration::from_millis(200));
    let mut probe = node.connection();
    let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut probe);
    assert!(
        pong.is_ok(),
        "{pong:?}; the server's log says:\n{}",
        log_assertions(&node)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let aof = aof_text(&node);
        if aof.contains("600000") {
            break;
        }
        assert!(Instant::now() < deadline, "never announced: {aof}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn aof_text(node: &Node) -> String {
    let mut out = String::new();
    for dir in [node.dir().to_path_buf(), node.dir().join("appendonlydir")] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().contains(".aof") {
                    out.push_str(&String::from_utf8_lossy(
                        &std::fs::read(e.path()).unwrap_or_default(),
                    ));
                }
            }
        }
    }
    out
}

/// A change of `redlock.sync-replicas` during a write pause: its
/// announcement to the replicas (`host::sync::announce_soon`, a 0 ms timer)
/// waits for the pause to end, and the server keeps running.
#[test]
fn a_sync_replicas_change_during_a_client_pause_is_announced_after_it() {
    let master = Node::builder()
        .config("appendonly", "yes")
        .config("repl-diskless-sync-delay", "0")
        .start();
    let replica = start_replica(&master, Node::builder());
    let mut con = master.connection();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_000)
        .arg("WRITE")
        .query(&mut con)
        .unwrap();
    let changed: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.sync-replicas")
        .arg(1)
        .query(&mut con);
    assert!(
        changed.is_ok(),
        "{changed:?}; the server's log says:\n{}",
        log_assertions(&master)
    );
    std::thread::sleep(Duration::from_millis(200));
    let mut probe = master.connection();
    let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut probe);
    assert!(
        pong.is_ok(),
        "{pong:?}; the server's log says:\n{}",
        log_assertions(&master)
    );
    // After the pause the replica hears of the new R.
    let mut r = replica.connection();
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut r, "redlock", "redlock_sync_master_replicas").as_deref() != Some("1") {
        assert!(
            Instant::now() < deadline,
            "the replica never heard of R = 1: {:?}",
            info_field(&mut r, "redlock", "redlock_sync_master_replicas")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
