//! `redlock`: take, release, inspect and run under fenced Redlock locks from
//! the shell. See `redlock --help`.

#[path = "redlock/elect.rs"]
mod elect;
#[path = "redlock/held.rs"]
mod held;
#[path = "redlock/job.rs"]
mod job;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redlock_client::{Error, Member, NodeState, Redlock, RetryPolicy};
use serde_json::json;

/// Success.
const EXIT_OK: u8 = 0;
/// Any error not listed below (no quorum, restart guard, module missing, …).
const EXIT_ERROR: u8 = 1;
/// Bad usage or argument (also clap's own code).
const EXIT_USAGE: u8 = 2;
/// The lock is held by another owner.
const EXIT_BUSY: u8 = 3;
/// `run`: the lock was lost while the command ran; the command was terminated.
const EXIT_LOST: u8 = 4;
/// `release`: the owner did not hold the lock (lease over or already released).
const EXIT_NOT_HELD: u8 = 5;
/// `fenced` (and `run --guard`): the guard has seen a newer token (STALE);
/// nothing ran.
const EXIT_STALE: u8 = 6;

const AFTER_HELP: &str = "\
Exit codes:
  0    success (run: the command exited 0)
  1    error: no quorum, restart guard, module not loaded, … (the message says what to do)
  2    bad usage or argument
  3    busy: the lock is held by another owner
  4    run, elect: the lock (leadership) was lost while the command ran; the command was terminated
  5    release: that owner did not hold the lock (lease over or already released);
       leader: nobody leads
  6    fenced, run --guard: STALE, the resource's guard has seen a newer token; nothing ran
  N    run: the command's own exit status (128+SIG when killed by a signal;
       126/127 when it could not be started)

Durations: 500ms, 30s, 2m, 1h (decimals allowed: 1.5s).

Environment: REDLOCK_NODES, REDLOCK_CLUSTERS, REDLOCK_SENTINELS, REDLOCK_TLS_CA,
REDLOCK_TLS_CERT and REDLOCK_TLS_KEY stand for --nodes, --cluster, --sentinel,
--tls-ca, --tls-cert and --tls-key (REDLOCK_CLUSTERS and REDLOCK_SENTINELS separate
members with ';'); REDLOCK_SENTINEL_DATA_USER and REDLOCK_SENTINEL_DATA_PASSWORD for
--sentinel-data-user and --sentinel-data-password.

Sentinel members: each --sentinel names one master with replicas behind Redis
Sentinel, as NAME@SENTINEL,SENTINEL (host:port, or a URL with the sentinels' own
scheme and credentials); the client asks the sentinels for the master and follows
failovers. Alone (the usual deployment) or mixed with other members:
  redlock --sentinel locks@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379 acquire reports
With redlock.sync-replicas set on its nodes, every grant is confirmed by every
replica before it counts, and a failover keeps the locks.

Cluster members: each --cluster names one Redis Cluster member by seed URLs
(comma-separated); it counts as one vote, like one node. Mix freely with --nodes:
  redlock --cluster redis://10.0.1.1:7000,redis://10.0.1.2:7000 \
          --cluster redis://10.0.2.1:7000,redis://10.0.2.2:7000 \
          --nodes redis://10.0.3.1:6379,redis://10.0.4.1:6379,redis://10.0.5.1:6379 \
          inspect reports        # for clusters: the shard that holds the key

Examples:
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  redlock acquire reports --ttl 30s
  redlock release reports --owner 5c0e9f5e-1d7a-4b8e-9a56-3f1f0f6c2d11
  redlock inspect reports
  redlock run nightly-backup --ttl 30s -- ./backup.sh --full   # token in $REDLOCK_TOKEN
  REDLOCK_RESOURCE=redis://10.0.9.1:6379 redlock run backup --guard backup:fence -- \\
    sh -c 'redlock fenced -- SET backup:last \"$(date +%s)\"'   # STALE: exit 6
  REDLOCK_NODES=rediss://locker:pw@10.0.0.1:6380,… \\
    redlock --tls-ca ca.crt --tls-cert client.crt --tls-key client.key acquire locks:reports";

/// Fenced distributed locks over a Redlock quorum of Redis masters running
/// the redlock module.
#[derive(Parser, Debug)]
#[command(name = "redlock", version, after_help = AFTER_HELP)]
struct Cli {
    /// Node URLs, comma-separated: redis://host:port, rediss://host:port (TLS),
    /// redis://user:password@host:port (ACL user), redis://:password@host:port
    /// (requirepass). Usually 5 independent masters. Prefer REDLOCK_NODES
    /// for URLs with passwords: command lines are visible to other users.
    #[arg(
        long,
        env = "REDLOCK_NODES",
        hide_env_values = true,
        value_delimiter = ',',
        global = true
    )]
    nodes: Vec<String>,

    /// One Redis Cluster member, by the URLs of some of its nodes (seeds),
    /// comma-separated; repeat the option for each cluster member (or
    /// separate clusters with ';'). A cluster counts as one member of the
    /// quorum, whatever its number of shards; every master must load the
    /// module.
    #[arg(
        long = "cluster",
        value_name = "SEEDS",
        env = "REDLOCK_CLUSTERS",
        hide_env_values = true,
        value_delimiter = ';',
        global = true
    )]
    clusters: Vec<String>,

    /// One Sentinel member: NAME@SENTINEL,SENTINEL,… where NAME is the
    /// master's name in Sentinel and each SENTINEL is host:port or a URL
    /// (redis://, rediss://, with the sentinels' own credentials); repeat
    /// the option for each Sentinel member (or separate them with ';').
    /// Counts as one member of the quorum.
    #[arg(
        long = "sentinel",
        value_name = "NAME@SENTINELS",
        env = "REDLOCK_SENTINELS",
        hide_env_values = true,
        value_delimiter = ';',
        global = true
    )]
    sentinels: Vec<String>,

    /// ACL user of the Sentinel members' data nodes (the sentinels keep the
    /// credentials of their URLs).
    #[arg(
        long,
        env = "REDLOCK_SENTINEL_DATA_USER",
        value_name = "USER",
        global = true
    )]
    sentinel_data_user: Option<String>,

    /// Password of the Sentinel members' data nodes. Prefer the environment
    /// variable: command lines are visible to other users.
    #[arg(
        long,
        env = "REDLOCK_SENTINEL_DATA_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD",
        global = true
    )]
    sentinel_data_password: Option<String>,

    /// The Sentinel members' data nodes serve TLS (rediss://; --tls-ca and
    /// --tls-cert/--tls-key apply).
    #[arg(long, global = true)]
    sentinel_data_tls: bool,

    /// PEM file of the CA that signed the nodes' TLS certificates (for
    /// rediss:// nodes; default: the system's trust store). Certificate
    /// verification cannot be turned off.
    #[arg(long, env = "REDLOCK_TLS_CA", value_name = "FILE", global = true)]
    tls_ca: Option<PathBuf>,

    /// PEM file of the client certificate for mutual TLS (Redis's default
    /// `tls-auth-clients yes`); needs --tls-key.
    #[arg(
        long,
        env = "REDLOCK_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key",
        global = true
    )]
    tls_cert: Option<PathBuf>,

    /// PEM file of the client certificate's private key; needs --tls-cert.
    #[arg(
        long,
        env = "REDLOCK_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert",
        global = true
    )]
    tls_key: Option<PathBuf>,

    /// Print results as JSON on stdout (and errors as JSON on stderr).
    #[arg(long, global = true)]
    json: bool,

    /// Longest wait for one node's reply.
    #[arg(long, default_value = "200ms", value_parser = parse_duration, global = true)]
    node_timeout: Duration,

    /// Longest wait for the replicas of a master with
    /// redlock.sync-replicas set to confirm a grant or an extension (on top
    /// of --node-timeout).
    #[arg(long, default_value = "250ms", value_parser = parse_duration, global = true)]
    sync_timeout: Duration,

    /// Longest wait for a connection to one node (TCP, TLS handshake, AUTH).
    #[arg(long, default_value = "1s", value_parser = parse_duration, global = true)]
    connect_timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Take a lock and keep it until its TTL runs out.
    ///
    /// Prints the fencing token and the owner id; the owner id is needed to
    /// release the lock early with `redlock release`.
    Acquire {
        /// The lock's name.
        key: String,
        /// Lease length.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        ttl: Duration,
        /// Wait up to this long for a busy lock, woken by the nodes when it
        /// frees (no polling; first come, first served); default: fail at
        /// once with exit code 3.
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        wait: Duration,
    },
    /// Release a lock taken with `acquire`.
    Release {
        /// The lock's name.
        key: String,
        /// The owner id printed by `acquire`.
        #[arg(long)]
        owner: String,
    },
    /// Show each node's view of a lock: held, time left, counter.
    Inspect {
        /// The lock's name.
        key: String,
    },
    /// Run a command while holding the lock, like flock(1) for a fleet.
    ///
    /// The lock is extended while the command runs; the token is passed in
    /// REDLOCK_TOKEN (and the key in REDLOCK_KEY). The command runs in a
    /// process group of its own, and every signal goes to that whole group,
    /// so that no process it started outlives the lock:
    ///
    /// - lock lost: SIGTERM, then SIGKILL after --kill-after; exit code 4.
    ///
    /// - SIGTERM, SIGINT, SIGHUP or SIGQUIT sent to redlock: passed on, then
    ///   SIGKILL after --kill-after; redlock exits with the command's status.
    ///
    /// - the command exits but left processes in its group: they get
    ///   SIGTERM, then SIGKILL after --kill-after.
    ///
    /// The lock is released only once no process of the group is left;
    /// redlock then exits with the command's status.
    ///
    /// Terminal: when redlock is the foreground job of a terminal, the
    /// command's group gets the terminal while it runs (as a shell does for
    /// a job): the command reads typed input, and Ctrl-C, Ctrl-\ and Ctrl-Z
    /// reach its whole group (after Ctrl-C ended the command, redlock
    /// releases the lock and dies of SIGINT too). Ctrl-Z stops redlock too (the lease is not
    /// extended while stopped; a stop longer than the lease loses the lock);
    /// `fg` resumes both. Run in the background or without a terminal, the
    /// terminal is left alone.
    ///
    /// Several names at once (`--lock a --lock b`, with or without a
    /// positional name): taken as one set, all or none on every node (no
    /// deadlock with overlapping sets), extended and lost together. The
    /// command then gets REDLOCK_LOCKS (how many names) and, for i from 1
    /// on in byte order of the names, REDLOCK_KEY_i and REDLOCK_TOKEN_i.
    /// --wait waits for the whole set (woken by the nodes, first come first
    /// served); a set takes no --guard.
    Run {
        /// The lock's name.
        #[arg(required_unless_present = "lock")]
        key: Option<String>,
        /// A name of a set of locks taken together (repeat for each name).
        #[arg(long = "lock", value_name = "NAME")]
        lock: Vec<String>,
        /// Lease length; the lock is extended about every ttl/3.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        ttl: Duration,
        /// Wait up to this long for a busy lock, woken by the nodes when it
        /// frees (no polling; first come, first served); default: fail at
        /// once with exit code 3.
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        wait: Duration,
        /// Time between SIGTERM (or the signal passed on) and SIGKILL to the
        /// command's process group.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        kill_after: Duration,
        /// A guard key on the resource server (--resource): the token is
        /// shown to it (REDLOCK.GUARD) before the command starts, so older
        /// holders are refused from then on, and it is passed in
        /// REDLOCK_GUARD for `redlock fenced`. STALE: exit code 6, the
        /// command does not start.
        #[arg(long, requires = "resource")]
        guard: Option<String>,
        /// URL of the Redis server (or any node of the cluster) that holds
        /// the protected data and loads the module; passed on in
        /// REDLOCK_RESOURCE. Prefer the environment variable for URLs with
        /// passwords.
        #[arg(long, env = "REDLOCK_RESOURCE", hide_env_values = true)]
        resource: Option<String>,
        /// Serve the client's metrics (redlock_acquisitions_total,
        /// redlock_hold_seconds, …) as Prometheus text over HTTP at this
        /// address (e.g. 127.0.0.1:9464), on any path, while `run` runs.
        #[cfg(feature = "prometheus")]
        #[arg(long, value_name = "HOST:PORT")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// With --metrics-addr: keep serving the metrics this long after the
        /// command ended and the lock was released, so that a scrape sees
        /// the final counts (SIGTERM or SIGINT ends the wait early).
        #[cfg(feature = "prometheus")]
        #[arg(long, default_value = "0s", value_parser = parse_duration, requires = "metrics_addr")]
        metrics_linger: Duration,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Run a command while this host leads the election NAME.
    ///
    /// Campaigns (waiting, first come first served, woken by the nodes),
    /// then runs the command with the epoch (the term's fencing token) in
    /// REDLOCK_EPOCH and REDLOCK_TOKEN, the name in REDLOCK_ELECTION and
    /// REDLOCK_KEY, in a process group of its own. Leadership is renewed
    /// while it runs; when it is lost the group gets SIGTERM, then SIGKILL
    /// after --kill-after (exit code 4). When the command ends, redlock
    /// resigns (the next candidate leads at once) and exits with its
    /// status, or with --again campaigns again.
    Elect {
        /// The election's name.
        name: String,
        /// Lease length; renewed about every ttl/3.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        ttl: Duration,
        /// Campaign again after each term (the command ended or leadership
        /// was lost), until a stop signal.
        #[arg(long)]
        again: bool,
        /// Proclaim this value (e.g. this host's address) while leading.
        #[arg(long)]
        value: Option<String>,
        /// Time between SIGTERM and SIGKILL to the command's process group.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        kill_after: Duration,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Show who leads the election NAME: epoch, time left, proclaimed value
    /// (never the owner). Exit code 5 when nobody leads.
    Leader {
        /// The election's name.
        name: String,
        /// Print every change as it happens, until a stop signal.
        #[arg(long)]
        watch: bool,
    },
    /// Run one Redis command on the resource, fenced by the token of the
    /// lock `redlock run` holds: `REDLOCK.FENCED $REDLOCK_GUARD $REDLOCK_KEY
    /// $REDLOCK_TOKEN CMD ARGS…` on $REDLOCK_RESOURCE. Prints the reply;
    /// exit code 6 when the guard has seen a newer token (nothing ran), 1 on
    /// any other error. Never retried.
    Fenced {
        /// The resource server's URL.
        #[arg(long, env = "REDLOCK_RESOURCE", hide_env_values = true)]
        resource: String,
        /// The guard key.
        #[arg(long, env = "REDLOCK_GUARD")]
        guard: String,
        /// The lock's name.
        #[arg(long, env = "REDLOCK_KEY")]
        key: String,
        /// The fencing token.
        #[arg(long, env = "REDLOCK_TOKEN")]
        token: u64,
        /// The Redis command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
}

/// The first argument of the packaging step (`make install`, `make deb`):
/// `redlock __generate-docs MAN_DIR COMPLETIONS_DIR`. It is read before clap
/// parses the command line, so it shows in no help text and no completion.
const GENERATE_DOCS: &str = "__generate-docs";

/// Writes the man pages (clap_mangen: redlock.1 and one page per subcommand)
/// and the bash, zsh and fish completions (clap_complete: redlock.bash,
/// _redlock, redlock.fish), all generated from [`Cli`], the definition that
/// `--help` shows.
fn generate_docs(man: &std::path::Path, completions: &std::path::Path) -> std::io::Result<()> {
    use clap::CommandFactory;
    use clap_complete::Shell;
    std::fs::create_dir_all(man)?;
    std::fs::create_dir_all(completions)?;
    clap_mangen::generate_to(Cli::command(), man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut Cli::command(), "redlock", completions)?;
    }
    Ok(())
}

/// Parses `500ms`, `30s`, `1.5s`, `2m`, `1h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 500ms, 30s, 2m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write e.g. 500ms, 30s, 2m or 1h"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?}: use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))
}

/// How the output is written.
#[derive(Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    /// One error line on stderr; returns the exit code for it.
    fn error(self, error: &Error) -> u8 {
        let (kind, code) = match error {
            Error::Busy { .. } => ("busy", EXIT_BUSY),
            Error::NoQuorum { .. } => ("no_quorum", EXIT_ERROR),
            Error::ModuleNotLoaded { .. } | Error::ResourceModuleNotLoaded { .. } => {
                ("module_not_loaded", EXIT_ERROR)
            }
            Error::RestartGuard { .. } => ("restart_guard", EXIT_ERROR),
            Error::PermissionDenied { .. } => ("permission_denied", EXIT_ERROR),
            Error::ExpiredBeforeUse { .. } => ("expired_before_use", EXIT_ERROR),
            Error::Lost { .. } | Error::Lapsed { .. } => ("lost", EXIT_LOST),
            Error::Stale { .. } => ("stale", EXIT_STALE),
            Error::InvalidArgument(_) => ("invalid_argument", EXIT_USAGE),
            _ => ("error", EXIT_ERROR),
        };
        self.fail(kind, &error.to_string(), code)
    }

    fn fail(self, kind: &str, message: &str, code: u8) -> u8 {
        if self.json {
            eprintln!("{}", json!({ "error": kind, "message": message }));
        } else {
            eprintln!("redlock: {message}");
        }
        code
    }
}

async fn connect(cli: &Cli) -> Result<Redlock, Error> {
    // One attempt without --wait; with it, the waiting paths (woken by the
    // nodes) take over, and the retry policy only paces retries after
    // failures that are not "busy".
    let mut builder = Redlock::builder(members(cli))
        .node_timeout(cli.node_timeout)
        .sync_timeout(cli.sync_timeout)
        .connect_timeout(cli.connect_timeout)
        .retry(RetryPolicy::no_retry());
    if let Some(ca) = &cli.tls_ca {
        builder = builder.tls_ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        builder = builder.tls_client_cert(cert, key);
    }
    builder.build().await
}

/// One `--sentinel NAME@SENTINEL,…`: the master's name and the sentinels'
/// URLs (`host:port` becomes `redis://host:port`); `None` without a name or
/// a sentinel.
fn sentinel_member(spec: &str) -> Option<(String, Vec<String>)> {
    let (name, list) = spec.trim().split_once('@')?;
    let sentinels: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s.contains("://") {
                s.to_string()
            } else {
                format!("redis://{s}")
            }
        })
        .collect();
    (!name.trim().is_empty() && !sentinels.is_empty()).then(|| (name.trim().to_string(), sentinels))
}

/// The quorum's members: the `--nodes`, then one member per `--cluster`,
/// then one per `--sentinel`.
fn members(cli: &Cli) -> Vec<Member> {
    let nodes = cli
        .nodes
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .map(Member::node);
    let clusters = cli.clusters.iter().filter_map(|seeds| {
        let seeds: Vec<&str> = seeds
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        (!seeds.is_empty()).then(|| Member::cluster(seeds))
    });
    let sentinels = cli.sentinels.iter().filter_map(|spec| {
        let (name, urls) = sentinel_member(spec)?;
        let mut member = Member::sentinel(name, urls);
        if let Some(password) = &cli.sentinel_data_password {
            member = member.data_credentials(cli.sentinel_data_user.as_deref(), password);
        }
        if cli.sentinel_data_tls {
            member = member.data_tls();
        }
        Some(member)
    });
    nodes.chain(clusters).chain(sentinels).collect()
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == GENERATE_DOCS) {
        let out = Out { json: false };
        let [_, _, man, completions] = args.as_slice() else {
            return ExitCode::from(out.fail(
                "invalid_argument",
                &format!("usage: redlock {GENERATE_DOCS} MAN_DIR COMPLETIONS_DIR"),
                EXIT_USAGE,
            ));
        };
        return ExitCode::from(match generate_docs(man.as_ref(), completions.as_ref()) {
            Ok(()) => EXIT_OK,
            Err(e) => out.fail("error", &format!("cannot write the docs: {e}"), EXIT_ERROR),
        });
    }
    let cli = Cli::parse_from(args);
    let out = Out { json: cli.json };
    let needs_nodes = !matches!(cli.command, Command::Fenced { .. });
    if let Some(bad) = cli.sentinels.iter().find(|s| sentinel_member(s).is_none()) {
        return ExitCode::from(out.fail(
            "invalid_argument",
            &format!(
                "--sentinel {:?}: write NAME@host:port,host:port (the master's name in Sentinel, then the sentinels)",
                bad.split('@').next().unwrap_or_default()
            ),
            EXIT_USAGE,
        ));
    }
    if needs_nodes && members(&cli).is_empty() {
        return ExitCode::from(out.fail(
            "invalid_argument",
            "no nodes: pass --nodes redis://host:port,…, --cluster redis://host:port,… or --sentinel NAME@host:port,… (or set REDLOCK_NODES / REDLOCK_CLUSTERS / REDLOCK_SENTINELS)",
            EXIT_USAGE,
        ));
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return ExitCode::from(out.fail(
                "error",
                &format!("cannot start the async runtime: {e}"),
                EXIT_ERROR,
            ))
        }
    };
    ExitCode::from(runtime.block_on(run(cli, out)))
}

async fn run(cli: Cli, out: Out) -> u8 {
    if let Command::Fenced {
        resource,
        guard,
        key,
        token,
        command,
    } = &cli.command
    {
        return fenced(out, resource, guard, key, *token, command).await;
    }
    #[cfg(feature = "prometheus")]
    if let Command::Run {
        metrics_addr: Some(addr),
        ..
    } = &cli.command
    {
        if let Err(e) = serve_metrics(*addr) {
            return out.fail(
                "invalid_argument",
                &format!("--metrics-addr {addr}: {e}"),
                EXIT_USAGE,
            );
        }
    }
    let redlock = match connect(&cli).await {
        Ok(r) => r,
        Err(e) => return out.error(&e),
    };
    match cli.command {
        Command::Acquire { key, ttl, wait } => acquire(&redlock, out, &key, ttl, wait).await,
        Command::Release { key, owner } => release(&redlock, out, &key, &owner).await,
        Command::Inspect { key } => inspect(&redlock, out, &key).await,
        Command::Run {
            key,
            lock,
            ttl,
            wait,
            kill_after,
            guard,
            resource,
            command,
            #[cfg(feature = "prometheus")]
            metrics_linger,
            ..
        } => {
            let names: Vec<String> = key.into_iter().chain(lock).collect();
            if names.len() > 1 && guard.is_some() {
                return out.fail(
                    "invalid_argument",
                    "a set of locks (--lock a --lock b) takes no --guard",
                    EXIT_USAGE,
                );
            }
            let fence = Fence {
                guard: guard.as_deref(),
                resource: resource.as_deref(),
            };
            let code = run_command(
                &redlock, out, &names, ttl, wait, kill_after, fence, &command,
            )
            .await;
            #[cfg(feature = "prometheus")]
            if !metrics_linger.is_zero() {
                linger(metrics_linger).await;
            }
            code
        }
        Command::Elect {
            name,
            ttl,
            again,
            value,
            kill_after,
            command,
        } => {
            elect::elect(
                &redlock,
                out,
                &name,
                ttl,
                again,
                value.as_deref(),
                kill_after,
                &command,
            )
            .await
        }
        Command::Leader { name, watch } => elect::leader(&redlock, out, &name, watch).await,
        Command::Fenced { .. } => EXIT_USAGE,
    }
}

/// Installs the Prometheus exporter as the process's metrics recorder, its
/// HTTP listener on `addr` served by this runtime (`--metrics-addr`).
#[cfg(feature = "prometheus")]
fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&redlock_client::metrics::SECONDS_BUCKETS)
        .and_then(|builder| builder.install())
        .map_err(|e| e.to_string())?;
    redlock_client::metrics::describe();
    Ok(())
}

/// `--metrics-linger`: waits `how_long`, or until SIGTERM, SIGINT, SIGHUP
/// or SIGQUIT.
#[cfg(feature = "prometheus")]
async fn linger(how_long: Duration) {
    let mut stop = StopSignals::install();
    tokio::select! {
        () = tokio::time::sleep(how_long) => {}
        _ = stop.next() => {}
    }
}

/// `run --guard G --resource URL`.
#[derive(Clone, Copy)]
struct Fence<'a> {
    guard: Option<&'a str>,
    resource: Option<&'a str>,
}

/// A connection to the resource server at `url`.
async fn resource_connection(url: &str) -> Result<redis::aio::MultiplexedConnection, Error> {
    let client = redis::Client::open(url)
        .map_err(|e| Error::InvalidArgument(format!("resource URL: {e}")))?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| Error::Resource(format!("cannot connect to the resource: {e}")))
}

/// `redlock fenced -- CMD ARGS…`.
async fn fenced(
    out: Out,
    resource: &str,
    guard: &str,
    key: &str,
    token: u64,
    command: &[String],
) -> u8 {
    let mut con = match resource_connection(resource).await {
        Ok(c) => c,
        Err(e) => return out.error(&e),
    };
    let mut cmd = redis::cmd("REDLOCK.FENCED");
    cmd.arg(guard).arg(key).arg(token).arg(command);
    match cmd.query_async::<redis::Value>(&mut con).await {
        Ok(value) => {
            if out.json {
                println!("{}", json!({ "reply": value_json(&value) }));
            } else {
                print_value(&value);
            }
            EXIT_OK
        }
        Err(e) if e.code() == Some("STALE") => out.fail(
            "stale",
            &format!(
                "STALE {}: another holder took over; nothing ran",
                e.detail().unwrap_or("")
            ),
            EXIT_STALE,
        ),
        Err(e) => out.fail("resource", &e.to_string(), EXIT_ERROR),
    }
}

/// A reply as JSON: strings as text (lossy), numbers, arrays, maps as pairs.
fn value_json(value: &redis::Value) -> serde_json::Value {
    use redis::Value;
    match value {
        Value::Nil => serde_json::Value::Null,
        Value::Int(n) => json!(n),
        Value::Okay => json!("OK"),
        Value::BulkString(b) => json!(String::from_utf8_lossy(b)),
        Value::SimpleString(s) => json!(s),
        Value::Double(d) => json!(d),
        Value::Boolean(b) => json!(b),
        Value::Array(items) | Value::Set(items) => {
            serde_json::Value::Array(items.iter().map(value_json).collect())
        }
        Value::Map(pairs) => serde_json::Value::Array(
            pairs
                .iter()
                .map(|(k, v)| json!([value_json(k), value_json(v)]))
                .collect(),
        ),
        other => json!(format!("{other:?}")),
    }
}

/// A reply as redis-cli's raw mode prints it: one value per line.
fn print_value(value: &redis::Value) {
    use redis::Value;
    match value {
        Value::Nil => println!(),
        Value::Int(n) => println!("{n}"),
        Value::Okay => println!("OK"),
        Value::BulkString(b) => println!("{}", String::from_utf8_lossy(b)),
        Value::SimpleString(s) => println!("{s}"),
        Value::Array(items) | Value::Set(items) => items.iter().for_each(print_value),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            print_value(k);
            print_value(v);
        }),
        other => println!("{other:?}"),
    }
}

async fn acquire(redlock: &Redlock, out: Out, key: &str, ttl: Duration, wait: Duration) -> u8 {
    let result = if wait.is_zero() {
        redlock.try_acquire(key, ttl).await.and_then(|lock| {
            lock.ok_or(Error::Busy {
                holders: 0,
                nodes: redlock.nodes().len(),
            })
        })
    } else {
        redlock.acquire_wait(key, ttl, wait).await
    };
    let lock = match result {
        Ok(lock) => lock,
        Err(Error::Busy { .. }) => {
            return out.fail(
                "busy",
                &format!("{key:?} is held by another owner: try again later, or pass --wait 10s"),
                EXIT_BUSY,
            )
        }
        Err(e) => return out.error(&e),
    };
    let token = lock.token();
    let validity = lock.validity();
    let owner = lock.detach();
    if out.json {
        println!(
            "{}",
            json!({
                "key": key,
                "token": token,
                "owner": owner,
                "validity_ms": validity.as_millis() as u64,
            })
        );
    } else {
        println!("acquired {key:?}");
        println!("  token  {token}");
        println!("  owner  {owner}");
        println!("  valid  {:.2}s", validity.as_secs_f64());
        println!("release early with: redlock release {key} --owner {owner}");
    }
    EXIT_OK
}

async fn release(redlock: &Redlock, out: Out, key: &str, owner: &str) -> u8 {
    match redlock.release_owner(key, owner).await {
        Ok(released) => {
            if out.json {
                println!("{}", json!({ "key": key, "released": released }));
            } else if released {
                println!("released {key:?}");
            } else {
                println!("{key:?} was not held by that owner (its lease ran out, or it was already released): nothing to do");
            }
            if released {
                EXIT_OK
            } else {
                EXIT_NOT_HELD
            }
        }
        Err(e) => out.error(&e),
    }
}

async fn inspect(redlock: &Redlock, out: Out, key: &str) -> u8 {
    let views = redlock.inspect(key).await;
    let held = views
        .iter()
        .filter(|v| matches!(v.state, NodeState::Present { held: true, .. }))
        .count();
    if out.json {
        let nodes: Vec<_> = views
            .iter()
            .map(|v| {
                let mut entry = match &v.state {
                    NodeState::Missing => json!({ "node": v.node, "exists": false }),
                    NodeState::Present { held, pttl, token } => json!({
                        "node": v.node,
                        "exists": true,
                        "held": held,
                        "pttl_ms": pttl.map(|d| d.as_millis() as u64),
                        "token": token,
                    }),
                    NodeState::Error(e) => json!({ "node": v.node, "error": e }),
                };
                if let Some(shard) = &v.shard {
                    entry["shard"] = json!({ "addr": shard.addr, "node_id": shard.node_id });
                }
                entry
            })
            .collect();
        println!(
            "{}",
            json!({
                "key": key,
                "quorum": redlock.quorum(),
                "held_on": held,
                "nodes": nodes,
            })
        );
        return EXIT_OK;
    }
    let width = views.iter().map(|v| v.node.len()).max().unwrap_or(4).max(4);
    println!(
        "lock {key:?} on {} nodes (quorum {})",
        views.len(),
        redlock.quorum()
    );
    println!("{:<width$}  {:<4}  {:>9}  TOKEN", "NODE", "HELD", "PTTL");
    for v in &views {
        // A cluster member names the shard that holds the key.
        let shard = v.shard.as_ref().map_or(String::new(), |s| {
            format!("  shard {} (node {})", s.addr, s.node_id)
        });
        match &v.state {
            NodeState::Missing => {
                println!(
                    "{:<width$}  {:<4}  {:>9}  -  (never locked here){shard}",
                    v.node, "-", "-"
                )
            }
            NodeState::Present { held, pttl, token } => println!(
                "{:<width$}  {:<4}  {:>9}  {token}{shard}",
                v.node,
                if *held { "yes" } else { "no" },
                pttl.map_or("-".to_string(), |d| format!("{}ms", d.as_millis())),
            ),
            NodeState::Error(e) => println!("{:<width$}  error: {e}", v.node),
        }
    }
    println!(
        "held on {held} of {} nodes: {}",
        views.len(),
        if held >= redlock.quorum() {
            "locked"
        } else {
            "not locked by a quorum"
        }
    );
    EXIT_OK
}

/// How the command under `run` ended.
enum RunEnd {
    /// The command exited (and its whole process group is gone);
    /// `terminal`: its group had the terminal.
    Exited {
        status: std::process::ExitStatus,
        terminal: bool,
    },
    /// The lock was lost; the group was terminated (the command's status).
    Lost(Option<std::process::ExitStatus>),
    /// The command could not be started.
    NotStarted(std::io::Error),
    /// Waiting for the command failed (its group was still terminated).
    WaitFailed(std::io::Error),
    /// `--guard`: showing the token to the guard failed; the command was
    /// not started.
    NotAnnounced(Error),
}

fn status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).min(255) as u8,
        _ => EXIT_ERROR,
    }
}

/// How often `run` checks whether the rest of the command's group is gone
/// after the command itself exited.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// The signals that ask `run` to stop; they are passed on to the
/// command's group.
struct StopSignals(Vec<(libc::c_int, tokio::signal::unix::Signal)>);

impl StopSignals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        StopSignals(
            [
                (libc::SIGTERM, SignalKind::terminate()),
                (libc::SIGINT, SignalKind::interrupt()),
                (libc::SIGHUP, SignalKind::hangup()),
                (libc::SIGQUIT, SignalKind::quit()),
            ]
            .into_iter()
            .filter_map(|(number, kind)| signal(kind).ok().map(|s| (number, s)))
            .collect(),
        )
    }

    /// The next stop signal received.
    async fn next(&mut self) -> libc::c_int {
        if self.0.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.0.iter_mut().map(|(number, s)| {
            let number = *number;
            Box::pin(async move {
                s.recv().await;
                number
            })
        });
        futures_util::future::select_all(waits).await.0
    }
}

/// The next SIGCHLD (never, when it could not be watched).
async fn child_changed(sigchld: &mut Option<tokio::signal::unix::Signal>) {
    match sigchld {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Runs the command in a process group of its own while the lock is held.
///
/// The group is signalled as a whole: SIGTERM when the lock is lost or
/// when the command exited and left processes behind, the received signal
/// when `run` is asked to stop (SIGTERM, SIGINT, SIGHUP, SIGQUIT); SIGKILL
/// `kill_after` after the first of these. The closure returns (and the lock
/// is released) only once no process of the group is left.
#[allow(clippy::too_many_arguments)]
async fn run_command(
    redlock: &Redlock,
    out: Out,
    names: &[String],
    ttl: Duration,
    wait: Duration,
    kill_after: Duration,
    fence: Fence<'_>,
    argv: &[String],
) -> u8 {
    let Some((program, args)) = argv.split_first() else {
        return out.fail("invalid_argument", "no command given after --", EXIT_USAGE);
    };
    let work = |guard: held::Held| async move {
        // The token is shown to the resource's guard before the command
        // starts: from then on, older holders are refused there.
        if let (Some(guard_key), Some(url), Some(lock)) =
            (fence.guard, fence.resource, guard.single())
        {
            let announced = match resource_connection(url).await {
                Ok(mut con) => lock.announce(&mut con, guard_key).await,
                Err(e) => Err(e),
            };
            if let Err(e) = announced {
                return RunEnd::NotAnnounced(e);
            }
        }
        // Installed before the command starts, so that no stop request
        // can end `run` and leave the command running unlocked.
        let mut stop_signals = StopSignals::install();
        let mut sigchld =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
        job::adopt_orphans();
        let terminal = job::Terminal::foreground();
        let mut command = tokio::process::Command::new(program);
        command.args(args).envs(guard.env()).kill_on_drop(true);
        if let Some(guard_key) = fence.guard {
            command.env("REDLOCK_GUARD", guard_key);
        }
        if let Some(url) = fence.resource {
            command.env("REDLOCK_RESOURCE", url);
        }
        let (mut child, group) = match job::spawn(&mut command, terminal.as_ref()) {
            Ok(started) => started,
            Err(e) => return RunEnd::NotStarted(e),
        };
        let leader = child.id();
        let mut status: Option<std::io::Result<std::process::ExitStatus>> = None;
        let mut lost = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut killed = false;
        let stop = |sig: libc::c_int, kill_at: &mut Option<tokio::time::Instant>| {
            group.signal(sig);
            kill_at.get_or_insert_with(|| tokio::time::Instant::now() + kill_after);
        };
        loop {
            if status.is_some() {
                if group.is_gone() {
                    break;
                }
                if kill_at.is_none() {
                    tracing::debug!(
                        "the command exited and left processes in its group: terminating them"
                    );
                    stop(libc::SIGTERM, &mut kill_at);
                }
            }
            let escalate = kill_at.filter(|_| !killed);
            tokio::select! {
                s = child.wait(), if status.is_none() => status = Some(s),
                _ = guard.lost(), if !lost => {
                    lost = true;
                    stop(libc::SIGTERM, &mut kill_at);
                }
                sig = stop_signals.next() => stop(sig, &mut kill_at),
                _ = child_changed(&mut sigchld), if terminal.is_some() && status.is_none() => {
                    if let (Some(terminal), Some(pid)) = (&terminal, leader) {
                        follow_stop(terminal, group, pid);
                    }
                }
                _ = tokio::time::sleep_until(escalate.unwrap_or_else(tokio::time::Instant::now)), if escalate.is_some() => {
                    group.signal(libc::SIGKILL);
                    killed = true;
                }
                _ = tokio::time::sleep(GROUP_POLL), if status.is_some() => {}
            }
        }
        let had_terminal = terminal.is_some();
        drop(terminal);
        match (status, lost) {
            (Some(Ok(s)), true) => RunEnd::Lost(Some(s)),
            (_, true) => RunEnd::Lost(None),
            (Some(Ok(status)), false) => RunEnd::Exited {
                status,
                terminal: had_terminal,
            },
            (Some(Err(e)), false) => RunEnd::WaitFailed(e),
            (None, false) => RunEnd::WaitFailed(std::io::Error::other("no exit status")),
        }
    };
    let key = &names.join(", ");
    let result = match names {
        [one] if wait.is_zero() => {
            redlock
                .with_lock(one, ttl, |g| work(held::Held::One(g)))
                .await
        }
        [one] => {
            redlock
                .with_lock_wait(one, ttl, wait, |g| work(held::Held::One(g)))
                .await
        }
        _ if wait.is_zero() => {
            redlock
                .with_lock_set(names, ttl, |g| work(held::Held::Set(g)))
                .await
        }
        _ => {
            redlock
                .with_lock_set_wait(names, ttl, wait, |g| work(held::Held::Set(g)))
                .await
        }
    };
    match result {
        Err(Error::Busy { .. }) => out.fail(
            "busy",
            &format!("{key:?} is held by another owner: try again later, or pass --wait 10s"),
            EXIT_BUSY,
        ),
        Err(e) => out.error(&e),
        Ok(RunEnd::Exited { status, terminal }) => {
            use std::os::unix::process::ExitStatusExt;
            if terminal && status.signal() == Some(libc::SIGINT) {
                die_of_sigint();
            }
            status_code(status)
        }
        Ok(RunEnd::Lost(status)) => out.fail(
            "lost",
            &format!(
                "lost the lock on {key:?} while the command ran (an extension failed to reach a quorum); the command was terminated{}",
                status.map_or(String::new(), |s| format!(" ({s})"))
            ),
            EXIT_LOST,
        ),
        Ok(RunEnd::NotStarted(e)) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            out.fail(
                "not_started",
                &format!("cannot run {program:?}: {e}"),
                code,
            )
        }
        Ok(RunEnd::NotAnnounced(e)) => out.error(&e),
        Ok(RunEnd::WaitFailed(e)) => out.fail(
            "error",
            &format!("lost track of the command: {e}"),
            EXIT_ERROR,
        ),
    }
}

/// Ends `redlock` by SIGINT, after Ctrl-C ended the command that had the
/// terminal (the lock is released by then). Ctrl-C reached only the
/// command's group; dying of the same signal tells a calling shell script
/// that the user interrupted it, so that the script stops as well instead
/// of going on with its next command.
fn die_of_sigint() -> ! {
    // SAFETY: resets SIGINT to its default action and raises it; no memory
    // is involved.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::raise(libc::SIGINT);
    }
    std::process::exit(128 + libc::SIGINT)
}

/// The command was stopped from the terminal (Ctrl-Z): stop `redlock` as
/// well, so that the shell sees the job stopped and gets the terminal back;
/// when `redlock` is continued, continue the command's group (in the
/// foreground again after `fg`). The lease is not extended while `redlock`
/// is stopped: a stop longer than the lease loses the lock.
fn follow_stop(terminal: &job::Terminal, group: job::ProcessGroup, leader: u32) {
    if !job::leader_stopped(leader) {
        return;
    }
    terminal.take_back();
    job::stop_self();
    if terminal.owned() {
        terminal.give_to(group);
    }
    group.signal(libc::SIGCONT);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("30x").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn cli_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
