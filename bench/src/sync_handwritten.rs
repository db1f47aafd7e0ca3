//! A hand-written lock with a replica-sync check, as a careful engineer
//! writes it today with the `redis` crate on one master with replicas:
//! `SET key owner NX PX ttl` and `WAIT r timeout` pipelined on one
//! `MultiplexedConnection`, the lock counted only when `WAIT` answered at
//! least `r` (otherwise released at once), and release by `EVALSHA` of the
//! compare-and-delete script. No fencing token, no failover handling: the
//! baseline of the Sentinel section, against the same master.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::handwritten::UNLOCK_SCRIPT;
use crate::owner::new_owner;

/// One master's connection and the `r` every lock waits for.
#[derive(Clone)]
pub struct HandSyncLock {
    conn: MultiplexedConnection,
    script: redis::Script,
    replicas: u64,
    timeout_ms: u64,
}

impl HandSyncLock {
    /// Connects to the master at `url` and loads the unlock script; every
    /// lock waits for `replicas` replicas, at most `timeout`.
    pub async fn connect(url: &str, replicas: u64, timeout: Duration) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&crate::untimed_connection())
            .await?;
        let script = redis::Script::new(UNLOCK_SCRIPT);
        script.prepare_invoke().load_async(&mut conn).await?;
        Ok(HandSyncLock {
            conn,
            script,
            replicas,
            timeout_ms: timeout.as_millis() as u64,
        })
    }

    /// One attempt: the owner when the lock was set and synced; a lock that
    /// was set but not synced is released before `None` is returned.
    pub async fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
    ) -> redis::RedisResult<Option<String>> {
        let owner = new_owner();
        let mut conn = self.conn.clone();
        let (set, acks): (Option<String>, u64) = redis::pipe()
            .cmd("SET")
            .arg(key)
            .arg(&owner)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(self.timeout_ms)
            .query_async(&mut conn)
            .await?;
        match (set, acks >= self.replicas) {
            (Some(_), true) => Ok(Some(owner)),
            (Some(_), false) => {
                self.release(key, &owner).await?;
                Ok(None)
            }
            (None, _) => Ok(None),
        }
    }

    /// `EVALSHA` compare-and-delete: whether the key was still ours.
    pub async fn release(&self, key: &str, owner: &str) -> redis::RedisResult<bool> {
        let mut conn = self.conn.clone();
        let deleted: i64 = redis::cmd("EVALSHA")
            .arg(self.script.get_hash())
            .arg(1)
            .arg(key)
            .arg(owner)
            .query_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }
}
