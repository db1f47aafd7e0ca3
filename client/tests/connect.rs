//! Connecting: the module check at build time, TLS URLs, and reconnecting
//! after the runtime that ran a reconnect task is gone.

mod common;

use std::time::{Duration, Instant};

use common::{parse_command, urls, CONNECT_TIMEOUT, NODE_TIMEOUT};
use redlock_client::{Error, NodeState, Redlock, RetryPolicy};
use redlock_testkit::{start_nodes, Node};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server that accepts connections and answers `+OK` to every command
/// (so connecting succeeds) except `REDLOCK.INSPECT`, which it never answers.
async fn silent_on_inspect() -> String {
    async fn serve(mut sock: TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            while let Some((args, used)) = parse_command(&buf) {
                buf.drain(..used);
                let inspect = args
                    .first()
                    .is_some_and(|a| a.eq_ignore_ascii_case(b"REDLOCK.INSPECT"));
                if !inspect && sock.write_all(b"+OK\r\n").await.is_err() {
                    return;
                }
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve(sock));
        }
    });
    format!("redis://{addr}")
}

/// A node that connects but does not answer the module check in time is
/// not counted as up: one such node alone is no quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_check_without_reply_is_a_failure() {
    let url = silent_on_inspect().await;
    let started = Instant::now();
    let err = Redlock::builder([url])
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await
        .expect_err("a node that never answered the check must not count");
    let Error::NoQuorum {
        answered, errors, ..
    } = &err
    else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert_eq!(*answered, 0, "{err}");
    assert!(errors[0].1.contains("no reply within 300 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{err}");
}

/// A `rediss://` URL to a node that does not speak TLS fails to connect
/// with an error (the TLS setup, including its crypto provider, works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_url_to_a_plain_node_is_a_connection_failure() {
    let node = Node::start();
    let url = format!("rediss://127.0.0.1:{}", node.port());
    let err = Redlock::builder([url])
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .await
        .expect_err("no TLS on the node");
    assert!(
        matches!(&err, Error::NoQuorum { answered: 0, errors, .. } if errors[0].1.starts_with("not connected: ")),
        "{err:?}"
    );
}

/// A node down at build time gets a reconnect task on the build's runtime.
/// When that runtime is gone, the task is gone too; the node must still
/// reconnect once it is back, from calls made on another runtime.
#[test]
fn a_node_reconnects_after_the_runtime_of_its_reconnect_task_is_gone() {
    let mut nodes = start_nodes(3, &Node::builder());
    nodes[2].stop();
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime")
    };
    let first = runtime();
    let redlock = first
        .block_on(
            Redlock::builder(urls(&nodes))
                .node_timeout(NODE_TIMEOUT)
                .connect_timeout(CONNECT_TIMEOUT)
                .retry(RetryPolicy::no_retry())
                .build(),
        )
        .expect("two of three nodes are up");
    drop(first);
    nodes[2].restart();
    let second = runtime();
    second.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let views = redlock.inspect("k").await;
            if views
                .iter()
                .all(|v| !matches!(v.state, NodeState::Error(_)))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "not every node reconnected: {views:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}
