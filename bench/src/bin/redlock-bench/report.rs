//! The benchmark's output: figures by name (for `--smoke` and `--json`),
//! the Markdown table, the targets, and the median and formatting helpers
//! every section uses.

use redlock_bench::stats::{median, median_percentiles, Percentiles};
use redlock_bench::workload::RunResult;

/// Every figure of the run, by name, for the smoke check and `--json`.
#[derive(Default)]
pub(crate) struct Figures {
    pub(crate) values: Vec<(String, Option<f64>)>,
}

impl Figures {
    pub(crate) fn put(&mut self, name: impl Into<String>, value: Option<f64>) -> Option<f64> {
        self.values.push((name.into(), value));
        value
    }

    pub(crate) fn missing(&self) -> Vec<&str> {
        self.values
            .iter()
            .filter(|(_, v)| !v.is_some_and(f64::is_finite))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
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
pub(crate) struct Table {
    pub(crate) rows: Vec<[String; 9]>,
}

impl Table {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn row(
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

    pub(crate) fn print(&self) {
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

pub(crate) fn us(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} ms", v / 1_000.0)
    } else if v >= 1_000.0 {
        format!("{:.2} ms", v / 1_000.0)
    } else {
        format!("{v:.0} µs")
    }
}

pub(crate) fn thousands(v: f64) -> String {
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

pub(crate) fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".into(), f)
}

pub(crate) fn ratio(v: Option<f64>) -> String {
    opt(v, |r| format!("{r:.2}×"))
}

/// Rotates `items` by `round` so that no implementation always runs first.
pub(crate) fn rotated<T: Copy>(items: &[T], round: usize) -> Vec<T> {
    let mut v = items.to_vec();
    if !v.is_empty() {
        let k = round % v.len();
        v.rotate_left(k);
    }
    v
}

pub(crate) fn med_rate(runs: &[RunResult], f: fn(&RunResult) -> f64) -> Option<f64> {
    median(&runs.iter().map(f).collect::<Vec<_>>())
}

pub(crate) fn med_lat(runs: &[RunResult]) -> Option<Percentiles> {
    let p: Option<Vec<Percentiles>> = runs.iter().map(|r| r.latency).collect();
    median_percentiles(&p?)
}

/// Median over rounds of the per-round ratio `f(a) / f(b)`.
pub(crate) fn med_ratio(
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
pub(crate) fn cpu_text(figures: &mut Figures, tag: &str, runs: &[RunResult]) -> String {
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
pub(crate) fn errors_note(runs: &[RunResult]) -> String {
    match med_rate(runs, |r| r.errors_per_sec) {
        Some(e) if e > 0.0 => format!(" ({e:.1} errors/s)"),
        _ => String::new(),
    }
}

pub(crate) fn p50(r: &RunResult) -> Option<f64> {
    r.latency.map(|p| p.p50)
}

pub(crate) struct Target {
    pub(crate) what: String,
    pub(crate) figure: Option<f64>,
    pub(crate) met: Option<bool>,
}

/// What the sections add to the output: figures, table rows, targets.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) figures: Figures,
    pub(crate) table: Table,
    pub(crate) targets: Vec<Target>,
    /// Lines printed under the targets.
    pub(crate) notes: Vec<String>,
}

impl Report {
    /// Prints the table and the targets with their verdicts.
    pub(crate) fn print_table(&self) {
        self.table.print();
        println!();
        if !self.targets.is_empty() {
            println!("Targets:");
            for t in &self.targets {
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
        for note in &self.notes {
            println!("{note}");
            println!();
        }
    }
}
