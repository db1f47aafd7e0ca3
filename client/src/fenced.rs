//! Fenced writes to a Redis-held resource (the module's `REDLOCK.FENCED`
//! and `REDLOCK.GUARD`): methods on [`LockInfo`], so both a
//! [`Lock`](crate::Lock) and a [`LockGuard`](crate::LockGuard) have them.
//!
//! The resource connection belongs to the caller: any
//! [`redis::aio::ConnectionLike`] (a multiplexed connection, a connection
//! manager, a cluster connection) to a server or cluster that loads the
//! module; usually not one of the lock's own nodes. Nothing is retried: a
//! lost reply leaves the outcome unknown, and sending again with the same
//! token passes the guard and may apply an `INCR` twice.

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, FromRedisValue, Pipeline, Value};

use crate::core::error::Error;
use crate::lock::LockInfo;

impl LockInfo {
    /// `REDLOCK.FENCED guard key token <cmd>`: `cmd` fenced by this lock's
    /// token on `guard`. Refuses a command with a cursor argument.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("report", Duration::from_secs(10)).await?;
    /// let mut set = redis::cmd("SET");
    /// set.arg("{report}:state").arg("done");
    /// let fenced = lock.fenced_cmd("{report}:fence", &set)?;
    /// # let _ = fenced; Ok(()) }
    /// ```
    pub fn fenced_cmd(&self, guard: &str, cmd: &Cmd) -> Result<Cmd, Error> {
        let mut fenced = redis::cmd("REDLOCK.FENCED");
        fenced.arg(guard).arg(self.key()).arg(self.token());
        for arg in cmd.args_iter() {
            match arg {
                Arg::Simple(bytes) => {
                    fenced.arg(bytes);
                }
                _ => {
                    return Err(Error::InvalidArgument(
                        "a fenced command cannot take a cursor argument".into(),
                    ))
                }
            }
        }
        Ok(fenced)
    }

    /// Runs `cmd` on the resource behind `con`, fenced by this lock's token
    /// on `guard`, and returns the command's own reply. A newer token seen
    /// by the guard gives [`Error::Stale`] (nothing ran); a server without
    /// the module [`Error::ResourceModuleNotLoaded`]; any other error reply
    /// or a connection failure gives [`Error::Resource`]. Never retried.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock, mut con: redis::aio::MultiplexedConnection) -> Result<(), redlock_client::Error> {
    /// let lock = redlock.acquire("report", Duration::from_secs(10)).await?;
    /// let mut incr = redis::cmd("HINCRBY");
    /// incr.arg("{report}:state").arg("runs").arg(1);
    /// let runs: i64 = lock.fenced(&mut con, "{report}:fence", &incr).await?;
    /// # let _ = runs; Ok(()) }
    /// ```
    pub async fn fenced<T: FromRedisValue>(
        &self,
        con: &mut impl ConnectionLike,
        guard: &str,
        cmd: &Cmd,
    ) -> Result<T, Error> {
        let fenced = self.fenced_cmd(guard, cmd)?;
        fenced
            .query_async(con)
            .await
            .map_err(|e| self.resource_error(guard, &e))
    }

    /// Runs every command of `pipe`, each fenced by this lock's token on
    /// `guard`, in one `MULTI`/`EXEC`, and returns their replies (as
    /// `pipe.query` would). With one guard and one token, a STALE first
    /// command means every later one is STALE too: [`Error::Stale`], and
    /// nothing ran.
    pub async fn fenced_atomic<T: FromRedisValue>(
        &self,
        con: &mut impl ConnectionLike,
        guard: &str,
        pipe: &Pipeline,
    ) -> Result<T, Error> {
        let mut atomic = redis::pipe();
        atomic.atomic().ignore_errors();
        for cmd in pipe.cmd_iter() {
            atomic.add_command(self.fenced_cmd(guard, cmd)?);
        }
        let reply: Value = atomic
            .query_async(con)
            .await
            .map_err(|e| self.resource_error(guard, &e))?;
        let items = match reply {
            Value::Array(items) => items,
            other => {
                return Err(Error::Resource(format!(
                    "unexpected reply to a fenced transaction: {other:?}"
                )))
            }
        };
        if let Some(e) = items.iter().find_map(|v| match v {
            Value::ServerError(e) => Some(e.clone()),
            _ => None,
        }) {
            return Err(self.resource_error(guard, &redis::RedisError::from(e)));
        }
        redis::from_redis_value(Value::Array(items))
            .map_err(|e| Error::Resource(format!("unexpected reply: {e}")))
    }

    /// `REDLOCK.GUARD guard key token`: shows this lock's token to `guard`
    /// without running anything, so that older holders are refused from now
    /// on. Returns the guard's highest token (this one). Do it first after
    /// acquiring: the resource refuses an old holder only once it has seen
    /// the newer token.
    pub async fn announce(&self, con: &mut impl ConnectionLike, guard: &str) -> Result<u64, Error> {
        redis::cmd("REDLOCK.GUARD")
            .arg(guard)
            .arg(self.key())
            .arg(self.token())
            .query_async(con)
            .await
            .map_err(|e| self.resource_error(guard, &e))
    }

    fn resource_error(&self, guard: &str, e: &redis::RedisError) -> Error {
        if e.code() == Some("STALE") {
            if let Some(highest) = e.detail().and_then(stale_highest) {
                self.metrics.stale(self.key(), self.token(), highest);
                return Error::Stale {
                    guard: guard.to_string(),
                    token: self.token(),
                    highest,
                };
            }
        }
        crate::classify::resource_error(e)
    }
}

/// The highest token named in a STALE reply's detail (`token 41 is below
/// 57, the highest …`).
pub(crate) fn stale_highest(detail: &str) -> Option<u64> {
    let rest = detail.split_once(" is below ")?.1;
    let number = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    number.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_details_parse() {
        assert_eq!(
            stale_highest(
                "token 41 is below 57, the highest token guard 'g' has seen for lock 'r'"
            ),
            Some(57)
        );
        assert_eq!(stale_highest("something else"), None);
    }
}
