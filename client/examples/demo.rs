//! A guided demo of fenced Redlock locks, run by `make demo` as
//! `cargo run --release -p redlock-client --example demo`.
//!
//! It starts five local `redis-server` nodes that load the module through
//! `modules.conf` (override the path with `REDLOCK_MODULES_CONF`) and a
//! sixth one that holds the protected resource, a ledger counter, lets four
//! workers contend for one lock and write to the ledger with
//! `REDLOCK.FENCED` (the resource's own server refuses stale tokens), kills
//! one lock node mid-run, freezes one worker past its lease so that its late
//! write is refused, prints a summary and stops the nodes it started.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use redlock_client::{Error, LockInfo, Redlock};

const NODES: usize = 5;
const KEY: &str = "demo:ledger";
/// The ledger's value and its guard on the resource server (one hash tag,
/// so they would share a slot in a cluster).
const LEDGER: &str = "{demo:ledger}:value";
const GUARD: &str = "{demo:ledger}:fence";
const TTL: Duration = Duration::from_secs(1);
const RUN_FOR: Duration = Duration::from_secs(10);
const KILL_AT: Duration = Duration::from_secs(3);
const PAUSE_AT: Duration = Duration::from_secs(5);
const PAUSE_FOR: Duration = Duration::from_millis(2500);
const WORKERS: [&str; 4] = ["alice", "bob", "carol", "dave"];
/// The worker that gets frozen past its lease.
const SLOW: &str = "dave";

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// The redis-server processes this demo started; killed on drop, so that
/// nothing is left running even when the demo fails half-way.
struct Cluster {
    nodes: Mutex<Vec<(u16, Option<Child>)>>,
}

impl Cluster {
    fn start(repo: &Path, conf: &Path, count: usize) -> Result<Cluster, Failure> {
        let cluster = Cluster {
            nodes: Mutex::new(Vec::new()),
        };
        for _ in 0..count {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let child = Command::new("redis-server")
                .current_dir(repo)
                .arg("--include")
                .arg(conf)
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .args(["--redlock.restart-grace-ms", "0"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    format!("cannot start redis-server ({e}): install it, e.g. `apt-get install redis-server`")
                })?;
            cluster.lock().push((port, Some(child)));
        }
        Ok(cluster)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u16, Option<Child>)>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn urls(&self) -> Vec<String> {
        self.lock()
            .iter()
            .map(|(port, _)| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// Waits until every node answers PING (the module loaded), or fails
    /// with the reason.
    async fn wait_ready(&self, deadline: Duration) -> Result<(), Failure> {
        let until = Instant::now() + deadline;
        for url in self.urls() {
            loop {
                if let Some(status) = self.exited() {
                    return Err(format!(
                        "a redis-server exited at start ({status}): check that modules.conf loads a built module (`make demo` builds it)"
                    )
                    .into());
                }
                let ping = async {
                    let client = redis::Client::open(url.as_str())?;
                    let mut con = client.get_multiplexed_async_connection().await?;
                    redis::cmd("PING").query_async::<String>(&mut con).await
                };
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(500), ping).await {
                    break;
                }
                if Instant::now() > until {
                    return Err(format!("{url} did not answer PING within {deadline:?}").into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    fn exited(&self) -> Option<std::process::ExitStatus> {
        self.lock()
            .iter_mut()
            .filter_map(|(_, c)| c.as_mut())
            .find_map(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL for node `i`; returns its address.
    fn kill(&self, i: usize) -> String {
        let mut nodes = self.lock();
        let (port, child) = &mut nodes[i];
        if let Some(mut c) = child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        format!("127.0.0.1:{port}")
    }

    /// Stops every node still running: SHUTDOWN NOSAVE, then SIGKILL for
    /// any that does not exit within 2 s.
    async fn shutdown(&self) {
        let ports: Vec<u16> = self
            .lock()
            .iter()
            .filter(|(_, c)| c.is_some())
            .map(|(p, _)| *p)
            .collect();
        for port in ports {
            let stop = async {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
                let mut con = client.get_multiplexed_async_connection().await?;
                redis::cmd("SHUTDOWN")
                    .arg("NOSAVE")
                    .query_async::<()>(&mut con)
                    .await
            };
            let _ = tokio::time::timeout(Duration::from_millis(500), stop).await;
        }
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let running = self
                .lock()
                .iter_mut()
                .filter_map(|(_, c)| c.as_mut())
                .filter_map(|c| c.try_wait().ok())
                .filter(Option::is_none)
                .count();
            if running == 0 || Instant::now() > until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in self.lock().iter_mut() {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// The protected resource: a counter on its own Redis server, written with
/// `REDLOCK.FENCED`: the server's guard remembers the highest token it has
/// seen and refuses any write with a lower one.
struct FencedLedger {
    con: redis::aio::MultiplexedConnection,
    state: Mutex<LedgerState>,
}

#[derive(Default)]
struct LedgerState {
    value: u64,
    accepted: u64,
    refused: Vec<(String, u64, u64)>,
}

impl FencedLedger {
    /// Adds one to the ledger (`INCR`, fenced by the lock's token).
    /// `Err(highest)` when the guard has seen a newer token: nothing ran.
    async fn write(&self, who: &str, lock: &LockInfo) -> Result<u64, u64> {
        let mut con = self.con.clone();
        let mut incr = redis::cmd("INCR");
        incr.arg(LEDGER);
        let result = lock.fenced::<u64>(&mut con, GUARD, &incr).await;
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(value) => {
                s.value = value;
                s.accepted += 1;
                Ok(value)
            }
            Err(Error::Stale { token, highest, .. }) => {
                s.refused.push((who.to_string(), token, highest));
                Err(highest)
            }
            Err(e) => {
                println!("{who:<6} ledger write failed: {e}");
                Err(0)
            }
        }
    }
}

/// Prints one timestamped line.
#[derive(Clone)]
struct Log {
    start: Instant,
}

impl Log {
    fn say(&self, who: &str, what: impl std::fmt::Display) {
        println!(
            "[{:>5.2}s] {:<6} {what}",
            self.start.elapsed().as_secs_f64(),
            who
        );
    }
}

#[derive(Default)]
struct Stats {
    tokens: Mutex<Vec<u64>>,
    busy: Mutex<u64>,
}

async fn worker(
    name: &'static str,
    redlock: Redlock,
    ledger: Arc<FencedLedger>,
    stats: Arc<Stats>,
    log: Log,
) {
    let mut will_pause = name == SLOW;
    let stop_at = log.start + RUN_FOR;
    while Instant::now() < stop_at {
        match redlock.try_acquire(KEY, TTL).await {
            Ok(Some(lock)) => {
                let token = lock.token();
                stats.tokens.lock().unwrap().push(token);
                if will_pause && log.start.elapsed() >= PAUSE_AT {
                    will_pause = false;
                    log.say(
                        name,
                        format!(
                            "acquired the lock, token {token} (valid for {:.2}s)",
                            lock.validity().as_secs_f64()
                        ),
                    );
                    // The worker checks its lease, then freezes before the
                    // write: a GC pause, a swapped-out VM, a SIGSTOP…
                    log.say(
                        name,
                        format!(
                            "checks the lease ({:.2}s left), then FREEZES for {:.1}s — longer than its {:.0}s lease",
                            lock.validity().as_secs_f64(),
                            PAUSE_FOR.as_secs_f64(),
                            TTL.as_secs_f64()
                        ),
                    );
                    tokio::time::sleep(PAUSE_FOR).await;
                    match ledger.write(name, &lock).await {
                        Ok(v) => log.say(name, format!("late write with token {token} accepted (ledger = {v}) — this should not happen")),
                        Err(highest) => log.say(
                            name,
                            format!("wakes up and writes with token {token} → REFUSED by the ledger: it has already seen token {highest}"),
                        ),
                    }
                    match lock.release().await {
                        Ok(false) => log.say(
                            name,
                            "release: the lease had already ended, nothing to free",
                        ),
                        Ok(true) => log.say(name, "released"),
                        Err(e) => log.say(name, format!("release failed: {e}")),
                    }
                    continue;
                }
                // Normal work: check the lease, write with the token, release.
                let mut wrote = Vec::new();
                for _ in 0..2 {
                    tokio::time::sleep(Duration::from_millis(60)).await;
                    if lock.validity() < Duration::from_millis(200) {
                        break;
                    }
                    wrote.push(ledger.write(name, &lock).await);
                }
                let released = match lock.release().await {
                    Ok(_) => "released".to_string(),
                    Err(e) => format!("release failed: {e}"),
                };
                let summary = match wrote.iter().find_map(|w| w.err()) {
                    None => format!(
                        "{} writes accepted (ledger = {})",
                        wrote.len(),
                        wrote.last().and_then(|w| w.ok()).unwrap_or(0)
                    ),
                    Some(highest) => format!("write REFUSED (ledger has seen {highest})"),
                };
                log.say(name, format!("token {token}: {summary}, {released}"));
            }
            Ok(None) => *stats.busy.lock().unwrap() += 1,
            Err(e) => log.say(name, format!("could not lock: {e}")),
        }
        let rest = rand::thread_rng().gen_range(200..600);
        tokio::time::sleep(Duration::from_millis(rest)).await;
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Failure> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .ok_or("no repository folder")?;
    let conf = std::env::var_os("REDLOCK_MODULES_CONF")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("modules.conf"));
    if !conf.exists() {
        return Err(format!(
            "{} not found: run `make demo` from the repository top, or set REDLOCK_MODULES_CONF to a file with a `loadmodule /path/to/libredlock.so` line",
            conf.display()
        )
        .into());
    }

    println!(
        "redlock demo: {} workers share one lock over {NODES} Redis nodes.",
        WORKERS.len()
    );
    println!("Each holder adds to a ledger on a sixth Redis server with REDLOCK.FENCED: the server keeps the highest fencing token it has seen and refuses lower ones.");
    println!("(Tokens are big because the client's clock, in microseconds, is their floor; what matters is that they only go up.)\n");

    let cluster = Cluster::start(&repo, &conf, NODES)?;
    let resource = Cluster::start(&repo, &conf, 1)?;
    let outcome = tokio::select! {
        r = scenario(&cluster, &resource) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
    };
    cluster.shutdown().await;
    resource.shutdown().await;
    drop(cluster);
    drop(resource);
    println!("\nall {NODES} lock nodes and the resource server stopped.");
    outcome
}

async fn scenario(cluster: &Cluster, resource: &Cluster) -> Result<(), Failure> {
    cluster.wait_ready(Duration::from_secs(10)).await?;
    resource.wait_ready(Duration::from_secs(10)).await?;
    let urls = cluster.urls();
    println!("started {NODES} nodes: {}", urls.join(" "));
    let resource_url = resource.urls().remove(0);
    println!("resource server (the ledger): {resource_url}");
    let con = redis::Client::open(resource_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let redlock = Redlock::builder(urls).build().await?;
    println!(
        "lock {KEY:?}: ttl {}s, quorum {} of {NODES}\n",
        TTL.as_secs(),
        redlock.quorum()
    );

    let log = Log {
        start: Instant::now(),
    };
    let ledger = Arc::new(FencedLedger {
        con,
        state: Mutex::default(),
    });
    let stats = Arc::new(Stats::default());
    let workers: Vec<_> = WORKERS
        .iter()
        .map(|name| {
            tokio::spawn(worker(
                name,
                redlock.clone(),
                Arc::clone(&ledger),
                Arc::clone(&stats),
                log.clone(),
            ))
        })
        .collect();

    tokio::time::sleep(KILL_AT).await;
    let killed = cluster.kill(2);
    log.say(
        "!!",
        format!("killing node 3 ({killed}) with SIGKILL — 4 nodes left, still a quorum"),
    );

    for w in workers {
        w.await?;
    }

    let tokens = stats.tokens.lock().unwrap().clone();
    let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
    let s = ledger.state.lock().unwrap();
    println!("\nsummary");
    println!(
        "  nodes                {NODES} started, node 3 ({killed}) killed at {}s; the others kept the quorum",
        KILL_AT.as_secs()
    );
    println!(
        "  acquisitions         {} (busy attempts: {})",
        tokens.len(),
        stats.busy.lock().unwrap()
    );
    if let (Some(first), Some(last)) = (tokens.first(), tokens.last()) {
        println!(
            "  tokens               {first} → {last}, strictly increasing: {}",
            if increasing { "yes" } else { "NO" }
        );
    }
    println!(
        "  writes accepted      {} (ledger = {})",
        s.accepted, s.value
    );
    println!("  stale writes refused {}", s.refused.len());
    for (who, token, highest) in &s.refused {
        println!("    {who}: token {token} refused by the resource server (STALE) — its guard had already seen token {highest} from a newer holder");
    }
    if !increasing || s.refused.is_empty() {
        return Err("the demo did not show what it should (see above)".into());
    }
    Ok(())
}
