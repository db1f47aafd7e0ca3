//! Section 2: tasks on one key, one `try_acquire` per operation.

use std::sync::Arc;
use std::time::Instant;

use redlock_bench::workload::{self, Outcome, RunResult, Window};

use crate::lockers::{timed, Lockers, TTL};
use crate::plan::{Impl, Plan};
use crate::report::{
    cpu_text, errors_note, med_lat, med_rate, med_ratio, opt, ratio, rotated, thousands, Report,
};

/// Tasks on the one key of the contended workload.
pub(crate) const CONTENDERS: usize = 16;

/// `CONTENDERS` tasks on one key: one `try_acquire` per operation (its
/// latency is recorded), released at once when it succeeded.
async fn attempts(
    l: &Lockers,
    imp: Impl,
    window: Window,
    round: usize,
) -> Result<RunResult, String> {
    let key: Arc<str> = Arc::from(format!("bench:c:{imp:?}:{round}"));
    let what = format!("contended {}", imp.label());
    match imp {
        Impl::Client => {
            let c = l.client.clone().ok_or("no client")?;
            timed(
                &what,
                window,
                workload::run(CONTENDERS, window, &l.pids, move |_| {
                    let (c, key) = (c.clone(), key.clone());
                    async move {
                        let t = Instant::now();
                        let got = c.try_acquire(&key, TTL).await?;
                        let latency = t.elapsed();
                        let ok = got.is_some();
                        if let Some(lock) = got {
                            c.release(lock).await?;
                        }
                        Ok(Outcome { ok, latency })
                    }
                }),
            )
            .await
        }
        Impl::Hand => {
            let h = l.hand.clone().ok_or("no hand-written")?;
            timed(
                &what,
                window,
                workload::run(CONTENDERS, window, &l.pids, move |_| {
                    let (h, key) = (h.clone(), key.clone());
                    async move {
                        let t = Instant::now();
                        let got = h.try_acquire(&key, TTL).await.map_err(|e| e.to_string())?;
                        let latency = t.elapsed();
                        let ok = got.is_some();
                        if let Some(lock) = got {
                            h.release(&key, &lock).await.map_err(|e| e.to_string())?;
                        }
                        Ok(Outcome { ok, latency })
                    }
                }),
            )
            .await
        }
        Impl::Floor => Err("the floor has no contended form".into()),
    }
}

/// Runs the section and adds its rows and figures.
pub(crate) async fn run(l: &Lockers, plan: &Plan, report: &mut Report) -> Result<(), String> {
    let window = plan.window;
    let impls: Vec<Impl> = plan
        .impls
        .iter()
        .copied()
        .filter(|i| *i != Impl::Floor)
        .collect();
    let mut res: Vec<Vec<RunResult>> = vec![Vec::new(); 3];
    for round in 0..plan.rounds {
        for imp in rotated(&impls, round) {
            res[imp as usize].push(attempts(l, imp, window, round).await?);
        }
    }
    eprintln!("  contended done");
    for imp in impls.iter().copied() {
        let runs = &res[imp as usize];
        let tag = format!("contended.{imp:?}").to_lowercase();
        let ok = report.figures.put(
            format!("{tag}.successes_per_sec"),
            med_rate(runs, |r| r.ok_per_sec),
        );
        let failed = report.figures.put(
            format!("{tag}.failed_per_sec"),
            med_rate(runs, |r| r.failed_per_sec),
        );
        let lat = med_lat(runs);
        report
            .figures
            .put(format!("{tag}.attempt_p50_us"), lat.map(|p| p.p50));
        report
            .figures
            .put(format!("{tag}.attempt_p99_us"), lat.map(|p| p.p99));
        report
            .figures
            .put(format!("{tag}.attempt_p999_us"), lat.map(|p| p.p999));
        let ratio_text = if imp == Impl::Client && impls.contains(&Impl::Hand) {
            let r = med_ratio(&res[0], &res[1], |r| Some(r.ok_per_sec));
            report.figures.put(format!("{tag}.successes_vs_hand"), r);
            format!("{} successes vs hand", ratio(r))
        } else {
            String::new()
        };
        report.table.row(
            "2",
            &format!("contended, {CONTENDERS} tasks on one key, try_acquire (attempt latency)"),
            imp.label(),
            format!(
                "{} ok/s + {} failed/s{}",
                opt(ok, thousands),
                opt(failed, thousands),
                errors_note(runs)
            ),
            lat,
            cpu_text(&mut report.figures, &tag, runs),
            ratio_text,
        );
    }
    report.table.row(
        "2",
        "",
        Impl::Floor.label(),
        "n/a".into(),
        None,
        String::new(),
        String::new(),
    );
    Ok(())
}
