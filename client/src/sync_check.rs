//! The replica-sync check on the client's side (DESIGN §13): a lock write
//! (ACQUIRE, EXTEND, and the write-back FENCE) on a master whose
//! `redlock.sync-replicas` is R > 0 states `SYNC R` and is followed, on the
//! same connection and in the same write, by `WAIT R timeout`; the write
//! counts only when `WAIT` answered at least R.
//!
//! R comes from the nodes: a member starts out assuming 0 (no `SYNC`, the
//! command is exactly what it was before the check existed), and a node
//! whose R differs refuses the command with its R (`SYNCREPLICAS r …`,
//! nothing changed); the member learns it and sends the command again.
//! Because the node compares the stated R with its own at the moment of the
//! write, a client never relies on fewer acknowledgements than the node
//! requires, also right after an operator changed R.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use redis::{Cmd, Pipeline, Value};

use crate::core::error::NodeFailure;
use crate::core::many::ACQUIRE_SET;

/// How often a member sends a lock write again after learning another R
/// from the node (the operator may change R between two tries).
pub(crate) const RESTATE_TRIES: usize = 3;

/// What one member knows about its nodes' R, and how long `WAIT` may take.
#[derive(Debug)]
pub(crate) struct SyncState {
    r: AtomicU64,
    timeout: Duration,
}

impl SyncState {
    /// R unknown (0 until a node says otherwise); `WAIT` bounded by `timeout`.
    pub(crate) fn new(timeout: Duration) -> Self {
        SyncState {
            r: AtomicU64::new(0),
            timeout,
        }
    }

    /// The R the member states now.
    pub(crate) fn r(&self) -> u64 {
        self.r.load(Relaxed)
    }

    /// A node stated its R.
    pub(crate) fn learn(&self, r: u64) {
        self.r.store(r, Relaxed);
    }

    /// How long `WAIT` may wait.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The time one lock write may take on top of the node timeout: the
    /// `WAIT`, when the check is on.
    pub(crate) fn extra(&self) -> Duration {
        if self.r() > 0 {
            self.timeout
        } else {
            Duration::ZERO
        }
    }
}

/// A lock write the check applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockWrite {
    /// `REDLOCK.ACQUIRE`: a grant (integer) counts only when synced.
    Acquire,
    /// `REDLOCK.EXTEND`: an extension (1) counts only when synced.
    Extend,
    /// `REDLOCK.FENCE`: a counter counts only when synced.
    Fence,
    /// `EVAL` of a lock set's step ([`ACQUIRE_SET`]): the set's grant (its
    /// tokens) counts only when synced.
    AcquireSet,
}

/// The largest R a node accepts (`redlock.sync-replicas`).
const MAX_R: u64 = 64;

/// A probe that makes a node state its R at connect time, so that the
/// first lock write already waits for the right number of replicas within
/// its round's time: `REDLOCK.EXTEND` of a key nobody holds, for a fresh
/// owner, stating the largest R. A node whose R differs refuses it with its
/// R and changes nothing; one at that R finds the lock not held (0).
pub(crate) fn probe() -> Cmd {
    let mut cmd = redis::cmd("REDLOCK.EXTEND");
    cmd.arg("redlock:sync-probe")
        .arg(uuid::Uuid::new_v4().to_string())
        .arg(1)
        .arg("SYNC")
        .arg(MAX_R);
    cmd
}

/// What the probe's reply says about the node's R; `None` when it says
/// nothing (a node without the check's commands, a refusal for another
/// reason).
pub(crate) fn probed(reply: &Result<Value, NodeFailure>) -> Option<u64> {
    match reply {
        Err(NodeFailure::SyncStated(r)) => Some(*r),
        Ok(Value::Int(0)) => Some(MAX_R),
        _ => None,
    }
}

/// Which lock write `cmd` is, from its name (and, for `EVAL`, its script);
/// `None` for any other command.
pub(crate) fn lock_write(cmd: &Cmd) -> Option<LockWrite> {
    let mut args = cmd.args_iter();
    let Some(redis::Arg::Simple(name)) = args.next() else {
        return None;
    };
    if name.eq_ignore_ascii_case(b"EVAL") {
        // `SYNC r` goes after the script's last argument, where the script
        // passes it on to every name's ACQUIRE.
        return match args.next() {
            Some(redis::Arg::Simple(script)) if script == ACQUIRE_SET.as_bytes() => {
                Some(LockWrite::AcquireSet)
            }
            _ => None,
        };
    }
    if name.eq_ignore_ascii_case(b"REDLOCK.ACQUIRE") {
        Some(LockWrite::Acquire)
    } else if name.eq_ignore_ascii_case(b"REDLOCK.EXTEND") {
        Some(LockWrite::Extend)
    } else if name.eq_ignore_ascii_case(b"REDLOCK.FENCE") {
        Some(LockWrite::Fence)
    } else {
        None
    }
}

/// Connections per node that carry the lock commands while the check is on
/// (see [`lock_key`]).
pub(crate) const SHARDS: usize = 4;

/// The key of a lock command (ACQUIRE, RELEASE, EXTEND, FENCE); `None` for
/// any other command.
///
/// While the check is on, a node's lock commands go over [`SHARDS`]
/// connections instead of one, each key always over the same one (so the
/// commands of one key keep the order the rounds rely on, `node.rs`): a
/// `WAIT` holds its connection until the replicas acknowledged, and one
/// shared connection would make every lock wait for the `WAIT`s queued
/// before it (measured on a master with two replicas, c=16: about 14,000
/// `SET NX PX` + `WAIT 2` per second over one connection, 32,000 over four).
pub(crate) fn lock_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter();
    let Some(redis::Arg::Simple(name)) = args.next() else {
        return None;
    };
    let lock = [
        &b"REDLOCK.ACQUIRE"[..],
        b"REDLOCK.RELEASE",
        b"REDLOCK.EXTEND",
        b"REDLOCK.FENCE",
    ]
    .iter()
    .any(|c| c.eq_ignore_ascii_case(name));
    match (lock, args.next()) {
        (true, Some(redis::Arg::Simple(key))) => Some(key),
        _ => None,
    }
}

/// Which of the [`SHARDS`] connections carries `key` (FNV-1a).
pub(crate) fn shard_of(key: &[u8]) -> usize {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in key {
        hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    hash as usize % SHARDS
}

/// `cmd SYNC r` followed by `WAIT r timeout-ms`, as one pipeline.
pub(crate) fn synced_pipeline(cmd: &Cmd, r: u64, timeout: Duration) -> Pipeline {
    let mut stated = cmd.clone();
    stated.arg("SYNC").arg(r);
    let mut pipe = redis::pipe();
    pipe.add_command(stated);
    pipe.cmd("WAIT")
        .arg(r)
        .arg(timeout.as_millis().clamp(1, i64::MAX as u128) as i64);
    pipe
}

/// The write's reply as the rounds see it, given `WAIT`'s reply: a grant,
/// extension or counter that fewer than `r` replicas acknowledged becomes
/// [`NodeFailure::NotSynced`] (it may have been applied, so a grant is
/// released); a refusal or "not held" stands as it is.
pub(crate) fn judge(
    kind: LockWrite,
    reply: Value,
    wait: Value,
    r: u64,
    timeout: Duration,
) -> Result<Value, NodeFailure> {
    if let Value::ServerError(e) = reply {
        let (failure, _) = crate::classify::node_failure(&e.into());
        return Err(failure);
    }
    let applied = match (kind, &reply) {
        (LockWrite::Acquire, Value::Int(n)) => *n > 0,
        (LockWrite::Extend, Value::Int(n)) => *n == 1,
        (LockWrite::Fence, Value::Int(_)) => true,
        (LockWrite::AcquireSet, Value::Array(tokens)) => !tokens.is_empty(),
        _ => false,
    };
    if !applied {
        return Ok(reply);
    }
    let (acks, error) = match wait {
        Value::Int(n) => (n.max(0) as u64, None),
        Value::ServerError(e) => (
            0,
            Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        ),
        other => (0, Some(format!("unexpected reply {other:?}"))),
    };
    if acks >= r && error.is_none() {
        Ok(reply)
    } else {
        Err(NodeFailure::NotSynced {
            required: r,
            acks,
            waited_ms: timeout.as_millis() as u64,
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(100);

    #[test]
    fn lock_commands_give_their_key_and_keep_it_on_one_connection() {
        let mut acquire = redis::cmd("REDLOCK.ACQUIRE");
        acquire.arg("job").arg("me").arg(100);
        let mut release = redis::cmd("REDLOCK.RELEASE");
        release.arg("job").arg("me");
        assert_eq!(lock_key(&acquire), Some(&b"job"[..]));
        assert_eq!(lock_key(&release), Some(&b"job"[..]));
        assert_eq!(lock_key(redis::cmd("REDLOCK.INSPECT").arg("job")), None);
        assert_eq!(lock_key(&redis::cmd("REDLOCK.ACQUIRE")), None);
        assert!(shard_of(b"job") < SHARDS);
        let spread: std::collections::HashSet<usize> = (0..64)
            .map(|i| shard_of(format!("k{i}").as_bytes()))
            .collect();
        assert_eq!(spread.len(), SHARDS);
    }

    #[test]
    fn a_lock_sets_step_is_a_lock_write_judged_by_its_tokens() {
        let mut set = redis::cmd("EVAL");
        set.arg(ACQUIRE_SET)
            .arg(2)
            .arg("a")
            .arg("b")
            .arg("me")
            .arg(100);
        assert_eq!(lock_write(&set), Some(LockWrite::AcquireSet));
        let mut other = redis::cmd("EVAL");
        other.arg("return 1").arg(0);
        assert_eq!(lock_write(&other), None);
        let tokens = Value::Array(vec![Value::Int(3), Value::Int(9)]);
        let kind = LockWrite::AcquireSet;
        assert_eq!(
            judge(kind, tokens.clone(), Value::Int(1), 1, T),
            Ok(tokens.clone())
        );
        assert!(matches!(
            judge(kind, tokens, Value::Int(0), 1, T),
            Err(NodeFailure::NotSynced { acks: 0, .. })
        ));
        // Refused (a name held): nothing to wait for.
        assert_eq!(judge(kind, Value::Nil, Value::Int(0), 1, T), Ok(Value::Nil));
    }

    #[test]
    fn the_probe_reads_the_nodes_r() {
        assert_eq!(probed(&Err(NodeFailure::SyncStated(2))), Some(2));
        assert_eq!(probed(&Err(NodeFailure::SyncStated(0))), Some(0));
        assert_eq!(probed(&Ok(Value::Int(0))), Some(64));
        assert_eq!(
            probed(&Err(NodeFailure::Refused(
                "ERR wrong number of arguments".into()
            ))),
            None
        );
        let probe = probe();
        assert_eq!(lock_write(&probe), Some(LockWrite::Extend));
        assert_eq!(probe.args_iter().count(), 6);
    }

    #[test]
    fn lock_writes_are_told_by_name() {
        assert_eq!(
            lock_write(redis::cmd("REDLOCK.ACQUIRE").arg("k")),
            Some(LockWrite::Acquire)
        );
        assert_eq!(
            lock_write(&redis::cmd("redlock.extend")),
            Some(LockWrite::Extend)
        );
        assert_eq!(
            lock_write(&redis::cmd("REDLOCK.FENCE")),
            Some(LockWrite::Fence)
        );
        assert_eq!(lock_write(&redis::cmd("REDLOCK.RELEASE")), None);
        assert_eq!(lock_write(&redis::cmd("REDLOCK.INSPECT")), None);
    }

    #[test]
    fn a_write_counts_only_with_r_acknowledgements() {
        use LockWrite::*;
        assert_eq!(
            judge(Acquire, Value::Int(7), Value::Int(2), 2, T),
            Ok(Value::Int(7))
        );
        assert_eq!(
            judge(Acquire, Value::Int(7), Value::Int(3), 2, T),
            Ok(Value::Int(7))
        );
        let short = judge(Acquire, Value::Int(7), Value::Int(1), 2, T).unwrap_err();
        assert!(
            short.maybe_executed(),
            "a grant that did not count is released"
        );
        assert_eq!(
            short.to_string(),
            "replica-sync check failed: 1 of the 2 replicas redlock.sync-replicas asks for acknowledged the write within 100 ms; not relied on"
        );
        // Busy, not held, refused: WAIT says nothing about them.
        assert_eq!(
            judge(Acquire, Value::Nil, Value::Int(0), 2, T),
            Ok(Value::Nil)
        );
        assert_eq!(
            judge(Extend, Value::Int(0), Value::Int(0), 2, T),
            Ok(Value::Int(0))
        );
        assert_eq!(
            judge(Fence, Value::Nil, Value::Int(0), 2, T),
            Ok(Value::Nil)
        );
        assert!(matches!(
            judge(Extend, Value::Int(1), Value::Int(0), 1, T),
            Err(NodeFailure::NotSynced {
                required: 1,
                acks: 0,
                ..
            })
        ));
        assert!(matches!(
            judge(Fence, Value::Int(9), Value::Int(1), 2, T),
            Err(NodeFailure::NotSynced {
                required: 2,
                acks: 1,
                ..
            })
        ));
    }
}
