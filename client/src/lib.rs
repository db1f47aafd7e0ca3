//! A Redlock client that hands out **fencing tokens**.
//!
//! `redlock_client` runs the Redlock quorum over N independent Redis masters
//! (five is the usual setup) that load the `redlock` module, and returns one
//! fencing token per acquisition: a number higher than every token handed
//! out before for the same key. Plain Redlock (`SET NX PX` on five masters)
//! has no such token, so a client that pauses past its lease can corrupt the
//! resource it protects; with a token, the resource can refuse the late
//! write.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_client::{Error, Redlock};
//!
//! # async fn write_report(_token: u64) -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let redlock = Redlock::builder([
//!         "redis://10.0.0.1:6379",
//!         "redis://10.0.0.2:6379",
//!         "redis://10.0.0.3:6379",
//!         "redis://10.0.0.4:6379",
//!         "redis://10.0.0.5:6379",
//!     ])
//!     .node_timeout(Duration::from_millis(50))
//!     .build()
//!     .await?;
//!
//!     // Take the lock, use its token, give it back.
//!     match redlock.try_acquire("report:2024-06", Duration::from_secs(10)).await? {
//!         Some(lock) => {
//!             write_report(lock.token()).await?;
//!             lock.release().await?;
//!         }
//!         None => eprintln!("someone else is writing the report"),
//!     }
//!
//!     // Or let the client keep the lock alive while the work runs.
//!     let result = redlock
//!         .with_lock("report:2024-06", Duration::from_secs(10), |guard| async move {
//!             tokio::select! {
//!                 r = write_report(guard.token()) => r.map_err(|e| e.to_string()),
//!                 _ = guard.lost() => Err("lock lost: stopped".to_string()),
//!             }
//!         })
//!         .await;
//!     match result {
//!         Ok(Ok(())) => {}
//!         Ok(Err(work_error)) => eprintln!("{work_error}"),
//!         Err(Error::Busy { .. }) => eprintln!("busy, try later"),
//!         Err(e) => return Err(e.into()),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # What the protected resource must do with the token
//!
//! A fencing token helps only if the resource checks it. The resource
//! remembers the highest token it has seen and refuses every operation
//! (read or write) that carries a lower one. A lock holder that was paused
//! (GC, swapping, a stopped VM) past its lease still believes it holds the
//! lock; its token is lower than the one of the holder that came after it,
//! so its late write is refused instead of silently overwriting newer data.
//!
//! With SQL, keep the token next to the data and make the check part of the
//! write itself, so check and write are atomic:
//!
//! ```sql
//! UPDATE accounts
//!    SET balance = $2, fence_token = $1
//!  WHERE id = $3 AND fence_token <= $1;
//! -- 0 rows updated: a newer lock holder has written; stop and do not retry
//! -- with this token.
//! ```
//!
//! Equal tokens are accepted (the same holder writing several times); lower
//! ones never are. For a file store or an API, the same rule applies: store
//! the highest token next to the object and compare before every change.
//!
//! # How it works
//!
//! [`Redlock::acquire`] sends `REDLOCK.ACQUIRE key owner ttl FLOOR now` to
//! every node at once and returns as soon as a quorum (`N / 2 + 1`) granted
//! the lock: in the healthy case, one round trip. The token is the highest
//! granted counter; if fewer than a quorum returned it, the client first
//! raises the others to it with `REDLOCK.FENCE` (the *write-back*, see the
//! comment in `quorum.rs`), which keeps tokens increasing even after nodes
//! failed and their counters drifted apart. The `FLOOR` (the client's wall
//! clock in microseconds, [`RedlockBuilder::clock_floor`]) keeps them
//! increasing when a node loses its counters.
//!
//! - **Busy or no quorum.** A failed attempt is *busy* ([`Error::Busy`];
//!   [`Redlock::try_acquire`] gives `Ok(None)`) when the nodes that said
//!   "held by another owner" plus the grants could have made a quorum;
//!   otherwise too few nodes answered and the error is [`Error::NoQuorum`],
//!   listing each failing node by address. A failed attempt is released on
//!   every node that may have granted it.
//! - **Validity.** `ttl − elapsed − (ttl × drift_factor + 2 ms)`, measured on
//!   the local monotonic clock from the start of the acquisition;
//!   [`Lock::validity`] is what is left of it now. Do the protected work
//!   within it, or use [`Redlock::with_lock`] which extends the lock.
//! - **Release.** [`Lock::release`] sends `REDLOCK.RELEASE` to every node
//!   and returns once a quorum answered; slower nodes get it in the
//!   background. Dropping an unreleased [`Lock`] releases it in the
//!   background.
//! - **Dead or frozen nodes** cost at most the per-node timeout
//!   ([`RedlockBuilder::node_timeout`]); connections are persistent and
//!   multiplexed, and reconnect in the background.
//!
//! # TLS and authentication
//!
//! `rediss://host:port` nodes use TLS; [`RedlockBuilder::tls_ca_file`] gives
//! the CA that signed their certificates (default: the system's trust
//! store) and [`RedlockBuilder::tls_client_cert`] a client certificate for
//! mutual TLS (`tls-auth-clients yes`). Verification cannot be turned off.
//! `redis://user:password@host:port` logs in as an ACL user,
//! `redis://:password@host:port` with `requirepass`; a wrong password shows
//! as "authentication failed" for that node, a key the user may not lock as
//! [`Error::PermissionDenied`].
//!
//! Tracing: every acquire, extend and release runs in a `tracing` span
//! (`redlock.acquire`, `redlock.extend`, `redlock.release`) with the key and
//! token, and logs each node's reply at `DEBUG`.

#![warn(missing_docs)]

mod builder;
mod error;
mod inspect;
mod lock;
mod node;
mod quorum;
mod redlock;
mod tally;
mod tls;
mod with_lock;

pub use builder::{
    RedlockBuilder, RetryPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR,
    DEFAULT_NODE_TIMEOUT,
};
pub use error::Error;
pub use inspect::{NodeState, NodeView};
pub use lock::{Lock, LockInfo};
pub use redlock::Redlock;
/// Re-exported so that users of [`LockGuard::lost_token`] need no direct
/// `tokio-util` dependency.
pub use tokio_util::sync::CancellationToken;
pub use with_lock::LockGuard;
