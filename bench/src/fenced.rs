//! Server cost of a fenced write: `REDLOCK.FENCED guard lock token SET k v`
//! against a plain `SET k v` and against the same check done in Lua with
//! `EVALSHA` (the recipe users write today: read the highest token from a
//! string key, refuse a lower one, raise it, then `SET`).
//!
//! Raw pipelined RESP on a few connections, each with its own guard and
//! data key and one token (the steady state of a holder writing many times:
//! the first call raises the guard, the rest pass as equal). The server's CPU
//! time over the window, divided by the commands it answered, is the figure.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cpu::pids_cpu;
use crate::resp::{encode, parse_one, ReplyKind};

/// The check-and-set of the Lua recipe: `KEYS[1]` the guard (a string),
/// `KEYS[2]` the data, `ARGV[1]` the token, `ARGV[2]` the value.
pub const LUA_FENCED_SET: &str = "\
local t = tonumber(ARGV[1])
local h = tonumber(redis.call('GET', KEYS[1]) or '0')
if t < h then return redis.error_reply('STALE token ' .. ARGV[1] .. ' is below ' .. h) end
if t > h then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('SET', KEYS[2], ARGV[2])";

/// Which command the load sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// `SET k v`.
    Plain,
    /// `REDLOCK.FENCED g lock token SET k v`.
    Fenced,
    /// `EVALSHA <sha of LUA_FENCED_SET> 2 g k token v`.
    Evalsha {
        /// SHA1 of the loaded script.
        sha: String,
    },
}

impl Write {
    /// Name in tables and figures.
    pub fn name(&self) -> &'static str {
        match self {
            Write::Plain => "SET",
            Write::Fenced => "REDLOCK.FENCED … SET",
            Write::Evalsha { .. } => "EVALSHA check + SET",
        }
    }
}

/// Shape of one load run.
#[derive(Clone, Debug)]
pub struct FencedSpec {
    /// Parallel connections.
    pub connections: usize,
    /// Commands per round trip on each connection.
    pub pipeline: usize,
    /// Time before counting starts.
    pub warmup: Duration,
    /// Counted time.
    pub duration: Duration,
    /// The server's pid.
    pub server_pid: u32,
}

/// What one run measured.
#[derive(Clone, Copy, Debug)]
pub struct FencedResult {
    /// Commands per second.
    pub ops_per_sec: f64,
    /// Server CPU microseconds per command.
    pub server_cpu_us: f64,
    /// Error replies (a STALE here would be a bug of the load).
    pub errors: u64,
}

/// The command batch connection `c` sends every round trip.
fn batch(write: &Write, c: usize, pipeline: usize) -> Vec<u8> {
    let guard = format!("{{bench:{c}}}:fence");
    let lua_guard = format!("{{bench:{c}}}:fence-lua");
    let data = format!("{{bench:{c}}}:data");
    let lock = format!("bench:{c}");
    let token = b"1000";
    let value = b"some value of a realistic size, 48 bytes long..";
    let mut out = Vec::new();
    for _ in 0..pipeline {
        match write {
            Write::Plain => encode(&mut out, &[b"SET", data.as_bytes(), value]),
            Write::Fenced => encode(
                &mut out,
                &[
                    b"REDLOCK.FENCED",
                    guard.as_bytes(),
                    lock.as_bytes(),
                    token,
                    b"SET",
                    data.as_bytes(),
                    value,
                ],
            ),
            Write::Evalsha { sha } => encode(
                &mut out,
                &[
                    b"EVALSHA",
                    sha.as_bytes(),
                    b"2",
                    lua_guard.as_bytes(),
                    data.as_bytes(),
                    token,
                    value,
                ],
            ),
        }
    }
    out
}

/// Runs the load against `addr` on a runtime of its own (one thread).
pub fn run(addr: SocketAddr, write: &Write, spec: &FencedSpec) -> std::io::Result<FencedResult> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(addr, write.clone(), spec.clone()))
}

async fn run_async(
    addr: SocketAddr,
    write: Write,
    spec: FencedSpec,
) -> std::io::Result<FencedResult> {
    let ops = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..spec.connections {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let out = batch(&write, c, spec.pipeline);
        let (ops, errors, counting, stop) = (
            Arc::clone(&ops),
            Arc::clone(&errors),
            Arc::clone(&counting),
            Arc::clone(&stop),
        );
        let pipeline = spec.pipeline;
        tasks.push(tokio::spawn(async move {
            let mut buf = Vec::with_capacity(64 * 1024);
            let mut chunk = vec![0u8; 64 * 1024];
            while !stop.load(Ordering::Relaxed) {
                stream.write_all(&out).await?;
                let mut got = 0;
                let mut errs = 0;
                while got < pipeline {
                    let n = stream.read(&mut chunk).await?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let mut at = 0;
                    while got < pipeline {
                        let Some((kind, len)) = parse_one(&buf[at..]) else {
                            break;
                        };
                        if kind == ReplyKind::Error {
                            errs += 1;
                        }
                        at += len;
                        got += 1;
                    }
                    buf.drain(..at);
                }
                if counting.load(Ordering::Relaxed) {
                    ops.fetch_add(pipeline as u64, Ordering::Relaxed);
                    errors.fetch_add(errs, Ordering::Relaxed);
                }
            }
            Ok::<(), std::io::Error>(())
        }));
    }
    tokio::time::sleep(spec.warmup).await;
    let cpu0 = pids_cpu(&[spec.server_pid]);
    let t0 = Instant::now();
    counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(spec.duration).await;
    counting.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let cpu = pids_cpu(&[spec.server_pid]).saturating_sub(cpu0);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.map_err(std::io::Error::other)??;
    }
    let n = ops.load(Ordering::Relaxed);
    Ok(FencedResult {
        ops_per_sec: n as f64 / elapsed.as_secs_f64(),
        server_cpu_us: if n == 0 {
            f64::NAN
        } else {
            cpu.as_secs_f64() * 1e6 / n as f64
        },
        errors: errors.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_whole_commands() {
        let b = batch(&Write::Fenced, 3, 2);
        let text = String::from_utf8(b).unwrap();
        assert_eq!(text.matches("REDLOCK.FENCED").count(), 2);
        assert!(text.contains("{bench:3}:fence"));
        let b = batch(&Write::Evalsha { sha: "abc".into() }, 0, 1);
        assert!(String::from_utf8(b)
            .unwrap()
            .starts_with("*7\r\n$7\r\nEVALSHA"));
    }
}
