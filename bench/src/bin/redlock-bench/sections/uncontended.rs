//! Section 1: one lock+unlock cycle per operation, each task on its own
//! key, at each concurrency level; redlock-client against the hand-written
//! Redlock and the PING floor.

use redlock_bench::workload::RunResult;

use crate::lockers::{own_key_cycles, Lockers, Timed};
use crate::plan::{Impl, Plan};
use crate::report::{
    cpu_text, errors_note, med_lat, med_rate, med_ratio, opt, p50, ratio, rotated, thousands,
    Report, Target,
};

/// Concurrency levels of the uncontended workload.
pub(crate) const CONCURRENCY: [usize; 2] = [1, 16];

/// Runs the section and adds its rows, figures and targets.
pub(crate) async fn run(l: &Lockers, plan: &Plan, report: &mut Report) -> Result<(), String> {
    let window = plan.window;
    let mut res: Vec<Vec<Vec<RunResult>>> = vec![vec![Vec::new(); 3]; CONCURRENCY.len()];
    for round in 0..plan.rounds {
        for (ci, &conc) in CONCURRENCY.iter().enumerate() {
            for imp in rotated(&plan.impls, round + ci) {
                let prefix = format!("bench:u:c{conc}");
                let r = own_key_cycles(l, imp, conc, window, &prefix, Timed::Cycle).await?;
                res[ci][imp as usize].push(r);
            }
        }
        eprintln!("  uncontended round {}/{} done", round + 1, plan.rounds);
    }
    for (ci, &conc) in CONCURRENCY.iter().enumerate() {
        let [client, hand, floor] = [&res[ci][0], &res[ci][1], &res[ci][2]];
        for imp in [Impl::Client, Impl::Hand, Impl::Floor] {
            if !plan.has(imp) {
                continue;
            }
            let runs = &res[ci][imp as usize];
            let tag = format!("uncontended.c{conc}.{imp:?}").to_lowercase();
            let rate = report.figures.put(
                format!("{tag}.cycles_per_sec"),
                med_rate(runs, |r| r.ok_per_sec),
            );
            let lat = med_lat(runs);
            report
                .figures
                .put(format!("{tag}.p50_us"), lat.map(|p| p.p50));
            report
                .figures
                .put(format!("{tag}.p99_us"), lat.map(|p| p.p99));
            report
                .figures
                .put(format!("{tag}.p999_us"), lat.map(|p| p.p999));
            let ratio_text = match imp {
                Impl::Client => {
                    let vs_hand = plan
                        .has(Impl::Hand)
                        .then(|| med_ratio(client, hand, |r| Some(r.ok_per_sec)))
                        .flatten();
                    let vs_floor = plan
                        .has(Impl::Floor)
                        .then(|| med_ratio(client, floor, p50))
                        .flatten();
                    if plan.has(Impl::Hand) {
                        report.figures.put(format!("{tag}.cycles_vs_hand"), vs_hand);
                    }
                    if plan.has(Impl::Floor) {
                        report.figures.put(format!("{tag}.p50_vs_floor"), vs_floor);
                    }
                    if conc == 16 {
                        report.targets.push(Target {
                            what: "c=16 cycles/s, client ÷ hand-written ≥ 1.00".into(),
                            figure: vs_hand,
                            met: vs_hand.map(|r| r >= 1.0),
                        });
                        report.targets.push(Target {
                            what: "c=16 p50, client ÷ PING floor ≤ 1.15".into(),
                            figure: vs_floor,
                            met: vs_floor.map(|r| r <= 1.15),
                        });
                    }
                    format!(
                        "{} cycles vs hand; {} p50 vs floor",
                        ratio(vs_hand),
                        ratio(vs_floor)
                    )
                }
                Impl::Hand => {
                    let vs_floor = plan
                        .has(Impl::Floor)
                        .then(|| med_ratio(hand, floor, p50))
                        .flatten();
                    if plan.has(Impl::Floor) {
                        report.figures.put(format!("{tag}.p50_vs_floor"), vs_floor);
                    }
                    format!("{} p50 vs floor", ratio(vs_floor))
                }
                Impl::Floor => String::new(),
            };
            report.table.row(
                "1",
                &format!("uncontended, c={conc}, own key per task"),
                imp.label(),
                format!(
                    "{}{}",
                    opt(rate, |v| format!("{} cycles/s", thousands(v))),
                    errors_note(runs)
                ),
                lat,
                cpu_text(&mut report.figures, &tag, runs),
                ratio_text,
            );
        }
    }
    Ok(())
}
