//! Section 5: acquire latency with all five nodes healthy and with one node
//! behind a proxy that delays it.

use std::time::Duration;

use redlock_bench::workload::RunResult;
use redlock_testkit::proxy::{Fault, FaultProxy};
use redlock_testkit::Node;

use crate::lockers::{addr_of, own_key_cycles, Lockers, Timed};
use crate::plan::{Impl, Plan};
use crate::report::{
    cpu_text, med_lat, med_rate, med_ratio, opt, p50, ratio, rotated, thousands, Report, Target,
};

/// Tasks of the slow-node workload.
pub(crate) const SLOW_TASKS: usize = 16;
/// One-way delay added by the proxy in front of the slow node.
pub(crate) const SLOW_DELAY: Duration = Duration::from_millis(20);

/// Runs the section against `nodes` (the first one is slowed) and adds its
/// rows, figures and target.
pub(crate) async fn run(
    l: &Lockers,
    nodes: &[Node],
    pids: &[u32],
    plan: &Plan,
    report: &mut Report,
) -> Result<(), String> {
    let window = plan.window;
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let proxy = FaultProxy::start(addr_of(&nodes[0]));
    let mut slow_urls = urls.clone();
    slow_urls[0] = proxy.url();
    let slow_plan = Plan {
        impls: plan
            .impls
            .iter()
            .copied()
            .filter(|i| *i != Impl::Floor)
            .collect(),
        ..plan.clone()
    };
    let slow = Lockers::connect(&slow_urls, pids, &slow_plan).await?;
    proxy.set(Fault::Delay(SLOW_DELAY));
    let impls = slow_plan.impls.clone();
    let mut healthy: Vec<Vec<RunResult>> = vec![Vec::new(); 3];
    let mut delayed: Vec<Vec<RunResult>> = vec![Vec::new(); 3];
    for round in 0..plan.rounds {
        for imp in rotated(&impls, round) {
            healthy[imp as usize].push(
                own_key_cycles(
                    l,
                    imp,
                    SLOW_TASKS,
                    window,
                    "bench:s:healthy",
                    Timed::Acquire,
                )
                .await?,
            );
            delayed[imp as usize].push(
                own_key_cycles(
                    &slow,
                    imp,
                    SLOW_TASKS,
                    window,
                    "bench:s:slow",
                    Timed::Acquire,
                )
                .await?,
            );
        }
    }
    eprintln!("  slow node done");
    for imp in impls.iter().copied() {
        let tag = format!("slow.{imp:?}").to_lowercase();
        let h = med_lat(&healthy[imp as usize]);
        let d = med_lat(&delayed[imp as usize]);
        report
            .figures
            .put(format!("{tag}.healthy_p50_us"), h.map(|p| p.p50));
        report
            .figures
            .put(format!("{tag}.healthy_p99_us"), h.map(|p| p.p99));
        report
            .figures
            .put(format!("{tag}.slow_p50_us"), d.map(|p| p.p50));
        let p99 = report
            .figures
            .put(format!("{tag}.slow_p99_us"), d.map(|p| p.p99));
        let rate = med_rate(&delayed[imp as usize], |r| r.ok_per_sec);
        let rate_h = med_rate(&healthy[imp as usize], |r| r.ok_per_sec);
        if imp == Impl::Client {
            report.targets.push(Target {
                what: "slow node: client acquire p99 < 20 ms".into(),
                figure: p99.map(|v| v / 1000.0),
                met: p99.map(|v| v < 20_000.0),
            });
        }
        let r = med_ratio(&delayed[imp as usize], &healthy[imp as usize], p50);
        report.table.row(
            "5",
            &format!("acquire latency, {SLOW_TASKS} tasks, all 5 nodes healthy"),
            imp.label(),
            opt(rate_h, |v| format!("{} acquisitions/s", thousands(v))),
            h,
            cpu_text(
                &mut report.figures,
                &format!("{tag}.healthy"),
                &healthy[imp as usize],
            ),
            String::new(),
        );
        report.table.row(
            "5",
            &format!(
                "acquire latency, {SLOW_TASKS} tasks, 1 of 5 nodes +{} ms each way",
                SLOW_DELAY.as_millis()
            ),
            imp.label(),
            opt(rate, |v| format!("{} acquisitions/s", thousands(v))),
            d,
            cpu_text(
                &mut report.figures,
                &format!("{tag}.slow"),
                &delayed[imp as usize],
            ),
            format!("{} p50 vs healthy", ratio(r)),
        );
    }
    drop(slow);
    drop(proxy);
    Ok(())
}
