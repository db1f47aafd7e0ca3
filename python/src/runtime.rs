//! The shared tokio runtime, fork detection, and the two ways a Python call
//! runs a Rust future: blocking (GIL released, Ctrl-C checked) or as an
//! asyncio future.

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// The runtime every call of the package runs on, built on first use (never
/// at import time, so that importing before `fork()` is harmless).
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

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
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
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

/// Runs `fut` blocking (see [`block`]) or, when `bridge` is given, starts it
/// for asyncio: the result is delivered through the bridge under `id`, and
/// the returned [`Pending`] can cancel it.
pub(crate) fn dispatch<F, T>(
    py: Python<'_>,
    asyncio: Option<(&Bridge, u64)>,
    on_cancel: OnCancel,
    fut: F,
) -> PyResult<Py<PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let Some((bridge, id)) = asyncio else {
        return block(py, on_cancel, fut)??.into_py_any(py);
    };
    let rt = runtime()?;
    let mut report = Report {
        inner: Arc::clone(&bridge.inner),
        id,
        sent: false,
    };
    let task = rt.spawn(async move {
        let result = fut.await;
        report.sent = true;
        let done: Done = Box::new(move |py| result.and_then(|v| v.into_py_any(py)));
        report.inner.push(id, done);
    });
    let abort = (on_cancel == OnCancel::Drop).then(|| task.abort_handle());
    Pending {
        abort: Mutex::new(abort),
    }
    .into_py_any(py)
}

/// Reports a call that ended without a result (its task panicked or was
/// aborted), so that no asyncio future waits for ever.
struct Report {
    inner: Arc<BridgeInner>,
    id: u64,
    sent: bool,
}

impl Drop for Report {
    fn drop(&mut self) {
        if !self.sent {
            let done: Done = Box::new(|_| Err(errors::internal("the call ended without a result")));
            self.inner.push(self.id, done);
        }
    }
}

/// A finished asyncio call: turns its result into a Python object (run in
/// the event loop's thread, attached to the interpreter).
type Done = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// What a bridge shares with the tasks that report to it.
struct BridgeInner {
    done: Mutex<Vec<(u64, Done)>>,
    /// Written once per batch of results; the event loop watches the other
    /// end (`loop.add_reader`).
    wake: UnixStream,
}

impl BridgeInner {
    fn push(&self, id: u64, done: Done) {
        let was_empty = {
            let mut queue = self.done.lock().unwrap_or_else(|p| p.into_inner());
            let was_empty = queue.is_empty();
            queue.push((id, done));
            was_empty
        };
        // Only the first result of a batch wakes the loop: the reader
        // empties the pipe before it takes the queue, so a result pushed
        // after that finds the queue empty again and writes.
        if was_empty {
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// Delivers the results of asyncio calls to one event loop without ever
/// taking the GIL on a runtime thread: results queue up here and a byte on
/// a socket pair wakes the loop, which collects them (`drain`) and completes
/// its futures.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct Bridge {
    inner: Arc<BridgeInner>,
    watch: UnixStream,
}

#[pymethods]
impl Bridge {
    #[new]
    fn new() -> PyResult<Self> {
        let (watch, wake) =
            UnixStream::pair().map_err(|e| errors::internal(&format!("socket pair: {e}")))?;
        for end in [&watch, &wake] {
            end.set_nonblocking(true)
                .map_err(|e| errors::internal(&format!("socket pair: {e}")))?;
        }
        Ok(Bridge {
            inner: Arc::new(BridgeInner {
                done: Mutex::new(Vec::new()),
                wake,
            }),
            watch,
        })
    }

    /// The descriptor the event loop watches for results.
    fn fileno(&self) -> i32 {
        self.watch.as_raw_fd()
    }

    /// The finished calls: `(id, ok, value)`, `value` the result or the
    /// exception.
    fn drain(&self, py: Python<'_>) -> Vec<(u64, bool, Py<PyAny>)> {
        let mut buf = [0u8; 256];
        while matches!((&self.watch).read(&mut buf), Ok(n) if n > 0) {}
        let done = std::mem::take(&mut *self.inner.done.lock().unwrap_or_else(|p| p.into_inner()));
        done.into_iter()
            .map(|(id, finish)| match finish(py) {
                Ok(value) => (id, true, value),
                Err(e) => (id, false, e.into_value(py).into_any()),
            })
            .collect()
    }
}

/// A started asyncio call; `cancel()` drops the work when it may be dropped
/// (see [`OnCancel`]) and does nothing otherwise.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct Pending {
    abort: Mutex<Option<tokio::task::AbortHandle>>,
}

#[pymethods]
impl Pending {
    /// Stops the work if it may be dropped.
    fn cancel(&self) {
        if let Some(abort) = self.abort.lock().unwrap_or_else(|p| p.into_inner()).take() {
            abort.abort();
        }
    }
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
