//! An adversarial read of finding L's fix (`host/config_file.rs`): a node
//! that learns a lease longer than its own `redlock.max-ttl-ms` raises its
//! own and writes it to its configuration file (`CONFIG REWRITE`), so that
//! restarted on a new disk it waits at least that long.
//!
//! Every test plays finding L's setup on real processes (the server of
//! `REDLOCK_SERVER_BIN`): M and R run with `max-ttl-ms` 400, R from a
//! configuration file kept apart from its data. M is raised to 3000 at run
//! time; M grants a 3 s lease once R acknowledged knowing it; M is lost, R
//! promoted, Sentinel's `CONFIG REWRITE` sent to R; R loses its disk and
//! restarts. Each test asserts the SAFE outcome: R grants the lock no
//! earlier than 3 s after the first grant. The control test (the plain
//! sequence, and the raise carried inside `MULTI`/`EXEC`) and the probes
//! found safe pass; the findings fail while their hole is open, and are
//! `#[ignore = "open finding: …"]` meanwhile (run them with `--ignored`).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// The lease M grants under its raised `max-ttl-ms`.
const LEASE_MS: u64 = 3000;

/// How M's `max-ttl-ms` is raised to [`LEASE_MS`].
#[derive(Clone, Copy)]
enum Raise {
    /// `CONFIG SET` on its own.
    Plain,
    /// `CONFIG SET` inside `MULTI`/`EXEC`: the node record it announces
    /// reaches R inside a transaction of the stream.
    InMulti,
}

/// Finding L's sequence with hooks. `prepare_r` runs on R before it
/// follows M; `after_grant` once M granted the 3 s lease and R acknowledged
/// everything; `restart` restarts R after its disk is wiped. Returns how far
/// into the 3 s lease R granted the lock again, if it did.
fn new_disk_after_learning(
    raise: Raise,
    prepare_r: impl FnOnce(&mut Node),
    after_grant: impl FnOnce(&mut Node, &mut redis::Connection),
    restart: impl FnOnce(&mut Node),
) -> Option<Duration> {
    let r = adversarial_node("400").config_file();
    new_disk_after_learning_from(r, raise, prepare_r, after_grant, restart)
}

/// [`new_disk_after_learning`] with R built from `r_builder`.
fn new_disk_after_learning_from(
    r_builder: redlock_testkit::NodeBuilder,
    raise: Raise,
    prepare_r: impl FnOnce(&mut Node),
    after_grant: impl FnOnce(&mut Node, &mut redis::Connection),
    restart: impl FnOnce(&mut Node),
) -> Option<Duration> {
    let mut m = adversarial_node("400").start();
    let mut r = r_builder.start();
    prepare_r(&mut r);
    let mut rc = r.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(m.port())
        .query(&mut rc)
        .unwrap();
    wait_for_link(&mut rc);
    wait_online_at_master(&mut m.connection(), r.port());

    let mut mm = m.connection();
    match raise {
        Raise::Plain => config_set(&mut mm, "redlock.max-ttl-ms", "3000"),
        Raise::InMulti => {
            let _: redis::Value = redis::pipe()
                .atomic()
                .cmd("CONFIG")
                .arg("SET")
                .arg("redlock.max-ttl-ms")
                .arg("3000")
                .query(&mut mm)
                .unwrap();
        }
    }
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        LEASE_MS,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("M grants the 3 s lease once R acknowledged knowing it");
    wait_replicated(&mut mm);
    drop(mm);
    after_grant(&mut r, &mut rc);

    m.kill();
    promote(&mut rc);
    // As Sentinel does with each REPLICAOF it sends (it may fail: R's file
    // may be unwritable, which is one of the cases below).
    let _: redis::RedisResult<()> = redis::cmd("CONFIG").arg("REWRITE").query(&mut rc);
    drop(rc);
    r.kill();
    wipe_dir(&r);
    restart(&mut r);
    let mut rc = r.connection();
    let until = granted_a + Duration::from_millis(LEASE_MS);
    let granted_b = first_grant(&mut rc, "L", "owner-b", 400, until)?;
    Some(granted_b - granted_a)
}

fn assert_safe(gap: Option<Duration>, what: &str) {
    match gap {
        None => eprintln!("{what}: R did not grant inside the 3 s lease"),
        Some(gap) => panic!(
            "two holders ({what}): R, restarted on a new disk, granted L {gap:?} into a 3 s lease"
        ),
    }
}

/// Control: finding L's plain sequence, and the same with M's raise inside
/// `MULTI`/`EXEC` (the node record reaches R inside a transaction of its
/// stream, and `CONFIG REWRITE` runs from `REDLOCK.APPLY` inside `EXEC`).
/// R writes the raise before it acknowledges, and waits the lease out.
#[test]
fn control_the_raise_is_written_before_the_ack_and_a_new_disk_waits() {
    for raise in [Raise::Plain, Raise::InMulti] {
        let gap = new_disk_after_learning(
            raise,
            |_| {},
            |r, rc| {
                assert_eq!(redlock_info(rc, "max_ttl_ms"), 3000);
                assert_eq!(redlock_info(rc, "max_ttl_unsaved_ms"), 0);
                let file = config_file_of(r);
                assert!(
                    file.lines().any(|l| l.trim() == "redlock.max-ttl-ms 3000"),
                    "the raise is in R's file once M's write is acknowledged:\n{file}"
                );
            },
            |r| r.restart(),
        );
        assert_safe(gap, "control");
    }
}

/// Finding 1: the file keeps a raise only until the next `CONFIG REWRITE`
/// of anyone. After R learned (and wrote) 3000, the operator sets R back to
/// 400 (`CONFIG SET` lowering is accepted while the learned lease runs, and
/// "a lower value is not written" by the module). Sentinel's failover then
/// sends `CONFIG REWRITE` to R, which writes 400: R on a new disk waited
/// 400 ms inside the 3 s lease. Fixed: the lowering below the longest lease
/// recorded writes that length as `redlock.longest-lease-ms`, which a load
/// reads too (`guard_rule::recorded_at_load`).
#[test]
fn a_lowering_written_by_sentinels_rewrite_shortens_the_new_disk_wait() {
    let gap = new_disk_after_learning(
        Raise::Plain,
        |_| {},
        |r, rc| {
            assert!(config_file_of(r)
                .lines()
                .any(|l| l.trim() == "redlock.max-ttl-ms 3000"));
            // The operator puts R back to the group's old value (or a
            // configuration tool that enforces 400 does).
            let lowered: redis::RedisResult<()> = redis::cmd("CONFIG")
                .arg("SET")
                .arg("redlock.max-ttl-ms")
                .arg("400")
                .query(rc);
            eprintln!("CONFIG SET redlock.max-ttl-ms 400 on R: {lowered:?}");
        },
        |r| {
            eprintln!("R's file at restart:\n{}", config_file_of(r));
            r.restart()
        },
    );
    assert_safe(gap, "lowered, then Sentinel's rewrite");
}

/// Finding 2: a `redlock.max-ttl-ms` on the server's command line (after
/// the configuration file, as `redis-server /etc/redis.conf
/// --redlock.max-ttl-ms 400` in a container's command) wins over the line
/// `CONFIG REWRITE` wrote into the file. Fixed: the raise's rewrite also
/// writes `redlock.longest-lease-ms 3000`, which the command line does not
/// override.
/// (The option is spelled in capitals so that the test kit puts it on the
/// command line again; config names are case-insensitive.)
#[test]
fn a_max_ttl_on_the_command_line_overrides_the_rewritten_file() {
    let gap = new_disk_after_learning(
        Raise::Plain,
        |_| {},
        |r, rc| {
            assert!(config_file_of(r)
                .lines()
                .any(|l| l.trim() == "redlock.max-ttl-ms 3000"));
            assert_eq!(
                redlock_info(rc, "max_ttl_unsaved_ms"),
                0,
                "the module believes the raise is kept"
            );
        },
        |r| r.restart_with(&[("REDLOCK.MAX-TTL-MS", "400")]),
    );
    assert_safe(gap, "command line over the file");
}

/// The configuration folder made unwritable (`chattr +i`, which binds root
/// too), undone on drop.
struct Immutable(PathBuf);

impl Immutable {
    fn set(dir: &Path) -> Option<Immutable> {
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| Immutable(dir.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

/// Finding 3: a replica whose configuration file cannot be written (a
/// read-only mount of the configuration, a full disk) still applies the
/// node record and acknowledges it; M counts the acknowledgement and grants
/// the 3 s lease. Nothing holds back: the failure is a log line and
/// `INFO redlock` `max_ttl_unsaved_ms`. R on a new disk waits 400 ms.
#[test]
#[ignore = "open finding: a replica whose configuration file cannot be written still acknowledges, and nothing holds the master back"]
fn a_replica_that_cannot_write_its_file_still_lets_the_master_grant() {
    let lock: std::cell::RefCell<Option<Immutable>> = Default::default();
    let unsupported = std::cell::Cell::new(false);
    let gap = new_disk_after_learning(
        Raise::Plain,
        |r| {
            let dir = r.config_path().unwrap().parent().unwrap().to_path_buf();
            *lock.borrow_mut() = Immutable::set(&dir);
            unsupported.set(lock.borrow().is_none());
        },
        |_, rc| {
            eprintln!(
                "R: max_ttl_ms {} max_ttl_unsaved_ms {}",
                redlock_info(rc, "max_ttl_ms"),
                redlock_info(rc, "max_ttl_unsaved_ms")
            );
        },
        |r| {
            lock.borrow_mut().take();
            r.restart()
        },
    );
    if unsupported.get() {
        eprintln!("chattr +i is not available here: the case is not played");
        return;
    }
    assert_safe(gap, "unwritable configuration file");
}

/// Probe (safe): R learns the 3000 from its first full sync (M was raised,
/// and granted, before R followed it), through a file, a diskless load
/// (`swapdb`, `on-empty-db`) and, on Valkey, dual-channel replication. M
/// then grants a new 3 s lease, which the lease-ack rule gives only once R
/// acknowledged an offset past M's record: by then R's file holds 3000
/// (written at the end of the load, before R's first acknowledgement).
#[test]
fn a_raise_learned_in_a_full_sync_is_in_the_file_before_the_master_relies_on_it() {
    let valkey = matches!(
        redlock_testkit::server_version().0,
        redlock_testkit::Flavor::Valkey
    );
    let mut variants: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![("repl-diskless-load", "swapdb")],
        vec![("repl-diskless-load", "on-empty-db")],
    ];
    if valkey {
        variants.push(vec![("dual-channel-replication-enabled", "yes")]);
        variants.push(vec![
            ("dual-channel-replication-enabled", "yes"),
            ("repl-diskless-load", "swapdb"),
        ]);
    }
    for (i, variant) in variants.iter().enumerate() {
        let m = adversarial_node("400").start();
        let mut mm = m.connection();
        for (name, value) in variant {
            if name.starts_with("dual-channel") {
                config_set(&mut mm, name, value);
            }
        }
        config_set(&mut mm, "redlock.max-ttl-ms", "3000");
        first_grant(
            &mut mm,
            "warm",
            "x",
            LEASE_MS,
            Instant::now() + Duration::from_secs(10),
        )
        .expect("a master without replicas grants at once");
        let mut builder = adversarial_node("400").config_file();
        for (name, value) in variant {
            builder = builder.config(name, value);
        }
        let r = start_replica(&m, builder);
        first_grant(
            &mut mm,
            &format!("L{i}"),
            "owner-a",
            LEASE_MS,
            Instant::now() + Duration::from_secs(10),
        )
        .expect("M grants once R acknowledged");
        let file = config_file_of(&r);
        assert!(
            file.lines().any(|l| l.trim() == "redlock.max-ttl-ms 3000"),
            "{variant:?}: M granted a 3 s lease relying on R, whose file does not hold 3000:\n{file}"
        );
    }
}

/// Finding 1 on a master: M, raised to 3000 at run time (written), grants a
/// 3 s lease; the operator lowers M to 400 at once (accepted) and any
/// `CONFIG REWRITE` follows (Sentinel's, the operator's). M loses its disk
/// and restarts: it waited 400 ms. Fixed by `redlock.longest-lease-ms`
/// (mutant `longest-lost-with-disk`). Returns how far into the 3 s lease M
/// granted L again, if it did.
fn master_lowered_after_a_long_grant(mutant: bool) -> Option<Duration> {
    let builder = adversarial_node("400").config_file();
    let builder = if mutant {
        builder.env("REDLOCK_TEST_MUTANTS", "longest-lost-with-disk")
    } else {
        builder
    };
    let mut m = builder.start();
    let mut mm = m.connection();
    config_set(&mut mm, "redlock.max-ttl-ms", "3000");
    let granted_a = first_grant(
        &mut mm,
        "L",
        "owner-a",
        LEASE_MS,
        Instant::now() + Duration::from_secs(10),
    )
    .expect("a master without replicas grants at once");
    config_set(&mut mm, "redlock.max-ttl-ms", "400");
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut mm).unwrap();
    let file = config_file_of(&m);
    assert!(
        file.lines().any(|l| l.trim() == "redlock.max-ttl-ms 400"),
        "{file}"
    );
    assert!(
        file.lines()
            .any(|l| l.trim() == "redlock.longest-lease-ms 3000"),
        "{file}"
    );
    drop(mm);
    m.kill();
    wipe_dir(&m);
    m.restart();
    let mut mm = m.connection();
    let until = granted_a + Duration::from_millis(LEASE_MS);
    first_grant(&mut mm, "L", "owner-b", 400, until).map(|b| b - granted_a)
}

#[test]
fn a_master_lowered_after_a_long_grant_then_rewritten_waits_the_lease_out() {
    assert_safe(
        master_lowered_after_a_long_grant(false),
        "master lowered, then rewritten",
    );
}

/// The test above fails with the fix switched off: the hole is real.
#[test]
fn with_longest_lost_with_disk_the_lowered_master_grants_inside_the_lease() {
    let gap = master_lowered_after_a_long_grant(true)
        .expect("with longest-lost-with-disk, M grants L inside the 3 s lease");
    eprintln!("with longest-lost-with-disk, M granted L {gap:?} into the 3 s lease");
}

/// Finding 4: an `include` at the end of the configuration file (Redis's
/// documented way to let a shared file override the node's own) that names
/// `redlock.max-ttl-ms` wins over the line `CONFIG REWRITE` changed in place
/// above it. (When the node's own file has no such line, the rewrite appends
/// one after the `include`, and the raise wins: safe.) Fixed: the
/// `include` does not name `redlock.longest-lease-ms`, which the raise's
/// rewrite writes too.
#[test]
fn an_include_after_the_rewritten_line_overrides_the_raise() {
    let gap = new_disk_after_learning(
        Raise::Plain,
        |r| {
            let path = r.config_path().unwrap();
            let group = path.parent().unwrap().join("group.conf");
            std::fs::write(&group, "redlock.max-ttl-ms 400\n").unwrap();
            let mut text = std::fs::read_to_string(&path).unwrap();
            text.push_str(&format!("include {}\n", group.display()));
            std::fs::write(&path, text).unwrap();
        },
        |r, _| {
            let file = config_file_of(r);
            assert!(
                file.lines().any(|l| l.trim() == "redlock.max-ttl-ms 3000"),
                "{file}"
            );
        },
        |r| {
            eprintln!("R's file at restart:\n{}", config_file_of(r));
            r.restart()
        },
    );
    assert_safe(gap, "include after the rewritten line");
}

/// Finding 3, second form: `rename-command CONFIG <secret>` (a common
/// hardening step; Sentinel follows it with `sentinel rename-command`). The
/// module's `CONFIG REWRITE` (an `RM_Call` of `CONFIG`) finds no command:
/// the raise is not written, R acknowledges all the same, M grants, and R on
/// a new disk waits 400 ms. Sentinel's own rewrite goes through the renamed
/// command and would write the raise, so this test leaves it out (a manual
/// `REPLICAOF NO ONE`, or a Sentinel without the rename configured). The
/// module does not even know: the crate maps `RM_Call`'s NULL reply (no such
/// command) to `Ok`, so `max_ttl_unsaved_ms` stays 0 and nothing is logged.
#[test]
#[ignore = "open finding: with CONFIG renamed the raise is not written; it is reported (max_ttl_unsaved_ms, the log) but nothing holds the master back"]
fn a_renamed_config_command_leaves_the_raise_unwritten() {
    let r = adversarial_node("400")
        .config_file()
        .config("rename-command", "CONFIG CONFIG-B840FC02");
    let gap = new_disk_after_learning_from(
        r,
        Raise::Plain,
        |_| {},
        |r, rc| {
            eprintln!(
                "R: max_ttl_ms {} max_ttl_unsaved_ms {}",
                redlock_info(rc, "max_ttl_ms"),
                redlock_info(rc, "max_ttl_unsaved_ms")
            );
            let file = config_file_of(r);
            eprintln!(
                "R's file holds the raise: {}",
                file.lines().any(|l| l.trim() == "redlock.max-ttl-ms 3000")
            );
        },
        |r| r.restart(),
    );
    assert_safe(gap, "CONFIG renamed");
}

/// Probe (safe): R configured by its `loadmodule` line's arguments
/// (`loadmodule libredlock.so max-ttl-ms 400`) instead of a
/// `redlock.max-ttl-ms` line. `CONFIG REWRITE` adds `redlock.max-ttl-ms
/// 3000` (the arguments are only the config's default) and keeps the
/// arguments; at the restart the module reads the line after them
/// (`RedisModule_LoadConfigs` runs after the arguments are taken), so the
/// raise wins.
#[test]
fn a_max_ttl_given_as_a_loadmodule_argument_is_overridden_by_the_rewritten_line() {
    let r = Node::builder()
        .module_arg("max-ttl-ms")
        .module_arg("400")
        .config("redlock.sync-replicas", "0")
        .config("redlock.restart-grace-ms", "-1")
        .config_file();
    let gap = new_disk_after_learning_from(
        r,
        Raise::Plain,
        |r| {
            let file = config_file_of(r);
            assert!(
                !file.contains("redlock.max-ttl-ms"),
                "only the loadmodule argument names it:\n{file}"
            );
        },
        |r, _| {
            let file = config_file_of(r);
            assert!(
                file.lines().any(|l| l.trim() == "redlock.max-ttl-ms 3000"),
                "{file}"
            );
            assert!(file.contains("max-ttl-ms 400"), "{file}");
        },
        |r| r.restart(),
    );
    assert_safe(gap, "loadmodule argument");
}

/// Finding 5: the guide's own example (`docs/guide/configuration.md`:
/// `loadmodule libredlock.so max-ttl-ms 30000 restart-grace-ms 30000`) pins
/// `redlock.restart-grace-ms` to the value of `max-ttl-ms`. The raise
/// learned moves `max-ttl-ms` (and writes it) but not the explicit grace, and
/// the window of a restart is the grace when it is set: R on a new disk
/// waits 400 ms inside the 3 s lease.
///
/// Fixed: an explicit grace at least the old `max-ttl-ms` is raised with it
/// (`host/config_file.rs::cover_learned`).
#[test]
fn an_explicit_restart_grace_is_not_raised_with_the_learned_max_ttl() {
    let r = adversarial_node("400")
        .config("redlock.restart-grace-ms", "400")
        .config_file();
    let gap = new_disk_after_learning_from(
        r,
        Raise::Plain,
        |_| {},
        |r, rc| {
            assert_eq!(redlock_info(rc, "max_ttl_ms"), 3000);
            let file = config_file_of(r);
            assert!(
                file.lines().any(|l| l.trim() == "redlock.max-ttl-ms 3000"),
                "{file}"
            );
        },
        |r| r.restart(),
    );
    assert_safe(gap, "explicit restart-grace-ms");
}

/// With `CONFIG` renamed the module's `CONFIG REWRITE` gets no reply at
/// all: the raise is reported as not written (it used to count as written).
#[test]
fn a_renamed_config_command_is_reported_as_an_unwritten_raise() {
    let n = adversarial_node("400")
        .config_file()
        .config("rename-command", "CONFIG CONFIG-B840FC02")
        .start();
    let mut con = n.connection();
    let _: () = redis::cmd("CONFIG-B840FC02")
        .arg("SET")
        .arg("redlock.max-ttl-ms")
        .arg("3000")
        .query(&mut con)
        .unwrap();
    assert_eq!(redlock_info(&mut con, "max_ttl_unsaved_ms"), 3000);
    let log = std::fs::read_to_string(n.dir().join("redis.log")).unwrap();
    assert!(
        log.contains("redlock.max-ttl-ms 3000 is not in a configuration file"),
        "the log says the raise is not kept"
    );
}
