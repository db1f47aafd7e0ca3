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

use redlock_client::RedlockBuilder;

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
