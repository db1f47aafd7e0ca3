//! Server-side load on one node: lock+unlock cycles over raw pipelined RESP,
//! so the driver costs as little as possible and the same for both sides.
//!
//! Every cycle takes a free lock and frees it again, with a fresh 36-byte
//! owner: `REDLOCK.ACQUIRE key owner ttl` + `REDLOCK.RELEASE key owner`
//! against `SET key owner NX PX ttl` + `EVALSHA <compare-and-delete> 1 key owner`.
//! Each connection cycles through its own pool of lock names (the steady state
//! of a lock service: a redlock name keeps its counter after release, a plain
//! key is deleted). A reply that is not a grant / a successful release is
//! counted as refused, so a workload that degenerates into renewals or
//! no-op releases shows up as an error instead of a fast figure.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cpu::CpuMeter;
use crate::owner::{write_owner, OWNER_LEN};
use crate::resp::{encode, parse_one, push_decimal, ReplyKind};

/// Lease of every lock taken by the load, in milliseconds.
pub const LOAD_TTL_MS: &[u8] = b"10000";

/// Which pair of commands a cycle sends.
#[derive(Clone, Debug)]
pub enum Side {
    /// `REDLOCK.ACQUIRE` + `REDLOCK.RELEASE`.
    Redlock,
    /// `SET NX PX` + `EVALSHA` of the compare-and-delete script with this SHA1.
    SetEvalsha {
        /// SHA1 of the loaded unlock script.
        sha: String,
    },
}

/// Shape of one load run.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Parallel connections.
    pub connections: usize,
    /// Commands sent per round trip on each connection (1 = no pipelining;
    /// otherwise even, so every batch holds whole cycles).
    pub pipeline: usize,
    /// Lock names per connection.
    pub key_pool: u64,
    /// Time before counting starts.
    pub warmup: Duration,
    /// Counted time.
    pub duration: Duration,
    /// The server's pid, whose CPU time is charged to the commands.
    pub server_pid: Option<u32>,
}

/// What one load run measured.
#[derive(Clone, Copy, Debug)]
pub struct LoadResult {
    /// Commands per second (two per cycle).
    pub ops_per_sec: f64,
    /// Replies that were not the expected grant or release.
    pub refused: u64,
    /// Error replies.
    pub errors: u64,
    /// Server CPU microseconds per command.
    pub server_cpu_us: f64,
}

/// Distinguishes the owners of successive runs.
static RUN: AtomicU64 = AtomicU64::new(1);

struct Shared {
    ops: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
}

/// Runs the load against `addr` on a runtime of its own (one thread, so the
/// driver takes one core and the server the other). Blocks.
pub fn run(
    addr: SocketAddr,
    side: Side,
    spec: &LoadSpec,
    tag: &str,
) -> std::io::Result<LoadResult> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(addr, side, spec.clone(), tag.to_string()))
}

async fn run_async(
    addr: SocketAddr,
    side: Side,
    spec: LoadSpec,
    tag: String,
) -> std::io::Result<LoadResult> {
    assert!(spec.pipeline == 1 || spec.pipeline & 1 == 0);
    let shared = Arc::new(Shared {
        ops: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let mut tasks = Vec::new();
    for c in 0..spec.connections {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (side, spec, shared) = (side.clone(), spec.clone(), shared.clone());
        let prefix = format!("{tag}:{c}:");
        tasks.push(tokio::spawn(async move {
            connection_loop(
                &mut stream,
                &side,
                &spec,
                &shared,
                prefix.as_bytes(),
                c as u64,
            )
            .await
        }));
    }
    tokio::time::sleep(spec.warmup).await;
    let pids: Vec<u32> = spec.server_pid.into_iter().collect();
    let (ops0, t0) = (shared.ops.load(Ordering::Relaxed), Instant::now());
    let meter = CpuMeter::start(&pids);
    tokio::time::sleep(spec.duration).await;
    let (ops1, t1) = (shared.ops.load(Ordering::Relaxed), Instant::now());
    let cpu = meter.stop();
    shared.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.map_err(std::io::Error::other)??;
    }
    Ok(LoadResult {
        ops_per_sec: (ops1 - ops0) as f64 / (t1 - t0).as_secs_f64(),
        refused: shared.refused.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        server_cpu_us: cpu.nodes.as_secs_f64() * 1e6 / (ops1 - ops0).max(1) as f64,
    })
}

async fn connection_loop(
    stream: &mut TcpStream,
    side: &Side,
    spec: &LoadSpec,
    shared: &Shared,
    prefix: &[u8],
    conn: u64,
) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(256 * spec.pipeline);
    let mut inbuf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut key = Vec::with_capacity(prefix.len() + 20);
    let mut owner = [0u8; OWNER_LEN];
    let mut next_cmd: u64 = 0;
    let run_id = RUN.fetch_add(1, Ordering::Relaxed) << 32;
    // Stop only between whole cycles, so that no lock is left held.
    while next_cmd & 1 == 1 || !shared.stop.load(Ordering::Relaxed) {
        out.clear();
        let first = next_cmd;
        for _ in 0..spec.pipeline {
            let cycle = next_cmd / 2;
            key.clear();
            key.extend_from_slice(prefix);
            push_decimal(&mut key, cycle % spec.key_pool);
            write_owner(&mut owner, run_id ^ conn, cycle);
            let release = next_cmd & 1 == 1;
            match (side, release) {
                (Side::Redlock, false) => {
                    encode(&mut out, &[b"REDLOCK.ACQUIRE", &key, &owner, LOAD_TTL_MS])
                }
                (Side::Redlock, true) => encode(&mut out, &[b"REDLOCK.RELEASE", &key, &owner]),
                (Side::SetEvalsha { .. }, false) => {
                    encode(&mut out, &[b"SET", &key, &owner, b"NX", b"PX", LOAD_TTL_MS])
                }
                (Side::SetEvalsha { sha }, true) => {
                    encode(&mut out, &[b"EVALSHA", sha.as_bytes(), b"1", &key, &owner])
                }
            }
            next_cmd += 1;
        }
        stream.write_all(&out).await?;
        let mut cmd = first;
        let mut consumed = 0;
        inbuf.clear();
        while cmd < next_cmd {
            match parse_one(&inbuf[consumed..]) {
                Some((kind, len)) => {
                    consumed += len;
                    let release = cmd & 1 == 1;
                    let expected = match (side, release) {
                        (Side::Redlock, false) => matches!(kind, ReplyKind::Integer(n) if n > 0),
                        (_, true) => kind == ReplyKind::Integer(1),
                        (Side::SetEvalsha { .. }, false) => kind == ReplyKind::Text,
                    };
                    if kind == ReplyKind::Error {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                    } else if !expected {
                        shared.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    cmd += 1;
                }
                None => {
                    let n = stream.read(&mut chunk).await?;
                    if n == 0 {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "server closed the connection",
                        ));
                    }
                    inbuf.extend_from_slice(&chunk[..n]);
                }
            }
        }
        shared
            .ops
            .fetch_add(spec.pipeline as u64, Ordering::Relaxed);
    }
    Ok(())
}
