//! The waiting scenario (`redlock_bench::waiting`), on nodes of its own.

use std::path::Path;

use redlock_bench::waiting;
use redlock_testkit::Node;

use crate::report::Figures;

/// The waiting scenario (`redlock_bench::waiting`), on nodes of their own.
pub(crate) async fn run(module: &Path, smoke: bool, figures: &mut Figures) -> Result<(), String> {
    let builder = Node::builder().module(module.to_path_buf());
    let plan = if smoke {
        waiting::WaitingPlan::smoke()
    } else {
        waiting::WaitingPlan::full()
    };
    let report = waiting::run(&builder, &plan).await?;
    println!();
    report.print();
    for r in &report.rows {
        let name = format!("waiting_{:?}_{}", r.waiter, r.tasks).to_lowercase();
        figures.put(format!("{name}_acq_per_s"), Some(r.rate));
        figures.put(format!("{name}_handoff_p99_us"), Some(r.handoff_wait_us.1));
        figures.put(format!("{name}_handoff_share"), Some(r.handoff_share));
        figures.put(format!("{name}_fairness"), Some(r.fairness()));
        figures.put(
            format!("{name}_commands_per_acq"),
            Some(r.commands_per_acquisition),
        );
    }
    figures.put(
        "waiting_held_commands_per_waiter",
        Some(report.held.commands as f64 / report.held.waiters.max(1) as f64),
    );
    Ok(())
}
