//! The node-wide values that travel with the data ([`NodeRecord`]: the
//! highest counter the node reclaimed, the longest lease it may have
//! granted) and what a load learns of them and of the records it reads: the
//! pure part of the type callbacks and of `REDLOCK.APPLY` (DESIGN §8, §12).
//!
//! A load (an RDB file, an AOF, a full sync from a master) is followed by a
//! [`Load`]. The node record is written before the keys, so a lock record
//! that loads while none was read means the writer left it out: its record
//! was the fixed baseline [`UNWRITTEN_NODE_RECORD`] (this module on Redis
//! 7.2+ / Valkey, [`aux_save2_writes`]), or the writer is unknown. The
//! baseline is then learned before that first record is timed, so no lease
//! is cut short; a full sync or an RDB file without lock records learns it
//! when the load ends (the writer may have granted leases of that length).
//!
//! Each record read is timed by where it comes from ([`Load::source`]): a
//! file by the rule for files, a master by the remaining time; a lease a
//! master sent is one it may grant, so its length is learned
//! ([`lease_to_learn`]).

use crate::core::lock::LockState;
use crate::core::mutant::{Mutant, Mutants};
use crate::core::persisted::{NodeRecord, Persisted, Source};

/// The node record that an RDB without this module's auxiliary data stands
/// for: what `aux_save2` leaves out, and what a load that found no auxiliary
/// data learns. It must not depend on either side's configuration (a
/// replica with a smaller `max-ttl-ms` than its master must still learn its
/// master's longest lease: issue 39).
pub const UNWRITTEN_NODE_RECORD: NodeRecord = NodeRecord {
    reclaimed: 0,
    longest_lease_ms: 60_000,
};

/// Whether `aux_save2` (Redis 7.2+, Valkey) writes the node `record`
/// (`writer_max_ttl_ms`: the writer's `max-ttl-ms`, which only the broken
/// variant reads). Redis 7.0 calls `aux_save`, which always writes it.
pub fn aux_save2_writes(record: &NodeRecord, writer_max_ttl_ms: u64, mutants: Mutants) -> bool {
    let unwritten = if mutants.on(Mutant::AuxWriterBaseline) {
        NodeRecord {
            reclaimed: 0,
            longest_lease_ms: writer_max_ttl_ms,
        }
    } else {
        UNWRITTEN_NODE_RECORD
    };
    *record != unwritten
}

/// Whether a master announces its node record to a replica that comes
/// online (a partial resync after this node restarted with a larger
/// `max-ttl-ms` carries none).
pub fn announce_to_new_replica(mutants: Mutants) -> bool {
    !mutants.on(Mutant::AuxWriterBaseline)
}

/// The counter a missing record starts from on a node whose highest
/// reclaimed counter is `reclaimed` ([`LockState::missing`]).
pub fn missing_record(reclaimed: u64, mutants: Mutants) -> LockState {
    if mutants.on(Mutant::NoReclaimedFloor) {
        return LockState::missing(0);
    }
    LockState::missing(reclaimed)
}

/// What the server is loading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loading {
    /// Nothing: a record read now comes from `RESTORE` (read as a file).
    Nothing,
    /// A file written before this process started (RDB, AOF).
    File,
    /// A full sync from a master.
    Replication,
}

/// What kind of load starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadKind {
    /// An RDB file.
    Rdb,
    /// An AOF (with or without an RDB preamble).
    Aof,
    /// A full sync from a master.
    Replication,
}

/// The state of the load in progress, kept across the callbacks of one
/// load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    loading: Loading,
    /// The node record was read (or the baseline learned in its place).
    record_loaded: bool,
    /// The load reads RDB data written elsewhere or earlier.
    rdb_load: bool,
}

impl Default for Load {
    fn default() -> Self {
        Self::new()
    }
}

impl Load {
    /// Nothing loading.
    pub const fn new() -> Self {
        Load {
            loading: Loading::Nothing,
            record_loaded: false,
            rdb_load: false,
        }
    }

    /// A load of `kind` begins: no node record read yet.
    pub fn started(&mut self, kind: LoadKind) {
        self.record_loaded = false;
        self.rdb_load = matches!(kind, LoadKind::Rdb | LoadKind::Replication);
        self.loading = match kind {
            LoadKind::Rdb | LoadKind::Aof => Loading::File,
            LoadKind::Replication => Loading::Replication,
        };
    }

    /// What is loading now.
    pub fn loading(&self) -> Loading {
        self.loading
    }

    /// The node record was read (the host learns it).
    pub fn record_read(&mut self) {
        self.record_loaded = true;
    }

    /// A lock record is about to load, or the load ends: the baseline to
    /// learn when no node record was read in this load (once per load).
    pub fn unwritten_to_learn(&mut self, mutants: Mutants) -> Option<NodeRecord> {
        if std::mem::replace(&mut self.record_loaded, true) || mutants.on(Mutant::AuxWriterBaseline)
        {
            return None;
        }
        Some(UNWRITTEN_NODE_RECORD)
    }

    /// The load ended: what it learns when it read RDB data without any
    /// node record (an AOF without one had nothing to say).
    pub fn ended(&mut self, mutants: Mutants) -> Option<NodeRecord> {
        let rdb = std::mem::replace(&mut self.rdb_load, false);
        self.loading = Loading::Nothing;
        if rdb {
            self.unwritten_to_learn(mutants)
        } else {
            None
        }
    }

    /// The load failed: nothing is loading, and it learns nothing.
    pub fn abandoned(&mut self) {
        self.rdb_load = false;
        self.loading = Loading::Nothing;
    }

    /// How a record read now is timed. A full sync from a master by the
    /// remaining time (the master's wall clock means nothing here); a file,
    /// and a `RESTORE` payload, by the rule for files. `clamp_ms`: the
    /// longest lease this node may have granted.
    pub fn source(&self, clamp_ms: u64) -> Source {
        match self.loading {
            Loading::File | Loading::Nothing => Source::Disk { clamp_ms },
            Loading::Replication => Source::Stream { clamp_ms },
        }
    }

    /// A record of an RDB payload (a file, a full sync) is read: the lease
    /// to learn first (a full sync's lease is one the master may grant), and
    /// the record as the rule reads it.
    pub fn record(&self, mut p: Persisted, mutants: Mutants) -> (Option<u64>, Persisted) {
        match self.loading {
            Loading::Replication => (lease_to_learn(&p), p),
            Loading::File => {
                if mutants.on(Mutant::DiskLeaseFromWall) {
                    p.remaining = None;
                    p.boot = None;
                }
                (None, p)
            }
            Loading::Nothing => (None, p),
        }
    }
}

/// The lease length a record received from a master (a full sync, the
/// stream) teaches: its remaining time when it is held.
pub fn lease_to_learn(p: &Persisted) -> Option<u64> {
    p.remaining.filter(|_| p.owner.is_some())
}

/// `REDLOCK.APPLY` of a state, from the AOF (`loading`) or from a master:
/// the lease to learn first (a lease received is one the master may grant),
/// and the record as the rule reads it. Then it is timed by
/// [`applied_source`] with the clamp that includes what was learned.
pub fn applied(mut p: Persisted, loading: bool, mutants: Mutants) -> (Option<u64>, Persisted) {
    let learn = lease_to_learn(&p);
    if loading && mutants.on(Mutant::DiskLeaseFromWall) {
        p.remaining = None;
        p.boot = None;
    }
    (learn, p)
}

/// How an applied state is timed: from the AOF by the rule for files, from
/// a master by the remaining time; never longer than `clamp_ms`.
pub fn applied_source(loading: bool, clamp_ms: u64) -> Source {
    if loading {
        Source::Disk { clamp_ms }
    } else {
        Source::Stream { clamp_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_is_learned_once_when_no_record_was_read() {
        let mut load = Load::default();
        load.started(LoadKind::Replication);
        assert_eq!(
            load.unwritten_to_learn(Mutants::NONE),
            Some(UNWRITTEN_NODE_RECORD)
        );
        assert_eq!(load.unwritten_to_learn(Mutants::NONE), None);
        assert_eq!(load.ended(Mutants::NONE), None);
        // A record read first: nothing to learn in its place.
        load.started(LoadKind::Rdb);
        load.record_read();
        assert_eq!(load.ended(Mutants::NONE), None);
        // An RDB without lock records and without a node record.
        load.started(LoadKind::Rdb);
        assert_eq!(load.ended(Mutants::NONE), Some(UNWRITTEN_NODE_RECORD));
        // An AOF without either had nothing to say.
        load.started(LoadKind::Aof);
        assert_eq!(load.ended(Mutants::NONE), None);
    }

    #[test]
    fn the_node_record_is_left_out_only_at_the_fixed_baseline() {
        let record = NodeRecord {
            reclaimed: 0,
            longest_lease_ms: 100_000,
        };
        assert!(aux_save2_writes(&record, 100_000, Mutants::NONE));
        assert!(!aux_save2_writes(
            &UNWRITTEN_NODE_RECORD,
            100_000,
            Mutants::NONE
        ));
    }
}
