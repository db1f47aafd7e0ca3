//! Owner ids are never at rest: `DUMP`, RDB and AOF files and the
//! replication stream hold a hash of the owner, and the owner in clear still
//! works everywhere a lock record can travel.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;

const OWNER: &str = "secret-owner-777";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn assert_no_owner(bytes: &[u8], what: &str) {
    assert!(
        !contains(bytes, OWNER.as_bytes()),
        "{what} contains the owner id"
    );
}

/// Acceptance 1: DUMP, an RDB file, AOF files (after writes and after a
/// rewrite, with and without the RDB preamble) and a replica's replication
/// stream (full sync and commands) never contain the owner's bytes.
#[test]
fn no_copy_of_a_lock_contains_the_owner() {
    for preamble in ["no", "yes"] {
        let node = Node::builder()
            .config("appendonly", "yes")
            .config("aof-use-rdb-preamble", preamble)
            .start();
        let mut con = node.connection();
        // A raw replication client: full sync first, then the command stream.
        let mut replica = std::net::TcpStream::connect(("127.0.0.1", node.port())).unwrap();
        replica
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        replica.write_all(b"PSYNC ? -1\r\n").unwrap();

        assert_eq!(acquire(&mut con, "k", OWNER, 60_000), Some(1));
        assert_eq!(extend(&mut con, "k", OWNER, 60_000), 1);
        assert_eq!(fence(&mut con, "k", OWNER, Some(5)), Some(5));
        assert_eq!(acquire(&mut con, "k2", OWNER, 60_000), Some(1));
        assert_eq!(release(&mut con, "k2", OWNER), 1);
        assert_eq!(acquire(&mut con, "k3", OWNER, 60_000), Some(1));

        let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut con).unwrap();
        assert!(!dump.is_empty());
        assert_no_owner(&dump, "DUMP");
        assert_no_owner(&aof_bytes(&node), &format!("AOF (preamble {preamble})"));
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
        wait_for_no_child(&mut con);
        assert_no_owner(
            &aof_bytes(&node),
            &format!("rewritten AOF (preamble {preamble})"),
        );
        let _: String = redis::cmd("SAVE").query(&mut con).unwrap();
        let rdb = std::fs::read(node.dir().join("dump.rdb")).unwrap();
        assert!(contains(&rdb, b"redlockfn") || rdb.len() > 20);
        assert_no_owner(&rdb, "RDB");

        let mut stream = Vec::new();
        let mut buf = [0u8; 65536];
        let deadline = Instant::now() + Duration::from_secs(10);
        while !contains(&stream, b"REDLOCK.APPLY") || !contains(&stream, b"k3") {
            assert!(Instant::now() < deadline, "replication stream incomplete");
            if let Ok(n) = replica.read(&mut buf) {
                stream.extend_from_slice(&buf[..n]);
            }
        }
        assert_no_owner(&stream, "replication stream");
    }
}

fn release_extend_fence_work_with_the_owner(con: &mut redis::Connection, key: &str, context: &str) {
    assert_eq!(extend(con, key, "wrong-owner", 30_000), 0, "{context}");
    assert_eq!(fence(con, key, "wrong-owner", Some(1)), None, "{context}");
    assert_eq!(release(con, key, "wrong-owner"), 0, "{context}");
    assert_eq!(extend(con, key, OWNER, 30_000), 1, "{context}");
    let token = inspect(con, key).unwrap().token;
    assert_eq!(fence(con, key, OWNER, None), Some(token), "{context}");
    assert_eq!(release(con, key, OWNER), 1, "{context}");
    assert!(!inspect(con, key).unwrap().held, "{context}");
}

/// Acceptance 2: RELEASE/EXTEND/FENCE with the right owner work on the
/// master, on a promoted replica, after DEBUG RELOAD, after restart from
/// AOF and RDB, after RESTORE of a DUMP and after COPY; a wrong owner gets
/// 0 or nil.
#[test]
fn the_owner_in_clear_works_wherever_the_record_travels() {
    let mut node = Node::builder()
        .config("appendonly", "yes")
        .config("repl-diskless-sync-delay", "0")
        .start();
    let mut con = node.connection();
    let take = |con: &mut redis::Connection, key: &str| {
        assert!(acquire(con, key, OWNER, 60_000).is_some(), "{key}");
    };

    take(&mut con, "master");
    release_extend_fence_work_with_the_owner(&mut con, "master", "on the master");

    take(&mut con, "reload");
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    release_extend_fence_work_with_the_owner(&mut con, "reload", "after DEBUG RELOAD");

    take(&mut con, "dumped");
    let dump: Vec<u8> = redis::cmd("DUMP").arg("dumped").query(&mut con).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .unwrap();
    release_extend_fence_work_with_the_owner(&mut con, "restored", "after RESTORE");

    let copied: i64 = redis::cmd("COPY")
        .arg("dumped")
        .arg("copied")
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    release_extend_fence_work_with_the_owner(&mut con, "copied", "after COPY");

    take(&mut con, "from-aof");
    take(&mut con, "from-rdb");
    let replica = start_replica(&node, Node::builder());
    let mut r = replica.connection();
    take(&mut con, "streamed");
    wait_replicated(&mut con);
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    release_extend_fence_work_with_the_owner(&mut r, "dumped", "promoted replica (full sync)");
    release_extend_fence_work_with_the_owner(&mut r, "streamed", "promoted replica (stream)");

    drop(con);
    node.restart();
    let mut con = node.connection();
    release_extend_fence_work_with_the_owner(&mut con, "from-aof", "after restart from AOF");
    let _: String = redis::cmd("SAVE").query(&mut con).unwrap();
    drop(con);
    node.restart_with(&[("appendonly", "no")]);
    let mut con = node.connection();
    release_extend_fence_work_with_the_owner(&mut con, "from-rdb", "after restart from RDB");
}

/// What `MEMORY USAGE` reports for a held and a released lock name, next to
/// a `SET NX PX` key with a UUID value: the record's size does not depend on
/// the owner's length (32 bytes leased, 16 released).
#[test]
fn memory_per_record_does_not_depend_on_the_owner() {
    let node = Node::start();
    let mut con = node.connection();
    assert_eq!(acquire(&mut con, "lock:short", "a", 60_000), Some(1));
    assert_eq!(
        acquire(&mut con, "lock:long1", &"x".repeat(256), 60_000),
        Some(1)
    );
    assert_eq!(acquire(&mut con, "lock:freed", "a", 60_000), Some(1));
    assert_eq!(release(&mut con, "lock:freed", "a"), 1);
    let short = memory_usage(&mut con, "lock:short");
    assert_eq!(memory_usage(&mut con, "lock:long1"), short);
    // A released record drops the owner and the lease: it is smaller.
    assert!(memory_usage(&mut con, "lock:freed") < short);
    let _: () = redis::cmd("SET")
        .arg("plain:lock")
        .arg("0b9a4a2e-5c1f-4f7e-9d43-2f7c1d0e8a11")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let plain = memory_usage(&mut con, "plain:lock");
    assert!(
        short <= plain,
        "lock record {short} B > SET NX PX key {plain} B"
    );
}
