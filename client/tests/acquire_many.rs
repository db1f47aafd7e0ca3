//! Locks over several names at once (`Redlock::acquire_many`,
//! `client/src/lock_set.rs`) on real nodes: a token per name from each
//! name's own counter, all or none on every node, release / extend / the
//! lost signal over the whole set, no deadlock between overlapping sets
//! taken in opposite orders, and names of different slots on a cluster
//! member refused.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client, five, held_after_release, held_on, CONNECT_TIMEOUT, NODE_TIMEOUT};
use redlock_client::{Error, Member, NodeState, Redlock, RetryPolicy};
use redlock_testkit::{Cluster, Node};

const TTL: Duration = Duration::from_secs(10);

/// Node `node`'s view of `key`: (held, token).
async fn on_node(redlock: &Redlock, key: &str, node: usize) -> (bool, u64) {
    let views = redlock.inspect(key).await;
    match &views[node].state {
        NodeState::Present { held, token, .. } => (*held, *token),
        NodeState::Missing => (false, 0),
        NodeState::Error(e) => panic!("INSPECT {key} on node {node}: {e}"),
    }
}

/// `REDLOCK.ACQUIRE key owner ttl` straight on one node: another owner's
/// grant there only.
fn hold_directly(node: &Node, key: &str, owner: &str) -> u64 {
    redis::cmd("REDLOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(10_000)
        .query(&mut node.connection())
        .expect("ACQUIRE on one node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_name_gets_a_token_of_its_own_counter_that_increases() {
    let nodes = five();
    // Without the clock floor (a token of the microsecond clock for every
    // name taken at the same moment), so that the counters show.
    let redlock = Redlock::builder(common::urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .clock_floor(false)
        .build()
        .await
        .expect("build client");
    // Raise "accounts:b"'s counter alone: the names' tokens then differ.
    for _ in 0..3 {
        let lock = redlock.acquire("accounts:b", TTL).await.unwrap();
        lock.release().await.unwrap();
    }
    let first = redlock
        .acquire_many(&["accounts:b", "accounts:a"], TTL)
        .await
        .unwrap();
    assert_eq!(first.names(), ["accounts:a", "accounts:b"]);
    let (a1, b1) = (
        first.token("accounts:a").unwrap(),
        first.token("accounts:b").unwrap(),
    );
    assert!(b1 > a1, "b's own counter is ahead: a {a1}, b {b1}");
    assert_eq!(first.token("accounts:c"), None);
    assert_eq!(
        first.tokens().collect::<Vec<_>>(),
        [("accounts:a", a1), ("accounts:b", b1)]
    );
    for (key, token) in [("accounts:a", a1), ("accounts:b", b1)] {
        assert_eq!(held_on(&redlock, key).await, 5, "{key}");
        // Each name's token is that name's counter on the nodes.
        assert_eq!(on_node(&redlock, key, 0).await, (true, token), "{key}");
    }
    assert!(first.validity() > Duration::from_secs(9));
    assert!(first.release().await.unwrap());
    let second = redlock
        .acquire_many(&["accounts:a", "accounts:b"], TTL)
        .await
        .unwrap();
    assert!(second.token("accounts:a").unwrap() > a1);
    assert!(second.token("accounts:b").unwrap() > b1);
    // A single lock on one of the names comes after the set's token.
    let b2 = second.token("accounts:b").unwrap();
    let second_a = second.token("accounts:a").unwrap();
    second.release().await.unwrap();
    let single = redlock.acquire("accounts:b", TTL).await.unwrap();
    assert!(single.token() > b2);
    let single_b = single.token();
    single.release().await.unwrap();

    // With the clock floor (the default) too, each name's token grows.
    let floored = client(&nodes).await;
    let set = floored
        .acquire_many(&["accounts:a", "accounts:b"], TTL)
        .await
        .unwrap();
    assert!(set.token("accounts:a").unwrap() > second_a);
    assert!(set.token("accounts:b").unwrap() > single_b);
    set.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_sets_and_duplicate_names_are_refused_by_name() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let none: [&str; 0] = [];
    match redlock.acquire_many(&none, TTL).await {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("at least one name"), "{m}"),
        other => panic!("{other:?}"),
    }
    match redlock.try_acquire_many(&["a", "b", "a"], TTL).await {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("\"a\" is given more than once"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // Nothing was sent: no node knows either name.
    for key in ["a", "b"] {
        assert_eq!(on_node(&redlock, key, 0).await, (false, 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_partly_held_on_a_node_leaves_nothing_behind_there() {
    let nodes = five();
    let redlock = client(&nodes).await;
    // Another owner holds "pair:b" on node 0 only.
    hold_directly(&nodes[0], "pair:b", "someone-else");
    let set = redlock
        .try_acquire_many(&["pair:a", "pair:b"], TTL)
        .await
        .unwrap()
        .expect("four nodes of five grant the set");
    // Node 0 took none of it: "pair:a" is not held there (its counter was
    // raised by the step that released it: tokens only grow).
    assert!(!on_node(&redlock, "pair:a", 0).await.0);
    for node in 1..5 {
        assert!(on_node(&redlock, "pair:a", node).await.0, "node {node}");
        assert!(on_node(&redlock, "pair:b", node).await.0, "node {node}");
    }
    set.release().await.unwrap();

    // Held by another owner on three nodes: busy, and nothing of the set
    // is left on any node.
    for node in &nodes[1..3] {
        hold_directly(node, "pair:b", "someone-else");
    }
    assert!(redlock
        .try_acquire_many(&["pair:a", "pair:b"], TTL)
        .await
        .unwrap()
        .is_none());
    assert_eq!(held_after_release(&redlock, "pair:a").await, 0);
    assert_eq!(
        held_on(&redlock, "pair:b").await,
        3,
        "only the other owner's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_extend_cover_the_set() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let names = ["job:x", "job:y", "job:z"];
    let mut set = redlock
        .acquire_many(&names, Duration::from_secs(2))
        .await
        .unwrap();
    set.extend(Duration::from_secs(30)).await.unwrap();
    assert!(set.validity() > Duration::from_secs(25));
    for key in names {
        let views = redlock.inspect(key).await;
        for view in &views {
            match &view.state {
                NodeState::Present {
                    held: true,
                    pttl: Some(pttl),
                    ..
                } => assert!(*pttl > Duration::from_secs(25), "{key}: {view:?}"),
                other => panic!("{key}: {other:?}"),
            }
        }
    }
    // Held: a single lock on any of the names is busy.
    assert!(redlock.try_acquire("job:y", TTL).await.unwrap().is_none());
    assert!(set.release().await.unwrap());
    for key in names {
        assert_eq!(held_after_release(&redlock, key).await, 0, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_set_signals() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let mut set = redlock.acquire_many(&["m:1", "m:2"], TTL).await.unwrap();
    let lost = set.lost_token();
    assert!(!set.is_lost());
    // One name of the set is freed behind its back.
    assert!(redlock.release_owner("m:2", set.owner()).await.unwrap());
    match set.extend(TTL).await {
        Err(Error::Lost { key, .. }) => assert_eq!(key, "m:2"),
        other => panic!("{other:?}"),
    }
    assert!(set.is_lost());
    assert!(lost.is_cancelled());
    assert_eq!(set.validity(), Duration::ZERO);
    // A later extension is refused without reviving the other name.
    assert!(set.extend(TTL).await.is_err());
}

/// Per name: the caller holding it now, and the last token it was taken with.
type Holders = HashMap<String, (Option<usize>, u64)>;

/// Two callers whose sets overlap, listing the names in opposite orders,
/// each taking its set again and again with retries: both finish (no
/// deadlock) and never hold a shared name at the same time (an in-process
/// record of the holder, and the shared names' tokens only increase from
/// one holder to the next).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_opposite_orders_never_deadlock_nor_share_a_name() {
    let nodes = five();
    let urls = common::urls(&nodes);
    let build = || async {
        Redlock::builder(urls.clone())
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .retry(RetryPolicy {
                attempts: 1_000,
                base_delay: Duration::from_millis(2),
                jitter: Duration::from_millis(5),
            })
            .build()
            .await
            .expect("build client")
    };
    const ROUNDS: usize = 30;
    // name -> (holder, last token)
    let record: Arc<Mutex<Holders>> = Arc::default();
    let callers = [
        (0usize, vec!["o:a", "o:b", "o:c"]),
        (1usize, vec!["o:d", "o:c", "o:b"]),
    ];
    let mut tasks = Vec::new();
    for (who, names) in callers {
        let redlock = build().await;
        let record = Arc::clone(&record);
        tasks.push(tokio::spawn(async move {
            let mut rounds = 0;
            for _ in 0..ROUNDS {
                let set = redlock.acquire_many(&names, TTL).await.unwrap();
                {
                    let mut record = record.lock().unwrap();
                    for (name, token) in set.tokens() {
                        let entry = record.entry(name.to_string()).or_insert((None, 0));
                        assert_eq!(entry.0, None, "{name} held by {:?} and {who}", entry.0);
                        assert!(token > entry.1, "{name}: {token} after {}", entry.1);
                        *entry = (Some(who), token);
                    }
                }
                tokio::task::yield_now().await;
                {
                    let mut record = record.lock().unwrap();
                    for name in set.names() {
                        record.get_mut(name.as_str()).unwrap().0 = None;
                    }
                }
                set.release().await.unwrap();
                rounds += 1;
            }
            rounds
        }));
    }
    let started = Instant::now();
    let all = futures_util::future::join_all(tasks);
    let results = tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("both callers finish: no deadlock");
    // Both callers made progress: every round of each took its whole set.
    for result in results {
        assert_eq!(result.expect("a caller failed"), ROUNDS);
    }
    let record = record.lock().unwrap();
    assert_eq!(record["o:b"].0, None, "{record:?}");
    eprintln!("{} rounds each in {:?}", ROUNDS, started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_takes_a_set_of_one_slot_and_refuses_names_of_other_slots() {
    let cluster = Cluster::builder().shards(2).start();
    let singles = redlock_testkit::start_nodes(2, &Node::builder());
    let mut members = vec![Member::cluster(cluster.seed_urls())];
    members.extend(singles.iter().map(|n| Member::node(n.url())));
    let redlock = Redlock::builder(members)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build client");
    // "a" and "b" are in different slots.
    match redlock.acquire_many(&["a", "b", "{a}x"], TTL).await {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("share a hash slot"), "{m}");
            assert!(m.contains("\"b\" (slot 3300)"), "{m}");
            assert!(!m.contains("\"{a}x\" (slot"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // One slot (a hash tag): the cluster member takes the set too.
    let set = redlock
        .acquire_many(&["{orders}1", "{orders}2"], TTL)
        .await
        .unwrap();
    let views = redlock.inspect("{orders}2").await;
    assert!(
        views
            .iter()
            .all(|v| matches!(v.state, NodeState::Present { held: true, .. })),
        "{views:?}"
    );
    set.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_set_keeps_the_set_alive_signals_its_loss_and_releases_it() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let ttl = Duration::from_millis(900);
    // Kept alive past two leases, then released.
    let tokens = redlock
        .with_lock_set(&["k:2", "k:1"], ttl, |guard| async move {
            tokio::time::sleep(ttl * 2).await;
            assert!(!guard.is_lost());
            guard.tokens().to_vec()
        })
        .await
        .unwrap();
    assert_eq!(
        tokens.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["k:1", "k:2"]
    );
    for key in ["k:1", "k:2"] {
        assert_eq!(held_after_release(&redlock, key).await, 0, "{key}");
    }
    // One name freed behind its back: the next extension finds it, and
    // the guard's lost signal fires within the lease.
    let other = redlock.clone();
    let fired = redlock
        .with_lock_set(&["k:1", "k:2"], ttl, |guard| async move {
            assert!(other.release_owner("k:1", guard.owner()).await.unwrap());
            tokio::time::timeout(ttl * 3, guard.lost()).await.is_ok()
        })
        .await
        .unwrap();
    assert!(fired, "the lost signal fired");
    assert_eq!(held_after_release(&redlock, "k:2").await, 0);
}

/// `redlock run --lock a --lock b -- cmd`, bounded to 20 s.
fn redlock_cli(nodes: &[Node], args: &[&str]) -> std::process::Output {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", common::urls(nodes).join(","))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("redlock did not exit within 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn redlock_run_takes_a_set_and_passes_a_token_per_name() {
    let nodes = five();
    let script = "echo \"$REDLOCK_LOCKS $REDLOCK_KEY_1=$REDLOCK_TOKEN_1 $REDLOCK_KEY_2=$REDLOCK_TOKEN_2\"; exit 5";
    let out = redlock_cli(
        &nodes,
        &[
            "run",
            "--lock",
            "cli:b",
            "--lock",
            "cli:a",
            "--ttl",
            "1s",
            "--",
            "sh",
            "-c",
            &format!("sleep 1.5; {script}"),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(5), "{text}{err}");
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{text}");
    assert_eq!(fields[0], "2");
    let token = |field: &str, name: &str| -> u64 {
        field
            .strip_prefix(&format!("{name}="))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {text:?}"))
    };
    let (a, b) = (token(fields[1], "cli:a"), token(fields[2], "cli:b"));
    assert!(a > 0 && b > 0);

    // Released at the end (the command outlived its 1 s ttl): a second
    // run gets the set again, with higher tokens.
    let out = redlock_cli(
        &nodes,
        &["run", "cli:a", "--lock", "cli:b", "--", "sh", "-c", script],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(5), "{text}");
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert!(
        token(fields[1], "cli:a") > a && token(fields[2], "cli:b") > b,
        "{text}"
    );

    // One name of the set held by someone else: busy (exit 3), no run.
    let held = redlock_cli(&nodes, &["acquire", "cli:b", "--ttl", "20s"]);
    assert_eq!(held.status.code(), Some(0));
    let out = redlock_cli(
        &nodes,
        &[
            "run", "--lock", "cli:a", "--lock", "cli:b", "--", "sh", "-c", "echo ran",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));

    // With --wait, the set waits: busy (exit 3) after the wait while
    // cli:b stays held, and run once cli:b is released (woken by the
    // nodes, long before its 20 s lease ends).
    let started = Instant::now();
    let out = redlock_cli(
        &nodes,
        &[
            "run", "--lock", "cli:a", "--lock", "cli:b", "--wait", "300ms", "--", "true",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(started.elapsed() >= Duration::from_millis(300));
    let owner = String::from_utf8_lossy(&held.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("owner").map(|o| o.trim().to_string()))
        .expect("the owner of cli:b");
    let waiter = {
        let urls = common::urls(&nodes).join(",");
        std::thread::spawn(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_redlock"))
                .env("REDLOCK_NODES", urls)
                .args([
                    "run",
                    "--lock",
                    "cli:a",
                    "--lock",
                    "cli:b",
                    "--wait",
                    "15s",
                    "--",
                    "sh",
                    "-c",
                    "echo $REDLOCK_TOKEN_2",
                ])
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run redlock")
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    let out = redlock_cli(&nodes, &["release", "cli:b", "--owner", &owner]);
    assert_eq!(out.status.code(), Some(0));
    let out = waiter.join().expect("the waiting run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "woken by the release"
    );
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(token > b);

    // A set takes no --guard; a name twice is refused.
    let out = redlock_cli(
        &nodes,
        &[
            "run",
            "--lock",
            "x",
            "--lock",
            "y",
            "--guard",
            "g",
            "--resource",
            "redis://127.0.0.1:1",
            "--",
            "true",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = redlock_cli(&nodes, &["run", "--lock", "x", "--lock", "x", "--", "true"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("more than once"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0));
}

/// A lock set on masters with the replica-sync check on
/// (`redlock.sync-replicas`, DESIGN §13): the set's step states the
/// node's R and is followed by `WAIT`, so the set counts only once the
/// replicas have it, and a frozen replica makes the set fail and leave
/// nothing on the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_waits_for_the_replicas_of_a_master_with_the_sync_check() {
    let cluster = Cluster::builder()
        .shards(2)
        .replicas(1)
        .config("redlock.sync-replicas", "1")
        .start();
    let redlock = Redlock::builder([Member::cluster(cluster.seed_urls())])
        .node_timeout(Duration::from_millis(500))
        .sync_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build client");
    let names = ["{sync}a", "{sync}b"];
    let shard = cluster.shard_of_slot(cluster.slot_of(names[0].as_bytes()));
    let held = |node: &Node, key: &str| -> bool {
        let mut con = node.connection();
        let _: () = redis::cmd("READONLY").query(&mut con).unwrap();
        let reply: Option<Vec<redis::Value>> = redis::cmd("REDLOCK.INSPECT")
            .arg(key)
            .query(&mut con)
            .unwrap();
        reply.is_some_and(|f| f[1] == redis::Value::Int(1))
    };
    let set = redlock.acquire_many(&names, TTL).await.unwrap();
    for key in names {
        for replica in cluster.replicas(shard) {
            assert!(held(replica, key), "the replica lacks {key}");
        }
    }
    set.release().await.unwrap();

    // The shard's replica frozen: the set does not count and is released.
    let replica = cluster.replicas(shard)[0];
    replica.pause();
    let frozen = redlock.acquire_many(&names, TTL).await;
    replica.resume();
    let text = frozen.unwrap_err().to_string();
    assert!(text.contains("replica-sync check failed"), "{text}");
    for key in names {
        assert!(
            !held(cluster.master(shard), key),
            "{key} left on the master"
        );
    }
}

/// The same through a Sentinel member (a master and two replicas,
/// `redlock.sync-replicas 2`): the set reaches both replicas before it
/// counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_through_a_sentinel_member_waits_for_both_replicas() {
    let group = redlock_testkit::SentinelGroup::builder()
        .node(Node::builder().config("redlock.sync-replicas", "2"))
        .start();
    let redlock = Redlock::builder([Member::sentinel(group.name(), group.sentinel_urls())])
        .node_timeout(Duration::from_millis(500))
        .sync_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build client");
    let names = ["s:a", "s:b"];
    let set = redlock.acquire_many(&names, TTL).await.unwrap();
    for i in 0..group.nodes().len() {
        for key in names {
            let reply: Option<Vec<redis::Value>> = redis::cmd("REDLOCK.INSPECT")
                .arg(key)
                .query(&mut group.connection(i))
                .unwrap();
            assert!(
                reply.is_some_and(|f| f[1] == redis::Value::Int(1)),
                "{key} on data node {i}"
            );
        }
    }
    assert!(set.release().await.unwrap());
}

/// Two callers whose sets overlap, listing the names in opposite orders,
/// each taking its set again and again with `acquire_many_wait` (no
/// retries: only the nodes' wake-ups): no deadlock, never a name held by
/// both, and each gets the set in turn (served in the order they started
/// waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_sets_in_opposite_orders_take_turns_without_deadlock() {
    let nodes = five();
    const ROUNDS: usize = 20;
    let record: Arc<Mutex<Holders>> = Arc::default();
    let turns: Arc<Mutex<Vec<usize>>> = Arc::default();
    let callers = [
        (0usize, vec!["wo:a", "wo:b", "wo:c"]),
        (1usize, vec!["wo:d", "wo:c", "wo:b"]),
    ];
    let mut tasks = Vec::new();
    for (who, names) in callers {
        let redlock = client(&nodes).await;
        let (record, turns) = (Arc::clone(&record), Arc::clone(&turns));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let set = redlock
                    .acquire_many_wait(&names, TTL, Duration::from_secs(30))
                    .await
                    .unwrap();
                {
                    let mut record = record.lock().unwrap();
                    for (name, token) in set.tokens() {
                        let entry = record.entry(name.to_string()).or_insert((None, 0));
                        assert_eq!(entry.0, None, "{name} held by {:?} and {who}", entry.0);
                        assert!(token > entry.1, "{name}: {token} after {}", entry.1);
                        *entry = (Some(who), token);
                    }
                    turns.lock().unwrap().push(who);
                }
                // Held long enough for the other caller to queue behind.
                tokio::time::sleep(Duration::from_millis(20)).await;
                {
                    let mut record = record.lock().unwrap();
                    for name in set.names() {
                        record.get_mut(name.as_str()).unwrap().0 = None;
                    }
                }
                assert!(set.release().await.unwrap());
            }
        }));
    }
    let started = Instant::now();
    let results = tokio::time::timeout(
        Duration::from_secs(60),
        futures_util::future::join_all(tasks),
    )
    .await
    .expect("both waiting callers finish: no deadlock");
    for result in results {
        result.expect("a caller failed");
    }
    let turns = turns.lock().unwrap();
    assert_eq!(turns.len(), 2 * ROUNDS);
    // In turn: a caller that releases and asks again at once queues behind
    // the one already waiting, so the holder changes (almost) every round.
    let changes = turns.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!(
        "{} rounds in {:?}, holder changed {changes} times of {}: {turns:?}",
        turns.len(),
        started.elapsed(),
        turns.len() - 1
    );
    assert!(
        changes >= turns.len() * 3 / 4,
        "not in turn: {changes} changes in {turns:?}"
    );
}

/// A waiting set is woken by the release of a name it waits for (long
/// before that name's lease would end), gives up at its deadline with
/// `Busy`, and leaves nothing behind when it gives up or is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_set_is_woken_gives_up_at_its_deadline_and_leaves_no_grant() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let holder = redlock.acquire("ws:b", TTL).await.unwrap();
    // The deadline: Busy, and "ws:a" (free) is not left held anywhere.
    let called = Instant::now();
    let busy = redlock
        .acquire_many_wait(&["ws:a", "ws:b"], TTL, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy:?}");
    assert!(called.elapsed() >= Duration::from_millis(300));
    assert_eq!(held_after_release(&redlock, "ws:a").await, 0);
    // Cancelled while it waits: nothing left either.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        redlock.acquire_many_wait(&["ws:a", "ws:b"], TTL, Duration::from_secs(30)),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the set cannot be had while ws:b is held"
    );
    assert_eq!(held_after_release(&redlock, "ws:a").await, 0);
    // Woken by the release: the 10 s lease of ws:b is far from its end.
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            redlock
                .acquire_many_wait(&["ws:b", "ws:a"], TTL, Duration::from_secs(30))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    let old = holder.token();
    assert!(holder.release().await.unwrap());
    let set = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken long before the lease's end")
        .unwrap()
        .unwrap();
    eprintln!("set taken {:?} after the release", released.elapsed());
    assert!(set.token("ws:b").unwrap() > old);
    assert_eq!(held_on(&redlock, "ws:a").await, 5);
    // The cancelled waiter left nothing: once released, the set is free.
    assert!(set.release().await.unwrap());
    assert!(redlock
        .try_acquire_many(&["ws:a", "ws:b"], TTL)
        .await
        .unwrap()
        .is_some());
}
