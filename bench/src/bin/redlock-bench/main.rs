//! `redlock-bench`: starts its own nodes on free loopback ports, runs every
//! workload in interleaved rounds and prints one Markdown table of medians.
//!
//! `redlock-bench --smoke` runs each workload for a moment and exits non-zero
//! unless every column produced a number.

mod client;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use redlock_bench::floor::PingFloor;
use redlock_bench::handwritten::{HandRedlock, UNLOCK_SCRIPT};
use redlock_bench::memory::{self, MemoryResult};
use redlock_bench::reclaim;
use redlock_bench::server::{self, LoadResult, LoadSpec, Side};
use redlock_bench::stats::{median, median_percentiles, Percentiles};
use redlock_bench::waiting;
use redlock_bench::workload::{self, Outcome, RunResult, Window};
use redlock_testkit::proxy::{Fault, FaultProxy};
use redlock_testkit::{start_nodes, Node};

use client::ClientLocker;

#[global_allocator]
static ALLOC: redlock_bench::alloc_count::CountingAlloc = redlock_bench::alloc_count::CountingAlloc;

/// Lease of every lock the client workloads take.
const TTL: Duration = Duration::from_secs(10);
/// Concurrency levels of the uncontended workload.
const CONCURRENCY: [usize; 2] = [1, 16];
/// Tasks on the one key of the contended workload.
const CONTENDERS: usize = 16;
/// Tasks of the slow-node workload.
const SLOW_TASKS: usize = 16;
/// One-way delay added by the proxy in front of the slow node.
const SLOW_DELAY: Duration = Duration::from_millis(20);
/// A single measurement that takes longer than its window plus this fails.
const MEASUREMENT_SLACK: Duration = Duration::from_secs(60);

#[derive(Parser, Debug)]
#[command(
    about = "Benchmarks redlock against a hand-written Redlock, a PING floor and SET NX PX + EVALSHA"
)]
struct Args {
    /// A second or two of everything, small counts; exits non-zero unless
    /// every column produced a number.
    #[arg(long)]
    smoke: bool,
    /// Rounds per workload (every figure is the median over rounds).
    #[arg(long)]
    rounds: Option<usize>,
    /// Counted seconds per measurement.
    #[arg(long)]
    secs: Option<f64>,
    /// Lock names of the memory measurement.
    #[arg(long)]
    memory_names: Option<u64>,
    /// The module library (default: `REDLOCK_MODULE`, else the release build
    /// next to this binary's target folder).
    #[arg(long)]
    module: Option<PathBuf>,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run only these sections.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
    /// Run only these implementations in the client sections.
    #[arg(long = "impl", value_enum, value_delimiter = ',')]
    impls: Vec<Impl>,
    /// Profiling aid: run this many sequential lock+unlock cycles of each
    /// `--impl` on one task, print the time taken, and exit (no table). Run
    /// it under `valgrind --tool=callgrind` or `strace -c -f` with two
    /// counts; the difference divided by the difference of the counts is the
    /// cost per cycle.
    #[arg(long)]
    profile_cycles: Option<u64>,
    /// Tasks sharing the `--profile-cycles` (each on its own key).
    #[arg(long, default_value_t = 1)]
    profile_tasks: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Section {
    Uncontended,
    Contended,
    Server,
    Memory,
    Slow,
    Reclaim,
    Waiting,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Impl {
    Client,
    Hand,
    Floor,
}

impl Impl {
    fn label(self) -> &'static str {
        match self {
            Impl::Client => "redlock-client",
            Impl::Hand => "hand-written Redlock",
            Impl::Floor => "PING floor",
        }
    }
}

struct Plan {
    smoke: bool,
    rounds: usize,
    window: Window,
    memory_names: u64,
    memory_rounds: usize,
    sections: Vec<Section>,
    impls: Vec<Impl>,
}

impl Plan {
    fn from(args: &Args) -> Self {
        let (rounds, secs, names, memory_rounds) = if args.smoke {
            (1, 0.1, 10_000, 1)
        } else {
            (5, 1.0, 1_000_000, 3)
        };
        let secs = args.secs.unwrap_or(secs);
        let all_sections = [
            Section::Uncontended,
            Section::Contended,
            Section::Server,
            Section::Memory,
            Section::Slow,
            Section::Reclaim,
            Section::Waiting,
        ];
        Plan {
            smoke: args.smoke,
            rounds: args.rounds.unwrap_or(rounds).max(1),
            window: Window {
                warmup: Duration::from_secs_f64((secs * 0.2).min(0.2)),
                duration: Duration::from_secs_f64(secs),
            },
            memory_names: args.memory_names.unwrap_or(names).max(1),
            memory_rounds,
            sections: if args.only.is_empty() {
                all_sections.to_vec()
            } else {
                args.only.clone()
            },
            impls: if args.impls.is_empty() {
                vec![Impl::Client, Impl::Hand, Impl::Floor]
            } else {
                args.impls.clone()
            },
        }
    }

    fn runs(&self, s: Section) -> bool {
        self.sections.contains(&s)
    }

    fn has(&self, i: Impl) -> bool {
        self.impls.contains(&i)
    }
}

/// Every figure of the run, by name, for the smoke check and `--json`.
#[derive(Default)]
struct Figures {
    values: Vec<(String, Option<f64>)>,
}

impl Figures {
    fn put(&mut self, name: impl Into<String>, value: Option<f64>) -> Option<f64> {
        self.values.push((name.into(), value));
        value
    }

    fn missing(&self) -> Vec<&str> {
        self.values
            .iter()
            .filter(|(_, v)| !v.is_some_and(f64::is_finite))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.values
                .iter()
                .map(|(n, v)| {
                    (
                        n.clone(),
                        v.map_or(serde_json::Value::Null, serde_json::Value::from),
                    )
                })
                .collect(),
        )
    }
}

#[derive(Default)]
struct Table {
    rows: Vec<[String; 9]>,
}

impl Table {
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        section: &str,
        workload: &str,
        imp: &str,
        rate: String,
        lat: Option<Percentiles>,
        cpu: String,
        ratio: String,
    ) {
        let (p50, p99, p999) = match lat {
            Some(p) => (us(p.p50), us(p.p99), us(p.p999)),
            None => ("–".into(), "–".into(), "–".into()),
        };
        self.rows.push([
            section.into(),
            workload.into(),
            imp.into(),
            rate,
            p50,
            p99,
            p999,
            cpu,
            ratio,
        ]);
    }

    fn print(&self) {
        let header = [
            "#",
            "workload",
            "implementation",
            "throughput",
            "p50",
            "p99",
            "p99.9",
            "CPU µs/op: bench + nodes",
            "ratio (same run)",
        ];
        let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut s = String::from("|");
            for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
                let pad = w - c.chars().count();
                if (3..8).contains(&i) {
                    s.push_str(&format!(" {}{} |", " ".repeat(pad), c));
                } else {
                    s.push_str(&format!(" {}{} |", c, " ".repeat(pad)));
                }
            }
            s
        };
        println!("{}", line(header.to_vec()));
        let mut sep = String::from("|");
        for (i, w) in width.iter().enumerate() {
            if (3..8).contains(&i) {
                sep.push_str(&format!("{}:|", "-".repeat(w + 1)));
            } else {
                sep.push_str(&format!("{}|", "-".repeat(w + 2)));
            }
        }
        println!("{sep}");
        for r in &self.rows {
            println!("{}", line(r.iter().map(String::as_str).collect()));
        }
    }
}

fn us(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} ms", v / 1_000.0)
    } else if v >= 1_000.0 {
        format!("{:.2} ms", v / 1_000.0)
    } else {
        format!("{v:.0} µs")
    }
}

fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".into(), f)
}

fn ratio(v: Option<f64>) -> String {
    opt(v, |r| format!("{r:.2}×"))
}

/// Finds the module: `--module`, `REDLOCK_MODULE`, the release build of
/// this binary's target folder, and (smoke runs only) the debug build.
fn module_path(args: &Args) -> Result<PathBuf, String> {
    if let Some(p) = &args.module {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("REDLOCK_MODULE") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile_dir = exe.parent().unwrap_or(Path::new("."));
    let target = profile_dir.parent().unwrap_or(Path::new("."));
    let release = target.join("release").join("libredlock.so");
    if release.exists() {
        return Ok(release);
    }
    let debug = target.join("debug").join("libredlock.so");
    if args.smoke && debug.exists() {
        return Ok(debug);
    }
    Err(format!(
        "{} is missing: build it with `cargo build --release -p redlock-module` (or set REDLOCK_MODULE)",
        release.display()
    ))
}

fn addr_of(node: &Node) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], node.port()))
}

async fn timed<T>(
    what: &str,
    window: Window,
    fut: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let limit = window.warmup + window.duration + MEASUREMENT_SLACK;
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("{what}: no result within {limit:?}"))?
}

/// The three implementations of the client sections, connected.
struct Lockers {
    pids: Vec<u32>,
    client: Option<ClientLocker>,
    hand: Option<HandRedlock>,
    floor: Option<PingFloor>,
}

impl Lockers {
    async fn connect(urls: &[String], pids: &[u32], plan: &Plan) -> Result<Self, String> {
        Ok(Lockers {
            pids: pids.to_vec(),
            client: if plan.has(Impl::Client) {
                Some(ClientLocker::connect(urls).await?)
            } else {
                None
            },
            hand: if plan.has(Impl::Hand) {
                Some(
                    HandRedlock::connect(urls)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            } else {
                None
            },
            floor: if plan.has(Impl::Floor) {
                Some(PingFloor::connect(urls).await.map_err(|e| e.to_string())?)
            } else {
                None
            },
        })
    }
}

fn keys(prefix: &str, n: usize) -> Arc<Vec<String>> {
    Arc::new((0..n).map(|i| format!("{prefix}:{i}")).collect())
}

/// One lock+unlock cycle per operation, each task on its own key.
async fn uncontended(
    l: &Lockers,
    imp: Impl,
    conc: usize,
    window: Window,
) -> Result<RunResult, String> {
    let keys = keys(&format!("bench:u:{imp:?}:{conc}"), conc);
    let what = format!("uncontended {} c={conc}", imp.label());
    match imp {
        Impl::Client => {
            let c = l.client.clone().ok_or("no client")?;
            timed(
                &what,
                window,
                workload::run(conc, window, &l.pids, move |task| {
                    let (c, keys) = (c.clone(), keys.clone());
                    async move {
                        let t = Instant::now();
                        let lock = c.acquire(&keys[task], TTL).await?;
                        c.release(lock).await?;
                        Ok(Outcome {
                            ok: true,
                            latency: t.elapsed(),
                        })
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
                workload::run(conc, window, &l.pids, move |task| {
                    let (h, keys) = (h.clone(), keys.clone());
                    async move {
                        let t = Instant::now();
                        let key = &keys[task];
                        let lock = h.acquire(key, TTL).await.map_err(|e| e.to_string())?;
                        h.release(key, &lock).await.map_err(|e| e.to_string())?;
                        Ok(Outcome {
                            ok: true,
                            latency: t.elapsed(),
                        })
                    }
                }),
            )
            .await
        }
        Impl::Floor => {
            let f = l.floor.clone().ok_or("no floor")?;
            timed(
                &what,
                window,
                workload::run(conc, window, &l.pids, move |_| {
                    let f = f.clone();
                    async move {
                        let t = Instant::now();
                        f.cycle().await.map_err(|e| e.to_string())?;
                        Ok(Outcome {
                            ok: true,
                            latency: t.elapsed(),
                        })
                    }
                }),
            )
            .await
        }
    }
}

/// `CONTENDERS` tasks on one key: one `try_acquire` per operation (its
/// latency is recorded), released at once when it succeeded.
async fn contended(
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

/// Acquire latency only (the release that follows is not timed), each task
/// on its own key.
async fn acquire_latency(
    l: &Lockers,
    imp: Impl,
    window: Window,
    tag: &str,
) -> Result<RunResult, String> {
    let keys = keys(&format!("bench:s:{tag}:{imp:?}"), SLOW_TASKS);
    let what = format!("acquire latency {tag} {}", imp.label());
    match imp {
        Impl::Client => {
            let c = l.client.clone().ok_or("no client")?;
            timed(
                &what,
                window,
                workload::run(SLOW_TASKS, window, &l.pids, move |task| {
                    let (c, keys) = (c.clone(), keys.clone());
                    async move {
                        let t = Instant::now();
                        let lock = c.acquire(&keys[task], TTL).await?;
                        let latency = t.elapsed();
                        c.release(lock).await?;
                        Ok(Outcome { ok: true, latency })
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
                workload::run(SLOW_TASKS, window, &l.pids, move |task| {
                    let (h, keys) = (h.clone(), keys.clone());
                    async move {
                        let t = Instant::now();
                        let key = &keys[task];
                        let lock = h.acquire(key, TTL).await.map_err(|e| e.to_string())?;
                        let latency = t.elapsed();
                        h.release(key, &lock).await.map_err(|e| e.to_string())?;
                        Ok(Outcome { ok: true, latency })
                    }
                }),
            )
            .await
        }
        Impl::Floor => Err("the floor has no acquire".into()),
    }
}

/// Rotates `items` by `round` so that no implementation always runs first.
fn rotated<T: Copy>(items: &[T], round: usize) -> Vec<T> {
    let mut v = items.to_vec();
    if !v.is_empty() {
        let k = round % v.len();
        v.rotate_left(k);
    }
    v
}

fn med_rate(runs: &[RunResult], f: fn(&RunResult) -> f64) -> Option<f64> {
    median(&runs.iter().map(f).collect::<Vec<_>>())
}

fn med_lat(runs: &[RunResult]) -> Option<Percentiles> {
    let p: Option<Vec<Percentiles>> = runs.iter().map(|r| r.latency).collect();
    median_percentiles(&p?)
}

/// Median over rounds of the per-round ratio `f(a) / f(b)`.
fn med_ratio(
    a: &[RunResult],
    b: &[RunResult],
    f: impl Fn(&RunResult) -> Option<f64>,
) -> Option<f64> {
    if a.is_empty() || a.len() != b.len() {
        return None;
    }
    let r: Option<Vec<f64>> = a.iter().zip(b).map(|(x, y)| Some(f(x)? / f(y)?)).collect();
    median(&r?)
}

/// Median CPU per operation of this process and of the nodes, registered
/// as figures and formatted for the table.
fn cpu_text(figures: &mut Figures, tag: &str, runs: &[RunResult]) -> String {
    let bench = figures.put(
        format!("{tag}.bench_cpu_us_per_op"),
        med_rate(runs, |r| r.bench_cpu_us),
    );
    let nodes = figures.put(
        format!("{tag}.nodes_cpu_us_per_op"),
        med_rate(runs, |r| r.nodes_cpu_us),
    );
    match (bench, nodes) {
        (Some(b), Some(n)) => format!("{b:.1} + {n:.1}"),
        _ => "–".into(),
    }
}

/// " (N errors/s)" when operations failed with errors, else nothing.
fn errors_note(runs: &[RunResult]) -> String {
    match med_rate(runs, |r| r.errors_per_sec) {
        Some(e) if e > 0.0 => format!(" ({e:.1} errors/s)"),
        _ => String::new(),
    }
}

fn p50(r: &RunResult) -> Option<f64> {
    r.latency.map(|p| p.p50)
}

struct Target {
    what: String,
    figure: Option<f64>,
    met: Option<bool>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = Args::parse();
    match run(&args).await {
        Ok(ok) => std::process::exit(if ok { 0 } else { 1 }),
        Err(e) => {
            eprintln!("redlock-bench: {e}");
            std::process::exit(2);
        }
    }
}

async fn run(args: &Args) -> Result<bool, String> {
    let started = Instant::now();
    let plan = Plan::from(args);
    let module = module_path(args)?;
    // The test kit reads the module path from the environment.
    std::env::set_var("REDLOCK_MODULE", &module);
    let builder = Node::builder().module(module.clone());
    let (nodes, server_node, memory_node) = tokio::task::spawn_blocking(move || {
        let nodes = start_nodes(5, &builder);
        let server_node = builder.clone().start();
        let memory_node = builder
            .config("redlock.max-ttl-ms", &memory::HOLD_TTL_MS.to_string())
            .start();
        (nodes, server_node, memory_node)
    })
    .await
    .map_err(|e| format!("starting nodes: {e}"))?;
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let pids: Vec<u32> = nodes.iter().filter_map(Node::pid).collect();

    // Refuse a test build (it registers REDLOCK.TESTHOOK) outside smoke runs.
    let mut probe = server_node.connection();
    let hooks: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("REDLOCK.TESTHOOK")
        .query(&mut probe)
        .map_err(|e| e.to_string())?;
    let test_build =
        matches!(&hooks, redis::Value::Array(v) if v.iter().any(|x| *x != redis::Value::Nil));
    if test_build && !plan.smoke {
        return Err(format!(
            "{} is a test build (it has REDLOCK.TESTHOOK): benchmark the release build",
            module.display()
        ));
    }
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut probe)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        })
        .unwrap_or_default();

    let mut figures = Figures::default();
    let mut table = Table::default();
    let mut targets: Vec<Target> = Vec::new();
    let window = plan.window;
    let client_impls: Vec<Impl> = plan.impls.clone();

    eprintln!(
        "redlock-bench: {} rounds × {:.1} s per measurement, 5 nodes + 2 single nodes, module {}",
        plan.rounds,
        window.duration.as_secs_f64(),
        module.display()
    );

    if let Some(n) = args.profile_cycles {
        let l = Lockers::connect(&urls, &pids, &plan).await?;
        let tasks = args.profile_tasks.max(1);
        for imp in plan.impls.iter().copied() {
            let per_task = n / tasks as u64;
            let t = Instant::now();
            let meter = redlock_bench::cpu::CpuMeter::start(&pids);
            let allocs = redlock_bench::alloc_count::allocations();
            let switches = redlock_bench::cpu::context_switches();
            let mut handles = Vec::new();
            for task in 0..tasks {
                let key = format!("bench:profile:{imp:?}:{task}");
                let (client, hand, floor) = (l.client.clone(), l.hand.clone(), l.floor.clone());
                handles.push(tokio::spawn(async move {
                    for _ in 0..per_task {
                        match imp {
                            Impl::Client => {
                                let c = client.as_ref().ok_or("no client")?;
                                let lock = c.acquire(&key, TTL).await?;
                                c.release(lock).await?;
                            }
                            Impl::Hand => {
                                let h = hand.as_ref().ok_or("no hand-written")?;
                                let lock = h.acquire(&key, TTL).await.map_err(|e| e.to_string())?;
                                h.release(&key, &lock).await.map_err(|e| e.to_string())?;
                            }
                            Impl::Floor => {
                                let f = floor.as_ref().ok_or("no floor")?;
                                f.cycle().await.map_err(|e| e.to_string())?;
                            }
                        }
                    }
                    Ok::<(), String>(())
                }));
            }
            for h in handles {
                h.await.map_err(|e| e.to_string())??;
            }
            let cpu = meter.stop();
            let allocs = redlock_bench::alloc_count::allocations() - allocs;
            let switches = redlock_bench::cpu::context_switches().saturating_sub(switches);
            let el = t.elapsed();
            let cycles = (per_task * tasks as u64) as f64;
            println!(
                "{}: {cycles} cycles on {tasks} task(s) in {:.3} s ({:.1} µs/cycle; CPU µs/cycle: bench {:.1}, nodes {:.1}; {:.1} allocations, {:.2} context switches per cycle)",
                imp.label(),
                el.as_secs_f64(),
                el.as_secs_f64() * 1e6 / cycles,
                cpu.bench.as_secs_f64() * 1e6 / cycles,
                cpu.nodes.as_secs_f64() * 1e6 / cycles,
                allocs as f64 / cycles,
                switches as f64 / cycles,
            );
        }
        return Ok(true);
    }

    let lockers = if plan.runs(Section::Uncontended)
        || plan.runs(Section::Contended)
        || plan.runs(Section::Slow)
    {
        Some(Lockers::connect(&urls, &pids, &plan).await?)
    } else {
        None
    };

    // 1. Uncontended.
    if plan.runs(Section::Uncontended) {
        let l = lockers.as_ref().ok_or("no lockers")?;
        let mut res: Vec<Vec<Vec<RunResult>>> = vec![vec![Vec::new(); 3]; CONCURRENCY.len()];
        for round in 0..plan.rounds {
            for (ci, &conc) in CONCURRENCY.iter().enumerate() {
                for imp in rotated(&client_impls, round + ci) {
                    let r = uncontended(l, imp, conc, window).await?;
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
                let rate = figures.put(
                    format!("{tag}.cycles_per_sec"),
                    med_rate(runs, |r| r.ok_per_sec),
                );
                let lat = med_lat(runs);
                figures.put(format!("{tag}.p50_us"), lat.map(|p| p.p50));
                figures.put(format!("{tag}.p99_us"), lat.map(|p| p.p99));
                figures.put(format!("{tag}.p999_us"), lat.map(|p| p.p999));
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
                            figures.put(format!("{tag}.cycles_vs_hand"), vs_hand);
                        }
                        if plan.has(Impl::Floor) {
                            figures.put(format!("{tag}.p50_vs_floor"), vs_floor);
                        }
                        if conc == 16 {
                            targets.push(Target {
                                what: "c=16 cycles/s, client ÷ hand-written ≥ 1.00".into(),
                                figure: vs_hand,
                                met: vs_hand.map(|r| r >= 1.0),
                            });
                            targets.push(Target {
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
                            figures.put(format!("{tag}.p50_vs_floor"), vs_floor);
                        }
                        format!("{} p50 vs floor", ratio(vs_floor))
                    }
                    Impl::Floor => String::new(),
                };
                table.row(
                    "1",
                    &format!("uncontended, c={conc}, own key per task"),
                    imp.label(),
                    format!(
                        "{}{}",
                        opt(rate, |v| format!("{} cycles/s", thousands(v))),
                        errors_note(runs)
                    ),
                    lat,
                    cpu_text(&mut figures, &tag, runs),
                    ratio_text,
                );
            }
        }
    }

    // 2. Contended.
    if plan.runs(Section::Contended) {
        let l = lockers.as_ref().ok_or("no lockers")?;
        let impls: Vec<Impl> = client_impls
            .iter()
            .copied()
            .filter(|i| *i != Impl::Floor)
            .collect();
        let mut res: Vec<Vec<RunResult>> = vec![Vec::new(); 3];
        for round in 0..plan.rounds {
            for imp in rotated(&impls, round) {
                res[imp as usize].push(contended(l, imp, window, round).await?);
            }
        }
        eprintln!("  contended done");
        for imp in impls.iter().copied() {
            let runs = &res[imp as usize];
            let tag = format!("contended.{imp:?}").to_lowercase();
            let ok = figures.put(
                format!("{tag}.successes_per_sec"),
                med_rate(runs, |r| r.ok_per_sec),
            );
            let failed = figures.put(
                format!("{tag}.failed_per_sec"),
                med_rate(runs, |r| r.failed_per_sec),
            );
            let lat = med_lat(runs);
            figures.put(format!("{tag}.attempt_p50_us"), lat.map(|p| p.p50));
            figures.put(format!("{tag}.attempt_p99_us"), lat.map(|p| p.p99));
            figures.put(format!("{tag}.attempt_p999_us"), lat.map(|p| p.p999));
            let ratio_text = if imp == Impl::Client && impls.contains(&Impl::Hand) {
                let r = med_ratio(&res[0], &res[1], |r| Some(r.ok_per_sec));
                figures.put(format!("{tag}.successes_vs_hand"), r);
                format!("{} successes vs hand", ratio(r))
            } else {
                String::new()
            };
            table.row(
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
                cpu_text(&mut figures, &tag, runs),
                ratio_text,
            );
        }
        table.row(
            "2",
            "",
            Impl::Floor.label(),
            "n/a".into(),
            None,
            String::new(),
            String::new(),
        );
    }

    // 3. Server side.
    if plan.runs(Section::Server) {
        let addr = addr_of(&server_node);
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(UNLOCK_SCRIPT)
            .query(&mut probe)
            .map_err(|e| e.to_string())?;
        let shapes = [
            (
                "no pipelining, 32 connections",
                LoadSpec {
                    connections: 32,
                    pipeline: 1,
                    key_pool: 1_000,
                    server_pid: server_node.pid(),
                    warmup: window.warmup,
                    duration: window.duration,
                },
            ),
            (
                "pipeline 32 commands, 4 connections",
                LoadSpec {
                    connections: 4,
                    pipeline: 32,
                    key_pool: 1_000,
                    server_pid: server_node.pid(),
                    warmup: window.warmup,
                    duration: window.duration,
                },
            ),
        ];
        let sides = [Side::Redlock, Side::SetEvalsha { sha }];
        // res[shape][side]
        let mut res: Vec<Vec<Vec<LoadResult>>> = vec![vec![Vec::new(); 2]; shapes.len()];
        for round in 0..plan.rounds {
            for (si, (_, spec)) in shapes.iter().enumerate() {
                for side_i in rotated(&[0usize, 1], round) {
                    let side = sides[side_i].clone();
                    let spec = spec.clone();
                    let tag = format!("{}{round}.{si}", if side_i == 0 { "srvR" } else { "srvS" });
                    let r = tokio::task::spawn_blocking({
                        let tag = tag.clone();
                        move || server::run(addr, side, &spec, &tag)
                    })
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("server load: {e}"))?;
                    if r.errors > 0 || r.refused > 0 {
                        return Err(format!(
                            "server load {tag}: {} error and {} unexpected replies",
                            r.errors, r.refused
                        ));
                    }
                    res[si][side_i].push(r);
                }
            }
        }
        eprintln!("  server side done");
        for (si, (shape, _)) in shapes.iter().enumerate() {
            let tag = if si == 0 {
                "server.nopipe"
            } else {
                "server.pipe32"
            };
            let red = figures.put(
                format!("{tag}.redlock_ops_per_sec"),
                median(&res[si][0].iter().map(|r| r.ops_per_sec).collect::<Vec<_>>()),
            );
            let set = figures.put(
                format!("{tag}.setnx_evalsha_ops_per_sec"),
                median(&res[si][1].iter().map(|r| r.ops_per_sec).collect::<Vec<_>>()),
            );
            let r = figures.put(
                format!("{tag}.ratio"),
                median(
                    &res[si][0]
                        .iter()
                        .zip(&res[si][1])
                        .map(|(a, b)| a.ops_per_sec / b.ops_per_sec)
                        .collect::<Vec<_>>(),
                ),
            );
            let red_cpu = figures.put(
                format!("{tag}.redlock_server_cpu_us_per_op"),
                median(
                    &res[si][0]
                        .iter()
                        .map(|r| r.server_cpu_us)
                        .collect::<Vec<_>>(),
                ),
            );
            let set_cpu = figures.put(
                format!("{tag}.setnx_evalsha_server_cpu_us_per_op"),
                median(
                    &res[si][1]
                        .iter()
                        .map(|r| r.server_cpu_us)
                        .collect::<Vec<_>>(),
                ),
            );
            targets.push(Target {
                what: format!("server side ({shape}), REDLOCK ÷ SET NX PX+EVALSHA ≥ 1.00"),
                figure: r,
                met: r.map(|v| v >= 1.0),
            });
            let _ = red.zip(set);
            table.row(
                "3",
                &format!("one node, {shape}"),
                "REDLOCK.ACQUIRE + REDLOCK.RELEASE",
                opt(red, |v| format!("{} ops/s", thousands(v))),
                None,
                opt(red_cpu, |v| format!("{v:.2} (server)")),
                format!("{} vs SET+EVALSHA", ratio(r)),
            );
            table.row(
                "3",
                &format!("one node, {shape}"),
                "SET NX PX + EVALSHA compare-and-delete",
                opt(set, |v| format!("{} ops/s", thousands(v))),
                None,
                opt(set_cpu, |v| format!("{v:.2} (server)")),
                String::new(),
            );
        }
    }

    // 4. Memory.
    if plan.runs(Section::Memory) {
        let addr = addr_of(&memory_node);
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
        let held = figures.put(
            "memory.held_bytes_per_name",
            median(&results.iter().map(|r| r.held).collect::<Vec<_>>()),
        );
        let released = figures.put(
            "memory.released_bytes_per_name",
            median(&results.iter().map(|r| r.released).collect::<Vec<_>>()),
        );
        let set = figures.put(
            "memory.setnx_bytes_per_name",
            median(&results.iter().map(|r| r.set_nx_px).collect::<Vec<_>>()),
        );
        let r_held = figures.put(
            "memory.held_vs_setnx",
            median(
                &results
                    .iter()
                    .map(|r| r.held / r.set_nx_px)
                    .collect::<Vec<_>>(),
            ),
        );
        let r_rel = figures.put(
            "memory.released_vs_setnx",
            median(
                &results
                    .iter()
                    .map(|r| r.released / r.set_nx_px)
                    .collect::<Vec<_>>(),
            ),
        );
        targets.push(Target {
            what: "memory per held name ÷ SET NX PX key ≤ 1.10".into(),
            figure: r_held,
            met: r_held.map(|v| v <= 1.1),
        });
        let names = thousands(n as f64);
        let bytes = |v: f64| format!("{v:.1} B/name");
        table.row(
            "4",
            &format!("memory, {names} names (used_memory delta)"),
            "redlock, held",
            opt(held, bytes),
            None,
            String::new(),
            format!("{} vs SET NX PX", ratio(r_held)),
        );
        table.row(
            "4",
            &format!("memory, {names} names (used_memory delta)"),
            "redlock, released (counter only)",
            opt(released, bytes),
            None,
            String::new(),
            format!("{} vs SET NX PX", ratio(r_rel)),
        );
        table.row(
            "4",
            &format!("memory, {names} names (used_memory delta)"),
            "SET NX PX, 36-byte value",
            opt(set, bytes),
            None,
            String::new(),
            String::new(),
        );
    }

    // 5. Slow node.
    if plan.runs(Section::Slow) {
        let l = lockers.as_ref().ok_or("no lockers")?;
        let proxy = FaultProxy::start(addr_of(&nodes[0]));
        let mut slow_urls = urls.clone();
        slow_urls[0] = proxy.url();
        let slow_plan = Plan {
            impls: client_impls
                .iter()
                .copied()
                .filter(|i| *i != Impl::Floor)
                .collect(),
            ..Plan::from(args)
        };
        let slow = Lockers::connect(&slow_urls, &pids, &slow_plan).await?;
        proxy.set(Fault::Delay(SLOW_DELAY));
        let impls = slow_plan.impls.clone();
        let mut healthy: Vec<Vec<RunResult>> = vec![Vec::new(); 3];
        let mut delayed: Vec<Vec<RunResult>> = vec![Vec::new(); 3];
        for round in 0..plan.rounds {
            for imp in rotated(&impls, round) {
                healthy[imp as usize].push(acquire_latency(l, imp, window, "healthy").await?);
                delayed[imp as usize].push(acquire_latency(&slow, imp, window, "slow").await?);
            }
        }
        eprintln!("  slow node done");
        for imp in impls.iter().copied() {
            let tag = format!("slow.{imp:?}").to_lowercase();
            let h = med_lat(&healthy[imp as usize]);
            let d = med_lat(&delayed[imp as usize]);
            figures.put(format!("{tag}.healthy_p50_us"), h.map(|p| p.p50));
            figures.put(format!("{tag}.healthy_p99_us"), h.map(|p| p.p99));
            figures.put(format!("{tag}.slow_p50_us"), d.map(|p| p.p50));
            let p99 = figures.put(format!("{tag}.slow_p99_us"), d.map(|p| p.p99));
            let rate = med_rate(&delayed[imp as usize], |r| r.ok_per_sec);
            let rate_h = med_rate(&healthy[imp as usize], |r| r.ok_per_sec);
            if imp == Impl::Client {
                targets.push(Target {
                    what: "slow node: client acquire p99 < 20 ms".into(),
                    figure: p99.map(|v| v / 1000.0),
                    met: p99.map(|v| v < 20_000.0),
                });
            }
            let r = med_ratio(&delayed[imp as usize], &healthy[imp as usize], p50);
            table.row(
                "5",
                &format!("acquire latency, {SLOW_TASKS} tasks, all 5 nodes healthy"),
                imp.label(),
                opt(rate_h, |v| format!("{} acquisitions/s", thousands(v))),
                h,
                cpu_text(
                    &mut figures,
                    &format!("{tag}.healthy"),
                    &healthy[imp as usize],
                ),
                String::new(),
            );
            table.row(
                "5",
                &format!(
                    "acquire latency, {SLOW_TASKS} tasks, 1 of 5 nodes +{} ms each way",
                    SLOW_DELAY.as_millis()
                ),
                imp.label(),
                opt(rate, |v| format!("{} acquisitions/s", thousands(v))),
                d,
                cpu_text(&mut figures, &format!("{tag}.slow"), &delayed[imp as usize]),
                format!("{} p50 vs healthy", ratio(r)),
            );
        }
        drop(slow);
        drop(proxy);
    }

    println!();
    println!(
        "redlock-bench — Redis {version}, 5 local nodes + 2 single nodes on loopback, {} CPU(s); medians over {} rounds of {:.1} s (memory: {} rounds){}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.rounds,
        window.duration.as_secs_f64(),
        plan.memory_rounds,
        if test_build { "; TEST BUILD of the module, figures not representative" } else { "" }
    );
    println!();
    table.print();
    println!();
    if !targets.is_empty() {
        println!("Targets:");
        for t in &targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "no figure",
            };
            println!(
                "- {}: {} ({verdict})",
                t.what,
                opt(t.figure, |v| format!("{v:.2}"))
            );
        }
        println!();
    }
    println!("({:.0} s in all)", started.elapsed().as_secs_f64());

    if plan.runs(Section::Reclaim) {
        reclaim_section(&module, plan.smoke, &mut figures).await?;
    }
    if plan.runs(Section::Waiting) {
        waiting_section(&module, plan.smoke, &mut figures).await?;
    }

    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "redis_version": version,
            "rounds": plan.rounds,
            "seconds_per_measurement": window.duration.as_secs_f64(),
            "module": module.display().to_string(),
            "figures": figures.to_json(),
        });
        std::fs::write(
            path,
            serde_json::to_string_pretty(&json).unwrap_or_default(),
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
    }

    drop(lockers);
    drop((nodes, server_node, memory_node));

    let missing = figures.missing();
    if plan.smoke {
        if !missing.is_empty() {
            eprintln!("smoke: no figure for {}", missing.join(", "));
            return Ok(false);
        }
        let expected = figures.values.len();
        if expected == 0 {
            eprintln!("smoke: no figures at all");
            return Ok(false);
        }
        println!("smoke: all {expected} figures present");
    }
    Ok(true)
}

/// The waiting scenario (`redlock_bench::waiting`), on nodes of their own.
async fn waiting_section(module: &Path, smoke: bool, figures: &mut Figures) -> Result<(), String> {
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

/// The reclamation scenarios (`redlock_bench::reclaim`), on nodes of their own.
async fn reclaim_section(module: &Path, smoke: bool, figures: &mut Figures) -> Result<(), String> {
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
