//! Fenced writes (`REDLOCK.FENCED`, `REDLOCK.GUARD`) from a held lock to a
//! resource server given by URL: a small per-client cache of connections to
//! those servers, and the conversion of the inner command's reply into
//! Python values.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString};
use pyo3::IntoPyObjectExt;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value};
use redlock_client::{Error, LockInfo};

use crate::errors;

/// How many resource servers a client keeps a connection to; connecting to
/// one more drops the others (they reconnect on their next use).
const MAX_RESOURCES: usize = 16;

/// The client's connections to resource servers, one multiplexed
/// connection per URL, shared by every lock the client hands out.
pub(crate) struct Resources {
    connections: Mutex<HashMap<String, MultiplexedConnection>>,
    connect_timeout: Duration,
}

impl Resources {
    /// An empty cache; new connections give up after `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration) -> Arc<Self> {
        Arc::new(Resources {
            connections: Mutex::new(HashMap::new()),
            connect_timeout,
        })
    }

    fn cached(&self, url: &str) -> Option<MultiplexedConnection> {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(url)
            .cloned()
    }

    /// The connection to `url`, made on first use.
    async fn connection(&self, url: &str) -> Result<MultiplexedConnection, Error> {
        if let Some(con) = self.cached(url) {
            return Ok(con);
        }
        // The URL may carry a password: it is never put in a message.
        let client = redis::Client::open(url)
            .map_err(|e| Error::InvalidArgument(format!("the resource URL does not parse: {e}")))?;
        // No response timeout, as redis-py's default: an inner command may
        // take long; the caller can interrupt (Ctrl-C, asyncio cancel).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| Error::Resource(format!("cannot connect to the resource server: {e}")))?;
        let mut map = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_RESOURCES && !map.contains_key(url) {
            map.clear();
        }
        // Two first calls racing both connect; the later one is kept.
        map.insert(url.to_string(), con.clone());
        Ok(con)
    }

    /// Forgets a broken connection so that the next call reconnects.
    fn forget(&self, url: &str) {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(url);
    }

    /// Runs `REDLOCK.FENCED guard <lock> <token> args…` on `url` with the
    /// lock `info`; the inner command's reply. Never retried.
    pub(crate) async fn fenced(
        &self,
        info: &LockInfo,
        url: &str,
        guard: &str,
        args: &[Vec<u8>],
    ) -> Result<Reply, Error> {
        if args.is_empty() {
            return Err(Error::InvalidArgument("no command to fence".into()));
        }
        let mut cmd = Cmd::new();
        for arg in args {
            cmd.arg(arg.as_slice());
        }
        let mut con = Watched::new(self.connection(url).await?);
        let reply = info.fenced::<Value>(&mut con, guard, &cmd).await;
        if con.broken {
            self.forget(url);
        }
        reply.map(Reply)
    }

    /// Runs `REDLOCK.GUARD guard <lock> <token>` on `url`: the guard's
    /// highest token.
    pub(crate) async fn announce(
        &self,
        info: &LockInfo,
        url: &str,
        guard: &str,
    ) -> Result<u64, Error> {
        let mut con = Watched::new(self.connection(url).await?);
        let highest = info.announce(&mut con, guard).await;
        if con.broken {
            self.forget(url);
        }
        highest
    }
}

/// A connection that notes an error after which it cannot be used again
/// (a dropped connection: a multiplexed connection does not reconnect).
struct Watched {
    con: MultiplexedConnection,
    broken: bool,
}

impl Watched {
    fn new(con: MultiplexedConnection) -> Self {
        Watched { con, broken: false }
    }
}

impl ConnectionLike for Watched {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.con.req_packed_command(cmd).await;
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
            let reply = self.con.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &reply {
                self.broken |= e.is_unrecoverable_error();
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
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
