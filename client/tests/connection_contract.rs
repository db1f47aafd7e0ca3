//! What the quorum rounds rely on from redis-rs's `MultiplexedConnection`,
//! stated in `client/src/node.rs` ("What the quorum rounds rely on from the
//! connection"), checked against a real server with the same connection
//! settings. A redis-rs release that changes any of it fails here.
//!
//! Each test runs on a current-thread runtime, so the connection's driver
//! task runs only when the test awaits: a command polled once and then
//! dropped has not been written yet when it is dropped.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisResult, Value};
use redlock_testkit::Node;

/// The client's connection settings (`node::connection_config`): no
/// response timeout inside the connection.
async fn connect(node: &Node) -> MultiplexedConnection {
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    Client::open(node.url())
        .expect("url")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect")
}

type Call = Pin<Box<dyn Future<Output = RedisResult<Value>>>>;

/// Starts `cmd` as a round does: one poll under `unconstrained`, then never
/// polled again. Returns the call, still pending.
async fn start(con: &MultiplexedConnection, cmd: Cmd) -> Call {
    let mut con = con.clone();
    let mut call: Call = Box::pin(tokio::task::unconstrained(async move {
        con.send_packed_command(&cmd).await
    }));
    std::future::poll_fn(|cx| {
        assert!(
            call.as_mut().poll(cx).is_pending(),
            "a command cannot have its reply on its first poll"
        );
        Poll::Ready(())
    })
    .await;
    call
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// 1 and 2: a command is queued by its first poll, and queued commands are
/// written in queue order, whichever clone of the connection queued them.
#[tokio::test]
async fn commands_are_queued_on_their_first_poll_and_written_in_order() {
    let node = Node::start();
    let con = connect(&node).await;
    let other = con.clone();
    let mut calls = Vec::new();
    for i in 0..50 {
        let via = if i % 2 == 0 { &con } else { &other };
        calls.push(start(via, redis::cmd("RPUSH").arg("order").arg(i).clone()).await);
    }
    // The 50 calls are alive but never polled again; this command is
    // queued after them and must see all of them applied, in order.
    let mut reader = con.clone();
    let listed = reader
        .send_packed_command(redis::cmd("LRANGE").arg("order").arg(0).arg(-1))
        .await
        .expect("LRANGE");
    let expected: Vec<Value> = (0..50).map(|i| bulk(&i.to_string())).collect();
    assert_eq!(listed, Value::Array(expected));
    drop(calls);
}

/// 3: a queued command whose caller was dropped before the connection
/// wrote it is not written.
#[tokio::test]
async fn a_command_abandoned_before_it_is_written_is_skipped() {
    let node = Node::start();
    let mut con = connect(&node).await;
    let abandoned = start(&con, redis::cmd("SET").arg("skipped").arg("1").clone()).await;
    drop(abandoned);
    let kept = start(&con, redis::cmd("SET").arg("kept").arg("1").clone()).await;
    let got = con
        .send_packed_command(redis::cmd("MGET").arg("skipped").arg("kept"))
        .await
        .expect("MGET");
    assert_eq!(got, Value::Array(vec![Value::Nil, bulk("1")]));
    drop(kept);
}
