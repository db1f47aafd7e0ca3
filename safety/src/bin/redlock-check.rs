//! `redlock-check HISTORY…`: re-checks saved histories offline and prints the
//! same counts as the `safety` runner. Exits 1 when any history violates
//! what its run guarantees, 2 when a history cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use redlock_safety::{checker, history};

/// Re-check saved redlock safety histories.
#[derive(Parser)]
#[command(name = "redlock-check", version)]
struct Args {
    /// History files (`*.jsonl`) or folders of per-process files of one run.
    #[arg(required = true)]
    histories: Vec<PathBuf>,
    /// Print the reports as JSON lines.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut bad = false;
    for path in &args.histories {
        let events = match history::load(path) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("redlock-check: {e}");
                return ExitCode::from(2);
            }
        };
        let report = checker::check(&events);
        if args.json {
            println!("{}", serde_json::to_string(&report).unwrap_or_default());
        } else {
            let counts: Vec<String> = report
                .counts()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!(
                "{}: run={} fault={} acquisitions={} failures={} faults={} resource_ops={} stale_refused={} {} violations={}",
                path.display(),
                report.run,
                report.fault,
                report.acquisitions,
                report.acquire_failures,
                report.faults,
                report.resource_ops,
                report.stale_refused,
                counts.join(" "),
                report.violations()
            );
            for ex in report.examples.iter().take(5) {
                println!("  {ex}");
            }
        }
        bad |= report.violations() > 0;
    }
    if bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
