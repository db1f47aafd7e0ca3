//! Fenced writes (`REDLOCK.FENCED`, `REDLOCK.GUARD`) from a held lock to a
//! resource server given by URL, or to a Redis Cluster given by seed URLs:
//! a small per-client cache of connections to them, and the conversion of
//! the inner commands' replies into JavaScript values.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Buffer, Either, Env, Null, ToNapiValue};
use napi::sys;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};
use redlock_client::{Error, LockInfo};

/// How many resource servers a client keeps a connection to; connecting to
/// one more drops the others (they reconnect on their next use).
const MAX_RESOURCES: usize = 16;

/// Where fenced commands go: one server, or a Redis Cluster (its seeds).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// A `redis://` or `rediss://` URL.
    Server(String),
    /// The URLs of some nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

impl Target {
    /// A URL (one server) or a list of seed URLs (a cluster), as the
    /// TypeScript layer passes them.
    pub(crate) fn from_js(target: Either<String, Vec<String>>) -> Self {
        match target {
            Either::A(url) => Target::Server(url),
            Either::B(seeds) => Target::Cluster(seeds),
        }
    }
}

impl Target {
    /// Refuses what the redis crate would read as "do not verify TLS
    /// certificates" (a `#insecure` fragment), as the client does for its
    /// nodes, and an empty cluster.
    fn check(&self) -> Result<(), Error> {
        let urls: &[String] = match self {
            Target::Server(url) => std::slice::from_ref(url),
            Target::Cluster(seeds) if seeds.is_empty() => {
                return Err(Error::InvalidArgument(
                    "a cluster resource needs at least one seed URL".into(),
                ))
            }
            Target::Cluster(seeds) => seeds,
        };
        if urls.iter().any(|u| u.contains('#')) {
            return Err(Error::InvalidArgument(
                "the resource URL has a #fragment: none is supported (certificate verification cannot be turned off)".into(),
            ));
        }
        Ok(())
    }

    fn is_tls(&self) -> bool {
        let tls = |u: &String| {
            u.get(..9)
                .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
        };
        match self {
            Target::Server(url) => tls(url),
            Target::Cluster(seeds) => seeds.iter().any(tls),
        }
    }
}

/// A connection to a resource: multiplexed to one server, or a cluster
/// connection that routes each command (a transaction: by its first key)
/// to the master of its slot.
#[derive(Clone)]
enum Connection {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// The client's connections to resource servers and clusters, shared by
/// every lock the client hands out.
pub(crate) struct Resources {
    connections: Mutex<HashMap<Target, Connection>>,
    connect_timeout: Duration,
    /// The client's TLS files (CA, client certificate and key), used for
    /// `rediss://` resources as for the lock's nodes.
    tls: Option<TlsCertificates>,
}

impl Resources {
    /// An empty cache; new connections give up after `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration, tls: Option<TlsCertificates>) -> Arc<Self> {
        Arc::new(Resources {
            connections: Mutex::new(HashMap::new()),
            connect_timeout,
            tls,
        })
    }

    fn cached(&self, target: &Target) -> Option<Connection> {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(target)
            .cloned()
    }

    /// The connection to `target`, made on first use.
    async fn connection(&self, target: &Target) -> Result<Connection, Error> {
        if let Some(con) = self.cached(target) {
            return Ok(con);
        }
        target.check()?;
        if target.is_tls() {
            ensure_tls_provider();
        }
        // The URLs may carry a password: none is ever put in a message.
        // The TLS files only go with TLS URLs: a plain `redis://` resource
        // stays plain (the redis crate refuses certificates without TLS).
        let tls = self.tls.as_ref().filter(|_| target.is_tls());
        let con = match target {
            Target::Server(url) => Connection::Server(self.connect_server(url, tls).await?),
            Target::Cluster(seeds) => Connection::Cluster(self.connect_cluster(seeds, tls).await?),
        };
        let mut map = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_RESOURCES && !map.contains_key(target) {
            map.clear();
        }
        // Two first calls racing both connect; the later one is kept.
        map.insert(target.clone(), con.clone());
        Ok(con)
    }

    async fn connect_server(
        &self,
        url: &str,
        tls: Option<&TlsCertificates>,
    ) -> Result<MultiplexedConnection, Error> {
        let client = match tls {
            Some(certs) => redis::Client::build_with_tls(url, certs.clone()),
            None => redis::Client::open(url),
        }
        .map_err(|e| Error::InvalidArgument(format!("the resource URL does not parse: {e}")))?;
        // No response timeout, as ioredis's default: an inner command may
        // take long; the caller can abort (AbortSignal).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| Error::Resource(format!("cannot connect to the resource server: {e}")))
    }

    async fn connect_cluster(
        &self,
        seeds: &[String],
        tls: Option<&TlsCertificates>,
    ) -> Result<ClusterConnection, Error> {
        // No retries: the cluster client would resend a command after a
        // dropped connection, which may apply it twice. A MOVED or ASK reply
        // (a slot being resharded) then comes back as an error, and the slot
        // map is refreshed for the next call.
        let mut builder = ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(self.connect_timeout)
            .retries(0);
        if let Some(certs) = tls {
            builder = builder.certs(certs.clone());
        }
        let client = builder.build().map_err(|e| {
            Error::InvalidArgument(format!(
                "the cluster resource's seed URLs do not parse: {e}"
            ))
        })?;
        // Connecting reads the slot map from a seed, then connects to every
        // master: two connection steps, so twice the bound of one.
        let connect = client.get_async_connection();
        match tokio::time::timeout(self.connect_timeout * 2, connect).await {
            Ok(Ok(con)) => Ok(con),
            Ok(Err(e)) => Err(Error::Resource(format!(
                "cannot connect to the resource cluster: {e}"
            ))),
            Err(_) => Err(Error::Resource(format!(
                "cannot connect to the resource cluster: timed out after {} ms",
                (self.connect_timeout * 2).as_millis()
            ))),
        }
    }

    /// Forgets a broken connection so that the next call reconnects.
    fn forget(&self, target: &Target) {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(target);
    }

    /// Runs `REDLOCK.FENCED guard <lock> <token> args…` on `target` with
    /// the lock `info`; the inner command's reply. Never retried.
    pub(crate) async fn fenced(
        &self,
        info: &LockInfo,
        target: &Target,
        guard: &str,
        args: &[Vec<u8>],
    ) -> Result<Reply, Error> {
        let cmd = command(args)?;
        let mut con = Watched::new(self.connection(target).await?);
        let reply = info.fenced::<Value>(&mut con, guard, &cmd).await;
        if con.broken {
            self.forget(target);
        }
        reply.map(Reply)
    }

    /// Runs every command of `commands`, each fenced by the lock `info` on
    /// `guard`, in one `MULTI`/`EXEC` on `target`: the list of their
    /// replies. Never retried.
    pub(crate) async fn fenced_transaction(
        &self,
        info: &LockInfo,
        target: &Target,
        guard: &str,
        commands: &[Vec<Vec<u8>>],
    ) -> Result<Reply, Error> {
        if commands.is_empty() {
            return Err(Error::InvalidArgument(
                "a fenced transaction needs at least one command".into(),
            ));
        }
        let mut pipe = redis::pipe();
        for args in commands {
            pipe.add_command(command(args)?);
        }
        let mut con = Watched::new(self.connection(target).await?);
        let reply = info.fenced_atomic::<Value>(&mut con, guard, &pipe).await;
        if con.broken {
            self.forget(target);
        }
        reply.map(Reply)
    }

    /// Runs `REDLOCK.GUARD guard <lock> <token>` on `target`: the guard's
    /// highest token.
    pub(crate) async fn announce(
        &self,
        info: &LockInfo,
        target: &Target,
        guard: &str,
    ) -> Result<u64, Error> {
        let mut con = Watched::new(self.connection(target).await?);
        let highest = info.announce(&mut con, guard).await;
        if con.broken {
            self.forget(target);
        }
        highest
    }
}

/// One command from its name and arguments.
fn command(args: &[Vec<u8>]) -> Result<Cmd, Error> {
    if args.is_empty() {
        return Err(Error::InvalidArgument("no command to fence".into()));
    }
    let mut cmd = Cmd::new();
    for arg in args {
        cmd.arg(arg.as_slice());
    }
    Ok(cmd)
}

/// Makes sure rustls has a crypto provider for `rediss://` resources (the
/// client installs the same one for TLS nodes; the resource may use TLS
/// when the nodes do not).
fn ensure_tls_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one first: either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A connection that notes an error after which it cannot be used again
/// (a dropped connection: a multiplexed connection does not reconnect).
struct Watched {
    con: Connection,
    broken: bool,
}

impl Watched {
    fn new(con: Connection) -> Self {
        Watched { con, broken: false }
    }
}

impl ConnectionLike for Watched {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = match &mut self.con {
                Connection::Server(con) => con.req_packed_command(cmd).await,
                Connection::Cluster(con) => con.req_packed_command(cmd).await,
            };
            if let Err(e) = &reply {
                self.broken |= e.is_unrecoverable_error();
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let reply = match &mut self.con {
                Connection::Server(con) => con.req_packed_commands(pipeline, offset, count).await,
                Connection::Cluster(con) => con.req_packed_commands(pipeline, offset, count).await,
            };
            if let Err(e) = &reply {
                self.broken |= e.is_unrecoverable_error();
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        match &self.con {
            Connection::Server(con) => con.get_db(),
            Connection::Cluster(con) => con.get_db(),
        }
    }
}

/// An inner command's reply, converted for JavaScript as ioredis does where
/// it can: nil `null`, integer `number` (a `bigint` beyond 2^53), bulk
/// string `string` (a `Buffer` when it is not UTF-8), status `string`,
/// array `Array`, and under RESP3 map a plain object (keys as strings), set
/// `Array`, double `number`, boolean `boolean`. An error inside an array
/// becomes an `Error` in it.
pub struct Reply(pub(crate) Value);

/// The largest integer a JavaScript number holds exactly.
const SAFE_INTEGER: i64 = (1 << 53) - 1;

impl ToNapiValue for Reply {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        unsafe { to_js(env, val.0) }
    }
}

/// The text of a reply used as a map key.
fn key_text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}

unsafe fn to_js(env: sys::napi_env, value: Value) -> napi::Result<sys::napi_value> {
    unsafe {
        match value {
            Value::Nil => Null::to_napi_value(env, Null),
            Value::Int(i) if (-SAFE_INTEGER..=SAFE_INTEGER).contains(&i) => {
                f64::to_napi_value(env, i as f64)
            }
            Value::Int(i) => BigInt::to_napi_value(env, BigInt::from(i)),
            Value::BulkString(bytes) => match String::from_utf8(bytes) {
                Ok(text) => String::to_napi_value(env, text),
                Err(e) => Buffer::to_napi_value(env, Buffer::from(e.into_bytes())),
            },
            Value::SimpleString(s) => String::to_napi_value(env, s),
            Value::Okay => String::to_napi_value(env, "OK".to_string()),
            Value::VerbatimString { text, .. } => String::to_napi_value(env, text),
            Value::Double(d) => f64::to_napi_value(env, d),
            Value::Boolean(b) => bool::to_napi_value(env, b),
            Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
                Vec::<Reply>::to_napi_value(env, items.into_iter().map(Reply).collect())
            }
            Value::Map(pairs) => {
                let map: HashMap<String, Reply> = pairs
                    .into_iter()
                    .map(|(k, v)| (key_text(&k), Reply(v)))
                    .collect();
                HashMap::to_napi_value(env, map)
            }
            Value::Attribute { data, .. } => to_js(env, *data),
            Value::ServerError(e) => {
                let message = match e.details() {
                    Some(detail) => format!("{} {detail}", e.code()),
                    None => e.code().to_string(),
                };
                let js_env = Env::from_raw(env);
                let error =
                    js_env.create_error(napi::Error::new(napi::Status::GenericFailure, message))?;
                ToNapiValue::to_napi_value(env, error)
            }
            // A RESP3 big number: its decimal text.
            other => match redis::from_redis_value::<String>(other) {
                Ok(text) => String::to_napi_value(env, text),
                Err(e) => Err(napi::Error::from_reason(e.to_string())),
            },
        }
    }
}
