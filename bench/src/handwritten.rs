//! A hand-written Redlock without fencing, as a careful engineer writes it
//! today with the `redis` crate: one `MultiplexedConnection` per node, a
//! parallel fan-out of `SET key owner NX PX ttl` that stops waiting once a
//! majority granted (or once a majority can no longer be reached), a validity
//! check, and release by `EVALSHA` of the standard compare-and-delete script
//! on every node. Release returns at a majority and leaves the slower nodes'
//! replies to a background task, as `redlock-client` does, so the two are
//! compared like for like; a failed attempt is released on every node that
//! did not refuse it, waiting for all of them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;

use crate::owner::new_owner;

/// The compare-and-delete script of the Redlock description.
pub const UNLOCK_SCRIPT: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// Clock drift allowance, as in the Redlock description.
const DRIFT_FACTOR: f64 = 0.01;

/// Connections to N plain Redis masters.
#[derive(Clone)]
pub struct HandRedlock {
    conns: Vec<MultiplexedConnection>,
    script: redis::Script,
    quorum: usize,
}

/// A lock held by [`HandRedlock`].
#[derive(Debug)]
pub struct HandLock {
    /// The random value stored on the nodes.
    pub owner: String,
}

impl HandRedlock {
    /// Connects to every URL and loads the unlock script on each node.
    pub async fn connect(urls: &[String]) -> redis::RedisResult<Self> {
        let mut conns = Vec::with_capacity(urls.len());
        let script = redis::Script::new(UNLOCK_SCRIPT);
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            let mut con = client
                .get_multiplexed_async_connection_with_config(&crate::untimed_connection())
                .await?;
            script.prepare_invoke().load_async(&mut con).await?;
            conns.push(con);
        }
        Ok(Self {
            quorum: urls.len() / 2 + 1,
            conns,
            script,
        })
    }

    /// One attempt: `Some` when a majority granted within the validity time;
    /// otherwise the lock is released on every node that did not refuse it
    /// (waiting for all of them) and `None` returned.
    pub async fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
    ) -> redis::RedisResult<Option<HandLock>> {
        let owner = new_owner();
        let ttl_ms = ttl.as_millis() as u64;
        let start = Instant::now();
        let mut pending: FuturesUnordered<_> = self
            .conns
            .iter()
            .enumerate()
            .map(|(i, con)| {
                let mut con = con.clone();
                let cmd = redis::cmd("SET")
                    .arg(key)
                    .arg(&owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms)
                    .clone();
                async move { (i, cmd.query_async::<Option<String>>(&mut con).await) }
            })
            .collect();
        let n = self.conns.len();
        let (mut granted, mut answered) = (0, 0);
        // Nodes that answered "not set": the lock is not ours there.
        let mut refused = vec![false; n];
        while let Some((i, reply)) = pending.next().await {
            answered += 1;
            match reply {
                Ok(Some(_)) => granted += 1,
                Ok(None) => refused[i] = true,
                Err(_) => {}
            }
            if granted >= self.quorum || answered - granted > n - self.quorum {
                break;
            }
        }
        drop(pending);
        let drift = Duration::from_millis((ttl_ms as f64 * DRIFT_FACTOR) as u64 + 2);
        let valid = ttl.checked_sub(start.elapsed() + drift).is_some();
        let lock = HandLock { owner };
        if granted >= self.quorum && valid {
            return Ok(Some(lock));
        }
        let targets: Vec<usize> = (0..n).filter(|&i| !refused[i]).collect();
        self.release_on(key, &lock, &targets).await?;
        Ok(None)
    }

    /// Acquires, retrying busy attempts after a short random pause.
    pub async fn acquire(&self, key: &str, ttl: Duration) -> redis::RedisResult<HandLock> {
        loop {
            if let Some(lock) = self.try_acquire(key, ttl).await? {
                return Ok(lock);
            }
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
    }

    fn unlock_cmd(&self, key: &str, lock: &HandLock) -> redis::Cmd {
        redis::cmd("EVALSHA")
            .arg(self.script.get_hash())
            .arg(1)
            .arg(key)
            .arg(&lock.owner)
            .clone()
    }

    /// `EVALSHA` compare-and-delete on every node in parallel. Returns once a
    /// majority deleted the key (or once that became impossible); the
    /// replies of slower nodes are awaited by a background task, so a slow
    /// node does not slow the caller down. The number of nodes that
    /// confirmed the delete before this returned.
    pub async fn release(&self, key: &str, lock: &HandLock) -> redis::RedisResult<usize> {
        let cmd = Arc::new(self.unlock_cmd(key, lock));
        let mut pending: FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|con| {
                let (mut con, cmd) = (con.clone(), cmd.clone());
                async move { cmd.query_async::<i64>(&mut con).await }
            })
            .collect();
        let n = self.conns.len();
        let (mut deleted, mut answered) = (0, 0);
        let mut first_error = None;
        while let Some(reply) = pending.next().await {
            answered += 1;
            match reply {
                Ok(1) => deleted += 1,
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            if deleted >= self.quorum || deleted + (n - answered) < self.quorum {
                break;
            }
        }
        if !pending.is_empty() {
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }
        match first_error {
            Some(e) if deleted < self.quorum => Err(e),
            _ => Ok(deleted),
        }
    }

    /// `EVALSHA` compare-and-delete on the nodes `targets`, waiting for all.
    pub async fn release_on(
        &self,
        key: &str,
        lock: &HandLock,
        targets: &[usize],
    ) -> redis::RedisResult<usize> {
        let cmd = self.unlock_cmd(key, lock);
        let replies = try_join_all(targets.iter().map(|&i| {
            let mut con = self.conns[i].clone();
            let cmd = &cmd;
            async move { cmd.query_async::<i64>(&mut con).await }
        }))
        .await?;
        Ok(replies.into_iter().filter(|&r| r == 1).count())
    }
}
