//! Leader election on real nodes: one leader at a time across five
//! candidates with nodes paused and killed, epochs that only grow, a paused
//! leader fenced out by its epoch, proclaims of a deposed leader refused by
//! the nodes, and observers that see every change in order.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client, five};
use redlock_client::{Error, Leader, Leadership, Redlock};
use redlock_testkit::Node;

async fn resource_con(resource: &Node) -> redis::aio::MultiplexedConnection {
    redis::Client::open(resource.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A fenced `RPUSH terms epoch` on the resource, by the leader's epoch.
async fn fenced_push(
    leadership: &Leadership,
    con: &mut redis::aio::MultiplexedConnection,
) -> Result<i64, Error> {
    let mut push = redis::cmd("RPUSH");
    push.arg("terms").arg(leadership.epoch());
    leadership.info().fenced(con, "fence", &push).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_leader_at_a_time_across_five_candidates_with_nodes_paused_and_killed() {
    let mut nodes = five();
    let resource = Node::start();
    let leading = Arc::new(AtomicBool::new(false));
    let elected: Arc<Mutex<Vec<u64>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut candidates = Vec::new();
    for _ in 0..5 {
        let redlock = client(&nodes).await;
        let mut con = resource_con(&resource).await;
        let (leading, elected) = (Arc::clone(&leading), Arc::clone(&elected));
        candidates.push(tokio::spawn(async move {
            let election = redlock.election("scheduler");
            let mut terms = 0;
            while terms < 4 && Instant::now() < deadline {
                let leadership = match election.campaign(Duration::from_secs(2)).await {
                    Ok(l) => l,
                    Err(e) if e.is_transient() => continue,
                    Err(e) => panic!("campaign: {e}"),
                };
                assert!(
                    !leading.swap(true, Ordering::SeqCst),
                    "two leaders at once (epoch {})",
                    leadership.epoch()
                );
                {
                    let mut elected = elected.lock().unwrap();
                    if let Some(last) = elected.last() {
                        assert!(leadership.epoch() > *last, "epoch did not grow");
                    }
                    elected.push(leadership.epoch());
                }
                let wrote = fenced_push(&leadership, &mut con).await;
                assert!(wrote.is_ok(), "the leader's fenced write: {wrote:?}");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(40)) => {}
                    () = leadership.lost() => {}
                }
                leading.store(false, Ordering::SeqCst);
                leadership.resign().await;
                terms += 1;
            }
            terms
        }));
    }
    // Faults while they campaign: one node paused at a time (SIGSTOP),
    // then one killed (SIGKILL) for good.
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let node = &nodes[round % 3];
        node.pause();
        tokio::time::sleep(Duration::from_millis(400)).await;
        node.resume();
    }
    nodes[4].kill();
    let mut total = 0;
    for c in candidates {
        total += c.await.expect("candidate");
    }
    let elected = elected.lock().unwrap().clone();
    assert_eq!(elected.len(), total);
    assert_eq!(total, 20, "every candidate led four times within a minute");
    assert!(elected.windows(2).all(|w| w[0] < w[1]), "{elected:?}");
    // The resource accepted every term, in epoch order.
    let mut con = resource.connection();
    let seen: Vec<u64> = redis::cmd("LRANGE")
        .arg("terms")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(seen, elected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_is_fenced_out_and_cannot_proclaim() {
    let nodes = five();
    let resource = Node::start();
    let paused_client = client(&nodes).await;
    let resource_url = resource.url();
    // The paused leader runs on a runtime of its own, in a thread that then
    // sleeps: its renewals stop, as in a process that was SIGSTOPped.
    let (elected_tx, elected_rx) = std::sync::mpsc::channel();
    let paused = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let leadership = paused_client
                .election("writer")
                .campaign(Duration::from_millis(600))
                .await
                .unwrap();
            let mut con = redis::Client::open(resource_url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            fenced_push(&leadership, &mut con).await.unwrap();
            leadership.proclaim("old").await.unwrap();
            elected_tx.send(leadership.epoch()).unwrap();
            // The pause: nothing on this runtime runs.
            std::thread::sleep(Duration::from_millis(2500));
            let write = fenced_push(&leadership, &mut con).await;
            let proclaim = leadership.proclaim("late").await;
            (leadership.epoch(), write, proclaim)
        })
    });
    let old_epoch = elected_rx.recv().unwrap();
    let redlock = client(&nodes).await;
    let election = redlock.election("writer");
    let successor = election.campaign(Duration::from_secs(10)).await.unwrap();
    assert!(successor.epoch() > old_epoch);
    let mut con = resource_con(&resource).await;
    fenced_push(&successor, &mut con).await.unwrap();
    successor.proclaim("new").await.unwrap();
    let (epoch, write, proclaim) = paused.join().unwrap();
    assert_eq!(epoch, old_epoch);
    assert!(
        matches!(write, Err(Error::Stale { token, highest, .. }) if token == old_epoch && highest == successor.epoch()),
        "{write:?}"
    );
    // Refused by the nodes' guard, or stopped by the lost signal its
    // renewals raised once the runtime ran again: never accepted.
    assert!(
        matches!(proclaim, Err(Error::Stale { .. } | Error::Lost { .. })),
        "{proclaim:?}"
    );
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.epoch, successor.epoch());
    assert_eq!(leader.value.as_deref(), Some("new"));
    successor.resign().await;
}

#[tokio::test]
async fn a_deposed_leaders_proclaim_is_refused_by_the_nodes() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let election = redlock.election("api");
    let deposed = election.campaign(Duration::from_secs(30)).await.unwrap();
    deposed.proclaim("10.0.0.1").await.unwrap();
    // Deposed behind its back (its renewal is 10 s away, so it does not
    // know yet): the lock released on every node, a successor elected.
    assert!(redlock
        .release_owner("api", deposed.info().owner())
        .await
        .unwrap());
    let other = client(&nodes).await;
    let successor = other
        .election("api")
        .campaign(Duration::from_secs(30))
        .await
        .unwrap();
    assert!(successor.epoch() > deposed.epoch());
    assert!(!deposed.is_lost());
    let late = deposed.proclaim("10.0.0.1-late").await;
    assert!(
        matches!(late, Err(Error::Stale { token, highest, .. }) if token == deposed.epoch() && highest == successor.epoch()),
        "{late:?}"
    );
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.epoch, successor.epoch());
    assert_eq!(
        leader.value, None,
        "the old leader's value is not the new one's"
    );
    successor.proclaim("10.0.0.2").await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.value.as_deref(), Some("10.0.0.2"));
    assert!(leader.time_left > Duration::from_secs(20));
    successor.resign().await;
    assert_eq!(election.leader().await.unwrap(), None);
}

type Changes = tokio::sync::mpsc::UnboundedReceiver<(Leader, Instant)>;

/// The observer's next report, with a generous deadline.
async fn next_change(rx: &mut Changes) -> (Leader, Instant) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the observer reported nothing for 10 s")
        .expect("observer ended")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_sees_every_change_in_order_and_wakes_soon_after_a_resign() {
    let nodes = five();
    let watcher = client(&nodes).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let observing = tokio::spawn(async move {
        let mut changes = watcher.election("jobs").observe();
        while let Some(change) = changes.next().await {
            let Ok(leader) = change else { continue };
            if tx.send((leader, Instant::now())).is_err() {
                break;
            }
        }
    });
    let a = client(&nodes).await;
    let b = client(&nodes).await;
    let mut current = a
        .election("jobs")
        .campaign(Duration::from_secs(10))
        .await
        .unwrap();
    let (seen, _) = next_change(&mut rx).await;
    assert_eq!(
        (seen.epoch, seen.revision, seen.value),
        (current.epoch(), 0, None)
    );
    let mut latencies = Vec::new();
    let mut epochs = vec![current.epoch()];
    for round in 0..20 {
        current.proclaim(&format!("value-{round}")).await.unwrap();
        let (seen, _) = next_change(&mut rx).await;
        assert_eq!(seen.epoch, current.epoch());
        assert_eq!(seen.revision, 1);
        assert_eq!(seen.value, Some(format!("value-{round}")));
        // The next candidate waits on the nodes; the leader resigns.
        let next_client = if round % 2 == 0 { b.clone() } else { a.clone() };
        let waiting = tokio::spawn(async move {
            next_client
                .election("jobs")
                .campaign(Duration::from_secs(10))
                .await
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let resigned = Instant::now();
        current.resign().await;
        let (seen, at) = next_change(&mut rx).await;
        latencies.push(at - resigned);
        current = waiting.await.unwrap();
        assert_eq!(
            seen.epoch,
            current.epoch(),
            "the next leader, nothing between"
        );
        assert_eq!(seen.revision, 0);
        epochs.push(current.epoch());
    }
    current.resign().await;
    observing.abort();
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let worst = latencies[latencies.len() - 1];
    println!(
        "observe: resign -> next leader seen: median {median:?}, max {worst:?} over {} hand-offs",
        latencies.len()
    );
    assert!(median < Duration::from_secs(2), "median {median:?}");
}

#[tokio::test]
async fn an_election_is_the_lock_of_its_name_and_a_zero_ttl_is_refused() {
    let nodes = five();
    let redlock: Redlock = client(&nodes).await;
    let election = redlock.election("solo");
    assert_eq!(election.leader().await.unwrap(), None);
    let leadership = election.campaign(Duration::from_secs(5)).await.unwrap();
    let held: Vec<u64> = redlock
        .inspect("solo")
        .await
        .into_iter()
        .filter_map(|v| match v.state {
            redlock_client::NodeState::Present {
                held: true, token, ..
            } => Some(token),
            _ => None,
        })
        .collect();
    assert_eq!(held, vec![leadership.epoch(); 5]);
    assert!(matches!(
        election.campaign(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    leadership.resign().await;
    assert_eq!(common::held_after_release(&redlock, "solo").await, 0);
}
