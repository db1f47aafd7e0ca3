//! Fenced writes (`redlock_bench::fenced`), on a node of its own: server CPU
//! per command of `REDLOCK.FENCED … SET` against a plain `SET` and against
//! the same check in Lua (`EVALSHA`), with the targets (≤ 2× SET,
//! ≤ 0.8× EVALSHA).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use redlock_bench::fenced::{self, FencedSpec, Write, LUA_FENCED_SET};
use redlock_bench::stats::median;
use redlock_testkit::Node;

use crate::report::Figures;

/// Target: FENCED's server CPU per command at most this many times SET's.
const MAX_VS_SET: f64 = 2.0;
/// Target: FENCED's server CPU per command at most this share of EVALSHA's.
const MAX_VS_EVALSHA: f64 = 0.8;

/// Runs the three loads in turn, `rounds` times at four pipeline depths,
/// and prints their medians.
pub(crate) async fn run(module: &Path, smoke: bool, figures: &mut Figures) -> Result<(), String> {
    let node = Node::builder().module(module.to_path_buf()).start();
    let pid = node.pid().ok_or("no server pid")?;
    let addr: SocketAddr = node
        .addr()
        .parse()
        .map_err(|e| format!("node address: {e}"))?;
    let mut con = node.connection();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(LUA_FENCED_SET)
        .query(&mut con)
        .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
    let (rounds, secs) = if smoke { (1, 0.2) } else { (5, 1.0) };
    // Pipeline 1: every command its own round trip (what most clients
    // do; the server's socket work is part of each command's cost).
    // Pipeline 32: the server busy with commands alone. 4 and 8: between.
    for pipeline in [1usize, 4, 8, 32] {
        let spec = FencedSpec {
            connections: 4,
            pipeline,
            warmup: Duration::from_millis(if smoke { 50 } else { 200 }),
            duration: Duration::from_secs_f64(secs),
            server_pid: pid,
        };
        let writes = [
            Write::Plain,
            Write::Fenced,
            Write::Evalsha { sha: sha.clone() },
        ];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); writes.len()];
        let mut rate: Vec<Vec<f64>> = vec![Vec::new(); writes.len()];
        for round in 0..rounds {
            // Rotate the order so no load always runs first.
            for k in 0..writes.len() {
                let i = (k + round) % writes.len();
                // The server's CPU time moves in clock ticks (10 ms): a
                // short round on a loaded machine can read none. Such a
                // round is run again (at most four more times).
                let mut r = None;
                for _ in 0..5 {
                    let w = writes[i].clone();
                    let s = spec.clone();
                    let run = tokio::task::spawn_blocking(move || fenced::run(addr, &w, &s))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| format!("{}: {e}", writes[i].name()))?;
                    let read = run.server_cpu_us > 0.0;
                    r = Some(run);
                    if read {
                        break;
                    }
                }
                let Some(r) = r else {
                    return Err(format!("{}: no round ran", writes[i].name()));
                };
                if r.errors > 0 {
                    return Err(format!("{}: {} error replies", writes[i].name(), r.errors));
                }
                cpu[i].push(r.server_cpu_us);
                rate[i].push(r.ops_per_sec);
            }
        }
        let med = |v: &[f64]| median(v);
        let (set, fen, lua) = (med(&cpu[0]), med(&cpu[1]), med(&cpu[2]));
        let vs_set = fen.zip(set).map(|(f, s)| f / s);
        let vs_lua = fen.zip(lua).map(|(f, l)| f / l);
        println!();
        println!(
            "Fenced writes — server CPU per command, {} connections × pipeline {pipeline}, medians over {rounds} rounds of {secs:.1} s",
            spec.connections
        );
        println!();
        println!("| command | ops/s | server CPU µs/command | vs SET | vs EVALSHA |");
        println!("|---|---:|---:|---:|---:|");
        for (i, w) in writes.iter().enumerate() {
            let c = med(&cpu[i]);
            let fmt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
            println!(
                "| {} | {:.0} | {} | {} | {} |",
                w.name(),
                med(&rate[i]).unwrap_or(f64::NAN),
                fmt(c),
                fmt(c.zip(set).map(|(c, s)| c / s)),
                fmt(c.zip(lua).map(|(c, l)| c / l)),
            );
        }
        let verdict = |v: Option<f64>, max: f64| match v {
            Some(v) if v <= max => format!("{v:.2} ≤ {max} met"),
            Some(v) => format!("{v:.2} > {max} MISSED"),
            None => "no figure".into(),
        };
        println!(
            "targets: FENCED vs SET {}; FENCED vs EVALSHA {}",
            verdict(vs_set, MAX_VS_SET),
            verdict(vs_lua, MAX_VS_EVALSHA)
        );
        let tag = format!("p{pipeline}");
        figures.put(format!("fenced_set_{tag}_server_cpu_us"), fen);
        figures.put(format!("plain_set_{tag}_server_cpu_us"), set);
        figures.put(format!("evalsha_fenced_set_{tag}_server_cpu_us"), lua);
        figures.put(format!("fenced_vs_set_{tag}_cpu_ratio"), vs_set);
        figures.put(format!("fenced_vs_evalsha_{tag}_cpu_ratio"), vs_lua);
    }
    Ok(())
}
