//! Issue 35 item 2: a replica refuses ACQUIRE, EXTEND, FENCE and FENCED
//! with `READONLY` whatever `replica-read-only` says, changes nothing, and
//! still applies its master's stream (`REDLOCK.APPLY`). With
//! `replica-read-only no` a replica used to grant locks of its own.

mod common;

use common::*;

/// The error code and text of a command expected to fail.
fn refusal(con: &mut redis::Connection, cmd: &mut redis::Cmd) -> String {
    match cmd.query::<redis::Value>(con) {
        Ok(v) => format!("accepted: {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")),
    }
}

#[test]
fn a_replica_refuses_lock_writes_whatever_replica_read_only_says() {
    for read_only in ["no", "yes"] {
        let master = Node::builder()
            .config("repl-diskless-sync-delay", "0")
            .start();
        let mut m = master.connection();
        let replica = start_replica(
            &master,
            Node::builder().config("replica-read-only", read_only),
        );
        let mut r = replica.connection();
        assert_eq!(acquire(&mut m, "k", "alice", 30_000), Some(1));
        let _: () = redis::cmd("REDLOCK.FENCED")
            .arg("g")
            .arg("k")
            .arg(1)
            .arg("SET")
            .arg("x")
            .arg("1")
            .query(&mut m)
            .unwrap();
        wait_replicated(&mut m);
        let before = (digest(&mut r), inspect(&mut r, "k").unwrap());

        let calls: [(&str, redis::Cmd); 6] = [
            ("ACQUIRE of a free lock", {
                let mut c = redis::cmd("REDLOCK.ACQUIRE");
                c.arg("free").arg("bob").arg(1_000);
                c
            }),
            ("ACQUIRE by the holder", {
                let mut c = redis::cmd("REDLOCK.ACQUIRE");
                c.arg("k").arg("alice").arg(60_000);
                c
            }),
            ("ACQUIRE with FLOOR", {
                let mut c = redis::cmd("REDLOCK.ACQUIRE");
                c.arg("free").arg("bob").arg(1_000).arg("FLOOR").arg(5);
                c
            }),
            ("EXTEND", {
                let mut c = redis::cmd("REDLOCK.EXTEND");
                c.arg("k").arg("alice").arg(60_000);
                c
            }),
            ("FENCE", {
                let mut c = redis::cmd("REDLOCK.FENCE");
                c.arg("k").arg("alice").arg(99);
                c
            }),
            ("FENCED", {
                let mut c = redis::cmd("REDLOCK.FENCED");
                c.arg("g").arg("k").arg(2).arg("SET").arg("x").arg("2");
                c
            }),
        ];
        for (what, mut cmd) in calls {
            let e = refusal(&mut r, &mut cmd);
            assert!(
                e.starts_with("READONLY"),
                "replica-read-only {read_only}, {what}: {e}"
            );
        }
        // Nothing changed on the replica.
        assert_eq!(
            inspect(&mut r, "free"),
            None,
            "replica-read-only {read_only}"
        );
        let after = (digest(&mut r), inspect(&mut r, "k").unwrap());
        assert_eq!(after.0, before.0, "replica-read-only {read_only}");
        assert_eq!(after.1.token, 1);
        assert!(after.1.pttl <= before.1.pttl, "{after:?} after {before:?}");
        let x: String = redis::cmd("GET").arg("x").query(&mut r).unwrap();
        assert_eq!(x, "1");
        // Reads still work, and the setting is what it says.
        assert!(inspect(&mut r, "k").unwrap().held);
        let wait: i64 = redis::cmd("REDLOCK.WAIT")
            .arg("free")
            .arg(100)
            .query(&mut r)
            .unwrap();
        assert_eq!(wait, 1);
        let plain_write: redis::RedisResult<()> = redis::cmd("SET").arg("y").arg("1").query(&mut r);
        assert_eq!(plain_write.is_ok(), read_only == "no", "{plain_write:?}");

        // The master's effects still arrive.
        assert_eq!(extend(&mut m, "k", "alice", 50_000), 1);
        assert_eq!(fence(&mut m, "k", "alice", Some(7)), Some(7));
        assert_eq!(acquire(&mut m, "free", "bob", 20_000), Some(1));
        wait_replicated(&mut m);
        let k = inspect(&mut r, "k").unwrap();
        assert!(k.held && k.token == 7 && k.pttl > 30_000, "{k:?}");
        assert!(inspect(&mut r, "free").unwrap().held);
        assert_eq!(release(&mut m, "k", "alice"), 1);
        wait_replicated(&mut m);
        assert!(!inspect(&mut r, "k").unwrap().held);
        assert_eq!(
            digest_value(&mut r, "free"),
            digest_value(&mut m, "free"),
            "replica-read-only {read_only}"
        );
    }
}

/// `DEBUG DIGEST-VALUE key`.
fn digest_value(con: &mut redis::Connection, key: &str) -> String {
    let digests: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(con)
        .unwrap();
    digests.into_iter().next().unwrap_or_default()
}
