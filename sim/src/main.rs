//! `redlock-sim`: replays one seed, runs a swarm of seeds, or the mutant
//! table.
//!
//! ```text
//! redlock-sim --seed 42                 # one seed: its world, its trace hash, what it found
//! redlock-sim --seed 42 --trace         # ... and every event
//! redlock-sim --seeds 100000 --progress # a swarm: summary table, exit 1 on a violation
//! redlock-sim --seed 7 --mutant late-extend   # a seed with a hole put back
//! redlock-sim --mutant-table            # seeds to the first failure of every mutant
//! redlock-sim --canary                  # the canary seed, which must fail
//! ```

use std::process::ExitCode;

use clap::Parser;

use redlock_sim::mutant::{self, MUTANTS};
use redlock_sim::scenario::{Kinds, Overrides, Scenario};
use redlock_sim::swarm::{self, SwarmOptions};
use redlock_sim::world::{Outcome, Setup};

/// The seed the canary runs.
const CANARY_SEED: u64 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "redlock-sim",
    about = "Deterministic simulator of the redlock protocol: the module's and the client's own rules under simulated faults"
)]
struct Args {
    /// Replay this one seed (the same trace hash every time).
    #[arg(long)]
    seed: Option<u64>,
    /// Run a swarm of this many seeds.
    #[arg(long)]
    seeds: Option<u64>,
    /// The swarm's first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Threads of the swarm (default: the CPUs available).
    #[arg(long)]
    threads: Option<usize>,
    /// Put a hole back (see --list-mutants).
    #[arg(long)]
    mutant: Option<String>,
    /// Only these fault kinds (comma-separated, `none`, `all`, or
    /// `all,-KIND,…` for every kind but those).
    #[arg(long)]
    faults: Option<String>,
    /// Clients.
    #[arg(long)]
    clients: Option<usize>,
    /// Lock names.
    #[arg(long)]
    keys: Option<usize>,
    /// Length of the fault phase in ms.
    #[arg(long)]
    fault_ms: Option<u64>,
    /// Clients wait as before a busy waiter queued at once (awaiting their
    /// busy attempt's RELEASEs before the WAIT): replays the seeds kept
    /// before that change.
    #[arg(long)]
    release_before_wait: bool,
    /// Print every event of the seed.
    #[arg(long)]
    trace: bool,
    /// Fail unless the seed's trace hash is this one (16 hex digits).
    #[arg(long)]
    expect_hash: Option<String>,
    /// Do not look for a shorter reproduction of a failing seed.
    #[arg(long)]
    no_shrink: bool,
    /// A progress bar on stderr.
    #[arg(long)]
    progress: bool,
    /// Seeds to the first failure of every mutant (at most --max-seeds).
    #[arg(long)]
    mutant_table: bool,
    /// The mutant table's budget per mutant.
    #[arg(long, default_value_t = 10_000)]
    max_seeds: u64,
    /// The canary: clocks drifting 8 % (past the 1 % the client allows);
    /// must fail.
    #[arg(long)]
    canary: bool,
    /// List the mutants.
    #[arg(long)]
    list_mutants: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("redlock-sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode, String> {
    if args.list_mutants {
        for m in MUTANTS {
            println!("{:22} {}", m.name, m.what);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let overrides = Overrides {
        faults: args.faults.as_deref().map(Kinds::parse).transpose()?,
        clients: args.clients,
        keys: args.keys,
        fault_ms: args.fault_ms,
    };
    let mut setup = Setup {
        release_before_wait: args.release_before_wait,
        ..Setup::default()
    };
    if let Some(name) = &args.mutant {
        let m = mutant::named(name).ok_or_else(|| {
            format!(
                "unknown mutant {name:?}; mutants: {}",
                MUTANTS
                    .iter()
                    .map(|m| m.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        m.apply(&mut setup);
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if args.mutant_table {
        let mut rows = Vec::new();
        for m in MUTANTS {
            let row = swarm::first_failure(m, args.max_seeds, threads);
            eprintln!(
                "{}: {}",
                m.name,
                row.first_failure.map_or("not caught".into(), |s| format!(
                    "first failure at seed {s}"
                ))
            );
            rows.push(row);
        }
        println!("{}", swarm::mutant_table(&rows));
        let missed = rows.iter().filter(|r| r.first_failure.is_none()).count();
        return Ok(if missed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    if args.canary {
        let out = redlock_sim::run_canary(CANARY_SEED);
        println!(
            "canary seed {CANARY_SEED}: clocks drifting 8 %: {} violation(s), trace {}",
            out.violations.len(),
            out.hash_hex()
        );
        if let Some(v) = out.violations.first() {
            println!("  first: [{}] at {} µs: {}", v.kind, v.at, v.what);
        }
        return Ok(if out.violations.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    if let Some(n) = args.seeds {
        let o = SwarmOptions {
            from: args.from,
            seeds: n,
            threads,
            overrides: overrides.clone(),
            setup: setup.clone(),
            progress: args.progress,
            stop_at_first_failure: false,
        };
        let summary = swarm::swarm(&o);
        println!("{}", summary.table());
        for f in summary.failures.iter().take(20) {
            println!(
                "seed {} failed: [{}] at {} µs: {} ({} violation(s)); replay: cargo run -p redlock-sim --release -- --seed {}{}{}",
                f.seed,
                f.first.kind,
                f.first.at,
                f.first.what,
                f.count,
                f.seed,
                overrides.args(),
                args.mutant.as_deref().map_or(String::new(), |m| format!(" --mutant {m}"))
            );
        }
        return Ok(if summary.failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let seed = args.seed.unwrap_or(0);
    let sc = Scenario::draw(seed, &overrides);
    println!("seed {seed}: {}", sc.summary());
    let mut replay = setup.clone();
    replay.record = args.trace;
    let out = redlock_sim::run(seed, &overrides, &replay);
    if args.trace {
        for line in out.trace.iter().flatten() {
            println!("{line}");
        }
    }
    report(&out);
    if let Some(want) = &args.expect_hash {
        if *want != out.hash_hex() {
            eprintln!("trace hash {} is not the expected {want}", out.hash_hex());
            return Ok(ExitCode::FAILURE);
        }
    }
    if out.violations.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    if !args.trace {
        print_around(seed, &overrides, &setup, &out);
    }
    if !args.no_shrink {
        if let Some((orig, best)) = redlock_sim::shrink::shrink(seed, &overrides, &setup) {
            println!(
                "shorter reproduction: {} events and {} faults to the first violation, down from {} and {} ([{}]):",
                best.events, best.faults, orig.events, orig.faults, best.kind
            );
            println!(
                "  cargo run -p redlock-sim --release -- --seed {seed}{}{}",
                best.overrides.args(),
                args.mutant
                    .as_deref()
                    .map_or(String::new(), |m| format!(" --mutant {m}"))
            );
        }
    }
    Ok(ExitCode::FAILURE)
}

fn report(out: &Outcome) {
    println!(
        "events {}, simulated {:.2} s, lock commands {}, acquisitions {}, faults {}; trace hash {}",
        out.events,
        out.end as f64 / 1e6,
        out.stats.node_commands,
        out.stats.acquisitions,
        out.stats.faults.iter().sum::<u64>(),
        out.hash_hex()
    );
    println!(
        "promotions {} (window shorter than the longest ttl: {}), renewals that met a longer lease {}, EXTENDs that shortened a lease {}",
        out.stats.promotions, out.stats.short_windows, out.stats.renewals_shorter, out.stats.extends_shorter
    );
    if out.violations.is_empty() {
        println!("no violation");
    }
    for v in out.violations.iter().take(10) {
        println!("VIOLATION [{}] at {} µs: {}", v.kind, v.at, v.what);
    }
}

/// Replays the seed with a readable trace and prints the events around the
/// first violation.
fn print_around(seed: u64, overrides: &Overrides, setup: &Setup, out: &Outcome) {
    let Some(first) = out.violations.first() else {
        return;
    };
    let mut replay = setup.clone();
    replay.record = true;
    replay.stop_at_first = true;
    let again = redlock_sim::run(seed, overrides, &replay);
    let lines = again.trace.unwrap_or_default();
    let upto = lines
        .iter()
        .rposition(|l| {
            l.split_whitespace()
                .next()
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|t| t <= first.at)
        })
        .unwrap_or(lines.len().saturating_sub(1));
    let from = upto.saturating_sub(60);
    println!("trace around the first violation (events {from}..={upto}):");
    for line in &lines[from..=upto.min(lines.len().saturating_sub(1))] {
        println!("  {line}");
    }
}
