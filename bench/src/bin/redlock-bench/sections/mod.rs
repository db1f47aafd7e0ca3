//! One module per scenario of the table (and the sections printed after it).

pub(crate) mod cluster;
pub(crate) mod contended;
pub(crate) mod fenced;
pub(crate) mod memory;
pub(crate) mod profile;
pub(crate) mod reclaim;
pub(crate) mod sentinel;
pub(crate) mod server;
pub(crate) mod slow;
pub(crate) mod uncontended;
pub(crate) mod waiting;
