//! Helpers shared by the module's integration tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

pub use redlock_testkit::Node;

/// `REDLOCK.ACQUIRE key owner ttl` → token or nil.
pub fn acquire(con: &mut redis::Connection, key: &str, owner: &str, ttl: u64) -> Option<i64> {
    redis::cmd("REDLOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(con)
        .unwrap_or_else(|e| panic!("ACQUIRE {key} {owner} {ttl}: {e}"))
}

/// `REDLOCK.ACQUIRE key owner ttl` on a master whose `max-ttl-ms` was just
/// raised: a lease longer than its replicas acknowledged knowing is refused
/// with `NOSYNC` until they acknowledged (`core/lease_ack_rule.rs`), so it
/// is asked again, for at most 30 s. → token or nil.
pub fn acquire_acknowledged(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
) -> Option<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match acquire_result(con, key, owner, ttl) {
            Ok(reply) => return reply,
            Err(e) if e.code() == Some("NOSYNC") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("ACQUIRE {key} {owner} {ttl}: {e}"),
        }
    }
}

/// `REDLOCK.ACQUIRE key owner ttl` → token, nil, or the error reply.
pub fn acquire_result(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
) -> redis::RedisResult<Option<i64>> {
    redis::cmd("REDLOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(con)
}

/// `REDLOCK.ACQUIRE key owner ttl FLOOR n`.
pub fn acquire_floor(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    floor: i64,
) -> Option<i64> {
    redis::cmd("REDLOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .arg("FLOOR")
        .arg(floor)
        .query(con)
        .unwrap()
}

/// `REDLOCK.RELEASE key owner` → 1 or 0.
pub fn release(con: &mut redis::Connection, key: &str, owner: &str) -> i64 {
    redis::cmd("REDLOCK.RELEASE")
        .arg(key)
        .arg(owner)
        .query(con)
        .unwrap()
}

/// `REDLOCK.EXTEND key owner ttl` → 1 or 0.
pub fn extend(con: &mut redis::Connection, key: &str, owner: &str, ttl: u64) -> i64 {
    redis::cmd("REDLOCK.EXTEND")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(con)
        .unwrap()
}

/// `REDLOCK.FENCE key owner [token]`.
pub fn fence(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    token: Option<i64>,
) -> Option<i64> {
    let mut cmd = redis::cmd("REDLOCK.FENCE");
    cmd.arg(key).arg(owner);
    if let Some(t) = token {
        cmd.arg(t);
    }
    cmd.query(con).unwrap()
}

/// What INSPECT shows.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct View {
    pub held: bool,
    pub pttl: i64,
    pub token: i64,
}

/// `REDLOCK.INSPECT key`, parsed; `None` for a missing key.
pub fn inspect(con: &mut redis::Connection, key: &str) -> Option<View> {
    let reply: Option<Vec<redis::Value>> =
        redis::cmd("REDLOCK.INSPECT").arg(key).query(con).unwrap();
    let fields = reply?;
    assert_eq!(fields.len(), 6, "INSPECT reply {fields:?}");
    let name = |v: &redis::Value| -> String { redis::from_redis_value_ref(v).unwrap() };
    let int = |v: &redis::Value| -> i64 { redis::from_redis_value_ref(v).unwrap() };
    assert_eq!(name(&fields[0]), "held");
    assert_eq!(name(&fields[2]), "pttl");
    assert_eq!(name(&fields[4]), "token");
    Some(View {
        held: int(&fields[1]) == 1,
        pttl: int(&fields[3]),
        token: int(&fields[5]),
    })
}

/// `DEBUG DIGEST`.
pub fn digest(con: &mut redis::Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(con).unwrap()
}

/// One field of `INFO section`.
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// Polls `check` until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a background AOF rewrite or save to finish.
pub fn wait_for_no_child(con: &mut redis::Connection) {
    wait_until(Duration::from_secs(20), "background rewrite", || {
        info_field(con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(con, "persistence", "rdb_bgsave_in_progress").as_deref() == Some("0")
            && info_field(con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
}

/// The error text of a command expected to fail.
pub fn error_of(con: &mut redis::Connection, args: &[&[u8]]) -> String {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<redis::Value>(con) {
        Ok(v) => panic!(
            "{:?} succeeded with {v:?}",
            String::from_utf8_lossy(args[0])
        ),
        Err(e) => {
            let code = e.code().unwrap_or("").to_string();
            let detail = e.detail().unwrap_or("").to_string();
            format!("{code} {detail}").trim().to_string()
        }
    }
}

/// The replica's link to its master is up.
pub fn link_up(con: &mut redis::Connection) -> bool {
    info_field(con, "replication", "master_link_status").as_deref() == Some("up")
}

/// Waits until the node behind `con` has an up link to its master.
pub fn wait_for_link(con: &mut redis::Connection) {
    wait_until(Duration::from_secs(20), "replica link up", || link_up(con));
}

/// Starts a replica of `master` from `builder` and waits until both sides
/// see it synced: its link is up and the master counts it online.
pub fn start_replica(master: &Node, builder: redlock_testkit::NodeBuilder) -> Node {
    let replica = builder
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start();
    let mut con = replica.connection();
    wait_for_link(&mut con);
    // The master lists a replica under the port it announces.
    let announced: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("replica-announce-port")
        .query(&mut con)
        .unwrap();
    let port = match announced.get(1).and_then(|p| p.parse().ok()) {
        Some(0) | None => replica.port(),
        Some(p) => p,
    };
    wait_online_at_master(&mut master.connection(), port);
    replica
}

/// Waits until the master behind `con` lists the replica listening on
/// `port` as `state=online`. The two sides do not change together (with a
/// sync through a file, the master puts the replica online at its first
/// acknowledgement after loading; a diskless one, once the last bytes are
/// written), and until then the master counts it in its first sync (a
/// master that loaded no file refuses leases meanwhile: `NOSYNC`).
pub fn wait_online_at_master(con: &mut redis::Connection, port: u16) {
    let entry = format!("port={port},state=online");
    wait_until(
        Duration::from_secs(20),
        "replica online at the master",
        || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(con)
                .unwrap_or_default();
            info.lines()
                .any(|l| l.starts_with("slave") && l.contains(&entry))
        },
    );
}

/// A numeric field of `INFO redlock` (without the `redlock_` prefix).
pub fn redlock_info(con: &mut redis::Connection, field: &str) -> u64 {
    info_field(con, "redlock", &format!("redlock_{field}"))
        .unwrap_or_else(|| panic!("INFO redlock has no {field}"))
        .parse()
        .unwrap_or_else(|e| panic!("INFO redlock {field}: {e}"))
}

/// `CONFIG SET name value`.
pub fn config_set(con: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// Moves the node's wall clock by `ms` (test builds of the module).
pub fn wall_offset(con: &mut redis::Connection, ms: i64) {
    let _: () = redis::cmd("REDLOCK.TESTHOOK")
        .arg("WALLCLOCK-OFFSET")
        .arg(ms)
        .query(con)
        .unwrap();
}

/// Waits until one replica acknowledged everything the master wrote.
pub fn wait_replicated(m: &mut redis::Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(m).unwrap();
    assert_eq!(acked, 1, "no replica acknowledged the writes");
}

/// Every file of the node's AOF folder, concatenated.
pub fn aof_bytes(node: &Node) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(node.dir().join("appendonlydir")).unwrap() {
        all.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    all
}

/// `MEMORY USAGE key SAMPLES 0`.
pub fn memory_usage(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query(con)
        .unwrap()
}

/// `REDLOCK.FENCED guard lock token inner…` as a command to run.
pub fn fenced_cmd(guard: &str, lock: &str, token: i64, inner: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("REDLOCK.FENCED");
    cmd.arg(guard).arg(lock).arg(token);
    for a in inner {
        cmd.arg(*a);
    }
    cmd
}

/// The highest token guard `guard` has seen (`REDLOCK.GUARDINFO`), `None`
/// when it is missing.
pub fn guard_highest(con: &mut redis::Connection, guard: &str) -> Option<i64> {
    let reply: Option<Vec<redis::Value>> = redis::cmd("REDLOCK.GUARDINFO")
        .arg(guard)
        .query(con)
        .unwrap();
    reply.map(|f| redis::from_redis_value_ref(&f[3]).unwrap())
}

/// `flat` (an AOF with `\r\n` turned into spaces) without the node record
/// announcements a master writes when a replica comes online or
/// `max-ttl-ms` grows (`REDLOCK.APPLY redlock:node-record node …`): they
/// land wherever the event happened to fall.
pub fn without_node_announcements(flat: &str) -> String {
    const HEAD: &str = "*5 $13 REDLOCK.APPLY $19 redlock:node-record $4 node ";
    let mut out = String::new();
    let mut rest = flat;
    while let Some(at) = rest.find(HEAD) {
        out.push_str(&rest[..at]);
        // Two bulk strings follow: `$len value` twice.
        let tail = &rest[at + HEAD.len()..];
        let mut words = tail.splitn(5, ' ');
        for _ in 0..4 {
            words.next();
        }
        rest = words.next().unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// `REPLICAOF NO ONE`: the replica is promoted.
pub fn promote(con: &mut redis::Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(con)
        .unwrap();
}

/// Tries `REDLOCK.ACQUIRE` (refused by `GRACE` or `NOSYNC` meanwhile) until
/// `until`: when it was granted, or `None`.
pub fn first_grant(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    until: Instant,
) -> Option<Instant> {
    loop {
        // Read before the request: the lease begins no earlier. A request
        // sent at or after `until` is not a grant inside the window, even
        // when the try before it was refused just short of `until`.
        let asked = Instant::now();
        if asked >= until {
            return None;
        }
        match acquire_result(con, key, owner, ttl) {
            Ok(Some(_)) => return Some(asked),
            Ok(None) => panic!("held by someone"),
            Err(e) => assert!(matches!(e.code(), Some("GRACE") | Some("NOSYNC")), "{e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes every file of a node's folder but its log: a restart "without
/// its files" (a new disk).
pub fn wipe_dir(node: &Node) {
    for entry in std::fs::read_dir(node.dir()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "redis.log" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
}

/// A node for the adversarial promotion tests: no sync check, restart
/// windows as long as the longest lease, `max-ttl-ms` as given.
pub fn adversarial_node(max_ttl: &str) -> redlock_testkit::NodeBuilder {
    Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", max_ttl)
}

/// The node behind `con` grants `key` to another owner no earlier than
/// `lease_ms` after `granted_a` (or not at all until a second after).
/// `granted_a` is read before the first holder's request was sent: the
/// lease began no earlier.
pub fn assert_no_second_holder(
    con: &mut redis::Connection,
    key: &str,
    granted_a: Instant,
    lease_ms: u64,
    who: &str,
) {
    assert_no_second_holder_of(con, key, granted_a, lease_ms, who, 1000);
}

/// [`assert_no_second_holder`] asking for a second lease of `second_ttl_ms`
/// (for nodes whose `max-ttl-ms` is below 1000).
pub fn assert_no_second_holder_of(
    con: &mut redis::Connection,
    key: &str,
    granted_a: Instant,
    lease_ms: u64,
    who: &str,
    second_ttl_ms: u64,
) {
    let until = granted_a + Duration::from_millis(lease_ms + 1_000);
    match first_grant(con, key, "owner-b", second_ttl_ms, until) {
        None => eprintln!("{who} did not grant {key} within the {lease_ms} ms lease + 1 s"),
        Some(granted_b) => {
            let gap = granted_b - granted_a;
            eprintln!("{who} granted {key} {gap:?} after the {lease_ms} ms lease began");
            assert!(
                gap >= Duration::from_millis(lease_ms),
                "two holders: {who} granted {key} {gap:?} after a {lease_ms} ms lease began"
            );
        }
    }
}

/// M (1000) → R, R taught by M's address and knowing 1000. Returns R's
/// connection.
pub fn taught_replica_of(m: &Node, r: &Node) -> redis::Connection {
    let mut mm = m.connection();
    let _ = first_grant(
        &mut mm,
        "warm",
        "x",
        1000,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("warm grant");
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mm).unwrap();
    let mut rc = r.connection();
    wait_until(Duration::from_secs(20), "R taught by M", || {
        redlock_info(&mut rc, "longest_lease_ms") >= 1_000
            && redlock_info(&mut rc, "taught_by_master") == 1
    });
    rc
}

/// The configuration file a node was started from
/// (`NodeBuilder::config_file`), as it is now.
pub fn config_file_of(n: &Node) -> String {
    std::fs::read_to_string(n.config_path().unwrap()).unwrap()
}

/// Whether a node's configuration file has `line` (trimmed) as a line.
pub fn config_file_says(n: &Node, line: &str) -> bool {
    config_file_of(n).lines().any(|l| l.trim() == line)
}

/// `CONFIG GET name`: its value ("" when there is none).
pub fn config_get(con: &mut redis::Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap();
    pair.get(1).cloned().unwrap_or_default()
}

/// The lease of the old master that the untaught promotions of the
/// adversarial tests must not shorten.
pub const OLD_LEASE_MS: u64 = 20_000;

/// M0: a master with no replica, `max-ttl-ms` raised at run time to
/// [`OLD_LEASE_MS`] (a master that never had a replica is not held back:
/// it grants at once), and a 5 s diskless sync delay so that a replica
/// stays in its first sync. Returns M0 and when its lease of `key` began.
pub fn old_master_granting(key: &str) -> (Node, Instant) {
    let m0 = Node::builder()
        .config("redlock.sync-replicas", "0")
        .config("repl-diskless-sync", "yes")
        .config("repl-diskless-sync-delay", "5")
        .start();
    let mut mc = m0.connection();
    config_set(&mut mc, "redlock.max-ttl-ms", &OLD_LEASE_MS.to_string());
    let granted = first_grant(
        &mut mc,
        key,
        "owner-a",
        OLD_LEASE_MS,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("M0 grants the long lease");
    (m0, granted)
}

/// Points `s` at `m0` and promotes it during its first sync: untaught, a
/// day's window. M0 is then lost.
pub fn promote_untaught(s: &Node, m0: &mut Node) -> redis::Connection {
    let mut sc = s.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m0.port())
        .query(&mut sc)
        .unwrap();
    promote(&mut sc);
    m0.kill();
    assert_eq!(redlock_info(&mut sc, "taught_by_master"), 0);
    sc
}

/// `REDLOCK.ACQUIRE key owner ttl SYNC r` then `WAIT r 2000` on the same
/// connection: the reply (or error) and the acknowledgements.
pub fn acquire_synced(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    r: u64,
) -> redis::RedisResult<(Option<i64>, i64)> {
    redis::pipe()
        .cmd("REDLOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .arg("SYNC")
        .arg(r)
        .cmd("WAIT")
        .arg(r)
        .arg(2_000)
        .query(con)
}

/// ACQUIRE … SYNC r + WAIT r until granted with r acknowledgements
/// (refused meanwhile: see below) or `until`. The time is
/// read before the request that was granted (the lease began no earlier).
pub fn first_synced_grant(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    r: u64,
    until: Instant,
) -> Option<Instant> {
    loop {
        let asked = Instant::now();
        if asked >= until {
            return None;
        }
        match acquire_synced(con, key, owner, ttl, r) {
            Ok((Some(_), acks)) if acks >= r as i64 => return Some(asked),
            Ok((Some(_), acks)) => panic!("granted without its acknowledgements ({acks})"),
            Ok((None, _)) => panic!("held by someone"),
            Err(e) => {
                let text = e.to_string();
                // Refusals that pass: the guard's window, the sync check,
                // and the sync-state file not written yet (a write after a
                // failure is tried at most every 100 ms) or lost at a start.
                assert!(
                    text.contains("GRACE")
                        || text.contains("NOSYNC")
                        || text.contains("TOOMANYREPLICAS")
                        || text.contains("could not be written")
                        || text.contains("was missing at this start"),
                    "{e}"
                )
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `REPLICAOF` `master` on the node of `con` (Sentinel repointing it).
pub fn replica_of(con: &mut redis::Connection, master: &Node) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query(con)
        .unwrap();
}

/// The second holder, if any: `con`'s node granting `key` (SYNC r) less
/// than `lease_ms` after `granted_a`.
pub fn assert_no_second_synced_holder(
    con: &mut redis::Connection,
    key: &str,
    r: u64,
    granted_a: Instant,
    lease_ms: u64,
    who: &str,
) {
    let until = granted_a + Duration::from_millis(lease_ms + 1_000);
    match first_synced_grant(con, key, "owner-b", 1000, r, until) {
        None => eprintln!("{who} did not grant {key} within the {lease_ms} ms lease + 1 s"),
        Some(granted_b) => {
            let gap = granted_b - granted_a;
            eprintln!("{who} granted {key} {gap:?} after the {lease_ms} ms lease began");
            assert!(
                gap >= Duration::from_millis(lease_ms),
                "two holders: {who} granted {key} {gap:?} after a {lease_ms} ms lease began"
            );
        }
    }
}

/// The next writes of `n`'s file fail (once a write under way, its `.tmp`
/// present, has ended).
pub fn block_writes(n: &Node) {
    wait_until(Duration::from_secs(5), "a write under way to end", || {
        std::fs::create_dir(blocker(n)).is_ok()
    });
}

pub fn blocker(n: &Node) -> std::path::PathBuf {
    n.dir().join(format!("redlock-sync-state-{}.tmp", n.port()))
}

pub fn durable(b: redlock_testkit::NodeBuilder) -> redlock_testkit::NodeBuilder {
    b.config("appendonly", "yes")
        .config("appendfsync", "always")
}

pub fn file_names(n: &Node, r: &Node) -> bool {
    std::fs::read_to_string(state_file(n))
        .unwrap_or_default()
        .contains(&r.port().to_string())
}

pub fn kill_replicas(mm: &mut redis::Connection) {
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(mm)
        .unwrap();
}

pub fn state_file(n: &Node) -> std::path::PathBuf {
    n.dir().join(format!("redlock-sync-state-{}", n.port()))
}

pub fn synced(r: u64, ttl: u64) -> redlock_testkit::NodeBuilder {
    Node::builder()
        .config("redlock.sync-replicas", &r.to_string())
        .config("redlock.restart-grace-ms", "-1")
        .config("redlock.max-ttl-ms", &ttl.to_string())
}
