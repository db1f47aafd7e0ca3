//! Quorum members that are Redis Clusters, against real clusters from the
//! test kit: locks spread over shards, resharding under load, shard
//! failover, members mixing both forms, one server one vote, and the order
//! of a lock's commands on a cluster member (`client/src/cluster.rs`,
//! "Ordering").

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{CONNECT_TIMEOUT, NODE_TIMEOUT};
use redlock_client::{Error, Member, NodeState, NodeView, Redlock, RetryPolicy};
use redlock_testkit::{Cluster, Node};

/// A client over `members`, short timeouts, one attempt per acquire.
async fn client(members: Vec<Member>) -> Redlock {
    Redlock::builder(members)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .expect("build client")
}

fn member(cluster: &Cluster) -> Member {
    Member::cluster(cluster.seed_urls())
}

/// Clusters start one at a time: the tests of this file run in parallel,
/// and many nodes starting at once on a loaded machine make port choices
/// collide and starts time out.
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Starts a cluster (one start at a time, see [`STARTING`]).
fn start(builder: redlock_testkit::ClusterBuilder) -> Cluster {
    let _one = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    builder.start()
}

/// Starts `n` clusters of `shards` shards (no replicas).
fn clusters(n: usize, shards: usize) -> Vec<Cluster> {
    (0..n)
        .map(|_| start(Cluster::builder().shards(shards)))
        .collect()
}

/// `n` single nodes with the module.
fn singles(n: usize) -> Vec<Node> {
    let _one = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    redlock_testkit::start_nodes(n, &Node::builder())
}

/// `REDLOCK.INSPECT key` on the master that serves the key's slot now:
/// (held, token), or `None` when the key does not exist there.
fn on_shard(cluster: &Cluster, key: &str) -> Option<(bool, u64)> {
    let slot = cluster.slot_of(key.as_bytes());
    let reply: Option<Vec<redis::Value>> = redis::cmd("REDLOCK.INSPECT")
        .arg(key)
        .query(&mut cluster.master_for_slot(slot).connection())
        .expect("INSPECT on the slot's master");
    reply.map(|fields| {
        let int = |i: usize| -> i64 { redis::from_redis_value(fields[i].clone()).unwrap() };
        (int(1) == 1, int(5) as u64)
    })
}

/// The node's count of ACQUIREs refused as busy (`INFO redlock`).
fn busy_count(node: &Node) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(&mut node.connection())
        .expect("INFO redlock");
    info.lines()
        .find_map(|l| {
            l.split_once("acquire_busy:")
                .map(|(_, n)| n.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no acquire_busy in {info}"))
}

/// Keys `prefix0, prefix1, …` until every shard of `cluster` holds at least
/// `per_shard` of them.
fn keys_on_every_shard(cluster: &Cluster, prefix: &str, per_shard: usize) -> Vec<String> {
    let mut count = vec![0; cluster.shard_count()];
    let mut keys = Vec::new();
    for i in 0.. {
        if count.iter().all(|&c| c >= per_shard) {
            break;
        }
        assert!(i < 1000, "keys do not spread over the shards: {count:?}");
        let key = format!("{prefix}{i}");
        let shard = cluster.shard_of_slot(cluster.slot_of(key.as_bytes()));
        if count[shard] < per_shard {
            count[shard] += 1;
            keys.push(key);
        }
    }
    keys
}

/// Members still holding `key` once the release's remaining calls had
/// time to land (polled for up to two seconds).
async fn held_after_release(redlock: &Redlock, key: &str) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let held = views_held(&redlock.inspect(key).await);
        if held == 0 || tokio::time::Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn views_held(views: &[NodeView]) -> usize {
    views
        .iter()
        .filter(|v| matches!(v.state, NodeState::Present { held: true, .. }))
        .count()
}

/// Acceptance 1: three members of three shards each. Acquire, extend,
/// busy, release and a waiting acquire on keys that land on every shard;
/// tokens increase per key; `inspect` names the shard that holds the key,
/// which is the one the cluster itself says serves the key's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_of_three_shards_lock_keys_on_every_shard() {
    let cs = clusters(3, 3);
    let members: Vec<Member> = cs.iter().map(member).collect();
    let redlock = client(members.clone()).await;
    let other = client(members).await;
    assert_eq!(redlock.quorum(), 2);
    let keys = keys_on_every_shard(&cs[0], "spread:", 2);
    let mut shards_seen = vec![false; 3];
    for key in &keys {
        let mut lock = redlock
            .try_acquire(key, Duration::from_secs(10))
            .await
            .expect("acquire")
            .expect("free");
        let first = lock.token();
        lock.extend(Duration::from_secs(10)).await.expect("extend");
        assert!(
            other
                .try_acquire(key, Duration::from_secs(1))
                .await
                .expect("try")
                .is_none(),
            "{key} is held: another owner must find it busy"
        );
        // Every member: held, on the shard that serves the key's slot.
        let views = redlock.inspect(key).await;
        assert_eq!(views_held(&views), 3, "{views:?}");
        for (view, cluster) in views.iter().zip(&cs) {
            let slot = cluster.slot_of(key.as_bytes());
            let master = cluster.master_for_slot(slot);
            let shard = view
                .shard
                .as_ref()
                .expect("a cluster member names its shard");
            assert_eq!(
                shard.addr,
                format!("127.0.0.1:{}", master.port()),
                "{view:?}"
            );
            let index = cluster.shard_of_slot(slot);
            assert_eq!(shard.node_id, cluster.node_id(index, 0), "{view:?}");
            shards_seen[index] = true;
            assert_eq!(
                on_shard(cluster, key),
                Some((true, first)),
                "{key} on {view:?}"
            );
        }
        assert!(lock.release().await.expect("release"));
        // The release returns at a quorum of confirmations; the last
        // member's may still be on its way.
        assert_eq!(held_after_release(&redlock, key).await, 0);

        // A waiter is woken when the holder releases; its token is higher.
        let held = redlock
            .try_acquire(key, Duration::from_secs(10))
            .await
            .expect("acquire again")
            .expect("free again");
        let second = held.token();
        assert!(second > first, "{key}: {second} after {first}");
        let waiter = {
            let other = other.clone();
            let key = key.clone();
            tokio::spawn(async move {
                other
                    .acquire_wait(&key, Duration::from_secs(5), Duration::from_secs(10))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(!waiter.is_finished(), "{key}: the waiter must wait");
        assert!(held.release().await.expect("release"));
        let woke = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is woken by the release")
            .expect("join")
            .expect("waiting acquire");
        assert!(
            woke.token() > second,
            "{key}: {} after {second}",
            woke.token()
        );
        assert!(woke.release().await.expect("release"));
    }
    assert_eq!(shards_seen, vec![true; 3], "keys landed on every shard");
}

/// Acceptance 2: the slot of a held, contended key moves to another shard
/// in every member (`SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT
/// … NODE`) while tasks keep trying to take it. The holder extends all
/// along and releases at the end; contenders only ever see "busy" until
/// then; tokens never repeat or go back; the key, its counter and its
/// lease are on the new shard afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_a_held_contended_key_keeps_the_lock_and_its_tokens() {
    let cs: Vec<Arc<Cluster>> = clusters(3, 3).into_iter().map(Arc::new).collect();
    let members: Vec<Member> = cs.iter().map(|c| member(c)).collect();
    let holder_client = client(members.clone()).await;
    let key = "reshard:key".to_string();
    let mut lock = holder_client
        .try_acquire(&key, Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    // Every token handed out, in the order of the acquisitions (the
    // holders take turns, so the order of the pushes is that order).
    let tokens = Arc::new(Mutex::new(vec![lock.token()]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut contenders = Vec::new();
    for _ in 0..3 {
        let redlock = client(members.clone()).await;
        let (key, tokens, stop) = (key.clone(), Arc::clone(&tokens), Arc::clone(&stop));
        contenders.push(tokio::spawn(async move {
            let (mut busy, mut won) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match redlock.try_acquire(&key, Duration::from_secs(2)).await {
                    Ok(None) => busy += 1,
                    Ok(Some(lock)) => {
                        tokens.lock().unwrap().push(lock.token());
                        won += 1;
                        lock.release().await.expect("a contender's release");
                    }
                    Err(e) => panic!("a contender failed with something else than busy: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (busy, won)
        }));
    }

    // Move the key's slot in every member, one after the other, while the
    // holder extends.
    let slot = cs[0].slot_of(key.as_bytes());
    let from = cs[0].shard_of_slot(slot);
    let to = (from + 1) % cs[0].shard_count();
    let mover = {
        let cs = cs.clone();
        tokio::task::spawn_blocking(move || {
            for c in &cs {
                let migration = c.begin_migration(slot, to);
                // Keep the slot half-moved for a while: ASK redirects.
                std::thread::sleep(Duration::from_millis(300));
                assert_eq!(c.migrate_keys(&migration, 10), 1, "the key moves");
                std::thread::sleep(Duration::from_millis(300));
                c.finish_migration(&migration);
            }
        })
    };
    let mut extends = 0;
    while !mover.is_finished() {
        lock.extend(Duration::from_secs(5))
            .await
            .expect("the holder extends while its key moves");
        extends += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    mover.await.expect("slot moves");
    lock.extend(Duration::from_secs(5))
        .await
        .expect("extend after the move");
    for c in &cs {
        assert_eq!(c.shard_of_slot(slot), to);
        let (held, token) = on_shard(c, &key).expect("the key is on the new shard");
        assert!(held, "the lease moved with the key");
        assert!(token >= lock.token());
    }
    let views = holder_client.inspect(&key).await;
    for (view, c) in views.iter().zip(&cs) {
        let shard = view.shard.as_ref().expect("shard");
        assert_eq!(shard.addr, format!("127.0.0.1:{}", c.master(to).port()));
    }
    assert!(
        lock.release().await.expect("release"),
        "still held at the end"
    );
    // Let the contenders take it a few times on the new shard.
    let until = Instant::now() + Duration::from_secs(10);
    while tokens.lock().unwrap().len() < 4 {
        assert!(
            Instant::now() < until,
            "contenders never got the lock after the release"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut busy = 0;
    for c in contenders {
        busy += c.await.expect("contender").0;
    }
    assert!(extends >= 5, "extends: {extends}");
    assert!(
        busy > 0,
        "the contenders found the lock busy while it moved"
    );
    let tokens = tokens.lock().unwrap().clone();
    for pair in tokens.windows(2) {
        assert!(pair[1] > pair[0], "tokens repeat or go back: {tokens:?}");
    }
}

/// Acceptance 3: the master of the shard that holds a lock is killed; its
/// replica takes over. On that member the lock is intact (owner: the holder
/// can extend and release through it; counter; lease), and tokens stay
/// exclusive and increasing. One of the other two members is frozen, so
/// that every quorum below needs the cluster member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_failover_keeps_the_lock_state_on_that_member() {
    let mut cluster = start(Cluster::builder().shards(3).replicas(1));
    let nodes = singles(2);
    let members = vec![
        member(&cluster),
        Member::node(nodes[0].url()),
        Member::node(nodes[1].url()),
    ];
    let redlock = client(members.clone()).await;
    let other = client(members).await;
    let key = "failover:key";
    let slot = cluster.slot_of(key.as_bytes());
    let shard = cluster.shard_of_slot(slot);
    let mut lock = redlock
        .try_acquire(key, Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    let token = lock.token();
    // The replica has the lock before its master dies (replication is
    // asynchronous; what a master loses unreplicated is the restart-guard
    // and FLOOR story, not this test's).
    let replicated: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(&mut cluster.master(shard).connection())
        .expect("WAIT");
    assert_eq!(replicated, 1);
    let old_port = cluster.master(shard).port();
    cluster.kill_master(shard);
    assert_ne!(cluster.master(shard).port(), old_port);
    let (held, counter) = on_shard(&cluster, key).expect("the key survived the failover");
    assert!(held);
    assert_eq!(counter, token);

    let _frozen = common::Frozen::new([&nodes[1]]);
    // Quorum 2 of {cluster, node 0}: both must still know the owner.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match lock.extend(Duration::from_secs(10)).await {
            Ok(()) => break,
            // The cluster connection may need a moment to find the new master.
            Err(Error::NoQuorum { .. }) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("extend after the failover: {e}"),
        }
    }
    let views = redlock.inspect(key).await;
    let shard_view = views[0].shard.as_ref().expect("shard");
    assert_eq!(
        shard_view.addr,
        format!("127.0.0.1:{}", cluster.master(shard).port()),
        "inspect follows the failover"
    );
    match &views[0].state {
        NodeState::Present {
            held: true,
            pttl: Some(pttl),
            token: t,
        } => {
            assert_eq!(*t, token);
            assert!(
                *pttl > Duration::from_secs(5),
                "the extend reached the new master"
            );
        }
        other => panic!("the lock on the cluster member: {other:?}"),
    }
    assert!(
        other
            .try_acquire(key, Duration::from_secs(1))
            .await
            .expect("try")
            .is_none(),
        "exclusive after the failover"
    );
    assert!(
        lock.release().await.expect("release"),
        "the owner is known after the failover"
    );
    let next = other
        .try_acquire(key, Duration::from_secs(1))
        .await
        .expect("acquire after")
        .expect("free after the release");
    assert!(next.token() > token, "{} after {token}", next.token());
    assert_eq!(on_shard(&cluster, key), Some((true, next.token())));
    next.release().await.expect("release");
}

/// Acceptance 4: two clusters and three single nodes in one quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_and_three_nodes_make_one_quorum() {
    let cs = clusters(2, 3);
    let nodes = singles(3);
    let members = vec![
        member(&cs[0]),
        Member::node(nodes[0].url()),
        member(&cs[1]),
        Member::node(nodes[1].url()),
        Member::node(nodes[2].url()),
    ];
    let redlock = client(members.clone()).await;
    let other = client(members).await;
    assert_eq!(redlock.quorum(), 3);
    let names = redlock.nodes();
    assert!(names[0].starts_with("cluster(127.0.0.1:"), "{names:?}");
    assert_eq!(names[1], common::addr(&nodes[0]));
    let mut last = 0;
    for key in keys_on_every_shard(&cs[0], "mixed:", 1) {
        let mut lock = redlock
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .expect("acquire")
            .expect("free");
        assert!(lock.token() > last);
        last = lock.token();
        lock.extend(Duration::from_secs(10)).await.expect("extend");
        assert!(other
            .try_acquire(&key, Duration::from_secs(1))
            .await
            .unwrap()
            .is_none());
        let views = redlock.inspect(&key).await;
        assert_eq!(views_held(&views), 5, "{views:?}");
        for (i, view) in views.iter().enumerate() {
            assert_eq!(view.shard.is_some(), i == 0 || i == 2, "{view:?}");
        }
        assert!(lock.release().await.expect("release"));
    }
    // With both clusters down to nothing (all their masters frozen), the
    // three nodes are still a quorum.
    let frozen: Vec<&Node> = cs.iter().flat_map(|c| c.masters()).collect();
    let _frozen = common::Frozen::new(frozen);
    let lock = redlock
        .try_acquire("mixed:without-clusters", Duration::from_secs(5))
        .await
        .expect("three nodes of five are a quorum")
        .expect("free");
    assert!(lock.release().await.expect("release"));
}

/// A waiting acquire on a key whose slot is half-moved: its `REDLOCK.WAIT`
/// follows `-MOVED` to the slot's owner and `-ASK` to the shard that has
/// the key already, blocks there, and is woken by the holder's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_redirects_to_a_key_in_a_moving_slot() {
    let cs = clusters(1, 3);
    let cluster = &cs[0];
    let redlock = client(vec![member(cluster)]).await;
    let waiting = client(vec![member(cluster)]).await;
    let key = "wait:moving";
    let lock = redlock
        .try_acquire(key, Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    let slot = cluster.slot_of(key.as_bytes());
    let to = (cluster.shard_of_slot(slot) + 1) % cluster.shard_count();
    let migration = cluster.begin_migration(slot, to);
    assert_eq!(
        cluster.migrate_keys(&migration, 10),
        1,
        "the key moves ahead of its slot"
    );
    let waiter = tokio::spawn(async move {
        waiting
            .acquire_wait(key, Duration::from_secs(5), Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter blocks while the lock is held"
    );
    let first = lock.token();
    assert!(lock.release().await.expect("release through -ASK"));
    let woke = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is woken by the release")
        .expect("join")
        .expect("waiting acquire");
    assert!(woke.token() > first);
    // Woken by the shard, not by polling: the waiter's only busy attempt
    // was its first one, on the shard that has the key.
    assert_eq!(busy_count(cluster.master(to)), 1);
    cluster.finish_migration(&migration);
    assert_eq!(on_shard(cluster, key), Some((true, woke.token())));
    assert!(woke.release().await.expect("release after the move"));
}

/// A cluster whose masters run without the module is named in the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_module_is_refused_by_name() {
    let plain = start(
        Cluster::builder()
            .shards(3)
            .node(Node::builder().without_module()),
    );
    let nodes = singles(2);
    let err = Redlock::builder([
        member(&plain),
        Member::node(nodes[0].url()),
        Member::node(nodes[1].url()),
    ])
    .connect_timeout(CONNECT_TIMEOUT)
    .build()
    .await
    .expect_err("no module on the cluster");
    match err {
        Error::ModuleNotLoaded { node } => {
            assert!(node.starts_with("cluster(127.0.0.1:"), "{node}")
        }
        other => panic!("expected ModuleNotLoaded, got {other}"),
    }
}

/// One server, one vote: the same cluster given twice (through other
/// seeds), or a cluster next to one of its own nodes under another name,
/// is refused at build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_counted_twice_is_refused() {
    let cs = clusters(1, 3);
    let nodes = singles(1);
    let seeds = cs[0].seed_urls();
    let twice = Redlock::builder([
        Member::cluster(seeds[..1].to_vec()),
        Member::node(nodes[0].url()),
        Member::cluster(seeds[1..].to_vec()),
    ])
    .connect_timeout(CONNECT_TIMEOUT)
    .build()
    .await
    .expect_err("the same cluster twice");
    let text = twice.to_string();
    assert!(text.contains("are the same Redis server"), "{text}");

    let alias = format!("redis://localhost:{}", cs[0].master(1).port());
    let inside = Redlock::builder([
        Member::cluster(seeds.clone()),
        Member::node(nodes[0].url()),
        Member::node(alias),
    ])
    .connect_timeout(CONNECT_TIMEOUT)
    .build()
    .await
    .expect_err("a node of the cluster as a member of its own");
    let text = inside.to_string();
    assert!(text.contains("are the same Redis server"), "{text}");

    let same_seed = Redlock::builder([
        Member::cluster(seeds.clone()),
        Member::node(seeds[2].clone()),
        Member::node(nodes[0].url()),
    ])
    .build()
    .await
    .expect_err("a seed listed as a node");
    assert!(
        same_seed.to_string().contains("are the same node"),
        "{same_seed}"
    );
}

/// The order of one lock's commands on a cluster member: a lock released
/// while its ACQUIRE on a frozen shard is still unanswered ends up free on
/// that shard once it wakes up, and stays free (the ACQUIRE, kept running
/// in its task after the round gave up on it, is answered before the
/// RELEASE is sent). Then a `-MOVED` after the slot moved is followed by
/// every lock command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reaches_a_frozen_shard_after_the_acquire_it_undoes() {
    // A node timeout longer than the freeze: the other masters must not
    // declare the frozen one failed (the cluster would go down).
    let cluster = &start(Cluster::builder().shards(3).node_timeout_ms(15_000));
    let nodes = singles(2);
    let members = vec![
        member(cluster),
        Member::node(nodes[0].url()),
        Member::node(nodes[1].url()),
    ];
    let redlock = client(members).await;
    let key = "order:key";
    let slot = cluster.slot_of(key.as_bytes());
    let master = cluster.master_for_slot(slot);
    {
        let _frozen = common::Frozen::new([master]);
        let frozen_at = Instant::now();
        let lock = redlock
            .try_acquire(key, Duration::from_secs(30))
            .await
            .expect("acquire")
            .expect("two nodes of three grant it");
        // Released while the cluster's ACQUIRE is unanswered.
        let release = tokio::time::timeout(Duration::from_secs(5), lock.release())
            .await
            .expect("release returns");
        assert!(release.expect("release by the two nodes"));
        // Frozen well past the round's timer, within the command's bound.
        tokio::time::sleep_until((frozen_at + CONNECT_TIMEOUT / 2).into()).await;
    }
    // Thawed: the ACQUIRE's attempts run first, then the RELEASE.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match on_shard(cluster, key) {
            Some((false, token)) if token > 0 => break,
            state => {
                assert!(Instant::now() < until, "the shard still shows {state:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // Nothing of the acquisition is left to arrive after it.
    tokio::time::sleep(CONNECT_TIMEOUT).await;
    let (held, _) = on_shard(cluster, key).expect("the key");
    assert!(
        !held,
        "an ACQUIRE landed after the RELEASE meant to undo it"
    );
    // Move the slot: the next lock commands follow the MOVED.
    let to = (cluster.shard_of_slot(slot) + 1) % cluster.shard_count();
    cluster.migrate_slot(slot, to);
    let mut lock = redlock
        .try_acquire(key, Duration::from_secs(10))
        .await
        .expect("acquire after the move")
        .expect("free");
    lock.extend(Duration::from_secs(10))
        .await
        .expect("extend after the move");
    assert_eq!(on_shard(cluster, key), Some((true, lock.token())));
    assert!(lock.release().await.expect("release after the move"));
}
