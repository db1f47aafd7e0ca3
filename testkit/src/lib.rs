//! Test support for redlock: start real `redis-server` processes with the
//! module loaded, on free loopback ports chosen at run time, and stop them by
//! their own pid. Used by the module's, the client's and the safety tests.
//!
//! ```no_run
//! use redlock_testkit::Node;
//! let node = Node::builder().config("appendonly", "yes").start();
//! let mut con = node.connection();
//! let token: i64 = redis::cmd("REDLOCK.ACQUIRE").arg("k").arg("me").arg(1000)
//!     .query(&mut con).unwrap();
//! assert_eq!(token, 1);
//! ```

pub mod cluster;
pub mod proxy;
pub mod sentinel;
pub mod tls;

pub use cluster::{Cluster, ClusterBuilder, Migration};
pub use sentinel::{Sentinel, SentinelGroup, SentinelGroupBuilder};
pub use tls::TestPki;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to answer PING after it was started.
pub const START_DEADLINE: Duration = Duration::from_secs(15);

/// The workspace's top folder.
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The module library the tests load: `REDLOCK_MODULE` when set, otherwise
/// the test build (`--features test-hooks`) in `target/debug`.
pub fn module_path() -> PathBuf {
    if let Some(p) = std::env::var_os("REDLOCK_MODULE") {
        // Nodes run in their own folders: a relative path must not stay relative.
        return std::path::absolute(PathBuf::from(p)).unwrap_or_default();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_dir().join("target"));
    let path = target.join("debug").join("libredlock.so");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p redlock-module --features test-hooks` (make test does)",
        path.display()
    );
    path
}

/// The server binary the tests start: `REDLOCK_SERVER_BIN` when set (a
/// `valkey-server`, another Redis build), otherwise `redis-server` from
/// `PATH`.
pub fn server_bin() -> PathBuf {
    match std::env::var_os("REDLOCK_SERVER_BIN") {
        // A path (made absolute: nodes run in their own folders), or a bare
        // name looked up in `PATH`.
        Some(p) if !p.is_empty() && Path::new(&p).components().count() > 1 => {
            std::path::absolute(PathBuf::from(p)).unwrap_or_default()
        }
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("redis-server"),
    }
}

/// Which server [`server_bin`] starts, as its `--version` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Redis (`Redis server v=…`).
    Redis,
    /// Valkey (`Valkey server v=…`).
    Valkey,
}

/// The flavor and version (`(major, minor, patch)`) of [`server_bin`], read
/// once from its `--version`.
pub fn server_version() -> (Flavor, (u32, u32, u32)) {
    static VERSION: std::sync::OnceLock<(Flavor, (u32, u32, u32))> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(server_bin())
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{} --version: {e}", server_bin().display()));
        parse_server_version(&String::from_utf8_lossy(&out.stdout)).unwrap_or_else(|| {
            panic!(
                "{} --version said {:?}",
                server_bin().display(),
                String::from_utf8_lossy(&out.stdout)
            )
        })
    })
}

/// Reads `Redis server v=7.0.15 …` or `Valkey server v=8.1.8 …`.
fn parse_server_version(text: &str) -> Option<(Flavor, (u32, u32, u32))> {
    let flavor = if text.starts_with("Valkey") {
        Flavor::Valkey
    } else if text.starts_with("Redis") {
        Flavor::Redis
    } else {
        return None;
    };
    let v = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((flavor, (parts.next()??, parts.next()??, parts.next()??)))
}

/// Whether the server under test calls the 7.2+ module callbacks
/// (`aux_save2`): Redis 7.2 and later, every Valkey.
pub fn server_has_7_2_api() -> bool {
    match server_version() {
        (Flavor::Valkey, _) => true,
        (Flavor::Redis, v) => v >= (7, 2, 0),
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// How to start a node.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    module: Option<PathBuf>,
    module_args: Vec<String>,
    configs: Vec<(String, String)>,
    env: Vec<(String, String)>,
    /// TLS only (`--port 0`, `--tls-port`), with these certificates.
    tls: Option<TestPki>,
    /// ACL users, one `user` line each (rules separated by spaces).
    users: Vec<String>,
    /// Options whose value is a free port picked at each start attempt.
    port_configs: Vec<String>,
    /// Files written into the node's folder before its first start.
    files: Vec<(String, Vec<u8>)>,
    /// The server binary; `None`: [`server_bin`].
    server: Option<PathBuf>,
    /// Starts as a replica of this loopback port (`--replicaof 127.0.0.1 PORT`).
    replica_of: Option<u16>,
    /// Starts from a configuration file ([`NodeBuilder::config_file`]).
    config_file: bool,
}

impl NodeBuilder {
    /// Sets an environment variable for the server process (e.g. the test
    /// build's `REDLOCK_TEST_WALL_OFFSET_MS`).
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds a `--name value` server option (after the module is loaded, so
    /// `redlock.*` configs work too).
    pub fn config(mut self, name: &str, value: &str) -> Self {
        self.configs.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds a `--name PORT` server option with a free loopback port, picked
    /// anew at each start attempt (like the node's own port), e.g. the
    /// cluster bus's `cluster-port`.
    pub fn free_port_config(mut self, name: &str) -> Self {
        self.port_configs.push(name.to_string());
        self
    }

    /// Adds arguments to the `loadmodule` line.
    pub fn module_arg(mut self, arg: &str) -> Self {
        self.module_args.push(arg.to_string());
        self
    }

    /// Starts a plain Redis without the module.
    pub fn without_module(mut self) -> Self {
        self.module = None;
        self.configs
            .retain(|(name, _)| !name.starts_with("redlock."));
        self
    }

    /// Serves TLS only: `--tls-port` with the server certificate of `pki`,
    /// `--tls-ca-cert-file` its CA and `tls-auth-clients yes` (clients must
    /// present a certificate signed by that CA), and `--port 0` (no plain
    /// TCP). [`Node::url`] is then `rediss://…`; the test kit's own
    /// connections ([`Node::connection`]) use a Unix socket.
    pub fn tls(mut self, pki: &TestPki) -> Self {
        self.tls = Some(pki.clone());
        self
    }

    /// Adds an ACL user, as the `user` line of redis.conf:
    /// `"locker on >secret ~locks:* -@all +redlock.acquire"`. The default
    /// user stays as it is (no password), for the test kit's own
    /// connections.
    pub fn acl_user(mut self, line: &str) -> Self {
        self.users.push(line.to_string());
        self
    }

    /// Starts this server binary instead of [`server_bin`] (e.g. one
    /// scenario of a run on Valkey).
    pub fn server(mut self, path: PathBuf) -> Self {
        self.server = Some(path);
        self
    }

    /// Writes a file into the node's folder before it starts (e.g. a
    /// `dump.rdb` made by another node).
    pub fn file(mut self, name: &str, contents: &[u8]) -> Self {
        self.files.push((name.to_string(), contents.to_vec()));
        self
    }

    /// Starts as a replica of the node on this loopback port.
    pub fn replica_of(mut self, port: u16) -> Self {
        self.replica_of = Some(port);
        self
    }

    /// Starts from a configuration file, `redis.conf` in a folder of its
    /// own apart from the data folder (as `/etc/redis` is apart from
    /// `/var/lib/redis`: wiping the data keeps it), which `CONFIG REWRITE`
    /// writes. The options go into it at the first start; a restart reads
    /// the file as the server left it, with the options changed since
    /// ([`Node::restart_with`]) on the command line after it.
    pub fn config_file(mut self) -> Self {
        self.config_file = true;
        self
    }

    /// Loads another module file.
    pub fn module(mut self, path: PathBuf) -> Self {
        self.module = Some(path);
        self
    }

    /// Starts the node and waits until it answers PING.
    pub fn start(self) -> Node {
        let mut last_error = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("redlock-node-")
                .tempdir()
                .expect("temp dir");
            for (name, contents) in &self.files {
                std::fs::write(dir.path().join(name), contents).expect("seed file");
            }
            let mut spec = self.clone();
            for name in std::mem::take(&mut spec.port_configs) {
                spec.configs.retain(|(n, _)| *n != name);
                spec.configs.push((name, free_port().to_string()));
            }
            let conf = spec.config_file.then(|| {
                tempfile::Builder::new()
                    .prefix("redlock-conf-")
                    .tempdir()
                    .expect("temp dir")
            });
            let mut node = Node {
                port: free_port(),
                dir,
                child: None,
                spec,
                conf,
                written: Vec::new(),
            };
            match node.spawn() {
                Ok(()) => return node,
                Err(e) => last_error = e,
            }
        }
        panic!("could not start {}: {last_error}", server_bin().display());
    }
}

/// A running `redis-server` in its own temporary folder.
pub struct Node {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    spec: NodeBuilder,
    /// The folder of the configuration file, when it starts from one.
    conf: Option<tempfile::TempDir>,
    /// The options written into the configuration file at the first start.
    written: Vec<Vec<String>>,
}

impl Node {
    /// A builder with the module, `--enable-debug-command yes`, no RDB
    /// snapshots and the restart guard off (tests of the guard turn it on).
    pub fn builder() -> NodeBuilder {
        NodeBuilder {
            module: Some(module_path()),
            module_args: Vec::new(),
            env: Vec::new(),
            configs: vec![
                ("enable-debug-command".into(), "yes".into()),
                ("save".into(), "".into()),
                ("redlock.restart-grace-ms".into(), "0".into()),
            ],
            tls: None,
            users: Vec::new(),
            port_configs: Vec::new(),
            files: Vec::new(),
            server: None,
            replica_of: None,
            config_file: false,
        }
    }

    /// Starts a node with the defaults of [`Node::builder`].
    pub fn start() -> Node {
        Self::builder().start()
    }

    /// The configuration file, when the node starts from one
    /// ([`NodeBuilder::config_file`]).
    pub fn config_path(&self) -> Option<PathBuf> {
        self.conf.as_ref().map(|d| d.path().join("redis.conf"))
    }

    /// Every option but the ports, as `name value…`.
    fn options(&self) -> Vec<Vec<String>> {
        let dir = self.dir.path().display().to_string();
        let mut opts: Vec<Vec<String>> = vec![
            vec!["bind".into(), "127.0.0.1".into()],
            vec!["dir".into(), dir.clone()],
            vec!["logfile".into(), format!("{dir}/redis.log")],
            vec!["daemonize".into(), "no".into()],
            // A master syncs a new replica at once instead of after 5 s
            // (a config below may set it back).
            vec!["repl-diskless-sync-delay".into(), "0".into()],
        ];
        for user in &self.spec.users {
            // One argument per rule: redis-server quotes each argument.
            let mut opt = vec!["user".to_string()];
            opt.extend(user.split_whitespace().map(str::to_string));
            opts.push(opt);
        }
        if let Some(module) = &self.spec.module {
            let mut opt = vec!["loadmodule".to_string(), module.display().to_string()];
            opt.extend(self.spec.module_args.iter().cloned());
            opts.push(opt);
        }
        for (name, value) in &self.spec.configs {
            // `replicaof "127.0.0.1 PORT"` is two arguments in a file.
            let mut opt = vec![name.clone()];
            if value.trim().is_empty() {
                opt.push(value.clone());
            } else {
                opt.extend(value.split_whitespace().map(str::to_string));
            }
            opts.push(opt);
        }
        if let Some(port) = self.spec.replica_of {
            opts.push(vec![
                "replicaof".into(),
                "127.0.0.1".into(),
                port.to_string(),
            ]);
        }
        opts
    }

    fn spawn(&mut self) -> Result<(), String> {
        let bin = self.spec.server.clone().unwrap_or_else(server_bin);
        let mut cmd = Command::new(&bin);
        cmd.current_dir(self.dir.path());
        let options = self.options();
        let on_command_line: Vec<Vec<String>> = match self.config_path() {
            None => options,
            Some(path) => {
                if !path.exists() {
                    // redis.conf quoting: every argument in double quotes.
                    let quote = |a: &String| {
                        format!("\"{}\"", a.replace('\\', "\\\\").replace('"', "\\\""))
                    };
                    let text: String = options
                        .iter()
                        .map(|opt| opt.iter().map(quote).collect::<Vec<_>>().join(" ") + "\n")
                        .collect();
                    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
                    self.written = options.clone();
                }
                // The file comes first; what changed since it was written
                // follows it, and wins.
                cmd.arg(&path);
                options
                    .into_iter()
                    .filter(|opt| !self.written.contains(opt))
                    .collect()
            }
        };
        match &self.spec.tls {
            None => {
                cmd.arg("--port").arg(self.port.to_string());
            }
            Some(pki) => {
                cmd.arg("--port")
                    .arg("0")
                    .arg("--tls-port")
                    .arg(self.port.to_string())
                    .arg("--tls-cert-file")
                    .arg(pki.server_cert())
                    .arg("--tls-key-file")
                    .arg(pki.server_key())
                    .arg("--tls-ca-cert-file")
                    .arg(pki.ca_cert())
                    .arg("--tls-auth-clients")
                    .arg("yes")
                    .arg("--unixsocket")
                    .arg(self.socket_path())
                    .arg("--unixsocketperm")
                    .arg("700");
            }
        }
        for opt in &on_command_line {
            if let Some((name, values)) = opt.split_first() {
                cmd.arg(format!("--{name}")).args(values);
            }
        }
        for (name, value) in &self.spec.env {
            cmd.env(name, value);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!("exited with {status}: {}", self.log_tail()));
            }
            if self.try_ping() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no PING reply within {START_DEADLINE:?}: {}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.admin_url()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        // A loading server answers -LOADING; wait for a real PONG.
        if redis::cmd("PING").query::<String>(&mut con).is_err() {
            return false;
        }
        // The port was free when picked, but another server started at the
        // same moment may have taken it (ours then exits): only our own
        // process counts.
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return true;
        };
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut con)
            .unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
            == Some(pid)
    }

    /// The node's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://127.0.0.1:PORT` for a TLS
    /// node.
    pub fn url(&self) -> String {
        let scheme = if self.spec.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{}", self.addr())
    }

    /// `redis://user:password@127.0.0.1:PORT` (`rediss://` for a TLS node);
    /// an empty `user` gives the password-only form `redis://:password@…`.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        let url = self.url();
        let (scheme, rest) = url.split_once("://").unwrap_or(("redis", &url));
        format!("{scheme}://{user}:{password}@{rest}")
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The Unix socket of a TLS node (for the test kit's own connections).
    fn socket_path(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// The URL of the test kit's own connections: the node's URL, or its
    /// Unix socket for a TLS node (no client certificate needed).
    fn admin_url(&self) -> String {
        match self.spec.tls {
            None => self.url(),
            Some(_) => format!("redis+unix://{}", self.socket_path().display()),
        }
    }

    /// The node's data folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A new synchronous connection as the default user (over the Unix
    /// socket for a TLS node).
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.admin_url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.admin_url()))
    }

    /// The end of the server log (for failure messages).
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Stops the server with `SHUTDOWN NOSAVE` (falls back to SIGKILL).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(client) = redis::Client::open(self.admin_url()) {
            if let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(500)) {
                let _: redis::RedisResult<()> =
                    redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut con);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Kills the server with SIGKILL: no shutdown, no final save.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, folder and options.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        if let Err(e) = self.spawn() {
            panic!("restart on port {}: {e}", self.port);
        }
    }

    /// Like [`Node::restart`] with some options replaced or added.
    pub fn restart_with(&mut self, configs: &[(&str, &str)]) {
        for (name, value) in configs {
            self.spec.configs.retain(|(n, _)| n != name);
            self.spec
                .configs
                .push((name.to_string(), value.to_string()));
        }
        self.restart();
    }

    /// Makes the next start a replica of the node on `port` (`None`: a
    /// master).
    pub fn set_replica_of(&mut self, port: Option<u16>) {
        self.spec.replica_of = port;
    }

    /// Sets (or replaces) an environment variable for the next start.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.spec.env.retain(|(n, _)| n != name);
        self.spec.env.push((name.to_string(), value.to_string()));
    }

    /// Freezes the process (SIGSTOP).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Thaws the process (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.pid() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(pid as libc::pid_t, sig);
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            self.signal_pid(child.id(), libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Node {
    fn signal_pid(&self, pid: u32, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// Several nodes started in parallel.
pub fn start_nodes(n: usize, builder: &NodeBuilder) -> Vec<Node> {
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let b = builder.clone();
            std::thread::spawn(move || b.start())
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("node start thread"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{parse_server_version, Flavor};

    #[test]
    fn reads_both_servers_version_lines() {
        assert_eq!(
            parse_server_version(
                "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0\n"
            ),
            Some((Flavor::Redis, (7, 0, 15)))
        );
        assert_eq!(
            parse_server_version("Valkey server v=8.1.8 sha=00000000:1 malloc=libc bits=64\n"),
            Some((Flavor::Valkey, (8, 1, 8)))
        );
        assert_eq!(parse_server_version("KeyDB server v=6.3.4"), None);
        assert_eq!(parse_server_version("Redis server v=7.x"), None);
    }
}
