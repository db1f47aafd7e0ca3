//! Fenced writes (`REDLOCK.FENCED`, `REDLOCK.GUARD`) from a held lock to a
//! resource server given by URL, or to a Redis Cluster given by seed URLs:
//! a small per-client cache of connections to them, and the conversion of
//! the inner commands' replies into Python values.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString};
use pyo3::IntoPyObjectExt;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};
use redlock_client::{Error, LockInfo};

use crate::errors;

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
    /// A `str` (one server) or a list of seed URLs (a cluster), as the
    /// Python layer passes them.
    pub(crate) fn from_py(ob: &Bound<'_, PyAny>) -> PyResult<Self> {
        if ob.is_instance_of::<PyString>() {
            Ok(Target::Server(ob.extract()?))
        } else {
            Ok(Target::Cluster(ob.extract()?))
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

    /// The server's address as the client names its nodes (`host:port`,
    /// never the URL, which may carry a password); `cluster(a,b)` for a
    /// cluster's seeds.
    fn address(&self) -> String {
        let one = |url: &str| match redis::IntoConnectionInfo::into_connection_info(url) {
            Ok(info) => info.addr().to_string(),
            Err(_) => "(an unparsable URL)".to_string(),
        };
        match self {
            Target::Server(url) => one(url),
            Target::Cluster(seeds) => format!(
                "cluster({})",
                seeds.iter().map(|s| one(s)).collect::<Vec<_>>().join(",")
            ),
        }
    }

    /// Names this resource in an error about it: the client's fenced calls
    /// get a connection, not an address, and leave the name out.
    fn name_in(&self, e: Error) -> Error {
        match e {
            Error::ResourceModuleNotLoaded {
                resource: None,
                command,
            } => Error::ResourceModuleNotLoaded {
                resource: Some(self.address()),
                command,
            },
            other => other,
        }
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
        // No response timeout, as redis-py's default: an inner command may
        // take long; the caller can interrupt (Ctrl-C, asyncio cancel).
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
        reply.map(Reply).map_err(|e| target.name_in(e))
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
        reply.map(Reply).map_err(|e| target.name_in(e))
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
        highest.map_err(|e| target.name_in(e))
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

/// An inner command's reply, converted for Python: nil `None`, integer
/// `int`, bulk string `bytes`, status string `str`, array `list`, and under
/// RESP3 map `dict`, set `set`, double `float`, boolean `bool`. An error
/// inside an array becomes a `ResourceError` instance in the list.
pub(crate) struct Reply(Value);

impl<'py> IntoPyObject<'py> for Reply {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, self.0)
    }
}

fn to_python(py: Python<'_>, value: Value) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        Value::Nil => py.None().into_bound(py),
        Value::Int(i) => i.into_bound_py_any(py)?,
        Value::BulkString(bytes) => PyBytes::new(py, &bytes).into_any(),
        Value::SimpleString(s) => PyString::new(py, &s).into_any(),
        Value::Okay => PyString::new(py, "OK").into_any(),
        Value::VerbatimString { text, .. } => PyString::new(py, &text).into_any(),
        Value::Double(d) => d.into_bound_py_any(py)?,
        Value::Boolean(b) => b.into_bound_py_any(py)?,
        Value::Array(items) | Value::Push { data: items, .. } => list(py, items)?.into_any(),
        Value::Set(items) => {
            let items = list(py, items)?;
            // A set of unhashable items (nested arrays) stays a list.
            match PySet::new(py, items.iter()) {
                Ok(set) => set.into_any(),
                Err(_) => items.into_any(),
            }
        }
        Value::Map(pairs) => {
            let dict = PyDict::new(py);
            let mut rows = Vec::with_capacity(pairs.len());
            let mut hashable = true;
            for (k, v) in pairs {
                let (k, v) = (to_python(py, k)?, to_python(py, v)?);
                if hashable && dict.set_item(&k, &v).is_err() {
                    hashable = false;
                }
                rows.push((k, v));
            }
            // A map with unhashable keys stays a list of (key, value) pairs.
            if hashable {
                dict.into_any()
            } else {
                PyList::new(py, rows)?.into_any()
            }
        }
        Value::Attribute { data, .. } => to_python(py, *data)?,
        Value::ServerError(e) => {
            let message = match e.details() {
                Some(detail) => format!("{} {detail}", e.code()),
                None => e.code().to_string(),
            };
            errors::lock_error(Error::Resource(message), None)
                .into_value(py)
                .into_bound(py)
                .into_any()
        }
        // A RESP3 big number: Python's int parses its decimal text.
        other => match redis::from_redis_value::<String>(other) {
            Ok(text) => py
                .get_type::<pyo3::types::PyInt>()
                .call1((text.clone(),))
                .or_else(|_| Ok::<_, PyErr>(PyString::new(py, &text).into_any()))?,
            Err(e) => return Err(errors::lock_error(Error::Resource(e.to_string()), None)),
        },
    })
}

fn list(py: Python<'_>, items: Vec<Value>) -> PyResult<Bound<'_, PyList>> {
    let converted = items
        .into_iter()
        .map(|v| to_python(py, v))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, converted)
}
