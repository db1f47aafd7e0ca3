//! One server, one vote: a server listed twice, under the same URL, another
//! name or behind a proxy, never counts twice for a quorum.

mod common;

use std::time::{Duration, Instant};

use common::{CONNECT_TIMEOUT, NODE_TIMEOUT};
use redlock_client::{Error, NodeState, Redlock, RetryPolicy};
use redlock_testkit::proxy::FaultProxy;
use redlock_testkit::{free_port, start_nodes, Node};

fn builder(urls: Vec<String>) -> redlock_client::RedlockBuilder {
    Redlock::builder(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry(RetryPolicy::no_retry())
}

/// Identical URLs, after normalising the host's case, the default port and
/// the database, are refused before connecting, naming both.
#[tokio::test]
async fn identical_urls_are_refused_naming_them() {
    let port = free_port();
    let cases = [
        (
            format!("redis://127.0.0.1:{port}"),
            format!("redis://127.0.0.1:{port}"),
        ),
        (
            format!("redis://LOCALHOST:{port}"),
            format!("redis://localhost:{port}/0"),
        ),
        (
            "redis://db.example".to_string(),
            "redis://user:secret@DB.example:6379".to_string(),
        ),
    ];
    for (first, second) in cases {
        let other = format!("redis://127.0.0.1:{}", free_port());
        let err = builder(vec![first.clone(), other, second.clone()])
            .build()
            .await
            .expect_err("identical URLs");
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(
            text.contains(&format!("{first} and ")),
            "names the first: {text}"
        );
        assert!(
            text.contains(&second.replace("user:secret@", "***@")),
            "names the second, without its password: {text}"
        );
        assert!(!text.contains("secret"), "{text}");
    }
}

/// `127.0.0.1:P`, `localhost:P` and a proxy to P are one server: `build()`
/// finds it out from the servers' run_id and refuses, naming both, so no
/// lock can ever be acquired on that node list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_of_one_server_are_refused_at_build() {
    let node = Node::start();
    let proxy = FaultProxy::start(format!("127.0.0.1:{}", node.port()).parse().unwrap());
    let direct = format!("redis://127.0.0.1:{}", node.port());
    let down = format!("redis://127.0.0.1:{}", free_port());
    for alias in [format!("redis://localhost:{}", node.port()), proxy.url()] {
        let err = builder(vec![direct.clone(), alias.clone(), down.clone()])
            .build()
            .await
            .expect_err("one server listed twice");
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(
            text.contains(&format!("{direct} and {alias} are the same Redis server")),
            "{text}"
        );
    }
}

/// A member that becomes the same server as another one only after a
/// reconnect (a proxy re-pointed, as a load balancer or a DNS alias can be)
/// is not counted: with the third member down, no lock is ever reported
/// acquired, and the error names both members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_that_appears_after_a_reconnect_is_not_counted() {
    let mut nodes = start_nodes(3, &Node::builder());
    let addr = |n: &Node| format!("127.0.0.1:{}", n.port()).parse().unwrap();
    let proxy = FaultProxy::start(addr(&nodes[2]));
    let members = vec![nodes[0].url(), nodes[1].url(), proxy.url()];
    let redlock = builder(members).build().await.expect("three servers");
    let mut kept = redlock
        .try_acquire("kept", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free");

    // The proxy now leads to node 0; node 1 and node 2 go down.
    proxy.set_upstream(addr(&nodes[0]));
    proxy.reset_connections();
    nodes[1].stop();
    nodes[2].stop();
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(redlock.inspect("dup").await[2].state, NodeState::Error(_)) {
        assert!(
            Instant::now() < deadline,
            "the proxy member never reconnected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Whichever of the two answers first counts; the error names both.
    let names_both = |text: &str| {
        let direct = format!("127.0.0.1:{}", nodes[0].port());
        let proxied = proxy.addr().to_string();
        text.contains(&format!("{direct} (same Redis server as {},", proxy.url()))
            || text.contains(&format!(
                "{proxied} (same Redis server as {},",
                nodes[0].url()
            ))
    };
    // An extension is confirmed by node 0 only once, not by its alias too.
    let err = kept.extend(Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    assert!(names_both(&err.to_string()), "{err}");
    for _ in 0..20 {
        match redlock.try_acquire("dup", Duration::from_secs(5)).await {
            Ok(Some(lock)) => panic!("acquired with token {} on one server", lock.token()),
            Ok(None) => panic!("busy: the lock was never taken"),
            Err(err) => {
                let text = err.to_string();
                assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
                assert!(names_both(&text), "{text}");
            }
        }
    }
}
