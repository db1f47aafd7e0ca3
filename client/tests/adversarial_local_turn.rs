//! An adversarial read of the local turn (`client/src/local_turn.rs`, used
//! at the start of `Redlock::acquire_wait` and `acquire_many_wait`):
//! callers of one name on one client register at call start, and a caller
//! that finds earlier callers waiting defers its first attempt.
//!
//! Each test asserts the safe (or live) outcome on five real nodes. The read
//! was made of the first design (defer until an earlier caller leaves, at
//! most 1 s; set waiters outside), in which five tests failed: a parked
//! caller cost every later call 1 s, a deferred caller was overtaken by
//! another client's later caller, deferred callers raced out of call order
//! at a departure, a set waiter was re-taken from, and a caller deferred
//! the full second lost its seniority to the nodes' 1 s ticket reach. The
//! design now ends the deferral once an earlier caller is queued at the
//! nodes (its `WAIT`s sent to a quorum and unanswered for 10 ms), caps it at
//! 100 ms, and gives set waiters a place under each name: all five pass.
//! The ordering cases have windows of about a millisecond, which a loaded
//! machine can miss (they were measured one test at a time). "At the parent
//! commit" figures: this file run on ac62ae6^ (before the local turn).

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use common::{client, five, held_after_release, info_u64};
use redlock_client::{Error, Lock, Redlock};
use redlock_testkit::Node;

type Waiting = Pin<Box<dyn Future<Output = Result<Lock, Error>> + Send>>;

/// Polls `fut` once; whether it was still pending.
async fn poll_once(fut: &mut Waiting) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
}

/// A waiting acquire of `key` on `redlock` that was polled once (it
/// registered, and its first ACQUIRE found the lock held by `other`) and
/// is then neither polled nor dropped; the lock is then released, so that
/// it is free on a quorum (four or five nodes) with nobody queued there.
async fn parked_caller(redlock: &Redlock, other: &Redlock, key: &str) -> Waiting {
    let lock = other.acquire(key, Duration::from_secs(10)).await.unwrap();
    let mut parked: Waiting = Box::pin({
        let redlock = redlock.clone();
        let key = key.to_string();
        async move {
            redlock
                .acquire_wait(&key, Duration::from_secs(5), Duration::from_secs(30))
                .await
        }
    });
    assert!(poll_once(&mut parked).await, "got a held lock");
    // Its ACQUIREs reach the nodes (and are answered "held") before the
    // release.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(lock.release().await.unwrap());
    // Free on a quorum (a release returns once a quorum confirmed it, and
    // on a loaded machine parked ACQUIREs may still arrive after it and
    // hold a node or two for the parked owner), with nobody queued.
    let held = held_after_release(redlock, key).await;
    assert!(held <= 2, "the lock is held on {held} nodes");
    parked
}

/// Waits until at least `n` clients are blocked in WAIT on a majority of
/// `nodes`; how long that took, or `None` after `limit`.
async fn blocked_on_majority(nodes: &[Node], n: u64, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    loop {
        let counts = nodes
            .iter()
            .filter(|node| info_u64(node, "redlock", "redlock_waiting_clients") >= n)
            .count();
        if counts > nodes.len() / 2 {
            return Some(started.elapsed());
        }
        if started.elapsed() >= limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Total calls of `cmd` on every node.
fn calls_of(nodes: &[Node], cmd: &str) -> u64 {
    nodes
        .iter()
        .map(|node| {
            let mut con = node.connection();
            let stats: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut con)
                .unwrap();
            let prefix = format!("cmdstat_{}:calls=", cmd.to_lowercase());
            stats
                .lines()
                .map(str::to_lowercase)
                .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// The holders seen by the test: at most one at a time, tokens rising.
#[derive(Default)]
struct Holders {
    state: Mutex<(Option<u64>, u64, Vec<u64>)>,
}

impl Holders {
    fn took(&self, token: u64) {
        let mut s = self.state.lock().unwrap();
        assert!(s.0.is_none(), "two holders: {:?} and {token}", s.0);
        assert!(token > s.1, "token went back: {} then {token}", s.1);
        s.0 = Some(token);
        s.1 = token;
        s.2.push(token);
    }

    fn left(&self, token: u64) {
        let mut s = self.state.lock().unwrap();
        assert_eq!(s.0, Some(token));
        s.0 = None;
    }

    fn tokens(&self) -> Vec<u64> {
        self.state.lock().unwrap().2.clone()
    }
}

/// Found by the read, bounded (liveness/latency): a parked caller that never
/// got queued now costs a later call at most `TURN_LIMIT` (100 ms; the test
/// asserts under 250 ms). One waiting acquire of a name that is
/// polled once and then parked (neither polled nor dropped: a future kept
/// in a struct, a `select!` branch kept for later, a task stuck in a
/// blocking call) keeps its registration: every later `acquire_wait` of
/// that name on that client waits min(1 s, max_wait) before its first
/// attempt, also when the lock is free on a quorum and nobody waits
/// there, and it does so on every call for as long as the future stays
/// parked (the limit bounds one call, not the total).
///
/// Measured (debug build, 2 shared cores): three calls in a row on the free
/// lock took 1,002 / 1,002 / 1,003 ms each (the same call with nothing
/// parked: 5 ms); a call with max_wait 300 ms got the free lock after
/// 301-302 ms, only at its deadline (its one attempt at the end of the
/// wait). At the parent commit (ac62ae6^) the same calls take under 1 ms
/// after the parked one (this test passes there).
///
/// The fix suggested, and built in the design described at the top: end the deferral when the earlier caller has reached the
/// nodes (its first busy attempt answered and its WAITs sent), not when it
/// leaves; that is all the cold-start re-take needs, and a caller that never
/// gets there then costs nothing. At least cap it far below 1 s (the
/// re-take window is one attempt plus opening the blocking connections:
/// milliseconds), or count a caller as "earlier" only while its future is
/// polled (e.g. reset a heartbeat on each poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_is_taken_at_once_while_an_earlier_caller_is_parked() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let other = client(&nodes).await;
    // The baseline: the same call with nothing parked.
    let t = Instant::now();
    let l = redlock
        .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(5))
        .await
        .unwrap();
    let baseline = t.elapsed();
    assert!(l.release().await.unwrap());
    let _parked = parked_caller(&redlock, &other, "k").await;
    let mut took = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let l = redlock
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(5))
            .await
            .unwrap();
        took.push(t.elapsed());
        assert!(l.release().await.unwrap());
    }
    println!("free lock, nothing parked: {baseline:?}; with a parked caller: {took:?}");
    for t in &took {
        assert!(
            *t < Duration::from_millis(250),
            "a free lock, nobody queued on the nodes, took {t:?} (nothing parked: {baseline:?})"
        );
    }
}

/// Safe: a caller whose max_wait is shorter than the turn limit still gets
/// a lock that is free on a quorum within its max_wait (+ one attempt),
/// even behind a parked earlier caller: its deferral ends at its deadline
/// and the one attempt that follows takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_max_wait_gets_a_free_lock_behind_a_parked_caller() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let other = client(&nodes).await;
    let _parked = parked_caller(&redlock, &other, "k").await;
    let t = Instant::now();
    let l = redlock
        .acquire_wait("k", Duration::from_secs(5), Duration::from_millis(300))
        .await
        .expect("a free lock within max_wait");
    let took = t.elapsed();
    println!("max_wait 300 ms behind a parked caller: {took:?}");
    assert!(took < Duration::from_millis(800), "{took:?}");
    assert!(l.release().await.unwrap());
}

/// Safe: max_wait 0 never waits for earlier callers (the deferral is cut
/// at the deadline, which has passed), and still makes its one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_wait_zero_does_not_wait_for_earlier_callers() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let other = client(&nodes).await;
    let _parked = parked_caller(&redlock, &other, "k").await;
    let t = Instant::now();
    let l = redlock
        .acquire_wait("k", Duration::from_secs(5), Duration::ZERO)
        .await
        .expect("a free lock with max_wait 0");
    let took = t.elapsed();
    println!("max_wait 0 behind a parked caller: {took:?}");
    assert!(took < Duration::from_millis(200), "{took:?}");
    assert!(l.release().await.unwrap());
    // Held by another client: Busy at once.
    let held = other.acquire("k", Duration::from_secs(5)).await.unwrap();
    let t = Instant::now();
    let err = redlock
        .acquire_wait("k", Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert!(held.release().await.unwrap());
}

/// How an earlier caller stops while a later one defers behind it.
#[derive(Clone, Copy, Debug)]
enum Ends {
    Aborted,
    Panics,
    Dropped,
}

/// Safe (no lost wake-up): an earlier caller that waits in the nodes'
/// queues and then stops without the lock (its task aborted, its task
/// panicking, its future dropped) lets the deferred later caller go at
/// once, not at the 1 s limit. The lock is released by its holder (another
/// client) at the moment the earlier caller stops: the later caller must
/// have it well before the 1 s limit.
async fn earlier_caller_stops(how: Ends) -> Duration {
    let nodes = five();
    let redlock = client(&nodes).await;
    let other = client(&nodes).await;
    let held = other.acquire("k", Duration::from_secs(10)).await.unwrap();
    let first = redlock.clone();
    let earlier = tokio::spawn(async move {
        let fut = first.acquire_wait("k", Duration::from_secs(5), Duration::from_secs(30));
        let mut fut = std::pin::pin!(fut);
        match how {
            Ends::Panics => {
                tokio::select! {
                    _ = &mut fut => {}
                    () = tokio::time::sleep(Duration::from_millis(400)) => {
                        panic!("the earlier caller's task panics")
                    }
                }
            }
            Ends::Dropped => {
                let _ = tokio::time::timeout(Duration::from_millis(400), &mut fut).await;
                // Dropped here (its task ends normally).
            }
            Ends::Aborted => {
                let _ = fut.await;
            }
        }
    });
    assert!(
        blocked_on_majority(&nodes, 1, Duration::from_secs(2))
            .await
            .is_some(),
        "the earlier caller never queued"
    );
    let later = redlock.clone();
    let called = Instant::now();
    let later = tokio::spawn(async move {
        let l = later
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
            .await;
        (l, Instant::now())
    });
    // The later caller is deferred (it registered after the earlier one).
    tokio::time::sleep(Duration::from_millis(150)).await;
    if let Ends::Aborted = how {
        earlier.abort();
    } else {
        // The task stops on its own at 400 ms.
        tokio::time::sleep(Duration::from_millis(400 - 150)).await;
    }
    let stopped = Instant::now();
    assert!(held.release().await.unwrap());
    let (l, got) = later.await.unwrap();
    let l = l.unwrap();
    let after = got.duration_since(stopped);
    println!(
        "{how:?}: the later caller got the lock {after:?} after the earlier one stopped ({:?} after its call)",
        got.duration_since(called)
    );
    let _ = earlier.await;
    assert!(l.release().await.unwrap());
    after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_earlier_caller_lets_the_later_one_go_at_once() {
    let after = earlier_caller_stops(Ends::Aborted).await;
    assert!(after < Duration::from_millis(400), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_earlier_caller_lets_the_later_one_go_at_once() {
    let after = earlier_caller_stops(Ends::Panics).await;
    assert!(after < Duration::from_millis(400), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_earlier_caller_lets_the_later_one_go_at_once() {
    let after = earlier_caller_stops(Ends::Dropped).await;
    assert!(after < Duration::from_millis(400), "{after:?}");
}

/// Safe (no deadlock): a holder that asks again for its own name
/// (reentrancy) while a caller of its client waits for it gets Busy at its
/// max_wait (as before the turn: it cannot take a lock it holds), and the
/// waiter gets the lock as soon as the holder releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_holder_with_a_waiter_of_its_client_does_not_deadlock() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let held = redlock
        .acquire_wait("k", Duration::from_secs(10), Duration::from_secs(1))
        .await
        .unwrap();
    let waiter = redlock.clone();
    let waiting = tokio::spawn(async move {
        let l = waiter
            .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
            .await;
        (l, Instant::now())
    });
    assert!(blocked_on_majority(&nodes, 1, Duration::from_secs(2))
        .await
        .is_some());
    let t = Instant::now();
    let again = redlock
        .acquire_wait("k", Duration::from_secs(10), Duration::from_millis(500))
        .await;
    let took = t.elapsed();
    assert!(matches!(again, Err(Error::Busy { .. })), "{again:?}");
    assert!(
        took >= Duration::from_millis(490) && took < Duration::from_millis(1_200),
        "{took:?}"
    );
    let first = held.token();
    let released = Instant::now();
    assert!(held.release().await.unwrap());
    let (l, got) = waiting.await.unwrap();
    let l = l.unwrap();
    let after = got.duration_since(released);
    println!(
        "reentrant call: Busy after {took:?}; the waiter got the lock {after:?} after the release"
    );
    assert!(after < Duration::from_millis(300), "{after:?}");
    assert!(l.token() > first);
    assert!(l.release().await.unwrap());
}

/// Safe (no deadlock): `with_lock_wait` nested on the same name (same
/// task, same client) ends with Busy at the inner max_wait; the outer work
/// then finishes and a later caller gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_with_lock_wait_on_one_name_ends_with_busy() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let inner = redlock.clone();
    let t = Instant::now();
    let (outer_token, inner_result, inner_took) = redlock
        .with_lock_wait(
            "k",
            Duration::from_secs(5),
            Duration::from_secs(1),
            |guard| async move {
                let t = Instant::now();
                let r = inner
                    .with_lock_wait(
                        "k",
                        Duration::from_secs(5),
                        Duration::from_millis(400),
                        |g| async move { g.token() },
                    )
                    .await;
                (guard.token(), r, t.elapsed())
            },
        )
        .await
        .unwrap();
    println!(
        "nested: inner {inner_result:?} after {inner_took:?}, all {:?}",
        t.elapsed()
    );
    assert!(
        matches!(inner_result, Err(Error::Busy { .. })),
        "{inner_result:?}"
    );
    assert!(inner_took < Duration::from_millis(1_000), "{inner_took:?}");
    let l = redlock
        .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(2))
        .await
        .unwrap();
    assert!(l.token() > outer_token);
    assert!(l.release().await.unwrap());
}

/// Safe: the local turn is shared by clones of a client. A worker that
/// releases and asks again on one clone lets a waiter of another clone
/// (polled once, its WAITs not sent yet) go first, in token order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_share_the_turn() {
    let nodes = five();
    for round in 0..3 {
        let holder = client(&nodes).await;
        let other_clone = holder.clone();
        let key = format!("clone-{round}");
        let lock = holder.acquire(&key, Duration::from_secs(10)).await.unwrap();
        let mut waiter: Waiting = Box::pin({
            let key = key.clone();
            async move {
                other_clone
                    .acquire_wait(&key, Duration::from_secs(10), Duration::from_secs(5))
                    .await
            }
        });
        assert!(poll_once(&mut waiter).await);
        assert!(lock.release().await.unwrap());
        let again = holder.acquire_wait(&key, Duration::from_secs(10), Duration::from_secs(5));
        let order = Mutex::new(Vec::new());
        let (w, h) = tokio::join!(
            async {
                let l = waiter.await.unwrap();
                order.lock().unwrap().push("waiter");
                let t = l.token();
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert!(l.release().await.unwrap());
                t
            },
            async {
                let l = again.await.unwrap();
                order.lock().unwrap().push("holder");
                let t = l.token();
                assert!(l.release().await.unwrap());
                t
            }
        );
        assert_eq!(
            *order.lock().unwrap(),
            ["waiter", "holder"],
            "round {round}"
        );
        assert!(w < h);
    }
}

/// Safe, with figures: 100 callers of one name on one client (clones), all
/// called at once, each takes the lock once: one holder at a time, tokens
/// rising, every caller served within its max_wait. Prints the time and
/// the ACQUIRE/WAIT calls per hand-off (the herd when the first caller's
/// departure releases the 99 deferred ones at once).
///
/// Measured (debug build, 2 shared cores), 5 runs each: all served in
/// 267-701 ms, 11.6-14.7 ACQUIRE calls per hand-off with the local turn;
/// 227-478 ms, 9.9-14.9 at ac62ae6^: no difference beyond the noise (the
/// deferred callers' busy attempts move to the first departure, none is
/// added).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_callers_of_one_name_each_get_it_once_in_token_order() {
    let nodes = five();
    let redlock = client(&nodes).await;
    // Warm the shared connections.
    let l = redlock
        .acquire("warm", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(l.release().await.unwrap());
    let acquires = calls_of(&nodes, "REDLOCK.ACQUIRE");
    let waits = calls_of(&nodes, "REDLOCK.WAIT");
    let holders = Arc::new(Holders::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let redlock = redlock.clone();
        let holders = Arc::clone(&holders);
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let l = redlock
                .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(20))
                .await
                .unwrap();
            let waited = t.elapsed();
            holders.took(l.token());
            let token = l.token();
            holders.left(token);
            assert!(l.release().await.unwrap());
            waited
        }));
    }
    let mut waited = Vec::new();
    for t in tasks {
        waited.push(t.await.unwrap());
    }
    let all = started.elapsed();
    waited.sort();
    let tokens = holders.tokens();
    assert_eq!(tokens.len(), 100);
    let acquires = calls_of(&nodes, "REDLOCK.ACQUIRE") - acquires;
    let waits = calls_of(&nodes, "REDLOCK.WAIT") - waits;
    println!(
        "100 callers: all done in {all:?}, wait p50 {:?} max {:?}; per hand-off {:.1} ACQUIRE and {:.1} WAIT calls (over 5 nodes)",
        waited[49],
        waited[99],
        acquires as f64 / 100.0,
        waits as f64 / 100.0
    );
    assert!(all < Duration::from_secs(15), "{all:?}");
}

/// Safe, with figures: four workers of one client loop on one name
/// (acquire_wait, hold 2 ms, release, ask again at once): one holder at a
/// time, tokens rising, and each worker served about as often as the
/// others (no worker re-takes its own lock). Prints the hand-off rate, the
/// longest wait and the ACQUIRE calls per hand-off.
///
/// Measured: 208-224 hand-offs/s with the local turn (6 runs), 204-227/s
/// at ac62ae6^ (4 runs); 10.0 ACQUIRE calls per hand-off (one busy
/// attempt, one granted) in both; re-takes 0 with the turn, 0-1 without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_workers_of_one_client_take_turns() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let l = redlock
        .acquire("warm", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(l.release().await.unwrap());
    let acquires = calls_of(&nodes, "REDLOCK.ACQUIRE");
    let holders = Arc::new(Holders::default());
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let retakes = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let run = Duration::from_millis(2_500);
    let mut tasks = Vec::new();
    for w in 0..4usize {
        let redlock = redlock.clone();
        let holders = Arc::clone(&holders);
        let last = Arc::clone(&last);
        let retakes = Arc::clone(&retakes);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            let mut longest = Duration::ZERO;
            while started.elapsed() < run {
                let t = Instant::now();
                let l = redlock
                    .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
                    .await
                    .unwrap();
                longest = longest.max(t.elapsed());
                holders.took(l.token());
                if last.swap(w, Ordering::SeqCst) == w {
                    retakes.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                holders.left(l.token());
                assert!(l.release().await.unwrap());
                n += 1;
            }
            (n, longest)
        }));
    }
    let mut per_worker = Vec::new();
    for t in tasks {
        per_worker.push(t.await.unwrap());
    }
    let all = started.elapsed();
    let total: u32 = per_worker.iter().map(|(n, _)| n).sum();
    let acquires = calls_of(&nodes, "REDLOCK.ACQUIRE") - acquires;
    println!(
        "4 looping workers: {total} hand-offs in {all:?} ({:.0}/s), per worker {:?}, re-takes {}, {:.1} ACQUIRE per hand-off",
        total as f64 / all.as_secs_f64(),
        per_worker,
        retakes.load(Ordering::SeqCst),
        acquires as f64 / total as f64
    );
    let min = per_worker.iter().map(|(n, _)| *n).min().unwrap();
    let max = per_worker.iter().map(|(n, _)| *n).max().unwrap();
    assert!(min * 2 >= max, "unfair: {per_worker:?}");
    assert!(total >= 20, "{total} hand-offs in {all:?}");
}

/// One round of three waiters in call order: B and C on client `p`, R on
/// client `q` (called after C), while `x` holds the lock; B holds the lock
/// it gets for `b_holds`, C and R for 20 ms. Returns the order in which
/// they got it.
async fn three_waiters(
    nodes: &[Node],
    p: &Redlock,
    q: &Redlock,
    x: &Redlock,
    key: &str,
    b_holds: Duration,
) -> Vec<&'static str> {
    let held = x.acquire(key, Duration::from_secs(10)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let spawn = |redlock: &Redlock, name: &'static str, hold: Duration| {
        let (redlock, order, key) = (redlock.clone(), Arc::clone(&order), key.to_string());
        tokio::spawn(async move {
            let l = redlock
                .acquire_wait(&key, Duration::from_secs(5), Duration::from_secs(10))
                .await
                .unwrap();
            order.lock().unwrap().push(name);
            tokio::time::sleep(hold).await;
            assert!(l.release().await.unwrap());
        })
    };
    let b = spawn(p, "B", b_holds);
    assert!(blocked_on_majority(nodes, 1, Duration::from_secs(2))
        .await
        .is_some());
    let c = spawn(p, "C", Duration::from_millis(20));
    // C has registered (and, behind B, defers).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = spawn(q, "R", Duration::from_millis(20));
    assert!(
        blocked_on_majority(nodes, 2, Duration::from_secs(2))
            .await
            .is_some(),
        "R never queued"
    );
    assert!(held.release().await.unwrap());
    for t in [b, c, r] {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    order
}

/// Found by the read, fixed (fairness across clients). The deferral keeps a caller out
/// of the nodes' queues, where its ticket (taken at its call) would have
/// placed it before later callers of other clients. Sequence: `x` holds
/// the lock; B (client P) waits, queued on the nodes; C (client P) calls
/// and defers behind B; R (client Q) calls 50 ms after C and queues; `x`
/// releases. B gets the lock and releases it at once: C was woken by B's
/// departure but its busy attempt and its WAIT are still on their way, so
/// the nodes hand the lock to R, the only waiter queued. Order B, R, C
/// although C called before R (before the local turn, C waited in the
/// queues with its earlier ticket: B, C, R).
///
/// Measured (debug build, 2 shared cores), B holding 0 ms: R overtook C in
/// 20 of 40 rounds (5, 6, 5, 4 per run of 10); at the parent commit
/// (ac62ae6^) in 0 of 50 (this test passes there). The window is narrow:
/// with B holding 1, 2, 5 or 10 ms, C was overtaken in 0 of 10 rounds each
/// (C's busy attempt and WAIT take about a millisecond on loopback; on a
/// real network, about two round trips); with B holding 100 ms, C keeps
/// its place (the next test).
///
/// The fix suggested, and built in the design described at the top: as for the parked caller, end the deferral once the
/// earlier callers have reached the nodes' queues rather than when they
/// leave, so that a deferred caller is in the queues (with its ticket)
/// before the lock can be handed on; or defer only a caller of this client
/// that released this name a moment ago (the re-take the turn is for),
/// not every caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_caller_is_not_overtaken_by_a_later_caller_of_another_client() {
    let nodes = five();
    let p = client(&nodes).await;
    let q = client(&nodes).await;
    let x = client(&nodes).await;
    let mut orders = Vec::new();
    for round in 0..10 {
        let key = format!("order-{round}");
        orders.push(three_waiters(&nodes, &p, &q, &x, &key, Duration::ZERO).await);
    }
    let overtaken = orders.iter().filter(|o| **o != ["B", "C", "R"]).count();
    println!("orders: {orders:?}; C overtaken in {overtaken} of 10 rounds");
    assert_eq!(overtaken, 0, "{orders:?}");
}

/// Safe: with B holding the lock a while (20 ms), the deferred C reaches
/// the queues before B releases and keeps its place ahead of R.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_caller_keeps_its_place_when_the_earlier_one_holds_a_while() {
    let nodes = five();
    let p = client(&nodes).await;
    let q = client(&nodes).await;
    let x = client(&nodes).await;
    let mut orders = Vec::new();
    for round in 0..5 {
        let key = format!("order-{round}");
        orders.push(three_waiters(&nodes, &p, &q, &x, &key, Duration::from_millis(100)).await);
    }
    println!("orders: {orders:?}");
    assert!(orders.iter().all(|o| *o == ["B", "C", "R"]), "{orders:?}");
}

/// `n` callers of client `p`, called 10 ms apart after an earlier caller B
/// of `p` queued behind `x`'s hold; `x` releases; B and each caller hold the
/// lock `hold`. Returns the order in which the `n` callers got the lock
/// (their call indices), the time from the release until the last one had
/// it, and the ACQUIRE calls on the nodes meanwhile.
async fn callers_behind_a_departure(
    nodes: &[Node],
    p: &Redlock,
    x: &Redlock,
    key: &str,
    n: usize,
    hold: Duration,
) -> (Vec<usize>, Duration, u64) {
    let held = x.acquire(key, Duration::from_secs(10)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let holders = Arc::new(Holders::default());
    let spawn = |i: usize| {
        let (redlock, order, holders, key) = (
            p.clone(),
            Arc::clone(&order),
            Arc::clone(&holders),
            key.to_string(),
        );
        tokio::spawn(async move {
            let l = redlock
                .acquire_wait(&key, Duration::from_secs(5), Duration::from_secs(10))
                .await
                .unwrap();
            holders.took(l.token());
            if i != usize::MAX {
                order.lock().unwrap().push(i);
            }
            tokio::time::sleep(hold).await;
            holders.left(l.token());
            assert!(l.release().await.unwrap());
        })
    };
    let mut tasks = vec![spawn(usize::MAX)];
    assert!(blocked_on_majority(nodes, 1, Duration::from_secs(2))
        .await
        .is_some());
    for i in 0..n {
        tasks.push(spawn(i));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Without the local turn they queue as they come; give them the time.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let acquires = calls_of(nodes, "REDLOCK.ACQUIRE");
    let released = Instant::now();
    assert!(held.release().await.unwrap());
    for t in tasks {
        t.await.unwrap();
    }
    let took = released.elapsed();
    let order = order.lock().unwrap().clone();
    (order, took, calls_of(nodes, "REDLOCK.ACQUIRE") - acquires)
}

/// Pairs out of call order in `order`.
fn inversions(order: &[usize]) -> usize {
    let mut n = 0;
    for (i, a) in order.iter().enumerate() {
        n += order[i + 1..].iter().filter(|b| *b < a).count();
    }
    n
}

/// Found by the read, fixed (fairness and herd within one client). Callers deferred
/// behind one earlier caller are all released by its departure at once.
/// When it leaves without keeping the lock long (it takes the lock and
/// releases it at once), they race for a free lock that nobody is queued
/// for on the nodes: the first ACQUIRE to reach each node wins, so they
/// are served out of call order: one of them (any: caller 9, 19, 9 of
/// 0..19 in three runs) wins the free lock, and only then the others queue
/// with their tickets and go in call order. Before the local turn they
/// waited in the nodes' queues as they came and were served in call order.
///
/// Sequence: `x` holds; B (client P) queues; 20 callers of P call 10 ms
/// apart (all defer behind B); `x` releases; B takes the lock and releases
/// it at once; each of the 20 holds it 0 ms.
///
/// Measured (debug build, 2 shared cores), 3 runs each: with the local
/// turn 20, 19 and 9 inversions, the last caller served 211, 72 and 65 ms
/// after the release, 11.2 / 9.8 / 9.8 ACQUIRE calls per hand-off in that
/// window (the 20 busy attempts moved from the calls to the departure: a
/// burst, not extra work); at the parent commit (ac62ae6^) 0, 0 and 0
/// inversions, 64, 52 and 61 ms, 5.0 ACQUIRE calls per hand-off (this test
/// passes there).
///
/// The fix suggested, and built in the design described at the top: as above, end a caller's deferral once the earlier
/// callers are in the nodes' queues, or wake one deferred caller per
/// departure (in call order) instead of all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_deferred_behind_a_departure_are_served_in_call_order() {
    let nodes = five();
    let p = client(&nodes).await;
    let x = client(&nodes).await;
    let (order, took, acquires) =
        callers_behind_a_departure(&nodes, &p, &x, "herd", 20, Duration::ZERO).await;
    let inv = inversions(&order);
    println!(
        "20 deferred callers, B holding 0 ms: order {order:?}, {inv} inversions, all served {took:?} after the release, {:.1} ACQUIRE per hand-off",
        acquires as f64 / 21.0
    );
    assert_eq!(inv, 0, "served out of call order: {order:?}");
}

/// Found by the read, fixed (coverage, not a regression). Set waiters
/// (`acquire_many_wait`) take no part in the local turn: a worker that
/// releases a name and asks again with `acquire_wait` at once still takes
/// its lock back from a set waiter of its own client whose WAITs have not
/// reached the nodes yet (the cold start the turn is for), and a set worker
/// asking again does so from single-name waiters alike.
///
/// Sequence (as `a_worker_that_releases_and_asks_again_lets_a_waiter_of_its_client_go_first`
/// in waiting.rs, with the waiter asking for the set `[key]`): a fresh
/// client holds `key`; its set waiter is polled once (its first attempt
/// finds the lock held); the holder releases and calls `acquire_wait` at
/// once. Measured: the holder took its lock back in 15 of 15 rounds (3
/// runs of 5); with a single-name waiter instead (waiting.rs), 0 of 5 since
/// ac62ae6. The Python package's `lock_set(..., wait=...)` (acquire_many_wait)
/// is in the same case.
///
/// The fix suggested, and built in the design described at the top: register set waiters under each of their names (and let
/// a set caller defer behind the earlier callers of any of its names), or
/// document that only single-name waits are kept in call order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_asks_again_lets_a_set_waiter_of_its_client_go_first() {
    let nodes = five();
    let mut orders = Vec::new();
    for round in 0..5 {
        let redlock = client(&nodes).await;
        let key = format!("cold-set-{round}");
        let lock = redlock
            .acquire(&key, Duration::from_secs(10))
            .await
            .unwrap();
        let names = [key.clone()];
        let set_waiter =
            redlock.acquire_many_wait(&names, Duration::from_secs(10), Duration::from_secs(5));
        let mut set_waiter = std::pin::pin!(set_waiter);
        let pending =
            std::future::poll_fn(|cx| Poll::Ready(set_waiter.as_mut().poll(cx).is_pending())).await;
        assert!(pending, "the set waiter got a held lock");
        let holder_again = async {
            assert!(lock.release().await.unwrap());
            redlock
                .acquire_wait(&key, Duration::from_secs(10), Duration::from_secs(5))
                .await
                .unwrap()
        };
        let order = Mutex::new(Vec::new());
        tokio::join!(
            async {
                let s = set_waiter.await.unwrap();
                order.lock().unwrap().push("set waiter");
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert!(s.release().await.unwrap());
            },
            async {
                let l = holder_again.await;
                order.lock().unwrap().push("holder");
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert!(l.release().await.unwrap());
            }
        );
        orders.push(order.into_inner().unwrap());
    }
    let retakes = orders.iter().filter(|o| o[0] == "holder").count();
    println!("orders: {orders:?}; the holder took its lock back in {retakes} of 5 rounds");
    assert_eq!(retakes, 0, "{orders:?}");
}

/// Safe, with figures: two clients with three looping workers each (hold
/// 1 ms, ask again at once): one holder at a time, tokens rising, every
/// worker served about as often as the others. Prints the hand-off rate,
/// the share of each client, and the p99 and longest wait.
///
/// Measured (debug build, 2 shared cores), 8 runs each: hand-offs 272-298/s
/// with the local turn, 264-304/s at ac62ae6^, every worker within 3 of the
/// others in both; but a longer tail with the local turn: p99 wait 24-68 ms
/// (median of runs 36 ms; 3 runs of 8 at 44 ms or more), longest wait
/// 29-150 ms, against p99 24-31 ms (median 26 ms) and longest 26-65 ms at
/// ac62ae6^. A re-asking worker stays out of the nodes' queues until
/// another worker of its client takes the lock (see the overtaking finding
/// above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_workers_of_two_clients_take_turns() {
    let nodes = five();
    let clients = [client(&nodes).await, client(&nodes).await];
    for c in &clients {
        let l = c.acquire("warm", Duration::from_secs(1)).await.unwrap();
        assert!(l.release().await.unwrap());
    }
    let holders = Arc::new(Holders::default());
    let started = Instant::now();
    let run = Duration::from_millis(2_500);
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..3 {
            let redlock = c.clone();
            let holders = Arc::clone(&holders);
            tasks.push(tokio::spawn(async move {
                let mut waits = Vec::new();
                while started.elapsed() < run {
                    let t = Instant::now();
                    let l = redlock
                        .acquire_wait("k", Duration::from_secs(5), Duration::from_secs(10))
                        .await
                        .unwrap();
                    waits.push(t.elapsed());
                    holders.took(l.token());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    holders.left(l.token());
                    assert!(l.release().await.unwrap());
                }
                waits
            }));
        }
    }
    let mut per_worker = Vec::new();
    let mut all_waits = Vec::new();
    for t in tasks {
        let w = t.await.unwrap();
        per_worker.push(w.len());
        all_waits.extend(w);
    }
    let all = started.elapsed();
    all_waits.sort();
    let total = all_waits.len();
    let p99 = all_waits[total * 99 / 100];
    println!(
        "2 clients x 3 workers: {total} hand-offs in {all:?} ({:.0}/s), per worker {per_worker:?}, wait p50 {:?} p99 {p99:?} max {:?}",
        total as f64 / all.as_secs_f64(),
        all_waits[total / 2],
        all_waits[total - 1]
    );
    let min = *per_worker.iter().min().unwrap();
    let max = *per_worker.iter().max().unwrap();
    assert!(min * 2 >= max, "unfair: {per_worker:?}");
    assert!(total >= 20, "{total} hand-offs in {all:?}");
}

/// Found by the read, fixed (order across clients; cheap to fix). The turn limit
/// (`TURN_LIMIT`, 1 s) equals the module's ticket reach (`TICKET_REACH_US`,
/// 1 s, `src/core/queue.rs`): a node ranks a ticket no older than 1 s before
/// its own clock. A caller deferred for the whole limit (an earlier caller
/// of its client waits behind a lock held more than 1 s, a common case)
/// reaches the queues with a ticket just over 1 s old, so it ranks as if it
/// had called at the moment of its WAIT minus 1 s, i.e. about one busy
/// attempt after its real call: a caller of another client that called
/// within that time after it goes first.
///
/// Sequence: `x` holds the lock (well over 1 s); B (client P) queues; C
/// (client P) calls and defers the full second; R (client Q) calls 1 ms
/// after C and queues; `x` releases after 1.2 s. Measured (debug build, 2
/// shared cores): order B, R, C in 8 of 9 rounds (3 runs of 3); at the
/// parent commit (ac62ae6^), where C queued at its call with its fresh
/// ticket, B, C, R in 9 of 9. With R 0, 1, 2, 3 ms after C: overtaken in
/// 2/2, 2/2, 1/2, 0/2 runs (the window is C's busy attempt).
///
/// The fix suggested, and built in the design described at the top: a turn limit well under the ticket reach. Checked on a
/// scratch copy of main with `TURN_LIMIT` at 500 ms: this test passed in 9
/// of 9 rounds, and waiting.rs (with the cold-start re-take test), the
/// passing tests here and local_turn's unit tests still pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_deferred_the_full_limit_keeps_its_seniority() {
    let nodes = five();
    let p = client(&nodes).await;
    let q = client(&nodes).await;
    let x = client(&nodes).await;
    let mut orders = Vec::new();
    for round in 0..3 {
        let key = format!("reach-{round}");
        let held = x.acquire(&key, Duration::from_secs(10)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |redlock: &Redlock, name: &'static str| {
            let (redlock, order, key) = (redlock.clone(), Arc::clone(&order), key.clone());
            tokio::spawn(async move {
                let l = redlock
                    .acquire_wait(&key, Duration::from_secs(5), Duration::from_secs(10))
                    .await
                    .unwrap();
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(20)).await;
                assert!(l.release().await.unwrap());
            })
        };
        let b = spawn(&p, "B");
        assert!(blocked_on_majority(&nodes, 1, Duration::from_secs(2))
            .await
            .is_some());
        let c = spawn(&p, "C");
        // C's call (its ticket) comes first.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let r = spawn(&q, "R");
        // C defers the full second (B waits on x), then queues.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        assert!(held.release().await.unwrap());
        for t in [b, c, r] {
            t.await.unwrap();
        }
        orders.push(order.lock().unwrap().clone());
    }
    println!("orders: {orders:?}");
    assert!(orders.iter().all(|o| *o == ["B", "C", "R"]), "{orders:?}");
}
