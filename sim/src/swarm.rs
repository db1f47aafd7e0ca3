//! Many seeds: a swarm over threads, with a progress bar, a summary table
//! (fault kinds per 1,000 seeds, simulated lock operations per CPU-second)
//! and the mutant table.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::check::Violation;
use crate::mutant::SimMutant;
use crate::scenario::{FaultKind, Overrides};
use crate::stats::Stats;
use crate::world::Setup;

/// A failing seed of a swarm.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Its first violation.
    pub first: Violation,
    /// How many violations it had.
    pub count: usize,
}

/// What a swarm found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds with a violation.
    pub failures: Vec<Failure>,
    /// Counts, added up.
    pub stats: Stats,
    /// Events, added up.
    pub events: u64,
    /// Simulated true time, added up (µs).
    pub simulated_us: u64,
    /// CPU time of the threads that ran the seeds.
    pub cpu: Duration,
    /// Wall time.
    pub wall: Duration,
}

/// The CPU time this thread used so far.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a plain call with a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// How a swarm runs.
#[derive(Clone, Debug)]
pub struct SwarmOptions {
    /// The first seed.
    pub from: u64,
    /// How many seeds.
    pub seeds: u64,
    /// Threads.
    pub threads: usize,
    /// Narrowing of each seed's draw.
    pub overrides: Overrides,
    /// Mutants and switches.
    pub setup: Setup,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Stop at the first failing seed.
    pub stop_at_first_failure: bool,
}

/// Runs a swarm.
pub fn swarm(o: &SwarmOptions) -> Summary {
    let next = AtomicU64::new(o.from);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let total = Mutex::new(Summary::default());
    let end = o.from + o.seeds;
    let started = Instant::now();
    let threads = o.threads.max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let cpu0 = thread_cpu();
                let mut mine = Summary::default();
                let mut setup = o.setup.clone();
                setup.stop_at_first = true;
                loop {
                    if stop.load(Relaxed) {
                        break;
                    }
                    let seed = next.fetch_add(1, Relaxed);
                    if seed >= end {
                        break;
                    }
                    let out = crate::run(seed, &o.overrides, &setup);
                    mine.seeds += 1;
                    mine.events += out.events;
                    mine.simulated_us += out.end;
                    mine.stats.add(&out.stats);
                    if let Some(first) = out.violations.first() {
                        mine.failures.push(Failure {
                            seed,
                            first: first.clone(),
                            count: out.violations.len(),
                        });
                        if o.stop_at_first_failure {
                            stop.store(true, Relaxed);
                        }
                    }
                    done.fetch_add(1, Relaxed);
                }
                mine.cpu = thread_cpu() - cpu0;
                let mut t = total.lock().unwrap_or_else(|p| p.into_inner());
                t.seeds += mine.seeds;
                t.events += mine.events;
                t.simulated_us += mine.simulated_us;
                t.stats.add(&mine.stats);
                t.failures.extend(mine.failures);
                t.cpu += mine.cpu;
            });
        }
        if o.progress {
            scope.spawn(|| {
                let mut last = 0;
                while !stop.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    let d = done.load(Relaxed);
                    if d != last {
                        last = d;
                        draw_progress(d, o.seeds, started.elapsed());
                    }
                    if d >= o.seeds {
                        break;
                    }
                }
                eprintln!();
            });
        }
    });
    let mut t = total.into_inner().unwrap_or_else(|p| p.into_inner());
    t.failures.sort_by_key(|f| f.seed);
    t.wall = started.elapsed();
    t
}

fn draw_progress(done: u64, total: u64, elapsed: Duration) {
    let width = 40;
    let filled = (done * width / total.max(1)) as usize;
    let rate = done as f64 / elapsed.as_secs_f64().max(1e-9);
    let left = (total.saturating_sub(done)) as f64 / rate.max(1e-9);
    eprint!(
        "\r[{}{}] {done}/{total} seeds  {rate:.0} seeds/s  {left:.0} s left   ",
        "#".repeat(filled),
        " ".repeat(width as usize - filled)
    );
    let _ = std::io::stderr().flush();
}

impl Summary {
    /// Simulated lock operations (commands the nodes ran) per CPU-second.
    pub fn ops_per_cpu_second(&self) -> f64 {
        self.stats.node_commands as f64 / self.cpu.as_secs_f64().max(1e-9)
    }

    /// The summary table (Markdown).
    pub fn table(&self) -> String {
        let s = &self.stats;
        let per_k = |n: u64| n as f64 * 1000.0 / self.seeds.max(1) as f64;
        let mut out = String::new();
        out.push_str("| figure | value |\n|---|---|\n");
        let rows: Vec<(&str, String)> = vec![
            ("seeds", self.seeds.to_string()),
            ("seeds with a violation", self.failures.len().to_string()),
            ("events", self.events.to_string()),
            (
                "simulated time",
                format!("{:.0} s", self.simulated_us as f64 / 1e6),
            ),
            (
                "lock commands run by the nodes",
                s.node_commands.to_string(),
            ),
            ("acquisitions (clients)", s.acquisitions.to_string()),
            ("grants refused by the guard", s.grace_refused.to_string()),
            ("waiters woken", s.wakeups.to_string()),
            ("replicas promoted", s.promotions.to_string()),
            ("records reclaimed", s.reclaimed.to_string()),
            (
                "stale uses refused by the resource",
                s.resource_refused.to_string(),
            ),
            (
                "late copies that reached a node",
                s.copies_landed.to_string(),
            ),
            (
                "renewals that met a longer lease",
                s.renewals_shorter.to_string(),
            ),
            (
                "EXTENDs that shortened a live lease",
                s.extends_shorter.to_string(),
            ),
            (
                "promotions with a window shorter than the longest ttl",
                s.short_windows.to_string(),
            ),
            ("CPU time", format!("{:.1} s", self.cpu.as_secs_f64())),
            ("wall time", format!("{:.1} s", self.wall.as_secs_f64())),
            (
                "simulated lock operations per CPU-second",
                format!("{:.0}", self.ops_per_cpu_second()),
            ),
            (
                "seeds per minute (wall)",
                format!(
                    "{:.0}",
                    self.seeds as f64 * 60.0 / self.wall.as_secs_f64().max(1e-9)
                ),
            ),
            (
                "seeds per CPU-minute",
                format!(
                    "{:.0}",
                    self.seeds as f64 * 60.0 / self.cpu.as_secs_f64().max(1e-9)
                ),
            ),
            (
                "acquisitions per CPU-second",
                format!(
                    "{:.0}",
                    s.acquisitions as f64 / self.cpu.as_secs_f64().max(1e-9)
                ),
            ),
        ];
        for (k, v) in rows {
            out.push_str(&format!("| {k} | {v} |\n"));
        }
        out.push_str("\n| fault kind | injected | per 1,000 seeds |\n|---|---|---|\n");
        for k in FaultKind::ALL {
            let n = s.faults[k.index()];
            out.push_str(&format!("| {} | {n} | {:.0} |\n", k.name(), per_k(n)));
        }
        out
    }
}

/// One row of the mutant table.
#[derive(Clone, Debug)]
pub struct MutantRow {
    /// The mutant.
    pub mutant: &'static SimMutant,
    /// The first seed (from 0) it fails, if any within the budget.
    pub first_failure: Option<u64>,
    /// The violation it failed with.
    pub caught_as: Option<Violation>,
    /// Seconds (wall) to find it.
    pub seconds: f64,
}

/// Runs seeds 0.. with `mutant` on until one fails (at most `budget`).
pub fn first_failure(mutant: &'static SimMutant, budget: u64, threads: usize) -> MutantRow {
    let started = Instant::now();
    let mut setup = mutant.setup();
    setup.stop_at_first = true;
    // In chunks, so that the lowest failing seed is the one reported.
    let chunk = 64 * threads.max(1) as u64;
    let mut from = 0;
    while from < budget {
        let o = SwarmOptions {
            from,
            seeds: chunk.min(budget - from),
            threads,
            overrides: Overrides::default(),
            setup: setup.clone(),
            progress: false,
            stop_at_first_failure: false,
        };
        let s = swarm(&o);
        // A seed that fails through a partner hole alone does not count.
        if let Some(f) = s.failures.iter().find(|f| mutant.own_failure(f.seed)) {
            return MutantRow {
                mutant,
                first_failure: Some(f.seed),
                caught_as: Some(f.first.clone()),
                seconds: started.elapsed().as_secs_f64(),
            };
        }
        from += chunk;
    }
    MutantRow {
        mutant,
        first_failure: None,
        caught_as: None,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// The mutant table (Markdown).
pub fn mutant_table(rows: &[MutantRow]) -> String {
    let mut out = String::from(
        "| mutant | seeds to first failure | seconds | caught as | what it puts back |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        let (seeds, caught) = match (&r.first_failure, &r.caught_as) {
            (Some(seed), Some(v)) => ((seed + 1).to_string(), v.kind.to_string()),
            _ => ("not caught".into(), "-".into()),
        };
        out.push_str(&format!(
            "| {} | {} | {:.1} | {} | {} |\n",
            r.mutant.name, seeds, r.seconds, caught, r.mutant.what
        ));
    }
    out
}
