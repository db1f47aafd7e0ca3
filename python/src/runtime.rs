//! The shared tokio runtime, fork detection, and blocking calls (GIL
//! released, Ctrl-C checked); `bridge.rs` runs calls for asyncio.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio_util::task::TaskTracker;

use crate::errors;

/// How often a blocking call wakes up to let Python handle signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Set in a fork child of a process that started the runtime (by a
/// `pthread_atfork` handler registered when it starts). Tokio's threads do
/// not survive `fork()`: a child must never use a runtime its parent
/// started. A flag, not a pid compared on every call: `getpid()` is a
/// system call, and every call of the package asked.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Whether the fork handler is registered (at the first use of the runtime).
static FORK_HANDLER: OnceLock<()> = OnceLock::new();

/// Background releases (garbage-collected locks), waited for at exit.
static BACKGROUND: OnceLock<TaskTracker> = OnceLock::new();

/// The runtime every call of the package runs on, built on first use (never
/// at import time, so that importing before `fork()` is harmless).
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The child side of `fork()`: only an atomic store (async-signal-safe).
extern "C" fn mark_forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Whether this process is a fork child of the one that started the runtime.
pub(crate) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// The runtime, or `LockStateError` in a fork child of its process.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    if forked() {
        return Err(errors::state(
            "this process was forked after the redlock client started: tokio's threads do not survive fork(); create clients only after fork(), or use the spawn/forkserver start method",
        ));
    }
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    FORK_HANDLER.get_or_init(|| {
        // SAFETY: registers a handler that only stores an atomic; it stays
        // valid for the life of the process (a static function).
        unsafe {
            libc::pthread_atfork(None, None, Some(mark_forked));
        }
    });
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("redlock-fenced")
        .build()
        .map_err(|e| errors::internal(&format!("cannot start the tokio runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| built))
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

/// How long a blocking call keeps checking for its result before it sleeps:
/// most calls are one or two round trips to the nodes, and a thread that
/// slept must be woken by a runtime thread, which costs more than a round
/// trip on a loaded machine.
const SPIN: Duration = Duration::from_micros(300);

/// Where a task leaves its result for a blocked caller.
struct Handoff<T> {
    value: Mutex<Option<T>>,
    ready: Condvar,
}

/// Runs `fut` on the runtime and waits for it with the GIL released,
/// checking for signals (Ctrl-C) every 50 ms. When a signal handler raises,
/// the work either finishes as a task ([`OnCancel::Finish`]; a result
/// nobody takes is dropped inside the runtime) or is aborted
/// ([`OnCancel::Drop`]).
pub(crate) fn block<F, T>(py: Python<'_>, on_cancel: OnCancel, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime()?;
    // A `Lock` dropped on this thread (a result left in the hand-off) must
    // find the runtime to release itself.
    let _enter = rt.enter();
    let handoff = Arc::new(Handoff {
        value: Mutex::new(None),
        ready: Condvar::new(),
    });
    let sender = Arc::clone(&handoff);
    let task = rt.spawn(async move {
        let value = fut.await;
        *sender.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
        sender.ready.notify_one();
    });
    let take = || {
        handoff
            .value
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    };
    let outcome = py.detach(|| {
        let spin_until = Instant::now() + SPIN;
        while Instant::now() < spin_until {
            if let Some(value) = take() {
                return Ok(value);
            }
            std::thread::yield_now();
        }
        let mut slot = handoff.value.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(value) = slot.take() {
                return Ok(value);
            }
            if task.is_finished() {
                // The task ended without a value: it panicked.
                return Err(errors::internal("the call ended without a result"));
            }
            let (next, waited) = handoff
                .ready
                .wait_timeout(slot, SIGNAL_POLL)
                .unwrap_or_else(|p| p.into_inner());
            slot = next;
            if waited.timed_out() && slot.is_none() {
                drop(slot);
                Python::attach(|py| py.check_signals())?;
                slot = handoff.value.lock().unwrap_or_else(|p| p.into_inner());
            }
        }
    });
    if outcome.is_err() && on_cancel == OnCancel::Drop {
        task.abort();
    }
    outcome
}

/// Waits up to `timeout` seconds for the background releases of
/// garbage-collected locks (called at interpreter exit).
#[pyfunction]
pub(crate) fn flush_background(py: Python<'_>, timeout: f64) -> PyResult<()> {
    if forked() || RUNTIME.get().is_none() {
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
