//! Section 3: one node under load from raw connections: REDLOCK.ACQUIRE +
//! REDLOCK.RELEASE against SET NX PX + an EVALSHA compare-and-delete.

use redlock_bench::handwritten::UNLOCK_SCRIPT;
use redlock_bench::server::{self, LoadResult, LoadSpec, Side};
use redlock_bench::stats::median;
use redlock_testkit::Node;

use crate::lockers::addr_of;
use crate::plan::Plan;
use crate::report::{opt, ratio, rotated, thousands, Report, Target};

/// Runs the section on `server_node` and adds its rows, figures and targets.
pub(crate) async fn run(
    server_node: &Node,
    plan: &Plan,
    report: &mut Report,
) -> Result<(), String> {
    let window = plan.window;
    let mut probe = server_node.connection();
    let addr = addr_of(server_node);
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(UNLOCK_SCRIPT)
        .query(&mut probe)
        .map_err(|e| e.to_string())?;
    let shapes = [
        (
            "no pipelining, 32 connections",
            LoadSpec {
                connections: 32,
                pipeline: 1,
                key_pool: 1_000,
                server_pid: server_node.pid(),
                warmup: window.warmup,
                duration: window.duration,
            },
        ),
        (
            "pipeline 32 commands, 4 connections",
            LoadSpec {
                connections: 4,
                pipeline: 32,
                key_pool: 1_000,
                server_pid: server_node.pid(),
                warmup: window.warmup,
                duration: window.duration,
            },
        ),
    ];
    let sides = [Side::Redlock, Side::SetEvalsha { sha }];
    // res[shape][side]
    let mut res: Vec<Vec<Vec<LoadResult>>> = vec![vec![Vec::new(); 2]; shapes.len()];
    for round in 0..plan.rounds {
        for (si, (_, spec)) in shapes.iter().enumerate() {
            for side_i in rotated(&[0usize, 1], round) {
                let side = sides[side_i].clone();
                let spec = spec.clone();
                let tag = format!("{}{round}.{si}", if side_i == 0 { "srvR" } else { "srvS" });
                let r = tokio::task::spawn_blocking({
                    let tag = tag.clone();
                    move || server::run(addr, side, &spec, &tag)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("server load: {e}"))?;
                if r.errors > 0 || r.refused > 0 {
                    return Err(format!(
                        "server load {tag}: {} error and {} unexpected replies",
                        r.errors, r.refused
                    ));
                }
                res[si][side_i].push(r);
            }
        }
    }
    eprintln!("  server side done");
    for (si, (shape, _)) in shapes.iter().enumerate() {
        let tag = if si == 0 {
            "server.nopipe"
        } else {
            "server.pipe32"
        };
        let red = report.figures.put(
            format!("{tag}.redlock_ops_per_sec"),
            median(&res[si][0].iter().map(|r| r.ops_per_sec).collect::<Vec<_>>()),
        );
        let set = report.figures.put(
            format!("{tag}.setnx_evalsha_ops_per_sec"),
            median(&res[si][1].iter().map(|r| r.ops_per_sec).collect::<Vec<_>>()),
        );
        let r = report.figures.put(
            format!("{tag}.ratio"),
            median(
                &res[si][0]
                    .iter()
                    .zip(&res[si][1])
                    .map(|(a, b)| a.ops_per_sec / b.ops_per_sec)
                    .collect::<Vec<_>>(),
            ),
        );
        let red_cpu = report.figures.put(
            format!("{tag}.redlock_server_cpu_us_per_op"),
            median(
                &res[si][0]
                    .iter()
                    .map(|r| r.server_cpu_us)
                    .collect::<Vec<_>>(),
            ),
        );
        let set_cpu = report.figures.put(
            format!("{tag}.setnx_evalsha_server_cpu_us_per_op"),
            median(
                &res[si][1]
                    .iter()
                    .map(|r| r.server_cpu_us)
                    .collect::<Vec<_>>(),
            ),
        );
        report.targets.push(Target {
            what: format!("server side ({shape}), REDLOCK ÷ SET NX PX+EVALSHA ≥ 1.00"),
            figure: r,
            met: r.map(|v| v >= 1.0),
        });
        let _ = red.zip(set);
        report.table.row(
            "3",
            &format!("one node, {shape}"),
            "REDLOCK.ACQUIRE + REDLOCK.RELEASE",
            opt(red, |v| format!("{} ops/s", thousands(v))),
            None,
            opt(red_cpu, |v| format!("{v:.2} (server)")),
            format!("{} vs SET+EVALSHA", ratio(r)),
        );
        report.table.row(
            "3",
            &format!("one node, {shape}"),
            "SET NX PX + EVALSHA compare-and-delete",
            opt(set, |v| format!("{} ops/s", thousands(v))),
            None,
            opt(set_cpu, |v| format!("{v:.2} (server)")),
            String::new(),
        );
    }
    Ok(())
}
