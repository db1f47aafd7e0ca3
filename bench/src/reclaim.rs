//! Reclaiming idle lock records (DESIGN §8), two scenarios on nodes of
//! their own:
//!
//! - **steady state**: fresh names locked (with FLOOR) and released at a
//!   fixed rate with a short `redlock.reclaim-after-ms`. The records level
//!   off at about rate × reclaim-after, and so does memory; the same
//!   workload with reclamation off grows without end. ACQUIRE latency is
//!   timed in both, so the p99 during sweeps can be set against the p99
//!   without reclamation. The two run side by side, so that whatever else
//!   loads the machine weighs on both, for several rounds; the figure is the
//!   median of the rounds' ratios.
//! - **idle million**: N idle records (a million in a full run) reclaimed at
//!   once: how long the sweep takes, its longest tick (`INFO redlock`), and
//!   `PING` latency during the sweep against a control node without one,
//!   pinged alternately with it over the same interval.
//!
//! Both also report the share of time spent in sweep ticks and the mean tick
//! from `INFO redlock` (`sweep_time_us`, `sweep_ticks`): figures the noise of
//! a shared machine barely moves, which bound what the sweep can add to a
//! command's latency (a command waits for at most one tick, and only when it
//! arrives during one).

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
    /// Steady-state rounds (each runs with and without reclamation).
    pub rounds: usize,
}

impl ReclaimPlan {
    /// A full run: 2,000 names/s, reclaim-after 2 s, five rounds of 12 s, a
    /// million idle records.
    pub const FULL: ReclaimPlan = ReclaimPlan {
        rate: 2_000,
        reclaim_after_ms: 2_000,
        duration: Duration::from_secs(12),
        idle_records: 1_000_000,
        rounds: 5,
    };

    /// A smoke run: a few seconds.
    pub const SMOKE: ReclaimPlan = ReclaimPlan {
        rate: 500,
        reclaim_after_ms: 1_000,
        duration: Duration::from_secs(2),
        idle_records: 10_000,
        rounds: 1,
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
    /// Share of time in sweep ticks (module lock held) over the second half.
    pub sweep_share: Option<f64>,
    /// Mean sweep tick over the second half, µs.
    pub mean_tick_us: Option<f64>,
}

/// The steady-state runs: each round runs with and without reclamation
/// side by side.
#[derive(Clone, Debug)]
pub struct Steady {
    /// The plan.
    pub plan: ReclaimPlan,
    /// With reclamation, in the round of the median p99 ratio.
    pub on: SteadyRun,
    /// Reclamation off (`redlock.reclaim-after-ms 0`), same round.
    pub off: SteadyRun,
    /// Every round, (with, without), in the order run.
    pub rounds: Vec<(SteadyRun, SteadyRun)>,
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
    /// Ticks over 1 ms (`sweep_slow_ticks`).
    pub slow_ticks: u64,
    /// The most CPU time one tick used, µs (without descheduled time).
    pub longest_tick_cpu_us: u64,
    /// `PING` latency before the sweep.
    pub ping_before: Percentiles,
    /// `PING` latency during the sweep.
    pub ping_during: Percentiles,
    /// Slowest `PING` during the sweep, µs.
    pub ping_max_during_us: f64,
    /// `PING` latency of the control node (no records, no sweep) before the
    /// sweep, pinged alternately with the sweeping node.
    pub control_before: Percentiles,
    /// `PING` latency of the control node during the sweep.
    pub control_during: Percentiles,
    /// Share of time in sweep ticks (module lock held) while the sweep ran.
    pub sweep_share: Option<f64>,
    /// Mean sweep tick, µs.
    pub mean_tick_us: Option<f64>,
    /// Median over [`PING_WINDOW`]s before the sweep of the sweeping node's
    /// PING p99 over the control node's.
    pub window_ratio_before: Option<f64>,
    /// The same during the sweep.
    pub window_ratio_during: Option<f64>,
}

/// PINGs are compared window by window: the load of the rest of the
/// machine changes within seconds, and a window's two p99s see the same.
const PING_WINDOW: Duration = Duration::from_secs(5);
/// PINGs before the sweep (a full run).
const PING_BEFORE: Duration = Duration::from_secs(10);

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

/// Total sweep time and ticks (`None` from a module without `sweep_time_us`).
fn sweep_counters(con: &mut redis::Connection) -> Result<Option<(u64, u64)>, String> {
    let ticks = info_u64(con, "redlock_sweep_ticks")?;
    Ok(info_u64(con, "redlock_sweep_time_us")
        .ok()
        .map(|time| (time, ticks)))
}

/// Share of time in ticks and mean tick (µs) between two
/// readings of [`sweep_counters`] `secs` apart.
fn sweep_rates(
    from: Option<(u64, u64)>,
    to: Option<(u64, u64)>,
    secs: f64,
) -> (Option<f64>, Option<f64>) {
    match (from, to) {
        (Some((t0, n0)), Some((t1, n1))) if secs > 0.0 => {
            let time = t1.saturating_sub(t0) as f64;
            let ticks = n1.saturating_sub(n0);
            (
                Some(time / 1e6 / secs),
                (ticks > 0).then(|| time / ticks as f64),
            )
        }
        _ => (None, None),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn opt_pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{:.2} %", v * 100.0))
}

fn opt_us(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.0}"))
}

fn node(builder: &NodeBuilder, reclaim_after_ms: u64) -> Node {
    builder
        .clone()
        .config("redlock.max-ttl-ms", &MAX_TTL_MS.to_string())
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.reclaim-after-ms", &reclaim_after_ms.to_string())
        .start()
}

/// Runs both scenarios on nodes built from `builder` (the module already
/// set). The two steady-state runs go side by side, each on its own node
/// and connection, so that whatever else loads the machine weighs on both.
pub fn run(builder: &NodeBuilder, plan: ReclaimPlan) -> Result<(Steady, IdleSweep), String> {
    let mut rounds = Vec::new();
    for _ in 0..plan.rounds.max(1) {
        let off = {
            let builder = builder.clone();
            std::thread::spawn(move || steady(&builder, plan, 0))
        };
        let on = steady(builder, plan, plan.reclaim_after_ms);
        let off = off
            .join()
            .map_err(|_| "steady state without reclamation panicked".to_string())?;
        rounds.push((on?, off?));
    }
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    let ratio = |i: usize| rounds[i].0.acquire.p99 / rounds[i].1.acquire.p99;
    order.sort_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
    let (on, off) = rounds[order[order.len() / 2]].clone();
    let idle = idle_sweep(builder, plan.idle_records)?;
    Ok((
        Steady {
            plan,
            on,
            off,
            rounds,
        },
        idle,
    ))
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
    let mut half_counters = None;
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
        if half_counters.is_none() && started.elapsed() >= plan.duration / 2 {
            half_counters = Some((started.elapsed(), sweep_counters(&mut probe)?));
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
    let (sweep_share, mean_tick_us) = match half_counters {
        Some((at, from)) => {
            let to = sweep_counters(&mut probe)?;
            sweep_rates(from, to, (started.elapsed() - at).as_secs_f64())
        }
        None => (None, None),
    };
    Ok(SteadyRun {
        sweep_share,
        mean_tick_us,
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

/// Takes and releases `n` names `idle:0…` with a FLOOR a minute old, in
/// pipelined batches: records that every sweep may reclaim (their counters
/// are behind the node's clock) once reclaim-after and max-ttl have passed.
pub fn load_idle_records(con: &mut redis::Connection, n: u64) -> Result<(), String> {
    let floor = now_us() - 60_000_000;
    let batch = 10_000;
    for start in (0..n).step_by(batch) {
        let mut pipe = redis::pipe();
        for k in start..(start + batch as u64).min(n) {
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
        let _: () = pipe.query(con).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Loads `n` idle FLOOR records with reclamation off, then turns it on and
/// times the sweep while a second connection PINGs in a loop.
fn idle_sweep(builder: &NodeBuilder, n: u64) -> Result<IdleSweep, String> {
    let node = node(builder, 0);
    let mut con = node.connection();
    load_idle_records(&mut con, n)?;
    if info_u64(&mut con, "redlock_records")? != n {
        return Err("idle records not all loaded".into());
    }
    // Idle for longer than reclaim-after and max-ttl by the time it is on.
    std::thread::sleep(Duration::from_millis(MAX_TTL_MS + 200));

    // PINGs go alternately to the sweeping node and to a control node (no
    // records, no sweep), each followed by a short pause: both see the same
    // load from the rest of the machine over the same interval.
    let control = self::node(builder, 0);
    let ping = |cons: &mut [redis::Connection; 2],
                until: &dyn Fn() -> bool|
     -> Result<(Vec<[Samples; 2]>, f64), String> {
        let mut windows: Vec<[Samples; 2]> = Vec::new();
        let mut window_end = Instant::now();
        let mut max = 0f64;
        while !until() {
            if Instant::now() >= window_end {
                windows.push([
                    Samples::with_capacity(20_000),
                    Samples::with_capacity(20_000),
                ]);
                window_end = Instant::now() + PING_WINDOW;
            }
            let Some(window) = windows.last_mut() else {
                break;
            };
            for (i, con) in cons.iter_mut().enumerate() {
                let t = Instant::now();
                let _: String = redis::cmd("PING").query(con).map_err(|e| e.to_string())?;
                let d = t.elapsed();
                if i == 0 {
                    max = max.max(d.as_secs_f64() * 1e6);
                }
                window[i].push(d);
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok((windows, max))
    };
    let mut pingers = [node.connection(), control.connection()];
    // A smoke run's sweep is over in a second: a short look before it.
    let before_for = if n >= 100_000 {
        PING_BEFORE
    } else {
        PING_WINDOW
    };
    let before_end = Instant::now() + before_for;
    let (before_windows, _) = ping(&mut pingers, &|| Instant::now() >= before_end)?;
    let (window_ratio_before, [mut before, mut control_before]) = pooled(before_windows);

    let counters_before = sweep_counters(&mut con)?;
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
    let (during_windows, max) = ping(&mut pingers, &|| done.load(Ordering::Relaxed))?;
    let (window_ratio_during, [mut during, mut control_during]) = pooled(during_windows);
    let took = watcher
        .join()
        .map_err(|_| "sweep watcher panicked".to_string())??;
    let (sweep_share, mean_tick_us) = sweep_rates(
        counters_before,
        sweep_counters(&mut con)?,
        took.as_secs_f64(),
    );
    Ok(IdleSweep {
        records: n,
        took,
        longest_tick_us: info_u64(&mut con, "redlock_sweep_longest_tick_us")?,
        ticks: info_u64(&mut con, "redlock_sweep_ticks")?,
        slow_ticks: info_u64(&mut con, "redlock_sweep_slow_ticks")?,
        longest_tick_cpu_us: info_u64(&mut con, "redlock_sweep_longest_tick_cpu_us")?,
        ping_before: before.percentiles().ok_or("no PING before")?,
        ping_during: during.percentiles().ok_or("no PING during the sweep")?,
        ping_max_during_us: max,
        control_before: control_before
            .percentiles()
            .ok_or("no control PING before")?,
        control_during: control_during
            .percentiles()
            .ok_or("no control PING during the sweep")?,
        sweep_share,
        mean_tick_us,
        window_ratio_before,
        window_ratio_during,
    })
}

/// The median over windows of the sweeping node's PING p99 over the
/// control node's, and every window's samples pooled per node.
fn pooled(windows: Vec<[Samples; 2]>) -> (Option<f64>, [Samples; 2]) {
    let mut ratios = Vec::new();
    let mut all = [Samples::default(), Samples::default()];
    for [mut node, mut control] in windows {
        if let (Some(n), Some(c)) = (node.percentiles(), control.percentiles()) {
            ratios.push(n.p99 / c.p99);
        }
        all[0].merge(node);
        all[1].merge(control);
    }
    ((!ratios.is_empty()).then(|| median(ratios)), all)
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

    /// p99 of ACQUIRE with reclamation over p99 without: the median of the
    /// rounds' ratios.
    pub fn p99_ratio(&self) -> f64 {
        median(
            self.rounds
                .iter()
                .map(|(on, off)| on.acquire.p99 / off.acquire.p99)
                .collect(),
        )
    }

    /// Prints the figures.
    pub fn print(&self) {
        let p = &self.plan;
        println!(
            "Reclamation, steady state: {} fresh names/s (ACQUIRE FLOOR + RELEASE), reclaim-after {} ms, {:.0} s per run, {} round(s), each with and without reclamation side by side",
            p.rate,
            p.reclaim_after_ms,
            p.duration.as_secs_f64(),
            self.rounds.len()
        );
        println!();
        println!("| round | run | records (2nd half, mean) | records at end | growth, records/s (2nd half) | memory above empty (2nd half) | ACQUIRE p50 / p99 / p99.9 µs | reclaimed | longest tick µs | share of time in ticks (2nd half) | mean tick µs |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for (i, (on, off)) in self.rounds.iter().enumerate() {
            for (name, r) in [("reclaim-after on", on), ("reclamation off", off)] {
                println!(
                    "| {} | {name} | {:.0} | {} | {:.0} | {:.2} MB | {:.0} / {:.0} / {:.0} | {} | {} | {} | {} |",
                    i + 1,
                    r.records_plateau,
                    r.records_end,
                    r.growth_per_s,
                    r.memory_plateau / 1e6,
                    r.acquire.p50,
                    r.acquire.p99,
                    r.acquire.p999,
                    r.reclaimed,
                    r.longest_tick_us,
                    opt_pct(r.sweep_share),
                    opt_us(r.mean_tick_us)
                );
            }
        }
        println!();
        println!(
            "- plateau (median round): {:.0} records vs rate × reclaim-after = {:.0} ({:.2}×); {:.0} B per record → expected {:.2} MB, measured {:.2} MB",
            self.on.records_plateau,
            self.expected_records(),
            self.on.records_plateau / self.expected_records(),
            self.bytes_per_record(),
            self.expected_records() * self.bytes_per_record() / 1e6,
            self.on.memory_plateau / 1e6
        );
        let ratios: Vec<String> = self
            .rounds
            .iter()
            .map(|(on, off)| format!("{:.2}", on.acquire.p99 / off.acquire.p99))
            .collect();
        println!(
            "- ACQUIRE p99 during sweeps / without reclamation: {:.2}× (median of the rounds: {}; target ≤ 1.2×)",
            self.p99_ratio(),
            ratios.join(", ")
        );
    }
}

impl IdleSweep {
    /// PING p99 during the sweep over the control node's PING p99 in the
    /// same interval.
    pub fn ping_p99_ratio(&self) -> f64 {
        self.ping_during.p99 / self.control_during.p99
    }

    /// Prints the figures.
    pub fn print(&self) {
        println!();
        println!(
            "Reclamation, {} idle records at once: all gone in {:.1} s ({:.0} records/s) over {} ticks; longest tick {} µs wall clock, {} µs CPU; {} ticks over 1 ms; share of time in ticks {}, mean tick {} µs",
            self.records,
            self.took.as_secs_f64(),
            self.records as f64 / self.took.as_secs_f64().max(1e-9),
            self.ticks,
            self.longest_tick_us,
            self.longest_tick_cpu_us,
            self.slow_ticks,
            opt_pct(self.sweep_share),
            opt_us(self.mean_tick_us)
        );
        println!(
            "- PING p50 / p99 / p99.9 µs, sweeping node: before {:.0} / {:.0} / {:.0}, during the sweep {:.0} / {:.0} / {:.0} (max {:.0})",
            self.ping_before.p50,
            self.ping_before.p99,
            self.ping_before.p999,
            self.ping_during.p50,
            self.ping_during.p99,
            self.ping_during.p999,
            self.ping_max_during_us
        );
        println!(
            "- PING p50 / p99 / p99.9 µs, control node: before {:.0} / {:.0} / {:.0}, during the sweep {:.0} / {:.0} / {:.0}",
            self.control_before.p50,
            self.control_before.p99,
            self.control_before.p999,
            self.control_during.p50,
            self.control_during.p99,
            self.control_during.p999
        );
        println!(
            "- PING p99, sweeping node / control node, median over {} s windows: {} during the sweep (before it: {}); over the whole interval: {:.2}× (before: {:.2}×). \"Flat\" = the median within 1.2×: the node sweeping against a node without a sweep, pinged alternately with it in the same windows",
            PING_WINDOW.as_secs(),
            self.window_ratio_during.map_or("n/a".into(), |r| format!("{r:.2}×")),
            self.window_ratio_before.map_or("n/a".into(), |r| format!("{r:.2}×")),
            self.ping_p99_ratio(),
            self.ping_before.p99 / self.control_before.p99
        );
    }
}
