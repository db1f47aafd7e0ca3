//! Memory per lock name: `INFO memory` `used_memory` before and after loading
//! N distinct names over one pipelined connection, which is closed before
//! the reading so that its buffers are not counted.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::owner::{write_owner, OWNER_LEN};
use crate::resp::{encode, parse_one, push_decimal, ReplyKind};

/// Lease used while loading, in milliseconds: long enough to outlast the
/// measurement (the node must allow it: `redlock.max-ttl-ms`).
pub const HOLD_TTL_MS: u64 = 3_600_000;

/// Commands per pipelined batch.
const BATCH: u64 = 2_000;

/// What to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// `REDLOCK.ACQUIRE lock:i owner ttl`: held names.
    Acquire,
    /// `REDLOCK.RELEASE lock:i owner`: the same names released (counter only).
    Release,
    /// `SET lock:i owner NX PX ttl` with the 36-byte owner as value.
    SetNxPx,
}

/// Bytes per name.
#[derive(Clone, Copy, Debug)]
pub struct MemoryResult {
    /// Held redlock names.
    pub held: f64,
    /// Released redlock names (the counter stays).
    pub released: f64,
    /// `SET NX PX` keys with a 36-byte value.
    pub set_nx_px: f64,
}

/// `used_memory` from `INFO memory`.
pub fn used_memory(con: &mut redis::Connection) -> redis::RedisResult<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query(con)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| (redis::ErrorKind::Parse, "no used_memory in INFO").into())
}

/// `used_memory` once it stopped moving (closed clients are freed lazily).
pub fn settled_memory(con: &mut redis::Connection) -> redis::RedisResult<u64> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = used_memory(con)?;
    loop {
        std::thread::sleep(Duration::from_millis(30));
        let now = used_memory(con)?;
        if now == last || Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// Sends `load` for names `0..n` over a fresh connection; fails on any reply
/// that is not a grant / release / OK.
pub fn load(addr: SocketAddr, load: Load, n: u64) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let ttl = HOLD_TTL_MS.to_string();
    let mut out = Vec::with_capacity(BATCH as usize * 80);
    let mut inbuf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut key = Vec::with_capacity(24);
    let mut owner = [0u8; OWNER_LEN];
    let mut i = 0;
    while i < n {
        out.clear();
        let end = (i + BATCH).min(n);
        for name in i..end {
            key.clear();
            key.extend_from_slice(b"lock:");
            push_decimal(&mut key, name);
            write_owner(&mut owner, 0x5eed, name);
            match load {
                Load::Acquire => encode(
                    &mut out,
                    &[b"REDLOCK.ACQUIRE", &key, &owner, ttl.as_bytes()],
                ),
                Load::Release => encode(&mut out, &[b"REDLOCK.RELEASE", &key, &owner]),
                Load::SetNxPx => encode(
                    &mut out,
                    &[b"SET", &key, &owner, b"NX", b"PX", ttl.as_bytes()],
                ),
            }
        }
        stream.write_all(&out)?;
        inbuf.clear();
        let mut consumed = 0;
        let mut got = i;
        while got < end {
            match parse_one(&inbuf[consumed..]) {
                Some((kind, len)) => {
                    consumed += len;
                    let ok = match load {
                        Load::Acquire => matches!(kind, ReplyKind::Integer(t) if t > 0),
                        Load::Release => kind == ReplyKind::Integer(1),
                        Load::SetNxPx => kind == ReplyKind::Text,
                    };
                    if !ok {
                        return Err(std::io::Error::other(format!(
                            "{load:?} of lock:{got}: unexpected reply {kind:?}"
                        )));
                    }
                    got += 1;
                }
                None => {
                    let k = stream.read(&mut chunk)?;
                    if k == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    inbuf.extend_from_slice(&chunk[..k]);
                }
            }
        }
        i = end;
    }
    Ok(())
}

/// One measurement on an otherwise empty node: held, released and
/// `SET NX PX` bytes per name for `n` names. Flushes the node.
pub fn measure(
    addr: SocketAddr,
    con: &mut redis::Connection,
    n: u64,
) -> Result<MemoryResult, String> {
    let flush = |con: &mut redis::Connection| -> Result<u64, String> {
        redis::cmd("FLUSHALL")
            .arg("SYNC")
            .query::<()>(con)
            .map_err(|e| e.to_string())?;
        settled_memory(con).map_err(|e| e.to_string())
    };
    let per_name = |before: u64, after: u64| (after as f64 - before as f64) / n as f64;
    let base = flush(con)?;
    load(addr, Load::Acquire, n).map_err(|e| e.to_string())?;
    let held = settled_memory(con).map_err(|e| e.to_string())?;
    load(addr, Load::Release, n).map_err(|e| e.to_string())?;
    let released = settled_memory(con).map_err(|e| e.to_string())?;
    let base2 = flush(con)?;
    load(addr, Load::SetNxPx, n).map_err(|e| e.to_string())?;
    let set = settled_memory(con).map_err(|e| e.to_string())?;
    flush(con)?;
    Ok(MemoryResult {
        held: per_name(base, held),
        released: per_name(base, released),
        set_nx_px: per_name(base2, set),
    })
}
