//! Closed-loop client workloads: `concurrency` tasks, each running one
//! operation after another for a fixed time; a warm-up first, then every
//! operation that completes inside the counted window is recorded.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpu::{CpuMeter, CpuUse};
use crate::stats::{Percentiles, Samples};

/// What one operation reports: whether it succeeded (a lock was obtained)
/// and the latency to record.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// A lock was obtained (always true for an uncontended cycle).
    pub ok: bool,
    /// The latency to record for this operation.
    pub latency: Duration,
}

/// Result of one timed run.
#[derive(Clone, Copy, Debug)]
pub struct RunResult {
    /// Successful operations per second.
    pub ok_per_sec: f64,
    /// Unsuccessful operations (busy attempts) per second.
    pub failed_per_sec: f64,
    /// Latency percentiles of all recorded operations.
    pub latency: Option<Percentiles>,
    /// Operations that failed with an error, per second (tolerated up to
    /// 1 % of the operations, see [`run`]).
    pub errors_per_sec: f64,
    /// CPU microseconds per operation (successful or not) of this process.
    pub bench_cpu_us: f64,
    /// CPU microseconds per operation of the nodes.
    pub nodes_cpu_us: f64,
}

/// Window of one run.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Time before counting starts.
    pub warmup: Duration,
    /// Counted time.
    pub duration: Duration,
}

/// Runs `op(task)` in a loop on `concurrency` tasks for `window`.
/// `node_pids`: the servers whose CPU time is charged to the operations.
///
/// An operation that fails is counted and the task goes on after a
/// millisecond (on a loaded machine a node can miss the client's per-node
/// timeout now and then); more than 1 % failed operations (and more than 5)
/// fail the run with the first error.
pub async fn run<F, Fut>(
    concurrency: usize,
    window: Window,
    node_pids: &[u32],
    op: F,
) -> Result<RunResult, String>
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome, String>> + Send + 'static,
{
    let recording = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let (op, recording, stop) = (op.clone(), recording.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Samples::with_capacity(1 << 14);
            let mut failed = 0u64;
            let mut errors = 0u64;
            let mut first_error = None;
            while !stop.load(Ordering::Relaxed) {
                match op(task).await {
                    Ok(outcome) => {
                        if recording.load(Ordering::Relaxed) {
                            samples.push(outcome.latency);
                            if !outcome.ok {
                                failed += 1;
                            }
                        }
                    }
                    Err(e) => {
                        if recording.load(Ordering::Relaxed) {
                            errors += 1;
                        }
                        first_error.get_or_insert(e);
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                }
            }
            Ok::<_, String>((samples, failed, errors, first_error))
        }));
    }
    tokio::time::sleep(window.warmup).await;
    recording.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let meter = CpuMeter::start(node_pids);
    tokio::time::sleep(window.duration).await;
    recording.store(false, Ordering::Relaxed);
    let cpu: CpuUse = meter.stop();
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut all = Samples::default();
    let mut failed = 0;
    let mut errors = 0;
    let mut first_error = None;
    let mut first_op_error = None;
    for t in tasks {
        match t.await {
            Ok(Ok((samples, f, e, msg))) => {
                all.merge(samples);
                failed += f;
                errors += e;
                if first_op_error.is_none() {
                    first_op_error = msg;
                }
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(format!("task failed: {e}"));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let total = all.len() as u64;
    if errors > 5 && errors * 100 > total + errors {
        return Err(format!(
            "{errors} of {} operations failed, first: {}",
            total + errors,
            first_op_error.unwrap_or_default()
        ));
    }
    let per_op = |d: std::time::Duration| d.as_secs_f64() * 1e6 / total.max(1) as f64;
    Ok(RunResult {
        ok_per_sec: (total - failed) as f64 / elapsed,
        failed_per_sec: failed as f64 / elapsed,
        errors_per_sec: errors as f64 / elapsed,
        latency: all.percentiles(),
        bench_cpu_us: per_op(cpu.bench),
        nodes_cpu_us: per_op(cpu.nodes),
    })
}
