//! Switches for the deliberately broken variants ("mutants") the checker
//! must catch. Each mutant is a test in `tests/mutants.rs`.
//!
//! | mutant | switch | where |
//! |---|---|---|
//! | write-back off | `RedlockBuilder::unsafe_disable_write_back()` | client (exists) |
//! | validity check off | [`disable_validity_check`] → `RedlockBuilder::unsafe_disable_validity_check()` | client |
//! | resource checks writes only | [`crate::resource::Checking::WritesOnly`] | this crate |
//! | floor off, nodes restarted empty | `RedlockBuilder::clock_floor(false)` + kill/restart without persistence | client (exists) + runner |
//! | effects not replicated to the AOF | [`disable_aof_propagation`] → `REDLOCK.TESTHOOK SKIP-REPLICATION 1` | module test build |
//! | promoted replicas grant at once | [`disable_promotion_guard`] → `REDLOCK.TESTHOOK PROMOTION-GUARD 0` | module test build |
//! | FENCED never refuses (check off) | [`fenced_hook`] → `REDLOCK.TESTHOOK FENCED-CHECK 0` on the resource server | module test build |
//! | FENCED never raises its guard | [`fenced_hook`] → `REDLOCK.TESTHOOK FENCED-RAISE 0` on the resource server | module test build |
//! | reads sent unfenced (Redis-held resource) | [`crate::resource::Checking::WritesOnly`] | this crate |
//! | a restart is exempt from the guard by today's config alone (a promotion window does not survive a restart) | [`RESTART_EXEMPTION_BY_CONFIG`] in [`MODULE_MUTANTS_ENV`] | module test build |
//! | a lease loaded from disk ends at its wall-clock expiry only | [`DISK_LEASE_WALL_CLOCK_ONLY`] in [`MODULE_MUTANTS_ENV`] | module test build |
//! | a grant on a missing key is not floored above the counters reclaimed | [`NO_RECLAIMED_FLOOR`] in [`MODULE_MUTANTS_ENV`] | module test build |
//! | an ACQUIRE by the holder shortens its lease (a late copy ends an extension) | [`RENEWAL_SHORTENS`] in [`MODULE_MUTANTS_ENV`] | module test build |
//!
//! The module mutants are switched on by an environment variable that the
//! module's test build reads when it loads (most of them act across
//! restarts, where a runtime hook would be gone after the restart under
//! test); the runner sets it on every node it starts
//! ([`crate::runner::RunConfig::module_mutants`]).

use redlock_client::RedlockBuilder;

/// Environment variable with the module mutants to switch on (names
/// separated by commas), read by the module's test build when it loads.
pub const MODULE_MUTANTS_ENV: &str = "REDLOCK_TEST_MUTANTS";

/// Module mutant: a restart is exempt from the restart guard whenever the
/// server runs `appendonly yes` + `appendfsync always` now, and the window
/// a promotion opened ends with the process (issue 24, item 1). Caught by
/// [`crate::runner::FaultType::PromotedRestart`].
pub const RESTART_EXEMPTION_BY_CONFIG: &str = "config-exemption";

/// Module mutant: a lease loaded from the AOF or RDB ends at its stored
/// wall-clock expiry read on the new clock only, so a forward step of the
/// wall clock across the restart shortens it (issue 24, item 2). Caught by
/// [`crate::runner::FaultType::ClockStepRestart`].
pub const DISK_LEASE_WALL_CLOCK_ONLY: &str = "disk-lease-from-wall";

/// Module mutant: a grant on a missing key gets `max(1, FLOOR)`, with no
/// floor above the counters the sweep deleted (issue 24, item 3). Caught by
/// the mixed-floor workload with reclamation
/// ([`crate::runner::RunConfig::mixed_floor`]).
pub const NO_RECLAIMED_FLOOR: &str = "no-reclaimed-floor";

/// Module mutant: an ACQUIRE by the holder of a live lease sets the lease
/// to its ttl from now, shorter or not (the rule before 74f467a), so a late
/// copy of the holder's first ACQUIRE ends a lease it extended since
/// (issue 35, item 3). Caught by [`crate::runner::FaultType::LateAcquireCopy`].
pub const RENEWAL_SHORTENS: &str = "renewal-shortens";

/// Turns off step 5 of the algorithm in the client: the validity is not
/// reduced by the time the acquisition took and an expired acquisition is
/// still returned (`RedlockBuilder::unsafe_disable_validity_check`).
pub fn disable_validity_check(builder: RedlockBuilder) -> Result<RedlockBuilder, String> {
    Ok(builder.unsafe_disable_validity_check())
}

/// Makes `node` (test build of the module) stop replicating the effects of
/// its mutations to the AOF and replicas: `REDLOCK.TESTHOOK SKIP-REPLICATION 1`.
/// The in-memory state still changes; a restart then loads an AOF that lacks
/// those effects. The switch is not persisted: a restarted node is back to
/// normal until it is set again.
pub fn disable_aof_propagation(con: &mut redis::Connection) -> Result<(), String> {
    redis::cmd("REDLOCK.TESTHOOK")
        .arg("SKIP-REPLICATION")
        .arg(1)
        .query::<()>(con)
        .map_err(|e| format!("REDLOCK.TESTHOOK SKIP-REPLICATION failed ({e}): is this the test build of the module?"))
}

/// Makes `node` (test build of the module) grant at once after a promotion
/// from replica to master: `REDLOCK.TESTHOOK PROMOTION-GUARD 0`.
pub fn disable_promotion_guard(con: &mut redis::Connection) -> Result<(), String> {
    redis::cmd("REDLOCK.TESTHOOK")
        .arg("PROMOTION-GUARD")
        .arg(0)
        .query::<()>(con)
        .map_err(|e| format!("REDLOCK.TESTHOOK PROMOTION-GUARD failed ({e}): is this the test build of the module?"))
}

/// Turns one part of `REDLOCK.FENCED` off on the resource server (test
/// build of the module): `REDLOCK.TESTHOOK <hook> 0`, with `hook`
/// `FENCED-CHECK` (stale tokens pass) or `FENCED-RAISE` (guards never rise).
pub fn fenced_hook(con: &mut redis::Connection, hook: &str) -> Result<(), String> {
    redis::cmd("REDLOCK.TESTHOOK")
        .arg(hook)
        .arg(0)
        .query::<()>(con)
        .map_err(|e| {
            format!("REDLOCK.TESTHOOK {hook} failed ({e}): is this the test build of the module?")
        })
}
