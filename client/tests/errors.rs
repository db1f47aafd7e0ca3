//! Acceptance tests 7 and 8: every `Error` variant is produced against real
//! nodes and its message checked; a node without the module is named.
//! (`NoQuorum` after node failures is also covered in `quorum.rs`.)

mod common;

use std::time::Duration;

use common::{addr, client, five, held_on, urls, NODE_TIMEOUT};
use redlock_client::{Error, Redlock, RetryPolicy};
use redlock_testkit::{start_nodes, Node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy() {
    let nodes = five();
    let a = client(&nodes).await;
    let b = Redlock::builder(urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy {
            attempts: 3,
            base_delay: Duration::from_millis(10),
            jitter: Duration::from_millis(10),
        })
        .build()
        .await
        .unwrap();
    let _held = a.acquire("busy", Duration::from_secs(10)).await.unwrap();
    let holding = held_on(&a, "busy").await;
    assert!(holding >= 3);
    let err = b
        .acquire("busy", Duration::from_secs(10))
        .await
        .unwrap_err();
    let Error::Busy { holders, nodes: n } = err else {
        panic!("expected Busy, got {err:?}")
    };
    assert!((3..=5).contains(&holders), "{holders}");
    assert_eq!(n, 5);
    assert!(err_text(&b.acquire("busy", Duration::from_secs(10)).await)
        .starts_with("the lock is held by another owner ("));
    assert!(err.is_transient());
    // The failed attempts took nothing from the holder.
    assert!(held_on(&a, "busy").await >= holding);
}

fn err_text<T: std::fmt::Debug>(r: &Result<T, Error>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_quorum_at_build_and_at_acquire() {
    let mut nodes = five();
    // At acquire: three nodes down.
    let redlock = client(&nodes).await;
    for n in &mut nodes[..3] {
        n.kill();
    }
    let err = redlock
        .try_acquire("nq", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("no quorum: "), "{text}");
    assert!(
        text.ends_with("check that a majority of the nodes is up and reachable"),
        "{text}"
    );
    // At build: a majority unreachable.
    let err = Redlock::builder(urls(&nodes))
        .connect_timeout(common::CONNECT_TIMEOUT)
        .build()
        .await
        .unwrap_err();
    let Error::NoQuorum {
        answered, errors, ..
    } = &err
    else {
        panic!("expected NoQuorum, got {err:?}")
    };
    assert_eq!(*answered, 2);
    let names: Vec<&str> = errors.iter().map(|(n, _)| n.as_str()).collect();
    let expected: Vec<String> = nodes[..3].iter().map(addr).collect();
    assert_eq!(
        names,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(
        errors
            .iter()
            .all(|(_, reason)| reason.starts_with("not connected")),
        "{errors:?}"
    );
}

/// A plain redis-server without the module, stopped on drop. (The test
/// kit's `without_module()` still passes `--redlock.restart-grace-ms`,
/// which a server without the module refuses.)
struct PlainRedis {
    port: u16,
    child: std::process::Child,
}

impl PlainRedis {
    fn start() -> PlainRedis {
        let port = redlock_testkit::free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(std::env::temp_dir())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server");
        let plain = PlainRedis { port, child };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let pong = redis::Client::open(plain.url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if pong.is_ok() {
                return plain;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "plain redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for PlainRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// 8. A node without the module: the error names it, in plain words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_not_loaded_names_the_node() {
    let plain = PlainRedis::start();
    let err = Redlock::builder([plain.url()]).build().await.unwrap_err();
    let Error::ModuleNotLoaded { node } = &err else {
        panic!("expected ModuleNotLoaded, got {err:?}")
    };
    assert_eq!(node, &plain.addr());
    assert!(
        err.to_string().starts_with(&format!(
            "the redlock module is not loaded on {}: ",
            plain.addr()
        )),
        "{err}"
    );

    // Among five nodes, the one without it is named.
    let nodes = start_nodes(4, &Node::builder());
    let mut all = urls(&nodes);
    all.insert(2, plain.url());
    let err = Redlock::builder(all).build().await.unwrap_err();
    assert!(
        matches!(&err, Error::ModuleNotLoaded { node } if *node == plain.addr()),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_guard() {
    let node = Node::builder()
        .config("redlock.restart-grace-ms", "60000")
        .start();
    let redlock = Redlock::builder([node.url()])
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .unwrap();
    let err = redlock
        .try_acquire("guarded", Duration::from_secs(1))
        .await
        .unwrap_err();
    let Error::RestartGuard { nodes, retry_after } = &err else {
        panic!("expected RestartGuard, got {err:?}")
    };
    assert_eq!(nodes, &vec![addr(&node)]);
    let after = retry_after.expect("the node says how long");
    assert!(
        after > Duration::from_secs(50) && after <= Duration::from_secs(60),
        "{after:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "new locks are refused by {} (restart guard",
            addr(&node)
        )),
        "{text}"
    );
    assert!(text.contains(": retry in "), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_before_use_and_released() {
    let nodes = five();
    let redlock = client(&nodes).await;
    // 2 ms minus the 2 ms + 1 % drift margin leaves nothing.
    let err = redlock
        .try_acquire("short", Duration::from_millis(2))
        .await
        .unwrap_err();
    let Error::ExpiredBeforeUse { ttl, .. } = err else {
        panic!("expected ExpiredBeforeUse, got {err:?}")
    };
    assert_eq!(ttl, Duration::from_millis(2));
    assert!(
        err.to_string()
            .starts_with("the lease ran out before the lock could be used ("),
        "{err}"
    );
    assert!(!err.is_transient());

    // 2.9 ms is sent as 2 ms, and the validity comes from what was sent:
    // with no drift factor, the fixed 2 ms margin leaves nothing, however
    // fast the round (from the untruncated 2.9 ms, 0.9 ms would be left).
    let exact = Redlock::builder(urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .drift_factor(0.0)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .unwrap();
    for _ in 0..20 {
        let err = exact
            .try_acquire("truncated", Duration::from_micros(2_900))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ExpiredBeforeUse { .. }), "{err:?}");
    }

    // With a 2 s lease and a drift margin that eats all of it, the nodes
    // grant the lock and the client releases it at once, long before the
    // lease would end.
    let greedy = Redlock::builder(urls(&nodes))
        .drift_factor(0.999)
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = greedy
        .try_acquire("greedy", Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ExpiredBeforeUse { .. }), "{err:?}");
    while held_on(&redlock, "greedy").await > 0 {
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "not released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_on_extending_an_expired_lock() {
    let nodes = five();
    let redlock = client(&nodes).await;
    let mut lock = redlock
        .acquire("lapsed", Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lock.validity(), Duration::ZERO);
    let err = lock.extend(Duration::from_secs(5)).await.unwrap_err();
    let Error::Lapsed { key, late } = &err else {
        panic!("expected Lapsed, got {err:?}")
    };
    assert_eq!(key, "lapsed");
    assert!(*late >= Duration::from_millis(100), "{late:?}");
    let message = err.to_string();
    assert!(
        message.starts_with("the lock on \"lapsed\" is no longer held: its validity ended ")
            && message.ends_with(
                " before the extension was confirmed, and another owner may have taken it since: stop using its token and acquire it again"
            ),
        "{message}"
    );
    // Never revived by the extend.
    assert_eq!(held_on(&redlock, "lapsed").await, 0);
    assert!(!lock.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments() {
    let none: [&str; 0] = [];
    let err = Redlock::builder(none).build().await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid argument: no nodes given: pass at least one redis:// URL"),
        "{err}"
    );

    let err = Redlock::builder(["redis://127.0.0.1:1", "nonsense://x:secret@host"])
        .build()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(text.starts_with("invalid argument: bad node URL"), "{text}");
    assert!(!text.contains("secret"), "password leaked: {text}");

    let err = Redlock::builder(["redis://127.0.0.1:1"])
        .drift_factor(1.5)
        .build()
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid argument: drift factor 1.5 is outside 0..1"
    );

    let node = Node::start();
    let redlock = Redlock::builder([node.url()]).build().await.unwrap();
    let err = redlock.try_acquire("k", Duration::ZERO).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid argument: ttl 0ns is below 1 ms"),
        "{err}"
    );
    // A TTL above the nodes' redlock.max-ttl-ms (default 60 s): the nodes'
    // own words.
    let err = redlock
        .try_acquire("k", Duration::from_secs(61))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("ERR invalid ttl-ms: 61000 is above redlock.max-ttl-ms (60000)"),
        "{err}"
    );
    let err = redlock.release_owner("k", "").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid argument: owner id must be 1 to 256 bytes, got 0 bytes"
    );
}

/// A client whose wall clock runs two days ahead of the nodes' sends a
/// `FLOOR` the nodes refuse: the client reports a clear invalid-argument
/// error at once, without retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_far_ahead_of_the_nodes_clocks_is_a_clear_error_without_retries() {
    let nodes = five();
    for node in &nodes {
        let mut con = node.connection();
        // The nodes' clocks read two days earlier than the client's.
        let _: () = redis::cmd("REDLOCK.TESTHOOK")
            .arg("WALLCLOCK-OFFSET")
            .arg(-2 * 86_400_000_i64)
            .query(&mut con)
            .unwrap();
    }
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy {
            attempts: 5,
            base_delay: Duration::from_millis(200),
            jitter: Duration::from_millis(0),
        })
        .build()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = redlock
        .acquire("ahead", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("more than one day ahead"), "{text}");
    assert!(!err.is_transient());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "retried: {:?}",
        started.elapsed()
    );
    for node in &nodes {
        let mut con = node.connection();
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .unwrap();
        let line = stats
            .lines()
            .find(|l| l.to_lowercase().starts_with("cmdstat_redlock.acquire:"))
            .unwrap_or_default();
        assert!(line.contains("calls=1,"), "{line}");
        let v: redis::Value = redis::cmd("REDLOCK.INSPECT")
            .arg("ahead")
            .query(&mut con)
            .unwrap();
        assert_eq!(v, redis::Value::Nil, "a refused ACQUIRE created the key");
    }
}
