//! Reclaiming idle lock records (DESIGN §8), two scenarios on nodes of
//! their own:
//!
//! - **steady state**: fresh names locked (with FLOOR) and released at a
//!   fixed rate with a short `redlock.reclaim-after-ms`. The records level
//!   off at about rate × reclaim-after, and so does memory; the same
//!   workload with reclamation off grows without end. ACQUIRE latency is
//!   timed in both, so the p99 during sweeps can be set against the p99
//!   without reclamation.
//! - **idle million**: N idle records (a million in a full run) reclaimed at
//!   once: how long the sweep takes, its longest tick (`INFO redlock`), and
//!   `PING` latency before and during the sweep.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlock_testkit::{Node, NodeBuilder};

use crate::memory::{settled_memory, used_memory};
use crate::stats::{Percentiles, Samples};

/// `redlock.max-ttl-ms` of the nodes (reclamation also waits this long).
const MAX_TTL_MS: u64 = 1_000;
/// Lease of each steady-state acquisition.
const TTL_MS: u64 = 100;

/// Sizes of one reclaim benchmark.
#[derive(Clone, Copy, Debug)]
pub struct ReclaimPlan {
    /// Fresh names per second in the steady state.
    pub rate: u64,
    /// `redlock.reclaim-after-ms` of the steady state.
    pub reclaim_after_ms: u64,
    /// Length of each steady-state run.
    pub duration: Duration,
    /// Idle records of the second scenario.
    pub idle_records: u64,
}

impl ReclaimPlan {
    /// A full run: 2,000 names/s, reclaim-after 2 s, 12 s runs, a million idle records.
    pub const FULL: ReclaimPlan = ReclaimPlan {
        rate: 2_000,
        reclaim_after_ms: 2_000,
        duration: Duration::from_secs(12),
        idle_records: 1_000_000,
    };

    /// A smoke run: a few seconds.
    pub const SMOKE: ReclaimPlan = ReclaimPlan {
        rate: 500,
        reclaim_after_ms: 1_000,
        duration: Duration::from_secs(3),
        idle_records: 20_000,
    };
}

/// One steady-state run.
#[derive(Clone, Debug)]
pub struct SteadyRun {
    /// Records at the end.
    pub records_end: u64,
    /// Mean records over the second half of the run.
    pub records_plateau: f64,
    /// Records added per second over the second half (≈ 0 when level).
    pub growth_per_s: f64,
    /// `used_memory` above the empty node, mean over the second half, bytes.
    pub memory_plateau: f64,
    /// `used_memory` above the empty node at the end, bytes.
    pub memory_end: f64,
    /// ACQUIRE round-trip latency.
    pub acquire: Percentiles,
    /// Records reclaimed during the run.
    pub reclaimed: u64,
    /// Longest sweep tick, µs.
    pub longest_tick_us: u64,
}

/// Both steady-state runs.
#[derive(Clone, Debug)]
pub struct Steady {
    /// The plan.
    pub plan: ReclaimPlan,
    /// With reclamation.
    pub on: SteadyRun,
    /// Reclamation off (`redlock.reclaim-after-ms 0`).
    pub off: SteadyRun,
}

/// The idle-records scenario.
#[derive(Clone, Debug)]
pub struct IdleSweep {
    /// Records loaded.
    pub records: u64,
    /// Time from turning reclamation on to the last record gone.
    pub took: Duration,
    /// Longest sweep tick, µs.
    pub longest_tick_us: u64,
    /// Sweep ticks that did work.
    pub ticks: u64,
    /// `PING` latency before the sweep.
    pub ping_before: Percentiles,
    /// `PING` latency during the sweep.
    pub ping_during: Percentiles,
    /// Slowest `PING` during the sweep, µs.
    pub ping_max_during_us: f64,
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn info_u64(con: &mut redis::Connection, field: &str) -> Result<u64, String> {
    let info: String = redis::cmd("INFO")
        .arg("redlock")
        .query(con)
        .map_err(|e| e.to_string())?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("INFO redlock has no {field}"))
}

fn node(builder: &NodeBuilder, reclaim_after_ms: u64) -> Node {
    builder
        .clone()
        .config("redlock.max-ttl-ms", &MAX_TTL_MS.to_string())
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.reclaim-after-ms", &reclaim_after_ms.to_string())
        .start()
}

/// Runs both scenarios on nodes built from `builder` (the module already set).
pub fn run(builder: &NodeBuilder, plan: ReclaimPlan) -> Result<(Steady, IdleSweep), String> {
    let on = steady(builder, plan, plan.reclaim_after_ms)?;
    let off = steady(builder, plan, 0)?;
    let idle = idle_sweep(builder, plan.idle_records)?;
    Ok((Steady { plan, on, off }, idle))
}

/// Fresh names at `plan.rate` for `plan.duration`, ACQUIRE (FLOOR, timed)
/// then RELEASE each, on one connection; memory and records sampled every
/// 250 ms on another.
fn steady(
    builder: &NodeBuilder,
    plan: ReclaimPlan,
    reclaim_after_ms: u64,
) -> Result<SteadyRun, String> {
    let node = node(builder, reclaim_after_ms);
    let mut con = node.connection();
    let mut probe = node.connection();
    let base = settled_memory(&mut probe).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut latencies =
        Samples::with_capacity((plan.rate * plan.duration.as_secs().max(1)) as usize);
    let mut samples: Vec<(f64, u64, u64)> = Vec::new();
    let mut next_sample = started;
    let mut sent = 0u64;
    let interval = Duration::from_secs_f64(1.0 / plan.rate.max(1) as f64);
    while started.elapsed() < plan.duration {
        let due = (started.elapsed().as_secs_f64() * plan.rate as f64) as u64;
        while sent < due {
            let key = format!("fresh:{sent}");
            let t = Instant::now();
            let token: Option<i64> = redis::cmd("REDLOCK.ACQUIRE")
                .arg(&key)
                .arg("owner")
                .arg(TTL_MS)
                .arg("FLOOR")
                .arg(now_us())
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            latencies.push(t.elapsed());
            if token.is_none() {
                return Err(format!("{key}: not granted"));
            }
            let _: i64 = redis::cmd("REDLOCK.RELEASE")
                .arg(&key)
                .arg("owner")
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            sent += 1;
        }
        if Instant::now() >= next_sample {
            let records = info_u64(&mut probe, "redlock_records")?;
            let memory = used_memory(&mut probe).map_err(|e| e.to_string())?;
            samples.push((started.elapsed().as_secs_f64(), records, memory));
            next_sample += Duration::from_millis(250);
        }
        std::thread::sleep(interval.min(Duration::from_millis(1)));
    }
    let half = plan.duration.as_secs_f64() / 2.0;
    let second: Vec<&(f64, u64, u64)> = samples.iter().filter(|s| s.0 >= half).collect();
    let (first, last) = match (second.first(), second.last()) {
        (Some(f), Some(l)) if l.0 > f.0 => (**f, **l),
        _ => return Err("too few samples".into()),
    };
    let n = second.len() as f64;
    Ok(SteadyRun {
        records_end: last.1,
        records_plateau: second.iter().map(|s| s.1 as f64).sum::<f64>() / n,
        growth_per_s: (last.1 as f64 - first.1 as f64) / (last.0 - first.0),
        memory_plateau: second.iter().map(|s| s.2 as f64 - base as f64).sum::<f64>() / n,
        memory_end: last.2 as f64 - base as f64,
        acquire: latencies.percentiles().ok_or("no ACQUIRE timed")?,
        reclaimed: info_u64(&mut probe, "redlock_reclaimed")?,
        longest_tick_us: info_u64(&mut probe, "redlock_sweep_longest_tick_us")?,
    })
}

/// Loads `n` idle FLOOR records with reclamation off, then turns it on and
/// times the sweep while a second connection PINGs in a loop.
fn idle_sweep(builder: &NodeBuilder, n: u64) -> Result<IdleSweep, String> {
    let node = node(builder, 0);
    let mut con = node.connection();
    // A floor a minute old: the counters are behind the node's clock.
    let floor = now_us() - 60_000_000;
    let batch = 10_000;
    let mut i = 0;
    while i < n {
        let mut pipe = redis::pipe();
        for k in i..(i + batch).min(n) {
            let key = format!("idle:{k}");
            pipe.cmd("REDLOCK.ACQUIRE")
                .arg(&key)
                .arg("o")
                .arg(TTL_MS)
                .arg("FLOOR")
                .arg(floor)
                .ignore()
                .cmd("REDLOCK.RELEASE")
                .arg(&key)
                .arg("o")
                .ignore();
        }
        let _: () = pipe.query(&mut con).map_err(|e| e.to_string())?;
        i += batch;
    }
    if info_u64(&mut con, "redlock_records")? != n {
        return Err("idle records not all loaded".into());
    }
    // Idle for longer than reclaim-after and max-ttl by the time it is on.
    std::thread::sleep(Duration::from_millis(MAX_TTL_MS + 200));

    let ping =
        |con: &mut redis::Connection, until: &dyn Fn() -> bool| -> Result<(Samples, f64), String> {
            let mut s = Samples::with_capacity(100_000);
            let mut max = 0f64;
            while !until() {
                let t = Instant::now();
                let _: String = redis::cmd("PING").query(con).map_err(|e| e.to_string())?;
                let d = t.elapsed();
                max = max.max(d.as_secs_f64() * 1e6);
                s.push(d);
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok((s, max))
        };
    let mut pinger = node.connection();
    let before_end = Instant::now() + Duration::from_secs(2);
    let (mut before, _) = ping(&mut pinger, &|| Instant::now() >= before_end)?;

    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = Arc::clone(&done);
        let mut watch = node.connection();
        std::thread::spawn(move || -> Result<Duration, String> {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("redlock.reclaim-after-ms")
                .arg(MAX_TTL_MS)
                .query(&mut watch)
                .map_err(|e| e.to_string())?;
            let on = Instant::now();
            let deadline = on + Duration::from_secs(600);
            while info_u64(&mut watch, "redlock_records")? > 0 {
                if Instant::now() > deadline {
                    done.store(true, Ordering::Relaxed);
                    return Err("sweep did not finish in 600 s".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let took = on.elapsed();
            done.store(true, Ordering::Relaxed);
            Ok(took)
        })
    };
    let (mut during, max) = ping(&mut pinger, &|| done.load(Ordering::Relaxed))?;
    let took = watcher
        .join()
        .map_err(|_| "sweep watcher panicked".to_string())??;
    Ok(IdleSweep {
        records: n,
        took,
        longest_tick_us: info_u64(&mut con, "redlock_sweep_longest_tick_us")?,
        ticks: info_u64(&mut con, "redlock_sweep_ticks")?,
        ping_before: before.percentiles().ok_or("no PING before")?,
        ping_during: during.percentiles().ok_or("no PING during the sweep")?,
        ping_max_during_us: max,
    })
}

impl Steady {
    /// Bytes per record in the steady state (memory plateau / records plateau).
    pub fn bytes_per_record(&self) -> f64 {
        self.on.memory_plateau / self.on.records_plateau.max(1.0)
    }

    /// rate × reclaim-after: the records expected at the plateau.
    pub fn expected_records(&self) -> f64 {
        self.plan.rate as f64 * self.plan.reclaim_after_ms as f64 / 1000.0
    }

    /// p99 of ACQUIRE with reclamation over p99 without.
    pub fn p99_ratio(&self) -> f64 {
        self.on.acquire.p99 / self.off.acquire.p99
    }

    /// Prints the figures.
    pub fn print(&self) {
        let p = &self.plan;
        println!(
            "Reclamation, steady state: {} fresh names/s (ACQUIRE FLOOR + RELEASE), reclaim-after {} ms, {:.0} s per run",
            p.rate,
            p.reclaim_after_ms,
            p.duration.as_secs_f64()
        );
        println!();
        println!("| run | records (2nd half, mean) | records at end | growth, records/s (2nd half) | memory above empty (2nd half) | ACQUIRE p50 / p99 / p99.9 µs | reclaimed | longest tick µs |");
        println!("|---|---|---|---|---|---|---|---|");
        for (name, r) in [
            ("reclaim-after on", &self.on),
            ("reclamation off", &self.off),
        ] {
            println!(
                "| {name} | {:.0} | {} | {:.0} | {:.2} MB | {:.0} / {:.0} / {:.0} | {} | {} |",
                r.records_plateau,
                r.records_end,
                r.growth_per_s,
                r.memory_plateau / 1e6,
                r.acquire.p50,
                r.acquire.p99,
                r.acquire.p999,
                r.reclaimed,
                r.longest_tick_us
            );
        }
        println!();
        println!(
            "- plateau: {:.0} records vs rate × reclaim-after = {:.0} ({:.2}×); {:.0} B per record → expected {:.2} MB, measured {:.2} MB",
            self.on.records_plateau,
            self.expected_records(),
            self.on.records_plateau / self.expected_records(),
            self.bytes_per_record(),
            self.expected_records() * self.bytes_per_record() / 1e6,
            self.on.memory_plateau / 1e6
        );
        println!(
            "- ACQUIRE p99 during sweeps / without reclamation: {:.2}× (target ≤ 1.2×)",
            self.p99_ratio()
        );
    }
}

impl IdleSweep {
    /// Prints the figures.
    pub fn print(&self) {
        println!();
        println!(
            "Reclamation, {} idle records at once: all gone in {:.1} s ({:.0} records/s) over {} ticks; longest tick {} µs",
            self.records,
            self.took.as_secs_f64(),
            self.records as f64 / self.took.as_secs_f64().max(1e-9),
            self.ticks,
            self.longest_tick_us
        );
        println!(
            "- PING p50 / p99 / p99.9 µs: before {:.0} / {:.0} / {:.0}, during the sweep {:.0} / {:.0} / {:.0} (max {:.0})",
            self.ping_before.p50,
            self.ping_before.p99,
            self.ping_before.p999,
            self.ping_during.p50,
            self.ping_during.p99,
            self.ping_during.p999,
            self.ping_max_during_us
        );
    }
}
