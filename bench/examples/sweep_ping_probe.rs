//! Diagnostic for the reclamation PING figure: PING latency of a node
//! sweeping a backlog of idle records against a control node, pinged
//! alternately (one PING each, 200 µs apart) in 4 s windows, before the sweep
//! and while it runs. Prints, per phase, the median over windows of the two
//! nodes' p99 and p50 ratios, then the sweep's pace from `INFO redlock`.
//!
//! `REDLOCK_MODULE=$PWD/target/release/libredlock.so cargo run --release -p redlock-bench --example sweep_ping_probe -- [records] [secs] [config=value | env:NAME=value ...]`
//!
//! The extra arguments apply to the sweeping node only: `hz=500` (Redis's own
//! timer), or, with a test build, `env:REDLOCK_TEST_SWEEP_ON_TIMERS=1` (the
//! sweep on main-thread module timers). With 0 records the "before" phase
//! compares the two nodes as configured, without any sweep.

use std::time::{Duration, Instant};

use redlock_testkit::Node;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n => v[((n as f64 - 1.0) * p) as usize],
    }
}

fn info(con: &mut redis::Connection, field: &str) -> Result<u64> {
    let info: String = redis::cmd("INFO").arg("redlock").query(con)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

/// PINGs both nodes in turn for `secs`; prints the window medians.
fn measure(cons: &mut [redis::Connection; 2], secs: f64, label: &str) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut p99_ratios, mut p50_ratios) = (Vec::new(), Vec::new());
    let mut all: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    while Instant::now() < end {
        let window_end = Instant::now() + Duration::from_secs(4);
        let mut window: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        while Instant::now() < window_end {
            for (i, con) in cons.iter_mut().enumerate() {
                let t = Instant::now();
                let _: String = redis::cmd("PING").query(con)?;
                window[i].push(t.elapsed().as_secs_f64() * 1e6);
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let [node, control] = &mut window;
        p99_ratios.push(percentile(node, 0.99) / percentile(control, 0.99));
        p50_ratios.push(percentile(node, 0.5) / percentile(control, 0.5));
        all[0].extend_from_slice(node);
        all[1].extend_from_slice(control);
    }
    let [node, control] = &mut all;
    println!(
        "{label}: {} windows; p99 ratio {:.2}, p50 ratio {:.2} (medians); PING p50/p99 µs: node {:.0}/{:.0}, control {:.0}/{:.0}",
        p99_ratios.len(),
        percentile(&mut p99_ratios, 0.5),
        percentile(&mut p50_ratios, 0.5),
        percentile(node, 0.5),
        percentile(node, 0.99),
        percentile(control, 0.5),
        percentile(control, 0.99)
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let records: u64 = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(300_000);
    let secs: f64 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(30.0);
    let base = Node::builder()
        .config("redlock.max-ttl-ms", "1000")
        .config("redlock.restart-grace-ms", "0")
        .config("redlock.reclaim-after-ms", "0");
    let mut sweeping = base.clone();
    for arg in args.iter().skip(3) {
        match arg.split_once('=') {
            Some((name, value)) => match name.strip_prefix("env:") {
                Some(env) => sweeping = sweeping.env(env, value),
                None => sweeping = sweeping.config(name, value),
            },
            None => return Err(format!("not config=value or env:NAME=value: {arg}").into()),
        }
    }
    let node = sweeping.start();
    let control = base.start();
    let mut con = node.connection();
    redlock_bench::reclaim::load_idle_records(&mut con, records)?;
    std::thread::sleep(Duration::from_millis(1_200));
    let mut cons = [node.connection(), control.connection()];
    measure(&mut cons, 12.0, "before")?;
    if records == 0 {
        return Ok(());
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("redlock.reclaim-after-ms")
        .arg(1_000)
        .query(&mut con)?;
    let (time0, ticks0) = (
        info(&mut con, "redlock_sweep_time_us")?,
        info(&mut con, "redlock_sweep_ticks")?,
    );
    let started = Instant::now();
    measure(&mut cons, secs, "during")?;
    let elapsed = started.elapsed().as_secs_f64();
    let time = info(&mut con, "redlock_sweep_time_us")?.saturating_sub(time0) as f64;
    let ticks = info(&mut con, "redlock_sweep_ticks")?.saturating_sub(ticks0);
    println!(
        "sweep (thread {}): {} records left, {} reclaimed; {:.2} % of the time in ticks, {:.0} ticks/s, mean tick {:.1} µs",
        info(&mut con, "redlock_sweep_thread")?,
        info(&mut con, "redlock_records")?,
        info(&mut con, "redlock_reclaimed")?,
        time / 1e6 / elapsed * 100.0,
        ticks as f64 / elapsed,
        time / ticks.max(1) as f64
    );
    Ok(())
}
