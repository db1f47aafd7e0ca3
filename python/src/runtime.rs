//! The shared tokio runtime, fork detection, and the two ways a Python call
//! runs a Rust future: blocking (GIL released, Ctrl-C checked) or as an
//! asyncio future.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use tokio::runtime::Runtime;
use tokio_util::task::TaskTracker;

use crate::errors;

/// How often a blocking call wakes up to let Python handle signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The pid of the process that started the runtime. Tokio's threads do not
/// survive `fork()`: a child must never use a runtime its parent started.
static RUNTIME_PID: OnceLock<u32> = OnceLock::new();

/// Background releases (garbage-collected locks), waited for at exit.
static BACKGROUND: OnceLock<TaskTracker> = OnceLock::new();

/// Sets the runtime's options; it is built lazily on first use, never at
/// import time (so that importing before `fork()` is harmless).
pub(crate) fn configure() {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(2)
        .enable_all()
        .thread_name("redlock-fenced");
    pyo3_async_runtimes::tokio::init(builder);
}

/// Whether this process is a fork child of the one that started the runtime.
pub(crate) fn forked() -> bool {
    RUNTIME_PID
        .get()
        .is_some_and(|pid| *pid != std::process::id())
}

/// The runtime, or `LockStateError` in a fork child of its process.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let pid = *RUNTIME_PID.get_or_init(std::process::id);
    if pid != std::process::id() {
        return Err(errors::state(
            "this process was forked after the redlock client started: tokio's threads do not survive fork(); create clients only after fork(), or use the spawn/forkserver start method",
        ));
    }
    Ok(pyo3_async_runtimes::tokio::get_runtime())
}

/// The tracker of background releases.
pub(crate) fn background() -> &'static TaskTracker {
    BACKGROUND.get_or_init(TaskTracker::new)
}

/// What happens to the Rust work when the caller stops waiting for it
/// (Ctrl-C, asyncio cancellation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnCancel {
    /// The work goes on as a task (an acquisition round must not be cut
    /// mid-way: a grant could be left behind; a result nobody receives is
    /// dropped inside the runtime, which releases a `Lock`).
    Finish,
    /// The work is dropped (it is documented as leaving nothing behind).
    Drop,
}

/// Runs `fut` and waits for it with the GIL released, checking for signals
/// (Ctrl-C) every 50 ms.
///
/// The future is polled on the calling thread (`block_on`: no hop to a
/// worker and back per call). When a signal handler raises, the future is
/// either moved to a runtime task to finish there ([`OnCancel::Finish`]) or
/// dropped ([`OnCancel::Drop`]).
pub(crate) fn block<F, T>(py: Python<'_>, on_cancel: OnCancel, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime()?;
    // A `Lock` dropped on this thread (a dropped result or future) must
    // find the runtime to release itself.
    let _enter = rt.enter();
    let mut fut = Box::pin(fut);
    let outcome = py.detach(|| {
        rt.block_on(async {
            loop {
                // The timer is made inside the runtime (tokio timers need one).
                tokio::select! {
                    biased;
                    value = &mut fut => return Ok(value),
                    () = tokio::time::sleep(SIGNAL_POLL) => {
                        Python::attach(|py| py.check_signals())?;
                    }
                }
            }
        })
    });
    if outcome.is_err() && on_cancel == OnCancel::Finish {
        rt.spawn(async move {
            drop(fut.await);
        });
    }
    outcome
}

/// Runs `fut` blocking (see [`block`]) or, when `asyncio`, returns an
/// asyncio future for it.
pub(crate) fn dispatch<F, T>(
    py: Python<'_>,
    asyncio: bool,
    on_cancel: OnCancel,
    fut: F,
) -> PyResult<Py<PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    if !asyncio {
        return block(py, on_cancel, fut)??.into_py_any(py);
    }
    let rt = runtime()?;
    let future = match on_cancel {
        OnCancel::Drop => pyo3_async_runtimes::tokio::future_into_py(py, fut)?,
        OnCancel::Finish => {
            // Cancelling the asyncio future drops only this join handle.
            let handle = rt.spawn(fut);
            pyo3_async_runtimes::tokio::future_into_py(py, async move {
                handle
                    .await
                    .map_err(|join| errors::internal(&join.to_string()))?
            })?
        }
    };
    Ok(future.unbind())
}

/// Waits up to `timeout` seconds for the background releases of
/// garbage-collected locks (called at interpreter exit).
#[pyfunction]
pub(crate) fn flush_background(py: Python<'_>, timeout: f64) -> PyResult<()> {
    if forked() || RUNTIME_PID.get().is_none() {
        return Ok(());
    }
    let wait = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::ZERO);
    let tracker = background().clone();
    tracker.close();
    let result = block(py, OnCancel::Drop, async move {
        let _ = tokio::time::timeout(wait, tracker.wait()).await;
    });
    background().reopen();
    result
}
