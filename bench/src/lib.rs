//! Benchmarks for redlock: the quorum client against a hand-written Redlock
//! and a PING floor, the module's commands against `SET NX PX` + `EVALSHA`,
//! memory per lock name, acquisition with one slow node, reclamation,
//! waiting for a busy lock, and fenced writes (`REDLOCK.FENCED … SET`
//! against `SET` and the Lua check).
//!
//! The `redlock-bench` binary starts its own nodes and prints one table; the
//! pieces here are the workloads it runs.

pub mod alloc_count;
pub mod cpu;
pub mod fenced;
pub mod floor;
pub mod handwritten;
pub mod memory;
pub mod owner;
pub mod reclaim;
pub mod resp;
pub mod server;
pub mod stats;
pub mod sync_handwritten;
pub mod waiting;
pub mod workload;

/// The connection settings of the baselines: no response timeout inside the
/// connection (redis 1.x adds a 500 ms one by default, a timer per call),
/// like `redlock-client`'s connections, so that both pay the same per call.
pub fn untimed_connection() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new().set_response_timeout(None)
}

/// Calls of every command `node` has served, from `INFO commandstats`:
/// (command name as Redis shows it, e.g. `REDLOCK.ACQUIRE` or `ping`, calls).
/// Empty when the node does not answer.
pub fn command_calls(node: &redlock_testkit::Node) -> Vec<(String, u64)> {
    let mut con = node.connection();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap_or_default();
    stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}
