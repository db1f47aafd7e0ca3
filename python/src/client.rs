//! `Client`: a connected `redlock_client::Redlock` (`redlock_fenced.Redlock`
//! and `AsyncRedlock` wrap it; both share its connections).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use redlock_client::{Error, Member, NodeState, Redlock, RetryPolicy};

use crate::bridge::{dispatch, Asyncio};
use crate::errors;
use crate::fenced::Resources;
use crate::lock::{Handout, NativeGuard, NativeLock, DAY, MIN_TTL};
use crate::runtime::OnCancel;

/// One member's view of a key: `(node, state, held, ttl, token, error,
/// shard)`, `state` one of `"missing"`, `"present"`, `"error"`.
type View = (
    String,
    &'static str,
    bool,
    Option<f64>,
    Option<u64>,
    Option<String>,
    Option<(String, String)>,
);

/// A connected client.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct Client {
    redlock: RwLock<Option<Redlock>>,
    /// The members' addresses, in the order given.
    #[pyo3(get)]
    nodes: Vec<String>,
    /// How many members must agree.
    #[pyo3(get)]
    quorum: usize,
    /// Connections to the servers of fenced resources, shared by the locks.
    resources: Arc<Resources>,
}

/// The builder for the options `connect` got (durations in seconds).
#[allow(clippy::too_many_arguments)]
fn builder(
    members: &Bound<'_, PyList>,
    node_timeout: f64,
    connect_timeout: f64,
    attempts: u32,
    base_delay: f64,
    jitter: f64,
    drift_factor: f64,
    clock_floor: bool,
    tls_ca_file: Option<PathBuf>,
    tls_client_cert: Option<(PathBuf, PathBuf)>,
    sync_timeout: f64,
) -> PyResult<(redlock_client::RedlockBuilder, Duration, TlsFiles)> {
    let mut list = Vec::with_capacity(members.len());
    for member in members.iter() {
        if member.is_instance_of::<PyString>() {
            list.push(Member::node(member.extract::<String>()?));
        } else if member.is_instance_of::<PyTuple>() {
            // `("sentinel", name, sentinels, data_user, data_password, data_tls)`
            // from `redlock_fenced.Sentinel`.
            let (_, name, sentinels, user, password, tls): (
                String,
                String,
                Vec<String>,
                Option<String>,
                Option<String>,
                bool,
            ) = member.extract()?;
            let mut m = Member::sentinel(name, sentinels);
            if let Some(password) = &password {
                m = m.data_credentials(user.as_deref(), password);
            }
            if tls {
                m = m.data_tls();
            }
            list.push(m);
        } else {
            list.push(Member::cluster(member.extract::<Vec<String>>()?));
        }
    }
    if !drift_factor.is_finite() {
        return Err(errors::invalid(format!(
            "drift_factor must be in 0..1, got {drift_factor}"
        )));
    }
    let connect_timeout = errors::duration("connect_timeout", connect_timeout, 0.0, DAY)?;
    let mut b = Redlock::builder(list)
        .node_timeout(errors::duration("node_timeout", node_timeout, 0.0, DAY)?)
        .sync_timeout(errors::duration("sync_timeout", sync_timeout, 0.0, DAY)?)
        .connect_timeout(connect_timeout)
        .retry(RetryPolicy {
            attempts,
            base_delay: errors::duration("retry.base_delay", base_delay, 0.0, DAY)?,
            jitter: errors::duration("retry.jitter", jitter, 0.0, DAY)?,
        })
        .drift_factor(drift_factor)
        .clock_floor(clock_floor);
    if let Some(ca) = &tls_ca_file {
        b = b.tls_ca_file(ca);
    }
    if let Some((cert, key)) = &tls_client_cert {
        b = b.tls_client_cert(cert, key);
    }
    let files = TlsFiles {
        ca: tls_ca_file,
        client: tls_client_cert,
    };
    Ok((b, connect_timeout, files))
}

/// The TLS files `connect` got, for the connections to `rediss://`
/// resources (the builder keeps its own copy for the nodes).
struct TlsFiles {
    ca: Option<PathBuf>,
    client: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// The certificates, read once the builder has checked the same files
    /// (so a failure here is a file changed in between); `None` without
    /// TLS files.
    fn load(&self) -> Result<Option<redis::TlsCertificates>, Error> {
        if self.ca.is_none() && self.client.is_none() {
            return Ok(None);
        }
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| {
                Error::InvalidArgument(format!("cannot read the TLS file {}: {e}", path.display()))
            })
        };
        let root_cert = self.ca.as_ref().map(read).transpose()?;
        let client_tls = match &self.client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

fn ttl(seconds: f64) -> PyResult<Duration> {
    errors::duration("ttl", seconds, MIN_TTL, DAY)
}

fn wait(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|w| errors::duration("wait", w, 0.0, DAY))
        .transpose()
}

impl Client {
    /// The connected client, for the functions of other files
    /// (`lock_set.rs`); an error once closed.
    pub(crate) fn redlock(&self) -> PyResult<Redlock> {
        self.get()
    }

    /// The client's connections to resource servers (for the terms of
    /// `election.rs`).
    pub(crate) fn resources(&self) -> Arc<Resources> {
        Arc::clone(&self.resources)
    }

    fn get(&self) -> PyResult<Redlock> {
        self.redlock
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| errors::state("the client is closed"))
    }

    #[allow(clippy::too_many_arguments)]
    fn connect_impl(
        py: Python<'_>,
        asyncio: Option<Asyncio<'_, '_>>,
        members: &Bound<'_, PyList>,
        node_timeout: f64,
        connect_timeout: f64,
        attempts: u32,
        base_delay: f64,
        jitter: f64,
        drift_factor: f64,
        clock_floor: bool,
        tls_ca_file: Option<PathBuf>,
        tls_client_cert: Option<(PathBuf, PathBuf)>,
        sync_timeout: f64,
    ) -> PyResult<Py<PyAny>> {
        let (b, connect_timeout, tls) = builder(
            members,
            node_timeout,
            connect_timeout,
            attempts,
            base_delay,
            jitter,
            drift_factor,
            clock_floor,
            tls_ca_file,
            tls_client_cert,
            sync_timeout,
        )?;
        dispatch(py, asyncio, OnCancel::Drop, async move {
            let redlock = b.build().await.map_err(|e| errors::lock_error(e, None))?;
            let tls = tls.load().map_err(|e| errors::lock_error(e, None))?;
            Ok(Client {
                nodes: redlock.nodes(),
                quorum: redlock.quorum(),
                redlock: RwLock::new(Some(redlock)),
                resources: Resources::new(connect_timeout, tls),
            })
        })
    }

    fn acquire_impl(
        &self,
        py: Python<'_>,
        asyncio: Option<Asyncio<'_, '_>>,
        key: String,
        ttl_s: f64,
        wait_s: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.get()?;
        let resources = Arc::clone(&self.resources);
        let ttl = ttl(ttl_s)?;
        match wait(wait_s)? {
            // A round is never cut mid-way (it could leave grants behind).
            None => dispatch(py, asyncio, OnCancel::Finish, async move {
                let lock = redlock.acquire(&key, ttl).await;
                lock.map(|l| Handout(NativeLock::new(l, resources)))
                    .map_err(|e| errors::lock_error(e, None))
            }),
            // Dropping acquire_wait leaves no grant behind (crate docs).
            Some(w) => dispatch(py, asyncio, OnCancel::Drop, async move {
                let lock = redlock.acquire_wait(&key, ttl, w).await;
                lock.map(|l| Handout(NativeLock::new(l, resources)))
                    .map_err(|e| errors::lock_error(e, None))
            }),
        }
    }

    fn try_acquire_impl(
        &self,
        py: Python<'_>,
        asyncio: Option<Asyncio<'_, '_>>,
        key: String,
        ttl_s: f64,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.get()?;
        let resources = Arc::clone(&self.resources);
        let ttl = ttl(ttl_s)?;
        dispatch(py, asyncio, OnCancel::Finish, async move {
            let lock = redlock.try_acquire(&key, ttl).await;
            lock.map(|l| l.map(|l| Handout(NativeLock::new(l, resources))))
                .map_err(|e| errors::lock_error(e, None))
        })
    }

    fn hold_impl(
        &self,
        py: Python<'_>,
        asyncio: Option<Asyncio<'_, '_>>,
        key: String,
        ttl_s: f64,
        wait_s: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.get()?;
        let ttl = ttl(ttl_s)?;
        let wait = wait(wait_s)?;
        let on_cancel = if wait.is_some() {
            OnCancel::Drop
        } else {
            OnCancel::Finish
        };
        dispatch(
            py,
            asyncio,
            on_cancel,
            NativeGuard::start(redlock, Arc::clone(&self.resources), key, ttl, wait),
        )
    }

    fn release_owner_impl(
        &self,
        py: Python<'_>,
        asyncio: Option<Asyncio<'_, '_>>,
        key: String,
        owner: String,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.get()?;
        dispatch(py, asyncio, OnCancel::Finish, async move {
            redlock
                .release_owner(&key, &owner)
                .await
                .map_err(|e| errors::lock_error(e, None))
        })
    }

    fn inspect_impl(
        &self,
        py: Python<'_>,
        asyncio: Option<Asyncio<'_, '_>>,
        key: String,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.get()?;
        dispatch(py, asyncio, OnCancel::Drop, async move {
            let views = redlock.inspect(&key).await;
            let rows: Vec<View> = views
                .into_iter()
                .map(|v| {
                    let shard = v.shard.map(|s| (s.addr, s.node_id));
                    match v.state {
                        NodeState::Missing => (v.node, "missing", false, None, None, None, shard),
                        NodeState::Present { held, pttl, token } => (
                            v.node,
                            "present",
                            held,
                            pttl.map(|d| d.as_secs_f64()),
                            Some(token),
                            None,
                            shard,
                        ),
                        NodeState::Error(e) => (v.node, "error", false, None, None, Some(e), shard),
                    }
                })
                .collect();
            Ok(rows)
        })
    }
}

#[pymethods]
impl Client {
    /// Connects (blocking). Durations in seconds.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (members, node_timeout, connect_timeout, attempts, base_delay, jitter, drift_factor, clock_floor, tls_ca_file=None, tls_client_cert=None, sync_timeout=0.25))]
    fn connect(
        py: Python<'_>,
        members: &Bound<'_, PyList>,
        node_timeout: f64,
        connect_timeout: f64,
        attempts: u32,
        base_delay: f64,
        jitter: f64,
        drift_factor: f64,
        clock_floor: bool,
        tls_ca_file: Option<PathBuf>,
        tls_client_cert: Option<(PathBuf, PathBuf)>,
        sync_timeout: f64,
    ) -> PyResult<Py<PyAny>> {
        Self::connect_impl(
            py,
            None,
            members,
            node_timeout,
            connect_timeout,
            attempts,
            base_delay,
            jitter,
            drift_factor,
            clock_floor,
            tls_ca_file,
            tls_client_cert,
            sync_timeout,
        )
    }

    /// Connects (asyncio future).
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (members, node_timeout, connect_timeout, attempts, base_delay, jitter, drift_factor, clock_floor, tls_ca_file=None, tls_client_cert=None, sync_timeout=0.25))]
    fn connect_async(
        py: Python<'_>,
        members: &Bound<'_, PyList>,
        node_timeout: f64,
        connect_timeout: f64,
        attempts: u32,
        base_delay: f64,
        jitter: f64,
        drift_factor: f64,
        clock_floor: bool,
        tls_ca_file: Option<PathBuf>,
        tls_client_cert: Option<(PathBuf, PathBuf)>,
        sync_timeout: f64,
    ) -> PyResult<Py<PyAny>> {
        Self::connect_impl(
            py,
            Some(Asyncio::current(py)?),
            members,
            node_timeout,
            connect_timeout,
            attempts,
            base_delay,
            jitter,
            drift_factor,
            clock_floor,
            tls_ca_file,
            tls_client_cert,
            sync_timeout,
        )
    }

    /// Takes the lock (blocking); `wait` seconds waits for a busy lock.
    #[pyo3(signature = (key, ttl, wait=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: String,
        ttl: f64,
        wait: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        self.acquire_impl(py, None, key, ttl, wait)
    }

    /// Takes the lock (asyncio future); its result is `wrap(lock)` when
    /// `wrap` is given.
    #[pyo3(signature = (key, ttl, wait=None, wrap=None))]
    fn acquire_async(
        &self,
        py: Python<'_>,
        key: String,
        ttl: f64,
        wait: Option<f64>,
        wrap: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.acquire_impl(py, Some(Asyncio::wrapped(py, wrap)?), key, ttl, wait)
    }

    /// One attempt (blocking); None when busy.
    fn try_acquire(&self, py: Python<'_>, key: String, ttl: f64) -> PyResult<Py<PyAny>> {
        self.try_acquire_impl(py, None, key, ttl)
    }

    /// One attempt (asyncio future).
    fn try_acquire_async(&self, py: Python<'_>, key: String, ttl: f64) -> PyResult<Py<PyAny>> {
        self.try_acquire_impl(py, Some(Asyncio::current(py)?), key, ttl)
    }

    /// Acquires and keeps the lock alive in the background (blocking).
    #[pyo3(signature = (key, ttl, wait=None))]
    fn hold(
        &self,
        py: Python<'_>,
        key: String,
        ttl: f64,
        wait: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        self.hold_impl(py, None, key, ttl, wait)
    }

    /// Acquires and keeps the lock alive in the background (asyncio future).
    #[pyo3(signature = (key, ttl, wait=None))]
    fn hold_async(
        &self,
        py: Python<'_>,
        key: String,
        ttl: f64,
        wait: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        self.hold_impl(py, Some(Asyncio::current(py)?), key, ttl, wait)
    }

    /// Releases `key` for an owner id (blocking).
    fn release_owner(&self, py: Python<'_>, key: String, owner: String) -> PyResult<Py<PyAny>> {
        self.release_owner_impl(py, None, key, owner)
    }

    /// Releases `key` for an owner id (asyncio future).
    fn release_owner_async(
        &self,
        py: Python<'_>,
        key: String,
        owner: String,
    ) -> PyResult<Py<PyAny>> {
        self.release_owner_impl(py, Some(Asyncio::current(py)?), key, owner)
    }

    /// Every member's view of `key` (blocking).
    fn inspect(&self, py: Python<'_>, key: String) -> PyResult<Py<PyAny>> {
        self.inspect_impl(py, None, key)
    }

    /// Every member's view of `key` (asyncio future).
    fn inspect_async(&self, py: Python<'_>, key: String) -> PyResult<Py<PyAny>> {
        self.inspect_impl(py, Some(Asyncio::current(py)?), key)
    }

    /// Drops the connections; later calls raise `LockStateError`. Locks
    /// already taken keep their own reference and can still be released.
    fn close(&self) {
        self.redlock
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.redlock
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}
