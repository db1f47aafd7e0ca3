//! The Rust client's side of `make bench-python`: acquire + release cycles
//! per second on already-running nodes, one key per task (no contention),
//! so that the Python package's figures can be set against the crate it
//! binds, measured in the same run on the same nodes.
//!
//! `python_baseline TASKS SECONDS URL...` prints `cycles_per_sec N`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_client::Redlock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [tasks, secs, urls @ ..] = args.as_slice() else {
        return Err("usage: python_baseline TASKS SECONDS URL...".into());
    };
    let tasks: usize = tasks.parse()?;
    let secs: f64 = secs.parse()?;
    let redlock = Redlock::builder(urls.iter().map(String::as_str))
        .build()
        .await?;
    let cycles = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (redlock, cycles) = (redlock.clone(), Arc::clone(&cycles));
        handles.push(tokio::spawn(async move {
            let key = format!("bench-rust-{}-{t}", std::process::id());
            while Instant::now() < until {
                if let Ok(lock) = redlock.acquire(&key, Duration::from_secs(10)).await {
                    let _ = lock.release().await;
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for h in handles {
        h.await?;
    }
    let rate = cycles.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    println!("cycles_per_sec {rate:.1}");
    Ok(())
}
