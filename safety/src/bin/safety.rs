//! `safety`: runs the fault matrix against five local module-enabled nodes,
//! prints a table per fault type, writes the histories to `--out`, and exits
//! 1 on any violation of what the run guarantees (2 when a run could not be
//! carried out).
//!
//! ```text
//! safety --quick --out target/safety          # CI: fixed seed, about a minute
//! safety --duration 600 --seed 7 --out DIR    # the full matrix, about 10 minutes
//! safety --only promoted_replica_restart --duration 30 --seed 7   # one fault type, two 15 s runs
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use redlock_safety::checker::Report;
use redlock_safety::election;
use redlock_safety::runner::{self, FaultType, Reclaim, RunConfig};
use redlock_safety::workload::{self, WorkerSpec};

/// Fault injection against a five-node redlock quorum, checked by a program.
#[derive(Parser)]
#[command(name = "safety", version)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Seed of the whole matrix (each run derives its own).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Total workload time in seconds, split over the runs (full mode).
    #[arg(long, default_value_t = 600)]
    duration: u64,
    /// Folder for the histories and summary.json.
    #[arg(long, default_value = "target/safety")]
    out: PathBuf,
    /// Short fixed-seed matrix for CI (one 4 s run per fault type).
    #[arg(long)]
    quick: bool,
    /// Only these fault types (names as in the table), comma-separated;
    /// `reclaim` selects the runs that reclaim idle records,
    /// `reclaim_mixed_floor` those of them whose clients send no clock
    /// floor in one process out of two.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// A `valkey-server` binary for the fault types that run on Valkey
    /// (`promote_lagging_replica_valkey`); without it they are skipped.
    #[arg(long, env = "REDLOCK_VALKEY_BIN")]
    valkey: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Internal: run one worker process from a JSON spec.
    #[command(hide = true)]
    Worker {
        /// The WorkerSpec as JSON.
        spec: String,
    },
}

fn worker(spec: &str) -> ExitCode {
    let spec: WorkerSpec = match serde_json::from_str(spec) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bad worker spec: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let run = if spec.election {
        rt.block_on(election::run_candidates(spec))
    } else {
        rt.block_on(workload::run_worker(spec))
    };
    match run {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Cmd::Worker { spec }) = &args.cmd {
        return worker(spec);
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("safety: cannot find my own binary: {e}");
            return ExitCode::from(2);
        }
    };
    let types: Vec<FaultType> = FaultType::MATRIX
        .iter()
        .copied()
        .filter(|f| args.only.is_empty() || args.only.iter().any(|o| o == f.name()))
        .filter(|f| !args.quick || f.in_quick_run())
        .filter(|f| {
            let runs = !f.on_valkey() || args.valkey.is_some();
            if !runs {
                eprintln!(
                    "safety: {} skipped: no Valkey binary (--valkey or REDLOCK_VALKEY_BIN)",
                    f.name()
                );
            }
            runs
        })
        .collect();
    let only = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let with_reclaim = only("reclaim");
    let with_mixed = with_reclaim || only("reclaim_mixed_floor");
    if types.is_empty() && !with_mixed {
        eprintln!("safety: --only matches no fault type");
        return ExitCode::from(2);
    }
    let (seed, runs_per_type, run_secs, budget) = if args.quick {
        (1, 1, 4.0, 6)
    } else {
        let per = (args.duration as f64 / (types.len().max(1) * 2) as f64).max(3.0);
        (args.seed, 2, per, 40)
    };
    let began = Instant::now();
    let mut table: Vec<(FaultType, usize, Report)> = Vec::new();
    let mut failed = Vec::new();
    for (ti, &fault) in types.iter().enumerate() {
        let mut total = Report::default();
        let mut runs = 0;
        for r in 0..runs_per_type {
            // An election is over one name.
            let keys = if (ti + r) % 2 == 0 || fault == FaultType::Election {
                1
            } else {
                4
            };
            // Cluster faults take seconds each (a failover waits for the
            // cluster to settle): a longer quick run, so that each kind runs.
            let secs = if args.quick && fault == FaultType::ClusterShards {
                10.0
            } else if args.quick && fault == FaultType::Election {
                // Room for each of its three faults (node pause, kill -9,
                // process pause) after the workers connect.
                5.0
            } else if fault.is_sentinel() {
                // The group takes a few seconds to form and each failover
                // two to three.
                if args.quick {
                    16.0
                } else {
                    run_secs.max(60.0)
                }
            } else {
                run_secs
            };
            let mut cfg = RunConfig::new(
                fault,
                Duration::from_secs_f64(secs),
                exe.clone(),
                args.out.clone(),
            );
            if fault.on_valkey() {
                cfg.server_bin = args.valkey.clone();
            }
            // Every other run waits for busy locks with `acquire_wait`
            // (woken by the nodes) instead of one attempt per try.
            // (Candidates always wait: a campaign is a waiting acquisition.)
            let waiting = (ti / 2 + r) % 2 == 1 && fault != FaultType::Election;
            if waiting {
                // Sentinel runs' leases are long: a wait of three would
                // outlast the run's end.
                cfg.client.wait_ms = Some((cfg.ttl_ms * 3).min(3_000));
            }
            cfg.name = format!(
                "{}-k{keys}-r{r}{}",
                fault.name(),
                if waiting { "-wait" } else { "" }
            );
            cfg.keys = keys;
            cfg.seed = seed.wrapping_mul(1000).wrapping_add((ti * 10 + r) as u64);
            cfg.fault_budget = budget;
            match runner::run(&cfg) {
                Ok(res) => {
                    let rep = &res.report;
                    eprintln!(
                        "[{:>5.0}s] {:<28} acquisitions={:<6} faults={:<3} violations={}{} -> {}",
                        began.elapsed().as_secs_f64(),
                        cfg.name,
                        rep.acquisitions,
                        rep.faults,
                        rep.violations(),
                        if fault.is_sentinel() {
                            format!(" locks_lost={}/{}", rep.locks_lost, rep.locks_checked)
                        } else {
                            String::new()
                        },
                        res.history.display()
                    );
                    for ex in rep.examples.iter().take(3) {
                        eprintln!("          {ex}");
                    }
                    total.add(rep);
                    runs += 1;
                }
                Err(e) => {
                    eprintln!("{}: run failed: {e}", cfg.name);
                    failed.push(cfg.name.clone());
                }
            }
        }
        table.push((fault, runs, total));
    }
    let mut reclaim_rows: Vec<(String, usize, Report, u64)> = Vec::new();
    // Reclamation runs: (fault, clients without the floor in every other
    // process, seed index).
    let mut reclaim_runs: Vec<(FaultType, bool, u64)> = Vec::new();
    if with_reclaim {
        let faults: &[FaultType] = if args.quick {
            &Reclaim::QUICK_FAULTS
        } else {
            &Reclaim::FAULTS
        };
        reclaim_runs.extend((0..).zip(faults).map(|(i, &f)| (f, false, 500 + i)));
    }
    if with_mixed {
        let faults: &[FaultType] = if args.quick {
            &Reclaim::QUICK_MIXED_FAULTS
        } else {
            &Reclaim::MIXED_FAULTS
        };
        reclaim_runs.extend((0..).zip(faults).map(|(i, &f)| (f, true, 600 + i)));
    }
    if !reclaim_runs.is_empty() {
        for &(fault, mixed, index) in &reclaim_runs {
            let secs = match (args.quick, mixed) {
                (true, false) => 5.0,
                // A name is reclaimed 1 s into its idle 2 s phase and
                // reused at the next: within about 4 s of the start.
                (true, true) => 4.5,
                (false, _) => run_secs.max(12.0),
            };
            let mut cfg = RunConfig::new(
                fault,
                Duration::from_secs_f64(secs),
                exe.clone(),
                args.out.clone(),
            );
            Reclaim::SHORT.apply(&mut cfg);
            cfg.mixed_floor = mixed;
            cfg.name = if mixed {
                format!("reclaim_mixed_floor+{}", fault.name())
            } else {
                format!("reclaim+{}", fault.name())
            };
            cfg.seed = seed.wrapping_mul(1000).wrapping_add(index);
            cfg.fault_budget = budget;
            match runner::run(&cfg) {
                Ok(res) => {
                    let rep = &res.report;
                    eprintln!(
                        "[{:>5.0}s] {:<28} acquisitions={:<6} faults={:<3} reclaimed={:<5} violations={} -> {}",
                        began.elapsed().as_secs_f64(),
                        cfg.name,
                        rep.acquisitions,
                        rep.faults,
                        res.reclaimed,
                        rep.violations(),
                        res.history.display()
                    );
                    for ex in rep.examples.iter().take(3) {
                        eprintln!("          {ex}");
                    }
                    if res.reclaimed == 0 {
                        eprintln!("{}: no record was reclaimed", cfg.name);
                        failed.push(cfg.name.clone());
                    }
                    reclaim_rows.push((cfg.name.clone(), 1, res.report.clone(), res.reclaimed));
                }
                Err(e) => {
                    eprintln!("{}: run failed: {e}", cfg.name);
                    failed.push(cfg.name.clone());
                }
            }
        }
    }
    if !table.is_empty() {
        print_table(&table);
    }
    let sentinel_rows: Vec<&(FaultType, usize, Report)> =
        table.iter().filter(|(f, _, _)| f.is_sentinel()).collect();
    if !sentinel_rows.is_empty() {
        println!(
            "locks lost by their holders in failovers (holds still valid that the new master lacked):"
        );
        for (f, _, r) in sentinel_rows {
            println!(
                "  {:<22} {} of {} holds checked after {} faults ({})",
                f.name(),
                r.locks_lost,
                r.locks_checked,
                r.faults,
                if *f == FaultType::Sentinel {
                    "with the replica-sync check, R = 2"
                } else {
                    "without it: the promotion guard keeps the run safe"
                }
            );
        }
    }
    for (name, _, r, reclaimed) in &reclaim_rows {
        println!(
            "{name:<36} acq={} dup={} inv={} VIOL={} reclaimed={reclaimed}",
            r.acquisitions,
            r.duplicate_tokens,
            r.token_inversions,
            r.violations()
        );
    }
    let summary: Vec<serde_json::Value> = table
        .iter()
        .map(|(f, runs, r)| serde_json::json!({"fault": f.name(), "runs": runs, "report": r}))
        .collect();
    let _ = std::fs::write(
        args.out.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap_or_default(),
    );
    let violations: u64 = table.iter().map(|(_, _, r)| r.violations()).sum::<u64>()
        + reclaim_rows
            .iter()
            .map(|(_, _, r, _)| r.violations())
            .sum::<u64>();
    println!(
        "total: {} acquisitions, {} faults, {} violations, {} failed runs, {:.0} s; histories in {}",
        table.iter().map(|t| t.2.acquisitions).sum::<u64>()
            + reclaim_rows.iter().map(|t| t.2.acquisitions).sum::<u64>(),
        table.iter().map(|t| t.2.faults).sum::<u64>()
            + reclaim_rows.iter().map(|t| t.2.faults).sum::<u64>(),
        violations,
        failed.len(),
        began.elapsed().as_secs_f64(),
        args.out.display()
    );
    if violations > 0 {
        ExitCode::from(1)
    } else if !failed.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_table(rows: &[(FaultType, usize, Report)]) {
    let head = [
        "fault",
        "runs",
        "acq",
        "acq_fail",
        "faults",
        "res_ops",
        "refused",
        "dup",
        "inv",
        "stale_ok",
        "lost",
        "ovl_expl",
        "ovl_unexpl",
        "valid_late",
        "regress",
        "VIOL",
    ];
    println!(
        "{:<26}{}",
        head[0],
        head[1..]
            .iter()
            .map(|h| format!("{h:>11}"))
            .collect::<String>()
    );
    for (f, runs, r) in rows {
        let cells = [
            *runs as u64,
            r.acquisitions,
            r.acquire_failures,
            r.faults,
            r.resource_ops,
            r.stale_refused,
            r.duplicate_tokens,
            r.token_inversions,
            r.stale_accepted,
            r.lost_updates,
            r.overlaps_explained,
            r.overlaps_unexplained,
            r.valid_after_end,
            r.counter_regressions,
            r.violations(),
        ];
        println!(
            "{:<26}{}",
            f.name(),
            cells.iter().map(|c| format!("{c:>11}")).collect::<String>()
        );
    }
}
