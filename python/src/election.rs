//! Leader election: `NativeLeadership` (`redlock_fenced.Leadership` /
//! `AsyncLeadership` wrap it), `NativeObserver` (the iterators of
//! `observe()`), and the functions that campaign and read the leader. All
//! of it is `redlock_client::Election`; this file only moves it across.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyList;
use redlock_client::{Election, Leader, Leadership, LockInfo, Observer};
use tokio::sync::{Mutex as AsyncMutex, OwnedRwLockReadGuard, RwLock as AsyncRwLock};

use crate::bridge::{dispatch, Asyncio};
use crate::client::Client;
use crate::errors;
use crate::fenced::Resources;
use crate::lock::{announce_future, fenced_future, Signal, DAY, MIN_TTL};
use crate::runtime::{self, OnCancel};

/// A leader as Python gets it: `(epoch, time_left, value, revision)`,
/// `time_left` in seconds.
type LeaderRow = (u64, f64, Option<String>, u64);

fn row(leader: Leader) -> LeaderRow {
    (
        leader.epoch,
        leader.time_left.as_secs_f64(),
        leader.value,
        leader.revision,
    )
}

/// A term as leader. The Rust `Leadership` sits behind an async lock:
/// proclaims and fenced commands read it (several at once), `resign` takes
/// it out for good.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct NativeLeadership {
    /// The election's name.
    #[pyo3(get)]
    name: String,
    /// The epoch (the term's fencing token).
    #[pyo3(get)]
    epoch: u64,
    term: Arc<AsyncRwLock<Option<Leadership>>>,
    /// Fired when the term is lost (kept after the term was resigned).
    lost: redlock_client::CancellationToken,
    resources: Arc<Resources>,
}

/// The term's lock, borrowed from a live term for one fenced call (a
/// resign waits for it).
struct TermInfo(OwnedRwLockReadGuard<Option<Leadership>, LockInfo>);

impl std::ops::Deref for TermInfo {
    type Target = LockInfo;

    fn deref(&self) -> &LockInfo {
        &self.0
    }
}

impl NativeLeadership {
    fn new(leadership: Leadership, resources: Arc<Resources>) -> Self {
        let term = Arc::new(AsyncRwLock::new(None));
        let native = NativeLeadership {
            name: leadership.info().key().to_string(),
            epoch: leadership.epoch(),
            lost: leadership.lost_token(),
            term: Arc::clone(&term),
            resources,
        };
        // Nobody else has the lock yet.
        if let Ok(mut slot) = term.try_write() {
            *slot = Some(leadership);
        }
        native
    }

    /// The live term for one call; `LockStateError` once resigned.
    async fn live(
        term: Arc<AsyncRwLock<Option<Leadership>>>,
        what: &str,
    ) -> PyResult<OwnedRwLockReadGuard<Option<Leadership>>> {
        let guard = term.read_owned().await;
        if guard.is_none() {
            return Err(errors::state(&format!(
                "cannot {what}: the leadership was resigned"
            )));
        }
        Ok(guard)
    }

    /// The term's lock for a fenced call, or `LockStateError` once resigned
    /// (checked now, without waiting).
    fn term_info(&self) -> PyResult<TermInfo> {
        let guard = Arc::clone(&self.term).try_read_owned().map_err(|_| {
            errors::state("cannot run a fenced command: the leadership is resigning")
        })?;
        OwnedRwLockReadGuard::try_map(guard, |term| term.as_ref().map(Leadership::info))
            .map(TermInfo)
            .map_err(|_| errors::state("cannot run a fenced command: the leadership was resigned"))
    }

    fn proclaim_future(
        &self,
        value: String,
    ) -> impl std::future::Future<Output = PyResult<()>> + use<> {
        let term = Arc::clone(&self.term);
        let name = self.name.clone();
        let epoch = self.epoch;
        async move {
            let term = Self::live(term, "proclaim").await?;
            let Some(leadership) = term.as_ref() else {
                return Err(errors::internal("proclaim without a term"));
            };
            leadership
                .proclaim(&value)
                .await
                .map_err(|e| proclaim_error(e, &name, epoch))
        }
    }

    fn resign_future(&self) -> impl std::future::Future<Output = PyResult<()>> + use<> {
        let term = Arc::clone(&self.term);
        async move {
            let taken = term.write().await.take();
            if let Some(leadership) = taken {
                leadership.resign().await;
            }
            Ok(())
        }
    }
}

/// A proclaim's error: a stale epoch names the election; a lost term is
/// `LockLostError` with the epoch.
fn proclaim_error(e: redlock_client::Error, name: &str, epoch: u64) -> PyErr {
    match e {
        e @ redlock_client::Error::Stale { .. } => errors::fenced_error(e, name),
        e => errors::lock_error(e, Some(epoch)),
    }
}

#[pymethods]
impl NativeLeadership {
    /// The "lost" event: set when a renewal found the term gone or its
    /// validity ran out (or a fenced command met a newer epoch).
    #[getter]
    fn lost(&self) -> Signal {
        Signal::from_token(self.lost.clone())
    }

    /// Seconds of the term's validity left (follows the renewals); 0.0
    /// once lost or resigned.
    fn validity(&self) -> f64 {
        if self.lost.is_cancelled() {
            return 0.0;
        }
        match self.term.try_read() {
            Ok(term) => term
                .as_ref()
                .map_or(0.0, |l| l.info().validity().as_secs_f64()),
            // A resign holds the term: it is ending.
            Err(_) => 0.0,
        }
    }

    /// `"leading"`, `"lost"` or `"resigned"`.
    fn state(&self) -> &'static str {
        match self.term.try_read() {
            Ok(term) if term.is_none() => "resigned",
            Err(_) => "resigned",
            Ok(_) if self.lost.is_cancelled() => "lost",
            Ok(_) => "leading",
        }
    }

    /// Publishes `value` under this epoch (blocking).
    fn proclaim(&self, py: Python<'_>, value: String) -> PyResult<Py<PyAny>> {
        // A proclaim cut mid-way may have reached some nodes: it finishes.
        dispatch(py, None, OnCancel::Finish, self.proclaim_future(value))
    }

    /// Publishes `value` (asyncio future).
    fn proclaim_async(&self, py: Python<'_>, value: String) -> PyResult<Py<PyAny>> {
        dispatch(
            py,
            Some(Asyncio::current(py)?),
            OnCancel::Finish,
            self.proclaim_future(value),
        )
    }

    /// Steps down (blocking): stops the renewals and releases the lock, so
    /// the next candidate is woken at once. A second call does nothing.
    fn resign(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        dispatch(py, None, OnCancel::Finish, self.resign_future())
    }

    /// Steps down (asyncio future); a cancelled caller stops waiting, the
    /// resign goes on.
    fn resign_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        dispatch(
            py,
            Some(Asyncio::current(py)?),
            OnCancel::Finish,
            self.resign_future(),
        )
    }

    /// Runs `args` on `resource`, fenced by the epoch on `guard` (blocking).
    fn fenced(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        args: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        let fut = fenced_future(
            self.term_info()?,
            self.lost.clone(),
            &self.resources,
            resource,
            guard,
            args,
        )?;
        dispatch(py, None, OnCancel::Drop, fut)
    }

    /// Runs a fenced command (asyncio future).
    fn fenced_async(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        args: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        let fut = fenced_future(
            self.term_info()?,
            self.lost.clone(),
            &self.resources,
            resource,
            guard,
            args,
        )?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Shows the epoch to `guard` on `resource` (blocking): the guard's
    /// highest token.
    fn announce(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
    ) -> PyResult<Py<PyAny>> {
        let fut = announce_future(
            self.term_info()?,
            self.lost.clone(),
            &self.resources,
            resource,
            guard,
        )?;
        dispatch(py, None, OnCancel::Drop, fut)
    }

    /// Shows the epoch to `guard` (asyncio future).
    fn announce_async(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
    ) -> PyResult<Py<PyAny>> {
        let fut = announce_future(
            self.term_info()?,
            self.lost.clone(),
            &self.resources,
            resource,
            guard,
        )?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }
}

impl Drop for NativeLeadership {
    fn drop(&mut self) {
        // Dropping the Rust term resigns in the background (its keeper
        // releases the lock); in a fork child nothing of the parent's
        // runtime may run.
        let Ok(mut slot) = self.term.try_write() else {
            return;
        };
        let Some(leadership) = slot.take() else {
            return;
        };
        if runtime::forked() {
            std::mem::forget(leadership);
            return;
        }
        drop(leadership);
    }
}

/// The changes of one election, one `next` at a time.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct NativeObserver {
    observer: Arc<AsyncMutex<Observer>>,
}

impl NativeObserver {
    /// The next change, or None when `timeout` passed first.
    fn next_future(
        &self,
        timeout: Option<f64>,
    ) -> PyResult<impl std::future::Future<Output = PyResult<Option<LeaderRow>>> + use<>> {
        let limit = timeout
            .map(|t| errors::duration("timeout", t, 0.0, 1e9))
            .transpose()?;
        let observer = Arc::clone(&self.observer);
        Ok(async move {
            let mut observer = observer.lock().await;
            // Dropping `next` between changes loses nothing: the observer
            // moves on only when it returns a change.
            let next = match limit {
                None => observer.next().await,
                Some(limit) => match tokio::time::timeout(limit, observer.next()).await {
                    Ok(next) => next,
                    Err(_) => return Ok(None),
                },
            };
            match next {
                Some(Ok(leader)) => Ok(Some(row(leader))),
                Some(Err(e)) => Err(errors::lock_error(e, None)),
                None => Err(errors::internal("the observer ended")),
            }
        })
    }
}

#[pymethods]
impl NativeObserver {
    /// The next change (blocking): `(epoch, time_left, value, revision)`,
    /// or None when `timeout` seconds passed first.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        dispatch(py, None, OnCancel::Drop, self.next_future(timeout)?)
    }

    /// The next change (asyncio future).
    #[pyo3(signature = (timeout=None))]
    fn next_async(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        dispatch(
            py,
            Some(Asyncio::current(py)?),
            OnCancel::Drop,
            self.next_future(timeout)?,
        )
    }
}

fn election(client: &Client, name: &str) -> PyResult<Election> {
    Ok(client.redlock()?.election(name))
}

fn campaign_impl(
    py: Python<'_>,
    asyncio: Option<Asyncio<'_, '_>>,
    client: &Client,
    name: String,
    ttl_s: f64,
) -> PyResult<Py<PyAny>> {
    let election = election(client, &name)?;
    let resources = client.resources();
    let ttl = errors::duration("ttl", ttl_s, MIN_TTL, DAY)?;
    // A campaign dropped while it waits leaves no grant (acquire_wait's
    // promise), and a term dropped once elected resigns: cancelling drops it.
    dispatch(py, asyncio, OnCancel::Drop, async move {
        election
            .campaign(ttl)
            .await
            .map(|l| NativeLeadership::new(l, resources))
            .map_err(|e| errors::lock_error(e, None))
    })
}

/// Waits until this candidate leads `name` (blocking): its term.
#[pyfunction]
pub(crate) fn campaign(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    name: String,
    ttl: f64,
) -> PyResult<Py<PyAny>> {
    campaign_impl(py, None, &client, name, ttl)
}

/// As `campaign` (asyncio future).
#[pyfunction]
pub(crate) fn campaign_async(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    name: String,
    ttl: f64,
) -> PyResult<Py<PyAny>> {
    campaign_impl(py, Some(Asyncio::current(py)?), &client, name, ttl)
}

fn leader_impl(
    py: Python<'_>,
    asyncio: Option<Asyncio<'_, '_>>,
    client: &Client,
    name: String,
) -> PyResult<Py<PyAny>> {
    let election = election(client, &name)?;
    dispatch(py, asyncio, OnCancel::Drop, async move {
        election
            .leader()
            .await
            .map(|l| l.map(row))
            .map_err(|e| errors::lock_error(e, None))
    })
}

/// Who leads `name` now (blocking): a row, or None.
#[pyfunction]
pub(crate) fn leader(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    name: String,
) -> PyResult<Py<PyAny>> {
    leader_impl(py, None, &client, name)
}

/// As `leader` (asyncio future).
#[pyfunction]
pub(crate) fn leader_async(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    name: String,
) -> PyResult<Py<PyAny>> {
    leader_impl(py, Some(Asyncio::current(py)?), &client, name)
}

/// An observer of `name`'s leadership changes.
#[pyfunction]
pub(crate) fn observe(client: PyRef<'_, Client>, name: String) -> PyResult<NativeObserver> {
    Ok(NativeObserver {
        observer: Arc::new(AsyncMutex::new(election(&client, &name)?.observe())),
    })
}
