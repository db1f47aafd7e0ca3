#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

/// The guide's Rust examples (`docs/guide/`), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/client-rust.md")]
pub struct GuideClient;

/// The guide's lock-set examples (`docs/guide/many-names.md`), compiled as
/// doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/many-names.md")]
pub struct GuideManyNames;

/// The guide's leader-election examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/election.md")]
pub struct GuideElection;

/// The guide's Sentinel example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/sentinel.md")]
pub struct GuideSentinel;

/// The guide's cluster-member example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/cluster.md")]
pub struct GuideCluster;

/// docs/metrics.md's Rust example, compiled as a doctest.
#[cfg(all(doctest, feature = "prometheus"))]
#[doc = include_str!("../../docs/metrics.md")]
pub struct MetricsGuide;

mod builder;
mod classify;
mod cluster;
mod core;
mod defaults;
mod election;
mod fenced;
mod identity;
mod inspect;
mod local_turn;
mod lock;
mod lock_set;
mod lock_set_wait;
mod member;
pub mod metrics;
mod node;
mod quorum;
mod redlock;
mod round_calls;
mod sentinel;
mod shared;
#[cfg(feature = "summary")]
pub mod summary;
mod sync_check;
mod tls;
mod waiting;
mod with_lock;
mod with_lock_set;

pub use crate::core::error::Error;
pub use builder::RedlockBuilder;
pub use defaults::{
    RetryPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR, DEFAULT_NODE_TIMEOUT,
    DEFAULT_SYNC_TIMEOUT,
};
pub use election::{Election, Leader, Leadership, Observer};
pub use inspect::{NodeState, NodeView, Shard};
pub use lock::{Lock, LockInfo};
pub use lock_set::LockSet;
pub use member::Member;
pub use redlock::Redlock;
/// Re-exported so that users of [`LockGuard::lost_token`] need no direct
/// `tokio-util` dependency.
pub use tokio_util::sync::CancellationToken;
pub use with_lock::LockGuard;
pub use with_lock_set::LockSetGuard;
