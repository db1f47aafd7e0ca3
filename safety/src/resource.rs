//! The fenced resource, in one of two forms ([`ResourceKind`]):
//!
//! - **Redis** (the default): a real redis-server with the module, AOF
//!   `always`, written with `REDLOCK.FENCED` for every read and write (see
//!   [`RedisResource`]); the stale-operation counts then come from Redis
//!   itself.
//! - **in process**: a tiny TCP server that keeps, per key, a value, a
//!   version and the highest fencing token seen, and refuses any read or
//!   write that carries a lower token — what DESIGN.md section 5 asks of a
//!   resource.
//!
//! Every operation is executed under one lock, in one global order, and
//! recorded by the resource itself as a [`Kind::Resource`] event (with its
//! sequence number), so the checker sees exactly what the resource did.
//!
//! Protocol, one line per request and reply:
//!
//! ```text
//! R <op> <key> <token>                      -> OK <value> <version> | STALE <highest>
//! W <op> <key> <token> <value> <based-on>   -> OK <version>         | STALE <highest>
//! ```
//!
//! `based-on` is the version the writer read: a write accepted while the
//! version moved on since that read is a lost update.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::history::{Kind, Recorder, ResOp};

/// Where the fenced resource lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceKind {
    /// A redis-server with the module, written with `REDLOCK.FENCED`.
    Redis,
    /// The in-process TCP server of this file.
    InProcess,
}

/// Which operations the resource checks (the mutation switch lives here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checking {
    /// Reads and writes are checked and both raise the highest token (correct).
    ReadsAndWrites,
    /// **Mutant**: only writes are checked; reads are neither checked nor
    /// raise the highest token.
    WritesOnly,
}

#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    highest: u64,
    value: u64,
    version: u64,
}

/// What the resource answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A read was accepted: the value and its version.
    Read {
        /// Value.
        value: u64,
        /// Version of the value.
        version: u64,
    },
    /// A write was accepted: the new version.
    Written {
        /// Version after the write.
        version: u64,
    },
    /// Refused: the token is lower than the highest seen.
    Stale {
        /// Highest token seen for the key.
        highest: u64,
    },
}

/// The in-process store behind the server.
pub struct Store {
    checking: Checking,
    cells: HashMap<String, Cell>,
    seq: u64,
    recorder: Option<Arc<Recorder>>,
}

impl Store {
    /// An empty store; events go to `recorder` when given.
    pub fn new(checking: Checking, recorder: Option<Arc<Recorder>>) -> Store {
        Store {
            checking,
            cells: HashMap::new(),
            seq: 0,
            recorder,
        }
    }

    /// Reads `key` with `token`.
    pub fn read(&mut self, op: &str, key: &str, token: u64) -> Reply {
        let checking = self.checking;
        let cell = self.cells.entry(key.to_string()).or_default();
        let reply = match checking {
            Checking::ReadsAndWrites if token < cell.highest => Reply::Stale {
                highest: cell.highest,
            },
            Checking::ReadsAndWrites => {
                cell.highest = token;
                Reply::Read {
                    value: cell.value,
                    version: cell.version,
                }
            }
            Checking::WritesOnly => Reply::Read {
                value: cell.value,
                version: cell.version,
            },
        };
        let version = cell.version;
        self.log(op, key, ResOp::Read, token, reply, version, None);
        reply
    }

    /// Writes `value` to `key` with `token`; `based_on` is the version read.
    pub fn write(&mut self, op: &str, key: &str, token: u64, value: u64, based_on: u64) -> Reply {
        let cell = self.cells.entry(key.to_string()).or_default();
        let reply = if token < cell.highest {
            Reply::Stale {
                highest: cell.highest,
            }
        } else {
            cell.highest = token;
            cell.value = value;
            cell.version += 1;
            Reply::Written {
                version: cell.version,
            }
        };
        let version = cell.version;
        self.log(op, key, ResOp::Write, token, reply, version, Some(based_on));
        reply
    }

    /// The value and version of `key`.
    pub fn get(&self, key: &str) -> (u64, u64) {
        self.cells.get(key).map_or((0, 0), |c| (c.value, c.version))
    }

    #[allow(clippy::too_many_arguments)]
    fn log(
        &mut self,
        op: &str,
        key: &str,
        kind: ResOp,
        token: u64,
        reply: Reply,
        version: u64,
        based_on: Option<u64>,
    ) {
        self.seq += 1;
        if let Some(r) = &self.recorder {
            r.record(Kind::Resource {
                seq: self.seq,
                op: op.to_string(),
                key: key.to_string(),
                kind,
                token,
                accepted: !matches!(reply, Reply::Stale { .. }),
                version,
                based_on,
            });
        }
    }

    fn handle(&mut self, line: &str) -> String {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let num = |s: &str| s.parse::<u64>().ok();
        let reply = match parts.as_slice() {
            ["R", op, key, token] => num(token).map(|t| self.read(op, key, t)),
            ["W", op, key, token, value, based_on] => match (num(token), num(value), num(based_on))
            {
                (Some(t), Some(v), Some(b)) => Some(self.write(op, key, t, v, b)),
                _ => None,
            },
            _ => None,
        };
        match reply {
            Some(Reply::Read { value, version }) => format!("OK {value} {version}\n"),
            Some(Reply::Written { version }) => format!("OK {version}\n"),
            Some(Reply::Stale { highest }) => format!("STALE {highest}\n"),
            None => "ERR bad request\n".to_string(),
        }
    }
}

/// The resource server, listening on a free port of 127.0.0.1. Dropping it
/// stops it.
pub struct ResourceServer {
    addr: SocketAddr,
    store: Arc<Mutex<Store>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ResourceServer {
    /// Starts a server over a new [`Store`].
    pub fn start(checking: Checking, recorder: Option<Arc<Recorder>>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Mutex::new(Store::new(checking, recorder)));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&store), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("resource".into())
            .spawn(move || {
                while !st.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((con, _)) => {
                            let (s, st) = (Arc::clone(&s), Arc::clone(&st));
                            let _ = std::thread::Builder::new()
                                .name("resource-conn".into())
                                .spawn(move || serve(con, s, st));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })?;
        Ok(ResourceServer {
            addr,
            store,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The value and version of `key`.
    pub fn get(&self, key: &str) -> (u64, u64) {
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
    }
}

impl Drop for ResourceServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(con: TcpStream, store: Arc<Mutex<Store>>, stop: Arc<AtomicBool>) {
    let _ = con.set_nonblocking(false);
    let _ = con.set_nodelay(true);
    let _ = con.set_read_timeout(Some(Duration::from_millis(100)));
    let Ok(mut out) = con.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(con);
    let mut line = String::new();
    while !stop.load(Ordering::SeqCst) {
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) if line.ends_with('\n') => {
                let reply = store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .handle(line.trim());
                line.clear();
                if out.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// An async connection to the resource, one per client task.
pub struct ResourceClient {
    reader: tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl ResourceClient {
    /// Connects to the server at `addr`.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok(ResourceClient {
            reader: tokio::io::BufReader::new(r),
            writer: w,
        })
    }

    async fn call(&mut self, req: String) -> std::io::Result<Vec<u64>> {
        self.writer.write_all(req.as_bytes()).await?;
        let mut line = String::new();
        self.reader.read_line(&mut line).await?;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, line.clone());
        let mut it = line.split_whitespace();
        let status = it.next().ok_or_else(bad)?;
        let nums: Vec<u64> = it
            .map(|s| s.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match status {
            "OK" => Ok(nums),
            "STALE" => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "stale",
            )),
            _ => Err(bad()),
        }
    }

    /// Reads `key`: `Some((value, version))`, `None` when refused as stale.
    pub async fn read(
        &mut self,
        op: &str,
        key: &str,
        token: u64,
    ) -> std::io::Result<Option<(u64, u64)>> {
        match self.call(format!("R {op} {key} {token}\n")).await {
            Ok(v) if v.len() == 2 => Ok(Some((v[0], v[1]))),
            Ok(_) => Err(std::io::ErrorKind::InvalidData.into()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `value`: `true` when accepted, `false` when refused as stale.
    pub async fn write(
        &mut self,
        op: &str,
        key: &str,
        token: u64,
        value: u64,
        based_on: u64,
    ) -> std::io::Result<bool> {
        match self
            .call(format!("W {op} {key} {token} {value} {based_on}\n"))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The global sequence key of the Redis-held resource: every operation
/// takes the next number in its MULTI/EXEC, so the order the checker sees is
/// the order Redis executed them in.
pub const SEQ_KEY: &str = "resource:seq";

/// The guard of `key` on the Redis-held resource (lock name: `key`).
pub fn guard_of(key: &str) -> String {
    format!("{key}:fence")
}

/// A worker's connection to the Redis-held resource. Key `k` is a hash
/// (`value`, `version`) guarded by `k:fence`:
///
/// - read: `MULTI, INCR resource:seq, REDLOCK.FENCED k:fence k T HMGET k
///   value version, EXEC`;
/// - write: `MULTI, INCR resource:seq, REDLOCK.FENCED … HSET k value v,
///   REDLOCK.FENCED … HINCRBY k version 1, EXEC`.
///
/// A STALE reply is a refused operation. The worker records each operation
/// it got a reply for as a [`Kind::Resource`] event with the sequence
/// number Redis handed out; an operation whose reply was lost is not
/// recorded (the check only gets looser).
pub struct RedisResource {
    con: redis::aio::MultiplexedConnection,
    fenced_reads: bool,
}

impl RedisResource {
    /// Connects to `url`. `fenced_reads: false` is the mutant that sends
    /// reads unfenced (plain `HMGET`).
    pub async fn connect(url: &str, fenced_reads: bool) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let con = tokio::time::timeout(
            Duration::from_secs(2),
            client.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| "resource connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
        Ok(RedisResource { con, fenced_reads })
    }

    fn fenced(key: &str, token: u64) -> redis::Cmd {
        let mut cmd = redis::cmd("REDLOCK.FENCED");
        cmd.arg(guard_of(key)).arg(key).arg(token);
        cmd
    }

    async fn exec(&mut self, pipe: &redis::Pipeline) -> std::io::Result<Vec<redis::Value>> {
        let reply = tokio::time::timeout(Duration::from_secs(2), pipe.query_async(&mut self.con))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
            .map_err(std::io::Error::other)?;
        match reply {
            redis::Value::Array(items) => Ok(items),
            other => Err(std::io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// Reads `key` with `token`: `Some((value, version))`, `None` when
    /// refused as stale. Records the operation in `rec`.
    pub async fn read(
        &mut self,
        rec: &Recorder,
        op: &str,
        key: &str,
        token: u64,
    ) -> std::io::Result<Option<(u64, u64)>> {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        pipe.cmd("INCR").arg(SEQ_KEY);
        let mut hmget = if self.fenced_reads {
            Self::fenced(key, token)
        } else {
            redis::Cmd::new()
        };
        hmget.arg("HMGET").arg(key).arg("value").arg("version");
        pipe.add_command(hmget);
        let items = self.exec(&pipe).await?;
        let (seq, fields) = match items.as_slice() {
            [redis::Value::Int(seq), fields] => (*seq as u64, fields),
            _ => return Err(std::io::Error::other(format!("unexpected reply {items:?}"))),
        };
        let read = match fields {
            redis::Value::ServerError(e) if e.code() == "STALE" => None,
            redis::Value::Array(v) if v.len() == 2 => {
                let num = |v: &redis::Value| -> u64 {
                    redis::from_redis_value_ref::<Option<u64>>(v)
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                };
                Some((num(&v[0]), num(&v[1])))
            }
            other => return Err(std::io::Error::other(format!("unexpected reply {other:?}"))),
        };
        rec.record(Kind::Resource {
            seq,
            op: op.to_string(),
            key: key.to_string(),
            kind: ResOp::Read,
            token,
            accepted: read.is_some(),
            version: read.map_or(0, |r| r.1),
            based_on: None,
        });
        Ok(read)
    }

    /// Writes `value` to `key` with `token` (`based_on`: the version read):
    /// `true` when accepted, `false` when refused as stale. Records the
    /// operation in `rec`.
    pub async fn write(
        &mut self,
        rec: &Recorder,
        op: &str,
        key: &str,
        token: u64,
        value: u64,
        based_on: u64,
    ) -> std::io::Result<bool> {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        pipe.cmd("INCR").arg(SEQ_KEY);
        let mut hset = Self::fenced(key, token);
        hset.arg("HSET").arg(key).arg("value").arg(value);
        pipe.add_command(hset);
        let mut bump = Self::fenced(key, token);
        bump.arg("HINCRBY").arg(key).arg("version").arg(1);
        pipe.add_command(bump);
        let items = self.exec(&pipe).await?;
        let (seq, version) = match items.as_slice() {
            [redis::Value::Int(seq), _, redis::Value::Int(version)] => {
                (*seq as u64, Some(*version as u64))
            }
            [redis::Value::Int(seq), redis::Value::ServerError(a), redis::Value::ServerError(b)]
                if a.code() == "STALE" && b.code() == "STALE" =>
            {
                (*seq as u64, None)
            }
            _ => return Err(std::io::Error::other(format!("unexpected reply {items:?}"))),
        };
        rec.record(Kind::Resource {
            seq,
            op: op.to_string(),
            key: key.to_string(),
            kind: ResOp::Write,
            token,
            accepted: version.is_some(),
            version: version.unwrap_or(0),
            based_on: Some(based_on),
        });
        Ok(version.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_lower_tokens_on_reads_and_writes() {
        let mut s = Store::new(Checking::ReadsAndWrites, None);
        assert_eq!(
            s.read("a", "k", 5),
            Reply::Read {
                value: 0,
                version: 0
            }
        );
        assert_eq!(s.read("b", "k", 4), Reply::Stale { highest: 5 });
        assert_eq!(s.write("b", "k", 4, 1, 0), Reply::Stale { highest: 5 });
        assert_eq!(s.write("a", "k", 5, 1, 0), Reply::Written { version: 1 });
        assert_eq!(
            s.read("c", "k", 6),
            Reply::Read {
                value: 1,
                version: 1
            }
        );
        assert_eq!(s.write("a", "k", 5, 2, 1), Reply::Stale { highest: 6 });
        // Keys are independent.
        assert_eq!(
            s.read("d", "other", 1),
            Reply::Read {
                value: 0,
                version: 0
            }
        );
    }

    #[test]
    fn writes_only_mutant_accepts_stale_reads() {
        let mut s = Store::new(Checking::WritesOnly, None);
        assert_eq!(
            s.read("b", "k", 6),
            Reply::Read {
                value: 0,
                version: 0
            }
        );
        assert_eq!(
            s.read("a", "k", 5),
            Reply::Read {
                value: 0,
                version: 0
            }
        );
        assert_eq!(s.write("a", "k", 5, 1, 0), Reply::Written { version: 1 });
        // B's write is based on version 0: a lost update the resource let through.
        assert_eq!(s.write("b", "k", 6, 1, 0), Reply::Written { version: 2 });
    }

    #[tokio::test]
    async fn server_round_trip_and_records() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Arc::new(Recorder::create(&dir.path().join("r.jsonl")).unwrap());
        let server = ResourceServer::start(Checking::ReadsAndWrites, Some(rec.clone())).unwrap();
        let mut c = ResourceClient::connect(server.addr()).await.unwrap();
        assert_eq!(c.read("o1", "k", 3).await.unwrap(), Some((0, 0)));
        assert!(c.write("o1", "k", 3, 1, 0).await.unwrap());
        assert_eq!(c.read("o0", "k", 2).await.unwrap(), None);
        assert!(!c.write("o0", "k", 2, 9, 0).await.unwrap());
        assert_eq!(server.get("k"), (1, 1));
        drop(server);
        rec.flush().unwrap();
        let evs = crate::history::load(rec.path()).unwrap();
        assert_eq!(evs.len(), 4);
        assert!(matches!(
            &evs[3].kind,
            Kind::Resource {
                seq: 4,
                accepted: false,
                based_on: Some(0),
                ..
            }
        ));
    }
}
