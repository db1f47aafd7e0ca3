//! Section 4: memory per lock name, held and released, against SET NX PX.

use redlock_bench::memory::{self, MemoryResult};
use redlock_bench::stats::median;
use redlock_testkit::Node;

use crate::lockers::addr_of;
use crate::plan::Plan;
use crate::report::{opt, ratio, thousands, Report, Target};

/// Runs the section on `memory_node` and adds its rows, figures and target.
pub(crate) async fn run(
    memory_node: &Node,
    plan: &Plan,
    report: &mut Report,
) -> Result<(), String> {
    let addr = addr_of(memory_node);
    let n = plan.memory_names;
    let rounds = plan.memory_rounds;
    let mut con = memory_node.connection();
    let results: Vec<MemoryResult> = tokio::task::spawn_blocking(move || {
        (0..rounds)
            .map(|_| memory::measure(addr, &mut con, n))
            .collect::<Result<Vec<_>, String>>()
    })
    .await
    .map_err(|e| e.to_string())??;
    eprintln!("  memory done");
    let held = report.figures.put(
        "memory.held_bytes_per_name",
        median(&results.iter().map(|r| r.held).collect::<Vec<_>>()),
    );
    let released = report.figures.put(
        "memory.released_bytes_per_name",
        median(&results.iter().map(|r| r.released).collect::<Vec<_>>()),
    );
    let set = report.figures.put(
        "memory.setnx_bytes_per_name",
        median(&results.iter().map(|r| r.set_nx_px).collect::<Vec<_>>()),
    );
    let r_held = report.figures.put(
        "memory.held_vs_setnx",
        median(
            &results
                .iter()
                .map(|r| r.held / r.set_nx_px)
                .collect::<Vec<_>>(),
        ),
    );
    let r_rel = report.figures.put(
        "memory.released_vs_setnx",
        median(
            &results
                .iter()
                .map(|r| r.released / r.set_nx_px)
                .collect::<Vec<_>>(),
        ),
    );
    report.targets.push(Target {
        what: "memory per held name ÷ SET NX PX key ≤ 1.10".into(),
        figure: r_held,
        met: r_held.map(|v| v <= 1.1),
    });
    let names = thousands(n as f64);
    let bytes = |v: f64| format!("{v:.1} B/name");
    report.table.row(
        "4",
        &format!("memory, {names} names (used_memory delta)"),
        "redlock, held",
        opt(held, bytes),
        None,
        String::new(),
        format!("{} vs SET NX PX", ratio(r_held)),
    );
    report.table.row(
        "4",
        &format!("memory, {names} names (used_memory delta)"),
        "redlock, released (counter only)",
        opt(released, bytes),
        None,
        String::new(),
        format!("{} vs SET NX PX", ratio(r_rel)),
    );
    report.table.row(
        "4",
        &format!("memory, {names} names (used_memory delta)"),
        "SET NX PX, 36-byte value",
        opt(set, bytes),
        None,
        String::new(),
        String::new(),
    );
    Ok(())
}
