//! CPU time spent by this process and by the nodes during a measurement,
//! so that implementations can be compared by cost per operation as well as
//! by throughput (on a shared machine the latter moves with the neighbours'
//! load, the former much less).

use std::time::Duration;

/// CPU time of this process (all threads).
pub fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// User + system CPU time of the processes `pids` (from `/proc/PID/stat`,
/// clock-tick resolution); processes that are gone count as zero.
pub fn pids_cpu(pids: &[u32]) -> Duration {
    let (user, system) = pids_user_system(pids);
    user + system
}

/// User and system CPU time of the processes `pids`, apart (from
/// `/proc/PID/stat`, clock-tick resolution); processes that are gone count
/// as zero.
pub fn pids_user_system(pids: &[u32]) -> (Duration, Duration) {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let (mut user, mut system) = (0u64, 0u64);
    for pid in pids {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces: fields start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
        user += fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
        system += fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    }
    let of = |t: u64| Duration::from_micros(t * 1_000_000 / ticks);
    (of(user), of(system))
}

/// Read and write system calls made so far by the processes `pids`, summed
/// (`syscr` and `syscw` of `/proc/PID/io`; a node's socket reads and writes
/// are counted there, `epoll_wait` is not). Processes that are gone count
/// as zero.
pub fn pids_syscalls(pids: &[u32]) -> (u64, u64) {
    let mut total = (0, 0);
    for pid in pids {
        let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) else {
            continue;
        };
        for line in io.lines() {
            let value = |v: &str| v.trim().parse::<u64>().unwrap_or(0);
            if let Some(v) = line.strip_prefix("syscr:") {
                total.0 += value(v);
            } else if let Some(v) = line.strip_prefix("syscw:") {
                total.1 += value(v);
            }
        }
    }
    total
}

/// Context switches (voluntary + involuntary) of all threads of this
/// process so far: a thread that parks and is woken again costs two.
pub fn context_switches() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut total = 0;
    for task in dir.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}

/// CPU used between two readings.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    /// This process.
    pub bench: Duration,
    /// The nodes.
    pub nodes: Duration,
}

/// A pair of readings.
#[derive(Clone, Debug)]
pub struct CpuMeter {
    pids: Vec<u32>,
    bench: Duration,
    nodes: Duration,
}

impl CpuMeter {
    /// Takes the first reading.
    pub fn start(pids: &[u32]) -> Self {
        CpuMeter {
            pids: pids.to_vec(),
            bench: process_cpu(),
            nodes: pids_cpu(pids),
        }
    }

    /// CPU used since [`CpuMeter::start`].
    pub fn stop(&self) -> CpuUse {
        CpuUse {
            bench: process_cpu().saturating_sub(self.bench),
            nodes: pids_cpu(&self.pids).saturating_sub(self.nodes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_advances_and_own_pid_is_readable() {
        let m = CpuMeter::start(&[std::process::id()]);
        let mut x = 0u64;
        // Spin until both readings show the CPU spent (a loaded machine
        // gives this thread only part of the wall time; /proc counts in
        // clock ticks), at most 10 s.
        let t = std::time::Instant::now();
        let mut used = m.stop();
        while (used.bench < Duration::from_millis(20) || used.nodes < Duration::from_millis(10))
            && t.elapsed() < Duration::from_secs(10)
        {
            for _ in 0..100_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            used = m.stop();
        }
        assert!(x > 0);
        assert!(used.bench >= Duration::from_millis(20), "{used:?}");
        assert!(used.nodes >= Duration::from_millis(10), "{used:?}");
    }

    #[test]
    fn own_reads_are_counted() {
        let me = [std::process::id()];
        let (reads, _) = pids_syscalls(&me);
        for _ in 0..3 {
            std::fs::read_to_string("/proc/self/stat").unwrap();
        }
        let (after, _) = pids_syscalls(&me);
        assert!(after >= reads + 3, "{reads} then {after}");
    }
}
