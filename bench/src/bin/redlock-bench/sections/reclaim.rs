//! The reclamation scenarios (`redlock_bench::reclaim`), on nodes of their own.

use std::path::Path;

use redlock_bench::reclaim;
use redlock_testkit::Node;

use crate::report::Figures;

/// The reclamation scenarios (`redlock_bench::reclaim`), on nodes of their own.
pub(crate) async fn run(module: &Path, smoke: bool, figures: &mut Figures) -> Result<(), String> {
    let builder = Node::builder().module(module.to_path_buf());
    let plan = if smoke {
        reclaim::ReclaimPlan::SMOKE
    } else {
        reclaim::ReclaimPlan::FULL
    };
    let (steady, idle) = tokio::task::spawn_blocking(move || reclaim::run(&builder, plan))
        .await
        .map_err(|e| format!("reclaim benchmark: {e}"))??;
    println!();
    steady.print();
    idle.print();
    figures.put(
        "reclaim_plateau_over_expected",
        Some(steady.on.records_plateau / steady.expected_records()),
    );
    figures.put("reclaim_bytes_per_record", Some(steady.bytes_per_record()));
    figures.put("reclaim_acquire_p99_ratio", Some(steady.p99_ratio()));
    figures.put("reclaim_idle_sweep_s", Some(idle.took.as_secs_f64()));
    figures.put(
        "reclaim_longest_tick_us",
        Some(idle.longest_tick_us.max(steady.on.longest_tick_us) as f64),
    );
    figures.put(
        "reclaim_longest_tick_cpu_us",
        Some(idle.longest_tick_cpu_us as f64),
    );
    figures.put("reclaim_ping_p99_during_us", Some(idle.ping_during.p99));
    figures.put("reclaim_ping_p99_over_control", idle.window_ratio_during);
    figures.put("reclaim_idle_sweep_share", idle.sweep_share);
    Ok(())
}
