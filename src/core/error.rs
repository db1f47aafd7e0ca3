//! Every way a command can be refused, with the exact error reply it becomes.
//!
//! The `Display` text is the whole Redis error reply: its first word is the
//! error code (`ERR`, `WRONGTYPE`, `GRACE`). Replies are written from this type
//! in one place, [`crate::host::ffi`].

use thiserror::Error;

/// A refused command. Nothing was changed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// Too few or too many arguments.
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(&'static str),
    /// An argument that must be an integer is not one.
    #[error("ERR invalid {0}: not an integer")]
    NotAnInteger(&'static str),
    /// An integer outside its range.
    #[error("ERR invalid {name}: must be between {min} and {max}")]
    OutOfRange {
        /// The argument's name.
        name: &'static str,
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A TTL above the configured maximum.
    #[error("ERR invalid ttl-ms: {ttl} is above redlock.max-ttl-ms ({max})")]
    TtlAboveMax {
        /// The TTL asked for.
        ttl: i64,
        /// The configured maximum.
        max: i64,
    },
    /// An owner id that is empty or longer than 256 bytes.
    #[error("ERR invalid owner: must be 1 to 256 bytes, got {0} bytes")]
    OwnerLength(usize),
    /// An option keyword that is not known here.
    #[error("ERR syntax error: expected {expected} at argument {position}")]
    Syntax {
        /// What was expected there.
        expected: &'static str,
        /// 1-based position after the command name.
        position: usize,
    },
    /// A `FLOOR` or FENCE token too far ahead of the node's wall clock.
    #[error("ERR invalid {name}: {value} is more than one day ahead of this node's clock ({node_clock_us} microseconds since the epoch); a client clock is wrong")]
    TokenAhead {
        /// The argument's name.
        name: &'static str,
        /// The value given.
        value: u64,
        /// The node's wall clock in microseconds.
        node_clock_us: u64,
    },
    /// An owner hash in `REDLOCK.APPLY` that is not 16 bytes.
    #[error("ERR invalid owner hash: must be 16 bytes, got {0} bytes")]
    OwnerHashLength(usize),
    /// A boot stamp in `REDLOCK.APPLY` that is neither empty nor 24 bytes.
    #[error(
        "ERR invalid boot stamp: must be 24 bytes (boot id and boot clock) or empty, got {0} bytes"
    )]
    BootStampLength(usize),
    /// Recording the longest lease failed, so it cannot be granted safely.
    #[error("ERR cannot record the lease length for the restart guard: {0}")]
    GuardRecord(String),
    /// The key holds a value of another type.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// The counter would pass i64::MAX.
    #[error("ERR fencing counter exhausted for this key (it reached 9223372036854775807)")]
    CounterExhausted,
    /// The restart guard refuses new locks for a while after the module
    /// loads or the node is promoted from replica to master.
    #[error("GRACE node {reason} {elapsed_ms} ms ago: new locks are refused for {remaining_ms} more ms (redlock.restart-grace-ms)")]
    Grace {
        /// What started the window: "restarted" or "was promoted to master".
        reason: &'static str,
        /// Milliseconds since the module loaded.
        elapsed_ms: u64,
        /// Milliseconds until ACQUIRE is accepted.
        remaining_ms: u64,
    },
    /// A lock write (ACQUIRE, EXTEND, FENCE) sent to a replica: its locks
    /// are its master's, whatever `replica-read-only` says. The code is
    /// Redis's own for a write refused on a replica.
    #[error("READONLY {0} is refused on a replica: locks are taken and changed on its master")]
    OnReplica(&'static str),
    /// The command stated another R (`SYNC r`, none = 0) than this node's
    /// `redlock.sync-replicas`: the client learns the node's R from the
    /// reply's second word and tries again.
    #[error("SYNCREPLICAS {node} redlock.sync-replicas is {node} on this node but the command stated {stated}: {}", sync_hint(*.node))]
    SyncStated {
        /// This node's R.
        node: u64,
        /// What the command stated.
        stated: u64,
    },
    /// The master has had more replicas than R since it became master.
    #[error("TOOMANYREPLICAS this master has had {known} replicas since it became master ({names}), more than redlock.sync-replicas ({r}): a lock write acknowledged by {r} of them could be missing on another one that may be promoted; set redlock.sync-replicas to {known} on every node of the group, or run REDLOCK.REPLICAS FORGET for one that is gone for good")]
    SyncTooMany {
        /// How many.
        known: usize,
        /// Their `ip:port`, comma-separated.
        names: String,
        /// This node's R.
        r: u64,
    },
    /// Fewer than R replicas are online: the write could not be confirmed.
    #[error("NOSYNC only {online} of the {r} replicas redlock.sync-replicas asks for are online: lock writes are refused until they are back")]
    SyncTooFew {
        /// How many are online.
        online: usize,
        /// This node's R.
        r: u64,
    },
    /// `redlock.sync-replicas` was lowered to 0 and some replica of this
    /// master's life has not yet acknowledged the announcement saying so.
    #[error("NOSYNC redlock.sync-replicas was lowered to 0: lock writes without the check wait until every replica of this master has applied the change (waiting for {0}); a replica that is gone for good: REDLOCK.REPLICAS FORGET")]
    SyncLowering(String),
    /// A lease longer than every replica of this master's life has
    /// acknowledged knowing (`core/lease_ack_rule.rs`): transient.
    #[error("NOSYNC a lease of {ttl} ms is longer than the {acked} ms every replica of this master has acknowledged knowing: leases that long wait until every replica has applied the master's longest lease (waiting for {waiting}; replicas acknowledge once a second); a replica that is gone for good: REDLOCK.REPLICAS FORGET")]
    LeaseUnacked {
        /// The ttl asked for.
        ttl: u64,
        /// The longest lease every replica acknowledged knowing.
        acked: u64,
        /// Who is waited for.
        waiting: String,
    },
    /// The master's replica set could not be written to its file: a restart
    /// would forget replicas, so lock writes are refused.
    #[error("ERR cannot record this master's replicas for the replica-sync check: {0}")]
    SyncRecord(String),
    /// `REDLOCK.REPLICAS` was called wrongly (FORGET of an online replica,
    /// an unknown subcommand).
    #[error("ERR {0}")]
    Replicas(String),
    /// A user called the internal replication command.
    #[error("ERR REDLOCK.APPLY is internal: it only runs from a master's replication stream or while loading the AOF")]
    InternalOnly,
    /// A test hook was called with an unknown subcommand.
    #[error("ERR unknown test hook: {0}")]
    UnknownHook(String),
    /// A fenced-write refusal (see [`crate::core::fence_rule::FenceError`]).
    #[error(transparent)]
    Fenced(#[from] crate::core::fence_rule::FenceError),
    /// A bug caught at the handler boundary.
    #[error("ERR redlock internal error in {0}: the command was aborted; please report it")]
    Internal(&'static str),
}

/// What a client refused for its stated R must do.
fn sync_hint(node: u64) -> String {
    if node == 0 {
        "send it without SYNC (the replica-sync check is off here)".to_string()
    } else {
        format!(
            "send SYNC {node} and rely on the write only once WAIT {node} counted {node} replicas"
        )
    }
}
