//! The history: every invocation, completion and fault of a run, one JSON
//! object per line, each stamped with [`crate::clock::mono_ns`] (system-wide
//! `CLOCK_MONOTONIC`, nanoseconds) so that lines written by different
//! processes order correctly.
//!
//! Each process writes its own file; [`load`] reads a file or every `*.jsonl`
//! file of a folder and sorts the events by time. Example lines:
//!
//! ```text
//! {"t":812345678901,"ev":"acquire_invoke","op":"w0.c1.7","client":"w0.c1","key":"k0","ttl_ms":400}
//! {"t":812346012345,"ev":"acquire_ok","op":"w0.c1.7","client":"w0.c1","key":"k0","token":1732912345678901,"validity_ns":395000000,"nodes":["17","17","17","timeout","17"]}
//! {"t":812346100000,"ev":"resource","seq":44,"op":"w0.c1.7","key":"k0","kind":"read","token":1732912345678901,"accepted":true,"version":12,"based_on":null}
//! {"t":812999000000,"ev":"fault_start","id":3,"kind":"node_pause","target":"n2","detail":"SIGSTOP 900ms"}
//! ```

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::clock::mono_ns;

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `CLOCK_MONOTONIC` nanoseconds when the event happened.
    pub t: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: Kind,
}

/// What the run promises; decides which checker counts are violations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guarantees {
    /// Per-node counters survive a crash (AOF `always`): a per-node
    /// regression is a violation.
    pub durable_counters: bool,
}

/// Resource operation kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResOp {
    /// Read of the value.
    Read,
    /// Write of a new value computed from an earlier read.
    Write,
}

/// The kinds of events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Kind {
    /// Start of a run: its parameters.
    RunStart {
        /// Run name (fault type and index).
        run: String,
        /// Fault type injected in this run.
        fault: String,
        /// Node persistence: `none`, `everysec` or `always`.
        persistence: String,
        /// Seed of the run.
        seed: u64,
        /// Lease requested by every acquisition, ms.
        ttl_ms: u64,
        /// Number of nodes.
        nodes: usize,
        /// Keys contended for.
        keys: Vec<String>,
        /// What the run promises.
        guarantees: Guarantees,
    },
    /// A client starts an acquisition.
    AcquireInvoke {
        /// Operation id, unique in the run (`w<proc>.c<task>.<n>`).
        op: String,
        /// Client task id.
        client: String,
        /// Lock key.
        key: String,
        /// Requested lease, ms.
        ttl_ms: u64,
        /// When the first poll of the acquire future returned (ns). The
        /// client reads its clock during that poll, so its start lies
        /// between `t` and this.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_poll: Option<u64>,
    },
    /// The acquisition returned a lock.
    AcquireOk {
        /// Operation id of the acquisition.
        op: String,
        /// Client task id.
        client: String,
        /// Lock key.
        key: String,
        /// The fencing token.
        token: u64,
        /// `Lock::validity()` read right after this event's time stamp.
        validity_ns: u64,
        /// Per-node replies when the client exposes them (`"17"`, `"nil"`,
        /// `"timeout"`, `"err:…"`, `"fence:17"`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nodes: Vec<String>,
    },
    /// The acquisition failed.
    AcquireFail {
        /// Operation id.
        op: String,
        /// Client task id.
        client: String,
        /// Lock key.
        key: String,
        /// `busy`, `expired`, `no_quorum`, `grace`, `other: …`.
        error: String,
    },
    /// The client checked the lock's validity just before using the token.
    Use {
        /// Operation id of the acquisition.
        op: String,
        /// `Lock::validity()` read right after this event's time stamp.
        validity_ns: u64,
    },
    /// Extension started.
    ExtendInvoke {
        /// Operation id of the acquisition.
        op: String,
        /// New lease, ms.
        ttl_ms: u64,
        /// When the first poll of the extend future returned (ns).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_poll: Option<u64>,
    },
    /// Extension finished.
    ExtendDone {
        /// Operation id of the acquisition.
        op: String,
        /// Reached a quorum.
        ok: bool,
        /// Validity after a successful extension.
        validity_ns: u64,
    },
    /// Release started: the client stops using the lock here.
    ReleaseInvoke {
        /// Operation id of the acquisition.
        op: String,
    },
    /// Release finished.
    ReleaseDone {
        /// Operation id of the acquisition.
        op: String,
        /// The client reported success.
        ok: bool,
    },
    /// An operation at the fenced resource, written by the resource itself in
    /// the order it executed them.
    Resource {
        /// Execution order at the resource (all keys).
        seq: u64,
        /// Operation id of the acquisition whose token was used.
        op: String,
        /// Key.
        key: String,
        /// Read or write.
        kind: ResOp,
        /// Token presented.
        token: u64,
        /// The resource accepted it.
        accepted: bool,
        /// The key's version after the operation (reads: the version read).
        version: u64,
        /// Writes: the version the writer had read.
        #[serde(default)]
        based_on: Option<u64>,
    },
    /// A fault began.
    FaultStart {
        /// Fault id, unique in the run.
        id: u64,
        /// Fault type (`node_kill`, `node_pause`, `client_pause`, …).
        kind: String,
        /// What it hit (`n2`, `w1`, `w0.c3`).
        target: String,
        /// Free text.
        detail: String,
        /// The fault can make clients' timing assumptions false (pauses,
        /// delays, clock jumps): overlaps near it are explained.
        timing: bool,
    },
    /// A fault ended.
    FaultStop {
        /// Fault id.
        id: u64,
    },
    /// A lock as the new master of a Sentinel group reports it right after
    /// a failover (`INSPECT`, read directly by the injector): a hold still
    /// valid on its client's clock is *lost by its holder* when the new
    /// master does not hold the lock with at least its token, or holds it
    /// with a lease that ends before the validity the holder was told (an
    /// extension the new master never received).
    LockAfterFailover {
        /// Key.
        key: String,
        /// The new master holds the lock.
        held: bool,
        /// Its counter (`0` when the key does not exist there).
        token: u64,
        /// Time left on its lease, ms (when held).
        #[serde(default)]
        pttl_ms: Option<u64>,
    },
    /// A node's counter for a key, read directly (not through the proxy)
    /// around a restart.
    NodeCounter {
        /// Node index.
        node: usize,
        /// Key.
        key: String,
        /// Counter (`0` when the key does not exist).
        counter: u64,
        /// `before_kill` or `after_restart`.
        phase: String,
    },
}

impl Event {
    /// An event stamped now.
    pub fn now(kind: Kind) -> Event {
        Event { t: mono_ns(), kind }
    }
}

/// Appends events to one JSON-lines file; cheap to share between tasks.
pub struct Recorder {
    out: Mutex<BufWriter<File>>,
    path: PathBuf,
}

impl Recorder {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        Ok(Recorder {
            out: Mutex::new(BufWriter::new(File::create(path)?)),
            path: path.to_path_buf(),
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `kind` stamped now; returns the stamp.
    pub fn record(&self, kind: Kind) -> u64 {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        // Stamped under the lock: lines of one file are in time order.
        let ev = Event::now(kind);
        let _ = serde_json::to_writer(&mut *out, &ev);
        let _ = out.write_all(b"\n");
        ev.t
    }

    /// Records an event with a given stamp.
    pub fn record_at(&self, ev: &Event) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = serde_json::to_writer(&mut *out, ev);
        let _ = out.write_all(b"\n");
    }

    /// Flushes buffered lines to the file.
    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// A history that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        /// File or folder.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A line that is not an event.
    #[error("{path}:{line}: {source}")]
    Parse {
        /// File.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Cause.
        source: serde_json::Error,
    },
}

/// Reads a history file, or every `*.jsonl` file of a folder, sorted by time
/// (stable: lines of one file with equal stamps keep their order).
pub fn load(path: &Path) -> Result<Vec<Event>, LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        v.sort();
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut events = Vec::new();
    for f in &files {
        let file = File::open(f).map_err(|source| LoadError::Io {
            path: f.clone(),
            source,
        })?;
        for (i, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|source| LoadError::Io {
                path: f.clone(),
                source,
            })?;
            if line.trim().is_empty() {
                continue;
            }
            let ev = serde_json::from_str(&line).map_err(|source| LoadError::Parse {
                path: f.clone(),
                line: i + 1,
                source,
            })?;
            events.push(ev);
        }
    }
    events.sort_by_key(|e: &Event| e.t);
    Ok(events)
}

/// Writes `events` as one JSON-lines file.
pub fn save(path: &Path, events: &[Event]) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    for ev in events {
        serde_json::to_writer(&mut out, ev)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        let a = Recorder::create(&dir.path().join("a.jsonl")).unwrap();
        let b = Recorder::create(&dir.path().join("b.jsonl")).unwrap();
        a.record(Kind::ReleaseInvoke { op: "1".into() });
        b.record(Kind::ReleaseInvoke { op: "2".into() });
        a.record(Kind::FaultStop { id: 3 });
        drop((a, b));
        let evs = load(dir.path()).unwrap();
        assert_eq!(evs.len(), 3);
        assert!(evs.windows(2).all(|w| w[0].t <= w[1].t));
        assert_eq!(evs[2].kind, Kind::FaultStop { id: 3 });
        let merged = dir.path().join("merged.json");
        save(&merged, &evs).unwrap();
        assert_eq!(load(&merged).unwrap(), evs);
    }

    #[test]
    fn bad_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.jsonl");
        std::fs::write(&p, "{\"t\":1,\"ev\":\"fault_stop\",\"id\":1}\nnope\n").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("h.jsonl:2"), "{e}");
    }
}
