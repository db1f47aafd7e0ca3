//! `NativeLockSet` (`redlock_fenced.LockSet` / `AsyncLockSet` wrap it) and
//! the functions that take one: a `redlock_client::LockSet`, a lock over
//! several names at once (one token per name, one validity).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use redlock_client::LockSet;

use crate::bridge::{dispatch, Asyncio};
use crate::client::Client;
use crate::errors;
use crate::lock::{DAY, MIN_TTL};
use crate::runtime::{self, OnCancel};

/// A held lock set; the set itself moves into a call while it runs.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct NativeLockSet {
    /// `(name, token)` pairs, in byte order of the names.
    #[pyo3(get)]
    tokens: Vec<(String, u64)>,
    owner: String,
    set: Arc<Mutex<SetSlot>>,
}

/// Where the set is: here, inside a running extend, or gone (boxed: a
/// `LockSet` is large next to the other two).
enum SetSlot {
    Held(Box<LockSet>),
    Busy,
    Released,
}

impl NativeLockSet {
    fn new(set: LockSet) -> Self {
        NativeLockSet {
            tokens: set.tokens().map(|(n, t)| (n.to_string(), t)).collect(),
            owner: set.owner().to_string(),
            set: Arc::new(Mutex::new(SetSlot::Held(Box::new(set)))),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, SetSlot> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The set, taken out for `what`; an error when another call has it or
    /// it was released.
    fn take(&self, what: &str) -> PyResult<Box<LockSet>> {
        let mut slot = self.slot();
        match std::mem::replace(&mut *slot, SetSlot::Busy) {
            SetSlot::Held(set) => Ok(set),
            SetSlot::Busy => Err(errors::state(&format!(
                "cannot {what}: another call on this lock set is running"
            ))),
            SetSlot::Released => {
                *slot = SetSlot::Released;
                Err(errors::state(&format!(
                    "cannot {what}: the lock set was released"
                )))
            }
        }
    }

    fn extend_future(
        &self,
        ttl: f64,
    ) -> PyResult<impl std::future::Future<Output = PyResult<()>> + use<>> {
        let ttl = errors::duration("ttl", ttl, MIN_TTL, DAY)?;
        let mut set = self.take("extend")?;
        let slot = Arc::clone(&self.set);
        Ok(async move {
            let result = set.extend(ttl).await;
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = SetSlot::Held(set);
            result.map_err(|e| errors::lock_error(e, None))
        })
    }

    fn release_future(
        &self,
    ) -> PyResult<impl std::future::Future<Output = PyResult<bool>> + use<>> {
        let set = self.take("release")?;
        *self.slot() = SetSlot::Released;
        Ok(async move { set.release().await.map_err(|e| errors::lock_error(e, None)) })
    }
}

#[pymethods]
impl NativeLockSet {
    /// The owner id shared by every name (a secret).
    #[getter]
    fn owner(&self) -> &str {
        &self.owner
    }

    /// Seconds of validity left (the earliest of the names'); 0.0 once
    /// lost or released. During an extend: the validity before it.
    fn validity(&self) -> f64 {
        match &*self.slot() {
            SetSlot::Held(set) => set.validity().as_secs_f64(),
            SetSlot::Busy | SetSlot::Released => 0.0,
        }
    }

    /// Whether an extension found the set lost.
    fn is_lost(&self) -> bool {
        match &*self.slot() {
            SetSlot::Held(set) => set.is_lost(),
            SetSlot::Busy | SetSlot::Released => false,
        }
    }

    /// `"held"`, `"busy"` (a call is running) or `"released"`.
    fn state(&self) -> &'static str {
        match &*self.slot() {
            SetSlot::Held(_) => "held",
            SetSlot::Busy => "busy",
            SetSlot::Released => "released",
        }
    }

    /// Extends every name to `ttl` seconds from now (blocking).
    fn extend(&self, py: Python<'_>, ttl: f64) -> PyResult<Py<PyAny>> {
        let fut = self.extend_future(ttl)?;
        dispatch(py, None, OnCancel::Finish, fut)
    }

    /// Extends every name (asyncio future).
    fn extend_async(&self, py: Python<'_>, ttl: f64) -> PyResult<Py<PyAny>> {
        let fut = self.extend_future(ttl)?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Finish, fut)
    }

    /// Releases every name (blocking): True when every name was still held.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let fut = self.release_future()?;
        dispatch(py, None, OnCancel::Finish, fut)
    }

    /// Releases every name (asyncio future).
    fn release_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let fut = self.release_future()?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Finish, fut)
    }
}

impl Drop for NativeLockSet {
    fn drop(&mut self) {
        let taken = std::mem::replace(&mut *self.slot(), SetSlot::Released);
        let SetSlot::Held(set) = taken else {
            return;
        };
        if runtime::forked() {
            std::mem::forget(set);
            return;
        }
        if let Ok(rt) = runtime::runtime() {
            let _enter = rt.enter();
            runtime::background().spawn(async move {
                let _ = set.release().await;
            });
        }
    }
}

fn ttl(seconds: f64) -> PyResult<Duration> {
    errors::duration("ttl", seconds, MIN_TTL, DAY)
}

fn acquire_many_impl(
    py: Python<'_>,
    asyncio: Option<Asyncio<'_, '_>>,
    client: &Client,
    names: Vec<String>,
    ttl_s: f64,
    one_attempt: bool,
    wait_s: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let redlock = client.redlock()?;
    let ttl = ttl(ttl_s)?;
    if let Some(wait_s) = wait_s {
        let wait = errors::duration("wait", wait_s, 0.0, DAY)?;
        // Dropping acquire_many_wait leaves no grant behind (its docs).
        return dispatch(py, asyncio, OnCancel::Drop, async move {
            let set = redlock.acquire_many_wait(&names, ttl, wait).await;
            set.map(|s| Some(NativeLockSet::new(s)))
                .map_err(|e| errors::lock_error(e, None))
        });
    }
    // A round is never cut mid-way (it could leave grants behind).
    dispatch(py, asyncio, OnCancel::Finish, async move {
        if one_attempt {
            let set = redlock.try_acquire_many(&names, ttl).await;
            set.map(|s| s.map(NativeLockSet::new))
                .map_err(|e| errors::lock_error(e, None))
        } else {
            let set = redlock.acquire_many(&names, ttl).await;
            set.map(|s| Some(NativeLockSet::new(s)))
                .map_err(|e| errors::lock_error(e, None))
        }
    })
}

/// Takes every name of `names` at once, retrying while busy, or with
/// `wait` seconds waiting for the set woken by the nodes (blocking).
#[pyfunction]
#[pyo3(signature = (client, names, ttl, wait=None))]
pub(crate) fn acquire_many(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    names: Vec<String>,
    ttl: f64,
    wait: Option<f64>,
) -> PyResult<Py<PyAny>> {
    acquire_many_impl(py, None, &client, names, ttl, false, wait)
}

/// As `acquire_many` (asyncio future).
#[pyfunction]
#[pyo3(signature = (client, names, ttl, wait=None))]
pub(crate) fn acquire_many_async(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    names: Vec<String>,
    ttl: f64,
    wait: Option<f64>,
) -> PyResult<Py<PyAny>> {
    acquire_many_impl(
        py,
        Some(Asyncio::current(py)?),
        &client,
        names,
        ttl,
        false,
        wait,
    )
}

/// One attempt at the set: None when busy (blocking).
#[pyfunction]
pub(crate) fn try_acquire_many(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    names: Vec<String>,
    ttl: f64,
) -> PyResult<Py<PyAny>> {
    acquire_many_impl(py, None, &client, names, ttl, true, None)
}

/// As `try_acquire_many` (asyncio future).
#[pyfunction]
pub(crate) fn try_acquire_many_async(
    py: Python<'_>,
    client: PyRef<'_, Client>,
    names: Vec<String>,
    ttl: f64,
) -> PyResult<Py<PyAny>> {
    acquire_many_impl(
        py,
        Some(Asyncio::current(py)?),
        &client,
        names,
        ttl,
        true,
        None,
    )
}
