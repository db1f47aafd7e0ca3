//! Waiting for a busy lock (DESIGN §6), on five nodes of their own.
//!
//! N tasks loop on one key: take the lock, hold it 1 ms, release it. Three
//! ways of waiting are compared in the same run:
//! - `redlock-client` `acquire_wait`, woken by the nodes (`REDLOCK.WAIT`);
//! - the hand-written Redlock polling every 50 ms plus 0–50 ms of jitter;
//! - `redlock-client` `acquire` with its default retries (3 attempts,
//!   100–200 ms apart), called again until it gets the lock.
//!
//! Reported per way and N: acquisitions per second; the wait (from the call
//! to the lock) of acquisitions whose previous holder was another task,
//! p50/p99/max; the share of such hand-offs; acquisitions per task
//! (min/max); server commands per acquisition (`INFO commandstats` summed
//! over the nodes). And once: a lock held for a while with many waiters,
//! with the commands the nodes received meanwhile (no polling: a few per
//! waiter in total).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use redlock_client::{Redlock, RetryPolicy};
use redlock_testkit::{start_nodes, Node, NodeBuilder};

use crate::handwritten::HandRedlock;
use crate::stats::Samples;

/// The ways of waiting compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiter {
    /// `acquire_wait`, woken by the nodes.
    Woken,
    /// Hand-written Redlock polling every 50 ms + 0–50 ms.
    Polling,
    /// `redlock-client` `acquire` with its default retries, in a loop.
    Retries,
}

impl Waiter {
    /// Every way, in table order.
    pub const ALL: [Waiter; 3] = [Waiter::Woken, Waiter::Polling, Waiter::Retries];

    /// Table label.
    pub fn label(self) -> &'static str {
        match self {
            Waiter::Woken => "redlock acquire_wait",
            Waiter::Polling => "hand-written, poll 50 ms + jitter",
            Waiter::Retries => "redlock acquire (retries)",
        }
    }
}

/// Sizes of one waiting benchmark.
#[derive(Clone, Debug)]
pub struct WaitingPlan {
    /// Task counts.
    pub tasks: Vec<usize>,
    /// Length of each measurement.
    pub duration: Duration,
    /// Waiters of the held-lock scenario.
    pub held_waiters: usize,
    /// How long the lock is held in that scenario.
    pub held_for: Duration,
}

impl WaitingPlan {
    /// A full run: 8 and 64 tasks, 5 s each; 100 waiters on a lock held 10 s.
    pub fn full() -> Self {
        WaitingPlan {
            tasks: vec![8, 64],
            duration: Duration::from_secs(5),
            held_waiters: 100,
            held_for: Duration::from_secs(10),
        }
    }

    /// A smoke run: a fraction of a second each.
    pub fn smoke() -> Self {
        WaitingPlan {
            tasks: vec![8],
            duration: Duration::from_millis(600),
            held_waiters: 10,
            held_for: Duration::from_millis(500),
        }
    }
}

/// One measurement: one way of waiting, N tasks.
#[derive(Clone, Debug)]
pub struct WaitingResult {
    /// The way of waiting.
    pub waiter: Waiter,
    /// Tasks.
    pub tasks: usize,
    /// Acquisitions per second.
    pub rate: f64,
    /// Wait of hand-offs to another task, µs: p50, p99, max.
    pub handoff_wait_us: (f64, f64, f64),
    /// Share of acquisitions whose previous holder was another task.
    pub handoff_share: f64,
    /// Fewest and most acquisitions of one task.
    pub per_task: (u64, u64),
    /// Server commands per acquisition, over the five nodes.
    pub commands_per_acquisition: f64,
}

impl WaitingResult {
    /// min / max acquisitions per task.
    pub fn fairness(&self) -> f64 {
        if self.per_task.1 == 0 {
            0.0
        } else {
            self.per_task.0 as f64 / self.per_task.1 as f64
        }
    }
}

/// The held-lock scenario: commands the nodes received while `waiters`
/// waited on a lock held for `held_for`.
#[derive(Clone, Debug)]
pub struct HeldResult {
    /// Waiters.
    pub waiters: usize,
    /// How long the lock was held.
    pub held_for: Duration,
    /// Commands the nodes received meanwhile, over the five nodes.
    pub commands: u64,
    /// Every waiter got the lock after the release.
    pub all_served: bool,
}

/// Every figure of the waiting benchmark.
#[derive(Clone, Debug)]
pub struct WaitingReport {
    /// One row per way and task count.
    pub rows: Vec<WaitingResult>,
    /// The held-lock scenario.
    pub held: HeldResult,
}

impl WaitingReport {
    /// The row of `waiter` with `tasks` tasks.
    pub fn row(&self, waiter: Waiter, tasks: usize) -> Option<&WaitingResult> {
        self.rows
            .iter()
            .find(|r| r.waiter == waiter && r.tasks == tasks)
    }

    /// Prints the table (Markdown).
    pub fn print(&self) {
        println!("### Waiting for a busy lock (1 key, hold 1 ms)");
        println!();
        println!("| tasks | waiting | acq/s | hand-off wait p50 | p99 | max | hand-offs | acq/task min/max | cmds/acq |");
        println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in &self.rows {
            println!(
                "| {} | {} | {:.0} | {:.1} ms | {:.1} ms | {:.1} ms | {:.0} % | {}/{} ({:.2}) | {:.1} |",
                r.tasks,
                r.waiter.label(),
                r.rate,
                r.handoff_wait_us.0 / 1000.0,
                r.handoff_wait_us.1 / 1000.0,
                r.handoff_wait_us.2 / 1000.0,
                r.handoff_share * 100.0,
                r.per_task.0,
                r.per_task.1,
                r.fairness(),
                r.commands_per_acquisition,
            );
        }
        println!();
        for &tasks in &self
            .rows
            .iter()
            .map(|r| r.tasks)
            .collect::<std::collections::BTreeSet<_>>()
        {
            if let (Some(w), Some(p)) = (
                self.row(Waiter::Woken, tasks),
                self.row(Waiter::Polling, tasks),
            ) {
                println!(
                    "{tasks} tasks, acquire_wait ÷ polling: hand-off p99 {:.3}×, acq/s {:.2}×; acquire_wait fairness {:.2}, hand-offs {:.0} %",
                    w.handoff_wait_us.1 / p.handoff_wait_us.1.max(1.0),
                    w.rate / p.rate.max(1e-9),
                    w.fairness(),
                    w.handoff_share * 100.0
                );
            }
        }
        println!(
            "A lock held {:?} with {} waiters: {} commands reached the nodes meanwhile ({:.2} per waiter); every waiter served after the release: {}",
            self.held.held_for,
            self.held.waiters,
            self.held.commands,
            self.held.commands as f64 / self.held.waiters.max(1) as f64,
            self.held.all_served
        );
    }
}

fn commands_total(nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .flat_map(crate::command_calls)
        .filter(|(name, _)| name != "info")
        .map(|(_, calls)| calls)
        .sum()
}

/// One acquisition as the scenario saw it.
struct Taken {
    task: usize,
    wait: Duration,
    handoff: bool,
}

/// The log of a measurement: who held the lock last, and every acquisition.
#[derive(Default)]
struct Log {
    last: Option<usize>,
    taken: Vec<Taken>,
}

async fn measure(
    waiter: Waiter,
    tasks: usize,
    duration: Duration,
    urls: &[String],
    nodes: &[Node],
    key: &str,
) -> Result<WaitingResult, String> {
    let redlock = Redlock::builder(urls.to_vec())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let hand = HandRedlock::connect(urls)
        .await
        .map_err(|e| e.to_string())?;
    let log = Arc::new(Mutex::new(Log::default()));
    let commands_before = commands_total(nodes);
    let started = Instant::now();
    let end = started + duration;
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (redlock, hand, log, key) = (
            redlock.clone(),
            hand.clone(),
            Arc::clone(&log),
            key.to_string(),
        );
        handles.push(tokio::spawn(async move {
            let ttl = Duration::from_secs(10);
            // Since when this task wants the lock (its last release, or the
            // start): a polling task's wait spans all its tries.
            let mut wanting_since = Instant::now();
            while Instant::now() < end {
                let called = wanting_since;
                // Take the lock the way under test; `release` gives it back.
                let release: Box<
                    dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
                        + Send,
                > = match waiter {
                    Waiter::Woken => {
                        let left = end.saturating_duration_since(Instant::now());
                        match redlock.acquire_wait(&key, ttl, left).await {
                            Ok(lock) => Box::new(move || {
                                Box::pin(async move {
                                    let _ = lock.release().await;
                                })
                            }),
                            Err(_) => continue,
                        }
                    }
                    Waiter::Retries => match redlock.acquire(&key, ttl).await {
                        Ok(lock) => Box::new(move || {
                            Box::pin(async move {
                                let _ = lock.release().await;
                            })
                        }),
                        Err(_) => continue,
                    },
                    Waiter::Polling => match hand.try_acquire(&key, ttl).await {
                        Ok(Some(lock)) => {
                            let (hand, key) = (hand.clone(), key.clone());
                            Box::new(move || {
                                Box::pin(async move {
                                    let _ = hand.release(&key, &lock).await;
                                })
                            })
                        }
                        _ => {
                            let pause = 50 + rand::thread_rng().gen_range(0..=50);
                            tokio::time::sleep(Duration::from_millis(pause)).await;
                            continue;
                        }
                    },
                };
                let wait = called.elapsed();
                {
                    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                    let handoff = log.last.is_some_and(|last| last != task);
                    log.taken.push(Taken {
                        task,
                        wait,
                        handoff,
                    });
                    log.last = Some(task);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                release().await;
                wanting_since = Instant::now();
            }
        }));
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed();
    // Background releases of the slower nodes settle first.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let commands = commands_total(nodes).saturating_sub(commands_before);
    let log = log.lock().unwrap_or_else(|p| p.into_inner());
    let mut waits = Samples::with_capacity(log.taken.len());
    let mut max_wait = Duration::ZERO;
    let mut per_task = vec![0u64; tasks];
    for t in &log.taken {
        per_task[t.task] += 1;
        if t.handoff {
            waits.push(t.wait);
            max_wait = max_wait.max(t.wait);
        }
    }
    let handoffs = waits.len();
    let acquisitions = log.taken.len();
    let p = waits.percentiles();
    Ok(WaitingResult {
        waiter,
        tasks,
        rate: acquisitions as f64 / elapsed.as_secs_f64(),
        handoff_wait_us: (
            p.map_or(f64::NAN, |p| p.p50),
            p.map_or(f64::NAN, |p| p.p99),
            max_wait.as_secs_f64() * 1e6,
        ),
        handoff_share: handoffs as f64 / acquisitions.max(1) as f64,
        per_task: (
            per_task.iter().copied().min().unwrap_or(0),
            per_task.iter().copied().max().unwrap_or(0),
        ),
        commands_per_acquisition: commands as f64 / acquisitions.max(1) as f64,
    })
}

async fn held_lock(
    plan: &WaitingPlan,
    urls: &[String],
    nodes: &[Node],
) -> Result<HeldResult, String> {
    let redlock = Redlock::builder(urls.to_vec())
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let holder = redlock
        .acquire("held", plan.held_for * 3)
        .await
        .map_err(|e| e.to_string())?;
    let mut waiters = Vec::new();
    for _ in 0..plan.held_waiters {
        let redlock = redlock.clone();
        let max_wait = plan.held_for * 4;
        waiters.push(tokio::spawn(async move {
            let lock = redlock
                .acquire_wait("held", Duration::from_secs(5), max_wait)
                .await?;
            lock.release().await.map(|_| ())
        }));
    }
    // Every waiter made its first attempt and is blocked now.
    tokio::time::sleep(plan.held_for / 5).await;
    let before = commands_total(nodes);
    tokio::time::sleep(plan.held_for).await;
    let commands = commands_total(nodes).saturating_sub(before);
    holder.release().await.map_err(|e| e.to_string())?;
    let mut all_served = true;
    for w in waiters {
        all_served &= matches!(w.await, Ok(Ok(())));
    }
    Ok(HeldResult {
        waiters: plan.held_waiters,
        held_for: plan.held_for,
        commands,
        all_served,
    })
}

/// Runs the waiting benchmark on five fresh nodes started from `builder`.
pub async fn run(builder: &NodeBuilder, plan: &WaitingPlan) -> Result<WaitingReport, String> {
    let nodes = start_nodes(5, builder);
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let mut rows = Vec::new();
    for &tasks in &plan.tasks {
        for waiter in Waiter::ALL {
            let key = format!("waiting-{tasks}-{waiter:?}");
            rows.push(measure(waiter, tasks, plan.duration, &urls, &nodes, &key).await?);
        }
    }
    let held = held_lock(plan, &urls, &nodes).await?;
    Ok(WaitingReport { rows, held })
}
