//! Issue 35 item 3: an ACQUIRE by the holder never shortens its live lease
//! (DESIGN §2; src/core/lock.rs `LockState::acquire`). The late-ACQUIRE
//! sequence through the quorum client: a lock taken for 1 s is extended to
//! 10 s, then a late copy of its first ACQUIRE reaches every node (a
//! cluster connection resending it, a second route to the same server).
//! The lock stays the holder's for the extension, and another client is
//! refused while the holder's validity runs. The test build's
//! `renewal-shortens` mutant (the rule before 74f467a) shows the overlap
//! the rule prevents.

mod common;

use std::time::{Duration, Instant};

use common::*;

const TTL: Duration = Duration::from_millis(1_000);
const EXTENDED: Duration = Duration::from_millis(10_000);

async fn client(urls: &[String]) -> redlock_client::Redlock {
    redlock_client::Redlock::builder(urls.to_vec())
        .node_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(2))
        .retry(redlock_client::RetryPolicy::no_retry())
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_the_holders_acquire_does_not_end_its_extended_lease() {
    for mutant in [false, true] {
        let nodes = redlock_testkit::start_nodes(3, &Node::builder());
        let urls: Vec<String> = nodes.iter().map(Node::url).collect();
        let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connection).collect();
        for con in &mut cons {
            let _: () = redis::cmd("REDLOCK.TESTHOOK")
                .arg("MUTANT")
                .arg("renewal-shortens")
                .arg(u8::from(mutant))
                .query(con)
                .unwrap();
        }
        let (holder, rival) = (client(&urls).await, client(&urls).await);

        let mut lock = holder.try_acquire("k", TTL).await.unwrap().expect("free");
        let token = lock.token();
        lock.extend(EXTENDED).await.unwrap();
        let extended = Instant::now();
        // The late copy of the first ACQUIRE, as the client sent it (its
        // FLOOR was at most the token).
        for con in &mut cons {
            let reply: Option<u64> = redis::cmd("REDLOCK.ACQUIRE")
                .arg("k")
                .arg(lock.owner())
                .arg(TTL.as_millis() as u64)
                .arg("FLOOR")
                .arg(token)
                .query(con)
                .unwrap();
            assert_eq!(reply, Some(token), "mutant {mutant}: a renewal, same token");
        }

        // Past the first lease, well inside the extension.
        tokio::time::sleep(TTL + Duration::from_millis(500)).await;
        assert!(
            lock.validity() > Duration::from_secs(5),
            "the holder counts on its extension: {:?}",
            lock.validity()
        );
        let taken = rival.try_acquire("k", TTL).await.unwrap();
        if mutant {
            // The late copy cut the extension short on every node: a second
            // holder while the first one's validity runs.
            let taken = taken.expect("the mutant gives the lock away");
            assert!(taken.token() > token);
            assert!(lock.validity() > Duration::ZERO);
            continue;
        }
        assert!(
            taken.is_none(),
            "another client got the lock {:?} into a 10 s extension",
            extended.elapsed()
        );
        for con in &mut cons {
            let v = inspect(con, "k").unwrap();
            let left = EXTENDED.as_millis() as i64 - extended.elapsed().as_millis() as i64;
            assert!(
                v.held && v.token == token as i64 && v.pttl >= left - 1_000,
                "{v:?}, about {left} ms expected"
            );
        }
        assert!(lock.release().await.unwrap());
        assert!(rival.try_acquire("k", TTL).await.unwrap().is_some());
    }
}
