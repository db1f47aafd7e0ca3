//! A single-member etcd on free loopback ports, and its v3 election driven
//! through etcd's JSON gateway (`/v3/lease/grant`, `/v3/election/campaign`,
//! `/v3/election/resign`, `/v3/kv/txn`): the baseline of the hand-off bench.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

/// Where the data directory lives: each write is fsynced to its WAL before
/// etcd answers (the bench does not pass `--unsafe-no-fsync`, which etcd
/// 3.4 does not have), so the medium decides what a write costs.
#[derive(Clone, Copy, Debug)]
pub enum DataDir {
    /// The disk (`std::env::temp_dir()`): durable, an fsync per write.
    Disk,
    /// tmpfs (`/dev/shm`): the fsync returns at once; nothing survives a
    /// reboot, like the in-memory Redis nodes.
    Tmpfs,
}

impl DataDir {
    fn parent(self) -> PathBuf {
        match self {
            DataDir::Disk => std::env::temp_dir(),
            DataDir::Tmpfs => PathBuf::from("/dev/shm"),
        }
    }

    /// Whether this medium is usable on this machine.
    pub fn available(self) -> bool {
        self.parent().is_dir()
    }
}

/// The `etcd` binary named by `ETCD_BIN` when set, else the first on `PATH`;
/// `None` when that file does not exist.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("ETCD_BIN") {
        return Some(PathBuf::from(bin)).filter(|p| p.is_file());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|p| p.is_file())
    })
}

/// A running single-member etcd, stopped by its pid when dropped.
pub struct Etcd {
    child: Child,
    dir: tempfile::TempDir,
    base: String,
    http: reqwest::Client,
}

pub type Error = Box<dyn std::error::Error + Send + Sync>;

impl Etcd {
    /// Starts etcd with client and peer URLs on free loopback ports and a
    /// fresh data directory under `data_dir`, and waits (20 s at most) until
    /// `/health` answers healthy.
    pub async fn start(bin: &Path, data_dir: DataDir) -> Result<Etcd, Error> {
        let dir = tempfile::Builder::new()
            .prefix("redlock-bench-etcd")
            .tempdir_in(data_dir.parent())?;
        let client = format!("http://127.0.0.1:{}", redlock_testkit::free_port());
        let peer = format!("http://127.0.0.1:{}", redlock_testkit::free_port());
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new(bin)
            .arg("--name=bench")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=bench={peer}"))
            .arg("--initial-cluster-state=new")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut etcd = Etcd {
            child,
            dir,
            base: client,
            http: reqwest::Client::new(),
        };
        etcd.wait_healthy(Duration::from_secs(20)).await?;
        Ok(etcd)
    }

    async fn wait_healthy(&mut self, within: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("etcd exited ({status}): {}", self.log_tail()).into());
            }
            let healthy = match self.http.get(format!("{}/health", self.base)).send().await {
                Ok(r) => r.json::<Value>().await.is_ok_and(|v| v["health"] == "true"),
                Err(_) => false,
            };
            if healthy {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(
                    format!("etcd not healthy within {within:?}: {}", self.log_tail()).into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// The pid of the etcd process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The client URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// A handle for one candidate (its own HTTP connections).
    pub fn candidate(&self) -> Candidate {
        Candidate {
            base: self.base.clone(),
            http: reqwest::Client::new(),
        }
    }
}

impl Drop for Etcd {
    /// SIGTERM to our own child's pid, then SIGKILL if it is still there
    /// after 5 s.
    fn drop(&mut self) {
        // The pid is our child's, not yet reaped: it cannot name another process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A campaign's result: etcd's leader key, whose create revision is the
/// term's epoch.
#[derive(Clone, Debug)]
pub struct Leader {
    lease: String,
    leader: Value,
    key: String,
    /// The leader key's create revision (the epoch).
    pub rev: i64,
}

/// One candidate in etcd's election.
#[derive(Clone)]
pub struct Candidate {
    base: String,
    http: reqwest::Client,
}

impl Candidate {
    async fn post(&self, path: &str, body: Value) -> Result<Value, Error> {
        let reply = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await?;
        let status = reply.status();
        let value: Value = reply.json().await?;
        if !status.is_success() || value.get("error").is_some() {
            return Err(format!("etcd {path}: {status} {value}").into());
        }
        Ok(value)
    }

    /// Grants a lease of `ttl` for the campaign to hold its key with.
    pub async fn grant(&self, ttl: Duration) -> Result<String, Error> {
        let v = self
            .post("/v3/lease/grant", json!({ "TTL": ttl.as_secs() }))
            .await?;
        v["ID"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("lease grant: no ID in {v}").into())
    }

    /// Campaigns for `election` with `lease`: returns once this candidate
    /// leads (etcd wakes it by a watch on the previous key's deletion).
    pub async fn campaign(&self, election: &str, lease: String) -> Result<Leader, Error> {
        let v = self
            .post(
                "/v3/election/campaign",
                json!({
                    "name": B64.encode(election),
                    "lease": lease,
                    "value": B64.encode("candidate"),
                }),
            )
            .await?;
        let leader = v["leader"].clone();
        let key = leader["key"]
            .as_str()
            .ok_or_else(|| format!("campaign: no leader key in {v}"))?
            .to_owned();
        let rev = leader["rev"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("campaign: no rev in {v}"))?;
        Ok(Leader {
            lease,
            leader,
            key,
            rev,
        })
    }

    /// The fenced write: a txn that puts `value` at `key` only while the
    /// leader key still exists with the create revision it had when this
    /// candidate was elected (a deposed leader's key is gone or newer).
    pub async fn fenced_write(&self, leader: &Leader, key: &str, value: &str) -> Result<(), Error> {
        let v = self
            .post(
                "/v3/kv/txn",
                json!({
                    "compare": [{
                        "key": leader.key,
                        "target": "CREATE",
                        "result": "EQUAL",
                        "create_revision": leader.rev.to_string(),
                    }],
                    "success": [{
                        "request_put": { "key": B64.encode(key), "value": B64.encode(value) }
                    }],
                }),
            )
            .await?;
        if v["succeeded"] != true {
            return Err(format!("fenced write refused: {v}").into());
        }
        Ok(())
    }

    /// Resigns: deletes the leader key (the next candidate's watch fires).
    pub async fn resign(&self, leader: &Leader) -> Result<(), Error> {
        self.post("/v3/election/resign", json!({ "leader": leader.leader }))
            .await?;
        Ok(())
    }

    /// Revokes the lease a finished campaign held.
    pub async fn revoke(&self, leader: &Leader) -> Result<(), Error> {
        self.post("/v3/lease/revoke", json!({ "ID": leader.lease }))
            .await?;
        Ok(())
    }

    /// How many candidates hold a key under `election` (the leader and
    /// those queued behind it).
    pub async fn candidates(&self, election: &str) -> Result<u64, Error> {
        let prefix = format!("{election}/");
        let mut end = prefix.clone().into_bytes();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let v = self
            .post(
                "/v3/kv/range",
                json!({
                    "key": B64.encode(&prefix),
                    "range_end": B64.encode(&end),
                    "count_only": true,
                }),
            )
            .await?;
        Ok(v["count"]
            .as_str()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0))
    }
}
