//! `--profile-cycles`: sequential lock+unlock cycles of each implementation,
//! for callgrind or `strace -c` (no table).

use std::time::Instant;

use crate::lockers::{Lockers, TTL};
use crate::plan::{Impl, Plan};

/// Runs `n` cycles of each implementation of `plan` on `tasks` tasks and
/// prints what they cost.
pub(crate) async fn run(
    n: u64,
    tasks: usize,
    urls: &[String],
    pids: &[u32],
    plan: &Plan,
) -> Result<(), String> {
    let l = Lockers::connect(urls, pids, plan).await?;
    let tasks = tasks.max(1);
    for imp in plan.impls.iter().copied() {
        let per_task = n / tasks as u64;
        let t = Instant::now();
        let meter = redlock_bench::cpu::CpuMeter::start(pids);
        let allocs = redlock_bench::alloc_count::allocations();
        let switches = redlock_bench::cpu::context_switches();
        let syscalls = redlock_bench::cpu::pids_syscalls(pids);
        let split = redlock_bench::cpu::pids_user_system(pids);
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
        let (user, system) = redlock_bench::cpu::pids_user_system(pids);
        let (user, system) = (user.saturating_sub(split.0), system.saturating_sub(split.1));
        let (reads, writes) = redlock_bench::cpu::pids_syscalls(pids);
        let (reads, writes) = (
            reads.saturating_sub(syscalls.0),
            writes.saturating_sub(syscalls.1),
        );
        let el = t.elapsed();
        let cycles = (per_task * tasks as u64) as f64;
        println!(
            "{}: {cycles} cycles on {tasks} task(s) in {:.3} s ({:.1} µs/cycle; CPU µs/cycle: bench {:.1}, nodes {:.1} (user {:.1}, system {:.1}); {:.1} allocations, {:.2} context switches per cycle; node reads {:.2}, writes {:.2} per cycle)",
            imp.label(),
            el.as_secs_f64(),
            el.as_secs_f64() * 1e6 / cycles,
            cpu.bench.as_secs_f64() * 1e6 / cycles,
            cpu.nodes.as_secs_f64() * 1e6 / cycles,
            user.as_secs_f64() * 1e6 / cycles,
            system.as_secs_f64() * 1e6 / cycles,
            allocs as f64 / cycles,
            switches as f64 / cycles,
            reads as f64 / cycles,
            writes as f64 / cycles,
        );
    }
    Ok(())
}
