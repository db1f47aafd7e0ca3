//! The order of one lock's commands on a cluster member when the cluster
//! connection retries (`client/src/cluster.rs`, "Ordering"), against a fake
//! one-node cluster that makes the retry happen on cue: it answers the first
//! ACQUIRE late (after the round's timer) with `-TRYAGAIN`, which redis-rs
//! retries after a pause. The failed attempt's RELEASE must reach the node
//! after the retried ACQUIRE, or the retry would take the lock again for its
//! whole lease.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::parse_command;
use redlock_client::{Error, Member, Redlock, RetryPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the fake node saw: (command, owner) of every ACQUIRE and RELEASE,
/// in the order it executed them.
type Log = Arc<Mutex<Vec<(String, String)>>>;

/// A one-node "cluster" serving every slot, with the module's commands
/// faked: the first ACQUIRE is answered `-TRYAGAIN` after `delay`, later
/// ones with a token; RELEASE with 1. Commands of one connection are
/// executed one after the other, as Redis does.
async fn fake_cluster(delay: Duration) -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let log: Log = Arc::default();
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let served = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve(
                sock,
                port,
                Arc::clone(&served),
                Arc::clone(&first),
                delay,
            ));
        }
    });
    (format!("redis://127.0.0.1:{port}"), log)
}

async fn serve(
    mut sock: TcpStream,
    port: u16,
    log: Log,
    first: Arc<std::sync::atomic::AtomicBool>,
    delay: Duration,
) {
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
            let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
            let arg =
                |i: usize| String::from_utf8_lossy(args.get(i).map_or(&[][..], |a| a)).into_owned();
            let reply: Vec<u8> = match name.as_str() {
                "CLUSTER" if arg(1).eq_ignore_ascii_case("SLOTS") => format!(
                    "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$40\r\n{}\r\n",
                    "f".repeat(40)
                )
                .into_bytes(),
                "INFO" => {
                    let text = "# Server\r\nrun_id:fake-cluster-node\r\n";
                    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
                }
                "PING" => b"+PONG\r\n".to_vec(),
                "REDLOCK.INSPECT" if args.len() == 1 => {
                    b"-ERR wrong number of arguments for 'redlock.inspect' command\r\n".to_vec()
                }
                "REDLOCK.ACQUIRE" => {
                    log.lock().unwrap().push((name.clone(), arg(2)));
                    if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                        tokio::time::sleep(delay).await;
                        b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n".to_vec()
                    } else {
                        b":7\r\n".to_vec()
                    }
                }
                "REDLOCK.RELEASE" => {
                    log.lock().unwrap().push((name.clone(), arg(2)));
                    b":1\r\n".to_vec()
                }
                _ => b"+OK\r\n".to_vec(),
            };
            if sock.write_all(&reply).await.is_err() {
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempts_release_reaches_the_shard_after_the_retried_acquire() {
    let node_timeout = Duration::from_millis(100);
    let (url, log) = fake_cluster(node_timeout * 3 / 2).await;
    let redlock = Redlock::builder([Member::cluster([url])])
        .node_timeout(node_timeout)
        .connect_timeout(Duration::from_secs(2))
        .retry(RetryPolicy::no_retry())
        .clock_floor(false)
        .build()
        .await
        .expect("build against the fake cluster");
    // The only member does not answer within the round: no quorum, and the
    // attempt is released on it (its ACQUIRE may have run).
    match redlock.try_acquire("k", Duration::from_secs(10)).await {
        Err(Error::NoQuorum { .. }) => {}
        other => panic!("expected no quorum, got {other:?}"),
    }
    // Everything of the attempt has arrived once the retry pause is over.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while log.lock().unwrap().len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fake node saw {:?}",
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = log.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["REDLOCK.ACQUIRE", "REDLOCK.ACQUIRE", "REDLOCK.RELEASE"],
        "the RELEASE must come after the retried ACQUIRE: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, owner)| owner == &seen[0].1),
        "one owner: {seen:?}"
    );
}
