//! `redlock-bench`: starts its own nodes on free loopback ports, runs every
//! workload in interleaved rounds and prints one Markdown table of medians.
//! Each scenario is a module of `sections/`.
//!
//! `redlock-bench --smoke` runs each workload for a moment and exits non-zero
//! unless every column produced a number.

mod client;
mod lockers;
mod plan;
mod report;
mod sections;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use redlock_bench::memory;
use redlock_testkit::{start_nodes, Node};

use lockers::Lockers;
use plan::{Impl, Plan, Section};
use report::Report;

#[global_allocator]
static ALLOC: redlock_bench::alloc_count::CountingAlloc = redlock_bench::alloc_count::CountingAlloc;

#[derive(Parser, Debug)]
#[command(
    about = "Benchmarks redlock against a hand-written Redlock, a PING floor and SET NX PX + EVALSHA"
)]
pub(crate) struct Args {
    /// A second or two of everything, small counts; exits non-zero unless
    /// every column produced a number.
    #[arg(long)]
    pub(crate) smoke: bool,
    /// Rounds per workload (every figure is the median over rounds).
    #[arg(long)]
    pub(crate) rounds: Option<usize>,
    /// Counted seconds per measurement.
    #[arg(long)]
    pub(crate) secs: Option<f64>,
    /// Lock names of the memory measurement.
    #[arg(long)]
    pub(crate) memory_names: Option<u64>,
    /// The module library (default: `REDLOCK_MODULE`, else the release build
    /// next to this binary's target folder).
    #[arg(long)]
    pub(crate) module: Option<PathBuf>,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Run only these sections.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) only: Vec<Section>,
    /// Run only these implementations in the client sections.
    #[arg(long = "impl", value_enum, value_delimiter = ',')]
    pub(crate) impls: Vec<Impl>,
    /// Profiling aid: run this many sequential lock+unlock cycles of each
    /// `--impl` on one task, print the time taken, and exit (no table). Run
    /// it under `valgrind --tool=callgrind` or `strace -c -f` with two
    /// counts; the difference divided by the difference of the counts is the
    /// cost per cycle.
    #[arg(long)]
    pub(crate) profile_cycles: Option<u64>,
    /// Tasks sharing the `--profile-cycles` (each on its own key).
    #[arg(long, default_value_t = 1)]
    pub(crate) profile_tasks: usize,
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

/// Whether the module is a test build (it registers REDLOCK.TESTHOOK), and
/// the server's version.
fn probe(node: &Node) -> Result<(bool, String), String> {
    let mut con = node.connection();
    let hooks: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("REDLOCK.TESTHOOK")
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    let test_build =
        matches!(&hooks, redis::Value::Array(v) if v.iter().any(|x| *x != redis::Value::Nil));
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut con)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        })
        .unwrap_or_default();
    Ok((test_build, version))
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

    // Refuse a test build outside smoke runs.
    let (test_build, version) = probe(&server_node)?;
    if test_build && !plan.smoke {
        return Err(format!(
            "{} is a test build (it has REDLOCK.TESTHOOK): benchmark the release build",
            module.display()
        ));
    }
    let window = plan.window;
    eprintln!(
        "redlock-bench: {} rounds × {:.1} s per measurement, 5 nodes + 2 single nodes, module {}",
        plan.rounds,
        window.duration.as_secs_f64(),
        module.display()
    );

    if let Some(n) = args.profile_cycles {
        sections::profile::run(n, args.profile_tasks, &urls, &pids, &plan).await?;
        return Ok(true);
    }

    let mut report = Report::default();
    let lockers = if plan.runs(Section::Uncontended)
        || plan.runs(Section::Contended)
        || plan.runs(Section::Slow)
    {
        Some(Lockers::connect(&urls, &pids, &plan).await?)
    } else {
        None
    };
    if let Some(l) = &lockers {
        if plan.runs(Section::Uncontended) {
            sections::uncontended::run(l, &plan, &mut report).await?;
        }
        if plan.runs(Section::Contended) {
            sections::contended::run(l, &plan, &mut report).await?;
        }
    }
    if plan.runs(Section::Server) {
        sections::server::run(&server_node, &plan, &mut report).await?;
    }
    if plan.runs(Section::Memory) {
        sections::memory::run(&memory_node, &plan, &mut report).await?;
    }
    if let (Some(l), true) = (&lockers, plan.runs(Section::Slow)) {
        sections::slow::run(l, &nodes, &pids, &plan, &mut report).await?;
    }
    if plan.runs(Section::Cluster) {
        sections::cluster::run(&module, &nodes, &plan, &mut report).await?;
    }
    if plan.runs(Section::Sentinel) {
        sections::sentinel::run(&module, &plan, &mut report).await?;
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
    report.print_table();
    println!("({:.0} s in all)", started.elapsed().as_secs_f64());

    let figures = &mut report.figures;
    if plan.runs(Section::Reclaim) {
        sections::reclaim::run(&module, plan.smoke, figures).await?;
    }
    if plan.runs(Section::Waiting) {
        sections::waiting::run(&module, plan.smoke, figures).await?;
    }
    if plan.runs(Section::Fenced) {
        sections::fenced::run(&module, plan.smoke, figures).await?;
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
