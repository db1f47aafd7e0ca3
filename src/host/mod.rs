//! The Redis glue: everything that calls the server, one file per concern,
//! around the pure rules of [`crate::core`].
//!
//! [`ffi`] is the boundary with Redis (argument access, replies, the one
//! place errors become replies), [`commands`] the lock command handlers
//! (parse → guard → decide → store → effects), [`store`] reading and writing
//! lock keys, [`datatype`] the `redlockfn` type callbacks, [`persist`] the
//! persisted form (RDB, AOF, replication), [`node`] the node-wide values
//! that travel with the data, [`replication`] when effects must be
//! replicated, [`wait`] the blocking WAIT and its queues, [`guard`] the
//! restart and promotion guard, [`sync`] the replica-sync check (who may
//! write, what a master announces, how a promoted replica starts), [`reclaim`] the sweep that deletes idle
//! records, [`events`] the server events, [`config`] the configuration,
//! [`info`] `INFO redlock` (it only reads the counters each subsystem
//! keeps), [`clock`] the clock readings, [`mutant`] the test builds'
//! deliberate faults. Fenced writes: [`fence_type`] the `redlockgd` guard
//! records, [`fenced`] the commands.

pub mod clock;
pub mod commands;
pub mod config;
pub mod config_file;
pub mod datatype;
pub mod events;
pub mod fence_type;
pub mod fenced;
pub mod ffi;
pub mod guard;
pub mod info;
pub mod lease_ack;
pub mod mutant;
pub mod node;
pub mod persist;
pub mod reclaim;
pub mod replication;
pub mod restamp;
pub mod store;
pub mod sync;
pub mod teacher;
pub mod wait;
