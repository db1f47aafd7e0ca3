//! The adversarial review of issue 37 (`/work/coord/review37.md`): event
//! sequences against the promotion rule and the replica-sync check, each on
//! real processes. A test here states the safety property it checks (no two
//! holders of one lock within their validity; tokens increase), not the code
//! path that used to break it.

mod common;

use std::time::Duration;

use common::*;
use redlock_testkit::NodeBuilder;

/// A node with the check at `r`, leases up to 60 s, and the restart guard on
/// by default (`restart-grace-ms -1`); `grace_ms` overrides it.
fn node(r: u64, grace_ms: i64) -> NodeBuilder {
    Node::builder()
        .config("redlock.sync-replicas", &r.to_string())
        .config("redlock.restart-grace-ms", &grace_ms.to_string())
        .config("redlock.max-ttl-ms", "60000")
}

/// A replica of `master` with the check at `r`, online at its master, its
/// own restart window over and the guard on for a promotion.
fn replica_of(master: &Node, r: u64) -> Node {
    let replica = start_replica(master, node(r, 0));
    let mut con = replica.connection();
    config_set(&mut con, "redlock.restart-grace-ms", "-1");
    wait_online(master, &replica);
    replica
}

/// Waits until `master` counts `replica` online.
fn wait_online(master: &Node, replica: &Node) {
    let mut m = master.connection();
    let online = format!("port={},state=online", replica.port());
    wait_until(Duration::from_secs(20), "the replica online", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap();
        info.contains(&online)
    });
}

/// Waits until the replica applied a fresh announcement of its master.
fn wait_current(con: &mut redis::Connection) {
    wait_until(Duration::from_secs(10), "a fresh announcement", || {
        redlock_info(con, "sync_current") == 1
    });
}

/// What a client that follows the node's R relies on: `ACQUIRE … SYNC r`
/// then `WAIT r` when the node's R is above 0 (and only with `r` acks), a
/// plain `ACQUIRE` when it is 0. `Some(token)` when the grant counts.
fn relied_grant(con: &mut redis::Connection, key: &str, owner: &str, ttl: u64) -> Option<i64> {
    let r = redlock_info(con, "sync_replicas");
    if r == 0 {
        return acquire_result(con, key, owner, ttl).ok().flatten();
    }
    match acquire_synced(con, key, owner, ttl, r) {
        Ok((Some(token), acks)) if acks as u64 >= r => Some(token),
        _ => None,
    }
}

/// Cuts the master's link to its replicas (as a network cut does): what the
/// master writes from now on does not reach a replica that is frozen.
fn cut_replicas(m: &mut redis::Connection) {
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(m)
        .unwrap();
}

/// Finding 1: `redlock.sync-replicas` lowered to 0 on the master while a
/// replica lags (its link cut, or just behind). The master grants at once
/// without the check (the client, told R is 0, relies on the grant without
/// WAIT); the replica never received the announcement that R is 0 and still
/// holds its master's vouch for R 1. Promoted, it must not grant the lock
/// while the unchecked lease may run.
#[test]
fn lowering_r_to_zero_while_a_replica_lags_loses_no_lock() {
    let mut m = node(1, 0).start();
    let mut c = m.connection();
    let a = replica_of(&m, 1);
    let mut ra = a.connection();
    wait_current(&mut ra);

    // The replica falls behind: frozen, its link cut.
    a.pause();
    cut_replicas(&mut c);
    // The operator turns the check off on the master; a client takes a lock
    // there as the node's R 0 says it may (no WAIT).
    config_set(&mut c, "redlock.sync-replicas", "0");
    let alice = relied_grant(&mut c, "k", "alice", 30_000);
    // The master dies; Sentinel promotes the replica.
    m.kill();
    a.resume();
    wait_until(Duration::from_secs(10), "the replica's link down", || {
        !link_up(&mut ra)
    });
    promote(&mut ra);
    // The new master gets a replica of its own, so that the check can pass.
    let b = replica_of(&a, 1);
    wait_current(&mut b.connection());
    let bob = relied_grant(&mut ra, "k", "bob", 1_000);
    assert!(
        alice.is_none() || bob.is_none(),
        "two holders of k: alice (token {alice:?}, 30 s lease, granted under R 0) and bob \
         (token {bob:?}) on the promoted replica (promotion outcome {})",
        redlock_info(&mut ra, "sync_last_promotion")
    );
}

/// The same with R raised again before the master dies (2 -> 0 -> 2): the
/// hold the raise announces never reaches the lagging replica either.
#[test]
fn lowering_r_to_zero_and_back_while_a_replica_lags_loses_no_lock() {
    let mut m = node(1, 0).start();
    let mut c = m.connection();
    let a = replica_of(&m, 1);
    let mut ra = a.connection();
    wait_current(&mut ra);
    a.pause();
    cut_replicas(&mut c);
    config_set(&mut c, "redlock.sync-replicas", "0");
    let alice = relied_grant(&mut c, "k", "alice", 30_000);
    config_set(&mut c, "redlock.sync-replicas", "1");
    m.kill();
    a.resume();
    wait_until(Duration::from_secs(10), "the replica's link down", || {
        !link_up(&mut ra)
    });
    promote(&mut ra);
    let b = replica_of(&a, 1);
    wait_current(&mut b.connection());
    let bob = relied_grant(&mut ra, "k", "bob", 1_000);
    assert!(
        alice.is_none() || bob.is_none(),
        "two holders of k: alice (token {alice:?}) and bob (token {bob:?}), promotion outcome {}",
        redlock_info(&mut ra, "sync_last_promotion")
    );
}

/// Lowering R to 0 completes once every replica of the master applied it:
/// lock writes without the check are refused until then (with the replicas
/// still waited for), and go on after; a promoted replica then keeps the
/// guard.
#[test]
fn lowering_r_to_zero_completes_once_every_replica_applied_it() {
    let m = node(2, 0).start();
    let mut c = m.connection();
    let a = replica_of(&m, 2);
    let b = replica_of(&m, 2);
    let mut ra = a.connection();
    wait_current(&mut ra);
    wait_current(&mut b.connection());
    // b falls behind: frozen (its master still counts it online).
    b.pause();
    config_set(&mut c, "redlock.sync-replicas", "0");
    wait_until(Duration::from_secs(10), "a applied R 0", || {
        redlock_info(&mut ra, "sync_master_replicas") == 0
    });
    // Past a's next acknowledgement: only b is waited for.
    std::thread::sleep(Duration::from_millis(1_500));
    let err = error_of(&mut c, &[b"REDLOCK.ACQUIRE", b"k", b"alice", b"30000"]);
    assert!(
        err.starts_with("NOSYNC redlock.sync-replicas was lowered to 0")
            && err.contains(&format!("127.0.0.1:{}", b.port()))
            && !err.contains(&format!("127.0.0.1:{}", a.port())),
        "{err}"
    );
    assert_eq!(inspect(&mut c, "k"), None, "a refused ACQUIRE changed k");
    assert_eq!(redlock_info(&mut c, "sync_lowering"), 1);
    // The field reads INFO replication from inside INFO: all sections at once
    // answer too.
    let everything: String = redis::cmd("INFO").arg("everything").query(&mut c).unwrap();
    assert!(
        everything.contains("redlock_sync_lowering:1"),
        "{everything}"
    );
    b.resume();
    wait_until(
        Duration::from_secs(10),
        "INFO says the lowering is complete",
        || redlock_info(&mut c, "sync_lowering") == 0,
    );
    let mut granted = None;
    wait_until(Duration::from_secs(10), "the lowering complete", || {
        granted = acquire_result(&mut c, "k", "alice", 30_000).ok().flatten();
        granted.is_some()
    });
    assert_eq!(granted, Some(1));
    promote(&mut ra);
    assert_eq!(redlock_info(&mut ra, "sync_last_promotion"), 3);
}

/// Finding 1b: the same lowering across a restart. The master ran with R 1
/// (its replica holds the vouch for R 1) and comes back with R 0 from its
/// configuration (a `CONFIG SET` never written to the file, or the file
/// edited to switch the check off). Durable all its life (AOF always), the
/// restart is exempt from the guard and grants at once without the check;
/// the replica, frozen meanwhile, never hears that R is 0.
#[test]

fn a_master_restarted_with_r_zero_while_a_replica_lags_loses_no_lock() {
    // Started without a window (so that the next start may be exempt).
    let mut m = node(1, 0)
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let a = replica_of(&m, 1);
    let mut ra = a.connection();
    wait_current(&mut ra);
    a.pause();
    // Killed (AOF always loses nothing) and started again with R 0.
    m.kill();
    m.restart_with(&[
        ("redlock.sync-replicas", "0"),
        ("redlock.restart-grace-ms", "-1"),
    ]);
    let mut c = m.connection();
    assert_eq!(redlock_info(&mut c, "restart_exempt"), 1);
    let alice = relied_grant(&mut c, "k", "alice", 30_000);
    m.kill();
    a.resume();
    wait_until(Duration::from_secs(10), "the replica's link down", || {
        !link_up(&mut ra)
    });
    promote(&mut ra);
    let b = replica_of(&a, 1);
    wait_current(&mut b.connection());
    let bob = relied_grant(&mut ra, "k", "bob", 1_000);
    assert!(
        alice.is_none() || bob.is_none(),
        "two holders of k: alice (token {alice:?}) on the restarted master and bob (token {bob:?}) \
         on the promoted replica, promotion outcome {}",
        redlock_info(&mut ra, "sync_last_promotion")
    );
}

/// Finding 2: two replicas that a master sees at the same `ip:port` (both
/// listen on the same port behind one NAT address, or announce the same
/// `replica-announce-ip`/`-port`). The master counted replicas by that
/// identity: two replicas were one, so R 1 passed with two replicas and
/// `WAIT 1` counted either. The one that missed a grant, promoted, granted
/// the lock again.
#[test]
fn two_replicas_at_one_address_are_two() {
    let mut m = node(1, 0).start();
    let mut c = m.connection();
    let a = replica_of(&m, 1);
    let shared_port = a.port().to_string();
    let b = start_replica(&m, node(1, 0).config("replica-announce-port", &shared_port));
    let mut rb = b.connection();
    config_set(&mut rb, "redlock.restart-grace-ms", "-1");
    wait_until(Duration::from_secs(20), "two replicas online", || {
        info_field(&mut c, "replication", "connected_slaves").as_deref() == Some("2")
            && redlock_info(&mut c, "sync_replicas_online") == 2
    });
    wait_current(&mut a.connection());
    wait_current(&mut rb);
    let err = error_of(
        &mut c,
        &[b"REDLOCK.ACQUIRE", b"probe", b"p", b"1000", b"SYNC", b"1"],
    );
    assert!(
        err.starts_with("TOOMANYREPLICAS this master has had 2 replicas")
            && err.contains(&format!("127.0.0.1#2:{shared_port}")),
        "{err}"
    );
    // b falls behind: frozen, its link cut (a comes back at once).
    b.pause();
    cut_replicas(&mut c);
    wait_until(Duration::from_secs(20), "a back online alone", || {
        info_field(&mut c, "replication", "connected_slaves").as_deref() == Some("1")
            && redlock_info(&mut c, "sync_replicas_online") == 1
    });
    let alice = relied_grant(&mut c, "k", "alice", 30_000);
    m.kill();
    b.resume();
    wait_until(Duration::from_secs(10), "b's link down", || {
        !link_up(&mut rb)
    });
    promote(&mut rb);
    let d = replica_of(&b, 1);
    wait_current(&mut d.connection());
    let bob = relied_grant(&mut rb, "k", "bob", 1_000);
    assert!(
        alice.is_none() || bob.is_none(),
        "two holders of k: alice (token {alice:?}) acknowledged by a only, and bob (token {bob:?}) \
         on b promoted, promotion outcome {}",
        redlock_info(&mut rb, "sync_last_promotion")
    );
}

/// A client of the replication protocol that is not a Redis server (a
/// migration or change-data-capture tool): `PSYNC` without
/// `REPLCONF listening-port` (so the master lists it with port 0), reads
/// the snapshot and the stream, and acknowledges what it read every 100 ms.
struct ReplicationTool {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReplicationTool {
    fn attach(master: &Node) -> ReplicationTool {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::Ordering;
        let sock = std::net::TcpStream::connect(("127.0.0.1", master.port())).unwrap();
        let mut writer = sock.try_clone().unwrap();
        let mut reader = BufReader::new(sock);
        writer
            .write_all(b"*3\r\n$8\r\nREPLCONF\r\n$4\r\ncapa\r\n$6\r\npsync2\r\n")
            .unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "+OK");
        writer
            .write_all(b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n")
            .unwrap();
        // "+FULLRESYNC replid offset", newlines while the snapshot is made,
        // then "$len" and the snapshot.
        let mut offset: u64 = loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if let Some(rest) = line.trim().strip_prefix("+FULLRESYNC ") {
                break rest.split_whitespace().nth(1).unwrap().parse().unwrap();
            }
        };
        let len: usize = loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if let Some(len) = line.trim().strip_prefix('$') {
                break len.parse().unwrap();
            }
        };
        let mut rdb = vec![0u8; len];
        reader.read_exact(&mut rdb).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while !flag.load(Ordering::Relaxed) {
                match reader.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => offset += n as u64,
                    Err(_) => {}
                }
                let ack = offset.to_string();
                let cmd = format!(
                    "*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n${}\r\n{ack}\r\n",
                    ack.len()
                );
                if writer.write_all(cmd.as_bytes()).is_err() {
                    return;
                }
            }
        });
        ReplicationTool {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for ReplicationTool {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes about `mb` MB to the master, so that what it writes next stays in
/// its own output buffer for a frozen replica (the kernel's socket buffers
/// are full): a replica that then loses its master never receives it.
fn fill_replication_buffers(c: &mut redis::Connection, mb: usize) {
    let value = vec![b'x'; 1 << 16];
    for i in 0..mb * 16 {
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&value[..])
            .query(c)
            .unwrap();
    }
}

/// Finding 3: `WAIT` counts every replica that acknowledges, but the master
/// left replicas listed with port 0 out of its count ("a tool that reads an
/// RDB, never a promotable replica"). Such a tool that acknowledges what it
/// read met `WAIT 1` while the one real replica lagged; promoted, that
/// replica granted the lock again.
#[test]
fn a_replication_tool_does_not_stand_in_for_a_replica() {
    let mut m = node(1, 0).start();
    let mut c = m.connection();
    let a = replica_of(&m, 1);
    let mut ra = a.connection();
    wait_current(&mut ra);
    let tool = ReplicationTool::attach(&m);
    wait_until(Duration::from_secs(20), "the tool online", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
        info.contains("port=0,state=online")
    });
    let err = error_of(
        &mut c,
        &[b"REDLOCK.ACQUIRE", b"probe", b"p", b"1000", b"SYNC", b"1"],
    );
    assert!(
        err.starts_with("TOOMANYREPLICAS this master has had 2 replicas")
            && err.contains("127.0.0.1:0 (no listening port)"),
        "{err}"
    );
    // A tool that left no longer counts (it is never promoted).
    let second = ReplicationTool::attach(&m);
    wait_until(Duration::from_secs(20), "the second tool counted", || {
        redlock_info(&mut c, "sync_replicas_known") == 3
    });
    drop(second);
    wait_until(Duration::from_secs(20), "the second tool gone", || {
        redlock_info(&mut c, "sync_replicas_known") == 2
    });
    // a falls behind: frozen, and what the master writes next does not
    // reach its socket.
    a.pause();
    fill_replication_buffers(&mut c, 40);
    let alice = relied_grant(&mut c, "k", "alice", 30_000);
    m.kill();
    drop(tool);
    a.resume();
    wait_until(Duration::from_secs(30), "a's link down", || {
        !link_up(&mut ra)
    });
    promote(&mut ra);
    let d = replica_of(&a, 1);
    wait_current(&mut d.connection());
    let bob = relied_grant(&mut ra, "k", "bob", 1_000);
    assert!(
        alice.is_none() || bob.is_none(),
        "two holders of k: alice (token {alice:?}) acknowledged by the tool only, and bob \
         (token {bob:?}) on a promoted, promotion outcome {}",
        redlock_info(&mut ra, "sync_last_promotion")
    );
}

/// Hardening 4: `REDLOCK.REPLICAS FORGET` refused only a replica *online*
/// now; one connected but in the middle of a full sync (listed `wait_bgsave`,
/// `send_bulk`) could be forgotten. Such a replica still holds its old data
/// and its master's vouch until it starts loading, and may be promoted.
#[test]
fn a_replica_in_the_middle_of_a_sync_cannot_be_forgotten() {
    use std::io::{BufRead, BufReader, Write};
    let m = node(1, 0)
        .config("repl-diskless-sync", "yes")
        .config("repl-diskless-sync-delay", "30")
        .start();
    let mut c = m.connection();
    config_set(&mut c, "repl-diskless-sync-delay", "0");
    let mut b = replica_of(&m, 1);
    let port = b.port();
    b.kill();
    wait_until(Duration::from_secs(10), "b offline", || {
        redlock_info(&mut c, "sync_replicas_online") == 0
    });
    // b comes back and asks for a full sync, which waits 30 s to start.
    config_set(&mut c, "repl-diskless-sync-delay", "30");
    let sock = std::net::TcpStream::connect(("127.0.0.1", m.port())).unwrap();
    let mut w = sock.try_clone().unwrap();
    let mut r = BufReader::new(sock);
    let p = port.to_string();
    for cmd in [
        format!(
            "*3\r\n$8\r\nREPLCONF\r\n$14\r\nlistening-port\r\n${}\r\n{p}\r\n",
            p.len()
        ),
        "*5\r\n$8\r\nREPLCONF\r\n$4\r\ncapa\r\n$3\r\neof\r\n$4\r\ncapa\r\n$6\r\npsync2\r\n".into(),
    ] {
        w.write_all(cmd.as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "+OK");
    }
    w.write_all(b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n")
        .unwrap();
    let syncing = format!("port={port},state=wait_bgsave");
    wait_until(Duration::from_secs(10), "b waiting for its sync", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
        info.contains(&syncing)
    });
    let err = error_of(
        &mut c,
        &[
            b"REDLOCK.REPLICAS",
            b"FORGET",
            format!("127.0.0.1:{port}").as_bytes(),
        ],
    );
    assert!(err.contains("is connected"), "{err}");
    drop((w, r));
}

/// Finding 5: a master and its replica that share `dir` (two instances on
/// one host with their own `dbfilename` and `appenddirname`, which Redis
/// allows). The replica wrote its state (no replica set) over the master's
/// `redlock-sync-state`; restarted, the master forgot a replica that had
/// left, counted only those online, and took writes that replica lacked.
#[test]
fn a_replica_sharing_the_masters_dir_leaves_its_replica_set_alone() {
    let mut m = node(2, 0)
        .config("appendonly", "yes")
        .config("appendfsync", "always")
        .start();
    let mut c = m.connection();
    let a = replica_of_builder(
        &m,
        node(2, 0)
            .config("dir", m.dir().to_str().unwrap())
            .config("dbfilename", "replica-a.rdb")
            .config("appenddirname", "replica-a-aof"),
    );
    let b = replica_of(&m, 2);
    let mut rb = b.connection();
    wait_current(&mut a.connection());
    wait_current(&mut rb);
    assert_eq!(redlock_info(&mut c, "sync_replicas_known"), 2);
    // b falls behind for good: frozen, its link cut (a comes back at once).
    b.pause();
    cut_replicas(&mut c);
    wait_until(Duration::from_secs(20), "a back online alone", || {
        redlock_info(&mut c, "sync_replicas_online") == 1
            && info_field(&mut c, "replication", "connected_slaves").as_deref() == Some("1")
    });
    // The master restarts (durable, nothing lost) and gets a second replica.
    m.kill();
    m.restart();
    let mut c = m.connection();
    wait_until(Duration::from_secs(20), "a back", || {
        redlock_info(&mut c, "sync_replicas_online") == 1
    });
    let d = replica_of(&m, 2);
    wait_current(&mut d.connection());
    let alice = relied_grant(&mut c, "k", "alice", 30_000);
    m.kill();
    b.resume();
    wait_until(Duration::from_secs(10), "b's link down", || {
        !link_up(&mut rb)
    });
    promote(&mut rb);
    let e = replica_of(&b, 2);
    let f = replica_of(&b, 2);
    wait_current(&mut e.connection());
    wait_current(&mut f.connection());
    let bob = relied_grant(&mut rb, "k", "bob", 1_000);
    assert!(
        alice.is_none() || bob.is_none(),
        "two holders of k: alice (token {alice:?}) and bob (token {bob:?}) on b promoted, \
         promotion outcome {}",
        redlock_info(&mut rb, "sync_last_promotion")
    );
}

/// A replica of `master` from `builder`, online at its master, the guard on
/// for a promotion.
fn replica_of_builder(master: &Node, builder: NodeBuilder) -> Node {
    let replica = start_replica(master, builder);
    let mut con = replica.connection();
    config_set(&mut con, "redlock.restart-grace-ms", "-1");
    wait_online(master, &replica);
    replica
}

/// The state file written before its name carried the port is read once by
/// a node that has none of its own (an upgrade keeps the replica set).
#[test]
fn the_state_file_of_an_older_version_is_read_once() {
    let m = node(1, 0)
        .file(
            "redlock-sync-state",
            b"redlock-sync-state 1\nseen none\nreplica 127.0.0.1:1\nreplica 127.0.0.1:2\n",
        )
        .start();
    let mut c = m.connection();
    let list: Vec<(String, i64)> = redis::cmd("REDLOCK.REPLICAS").query(&mut c).unwrap();
    assert_eq!(
        list,
        vec![
            ("127.0.0.1:1".to_string(), 0),
            ("127.0.0.1:2".to_string(), 0)
        ]
    );
    assert_eq!(redlock_info(&mut c, "sync_replicas_known"), 2);
    // Written under this node's own name from now on.
    let forgot: i64 = redis::cmd("REDLOCK.REPLICAS")
        .arg("FORGET")
        .arg("127.0.0.1:2")
        .query(&mut c)
        .unwrap();
    assert_eq!(forgot, 1);
    let own =
        std::fs::read_to_string(m.dir().join(format!("redlock-sync-state-{}", m.port()))).unwrap();
    assert!(
        own.contains("replica 127.0.0.1:1\n") && !own.contains("127.0.0.1:2"),
        "{own}"
    );
}

/// Finding 6: two nodes sharing `dir` (each with its own `dbfilename` and
/// `appenddirname`) shared `redlock-longest-lease-ms`, and each wrote its
/// own value over it: the record, which must only grow, went down. A node
/// that had granted a lease longer than what the record then said waited
/// too short a restart window after a crash, and granted the lock again
/// while that lease ran.
#[test]
fn a_node_sharing_dir_keeps_the_longest_lease_it_granted() {
    let mut y = Node::builder()
        .config("redlock.max-ttl-ms", "1000")
        .config("redlock.restart-grace-ms", "-1")
        .config("dbfilename", "y.rdb")
        .config("appenddirname", "y-aof")
        .start();
    let x = Node::builder()
        .config("redlock.max-ttl-ms", "1000")
        .config("redlock.restart-grace-ms", "-1")
        .config("dir", y.dir().to_str().unwrap())
        .config("dbfilename", "x.rdb")
        .config("appenddirname", "x-aof")
        .start();
    let mut cy = y.connection();
    let mut cx = x.connection();
    // Past both restart windows (1 s).
    wait_until(Duration::from_secs(10), "the windows over", || {
        redlock_info(&mut cy, "grace_active") == 0 && redlock_info(&mut cx, "grace_active") == 0
    });
    // y grants a 6 s lease; x raises its own limit to 3 s afterwards.
    config_set(&mut cy, "redlock.max-ttl-ms", "6000");
    assert_eq!(acquire(&mut cy, "k", "alice", 6_000), Some(1));
    let granted = std::time::Instant::now();
    config_set(&mut cx, "redlock.max-ttl-ms", "3000");
    // y crashes (no persistence: the lease is lost) and comes back with its
    // configured 1 s limit.
    y.kill();
    y.restart();
    let mut cy = y.connection();
    let mut bob = None;
    while granted.elapsed() < Duration::from_millis(5_500) && bob.is_none() {
        bob = acquire_result(&mut cy, "k", "bob", 1_000).ok().flatten();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        bob.is_none(),
        "bob was granted k {} ms after alice's 6 s lease (the record said {:?})",
        granted.elapsed().as_millis(),
        std::fs::read_to_string(y.dir().join("redlock-longest-lease-ms"))
    );
}

/// Finding 7: a replica that comes online while a client's `WAIT` is
/// blocked. The master checked its replica set when it took the write (two
/// known, R 2), and the new one, which synced the write with its snapshot,
/// met `WAIT 2` together with the other live one while the frozen one
/// lacked it; promoted at once, the frozen one granted the lock again.
#[test]
fn a_replica_that_comes_online_during_a_wait_does_not_stand_in() {
    let mut m = node(2, 0).start();
    let mut c = m.connection();
    let a = replica_of(&m, 2);
    let b = replica_of(&m, 2);
    let mut rb = b.connection();
    wait_current(&mut a.connection());
    wait_current(&mut rb);
    b.pause();
    fill_replication_buffers(&mut c, 40);
    // alice's grant, with a patient WAIT (a client's sync timeout).
    let port = m.port();
    let alice = std::thread::spawn(move || {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection()
            .unwrap();
        let reply: redis::RedisResult<(Option<i64>, i64)> = redis::pipe()
            .cmd("REDLOCK.ACQUIRE")
            .arg("k")
            .arg("alice")
            .arg(30_000)
            .arg("SYNC")
            .arg(2)
            .cmd("WAIT")
            .arg(2)
            .arg(15_000)
            .query(&mut con);
        match reply {
            Ok((Some(token), acks)) if acks >= 2 => (Some(token), String::new()),
            other => (None, format!("{other:?}")),
        }
    });
    wait_until(Duration::from_secs(10), "alice's WAIT blocked", || {
        info_field(&mut c, "clients", "blocked_clients").as_deref() == Some("1")
    });
    // A replica is added meanwhile.
    let d = replica_of(&m, 2);
    let (alice, why) = alice.join().unwrap();
    // Not counted: the WAIT was ended with an error when d came online.
    assert!(alice.is_some() || why.contains("UNBLOCKED"), "{why}");
    m.kill();
    b.resume();
    wait_until(Duration::from_secs(30), "b's link down", || {
        !link_up(&mut rb)
    });
    promote(&mut rb);
    let e = replica_of(&b, 2);
    let f = replica_of(&b, 2);
    wait_current(&mut e.connection());
    wait_current(&mut f.connection());
    let bob = relied_grant(&mut rb, "k", "bob", 1_000);
    drop(d);
    assert!(
        alice.is_none() || bob.is_none(),
        "two holders of k: alice (token {alice:?}, WAIT 2 met by a and the new replica) and bob \
         (token {bob:?}) on b promoted, promotion outcome {}",
        redlock_info(&mut rb, "sync_last_promotion")
    );
}
