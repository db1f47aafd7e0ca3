//! The shared tokio runtime, fork detection, and the two ways a Python call
//! runs a Rust future: blocking (GIL released, Ctrl-C checked) or as an
//! asyncio future.

use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use pyo3::IntoPyObjectExt;
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

/// How an asyncio call hands its result back: through the event loop's
/// `bridge`, passed to `wrap` (a Python callable, e.g. the class that wraps
/// a native lock) when one is given.
pub(crate) struct Asyncio<'a, 'py> {
    pub(crate) bridge: &'a Bound<'py, Bridge>,
    pub(crate) wrap: Option<&'a Bound<'py, PyAny>>,
}

impl<'a, 'py> Asyncio<'a, 'py> {
    /// Results as they are.
    pub(crate) fn new(bridge: &'a Bound<'py, Bridge>) -> Self {
        Asyncio { bridge, wrap: None }
    }
}

/// Runs `fut` blocking (see [`block`]) or, for asyncio, starts it and
/// returns the event loop's future for its result, completed by
/// [`Bridge::drain`]; cancelling that future drops the work when
/// `on_cancel` allows it.
pub(crate) fn dispatch<F, T>(
    py: Python<'_>,
    asyncio: Option<Asyncio<'_, '_>>,
    on_cancel: OnCancel,
    fut: F,
) -> PyResult<Py<PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let Some(Asyncio { bridge, wrap }) = asyncio else {
        return block(py, on_cancel, fut)??.into_py_any(py);
    };
    let rt = runtime()?;
    let native = bridge.get();
    let future = native.create_future(py)?;
    let id = native.next_id.fetch_add(1, Ordering::Relaxed);
    native.waiting().insert(
        id,
        Waiting {
            future: future.clone().unbind(),
            wrap: wrap.map(|w| w.clone().unbind()),
        },
    );
    let mut report = Report {
        inner: Arc::clone(&native.inner),
        id,
        sent: false,
    };
    let body = async move {
        let result = fut.await;
        report.sent = true;
        let done: Done = Box::new(move |py| result.and_then(|v| v.into_py_any(py)));
        report.inner.push(id, done);
    };
    let job: Job = if on_cancel == OnCancel::Drop {
        let (body, abort) = futures_util::future::abortable(body);
        future.call_method1(intern!(py, "add_done_callback"), (Canceller { abort },))?;
        Box::pin(async move {
            let _ = body.await;
        })
    } else {
        Box::pin(body)
    };
    Bridge::submit(bridge, rt, job)?;
    Ok(future.unbind())
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

/// The work of one asyncio call, waiting to be started.
type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An asyncio call in flight: its future, and what wraps its result.
struct Waiting {
    future: Py<PyAny>,
    wrap: Option<Py<PyAny>>,
}

/// Delivers the results of asyncio calls to one event loop without ever
/// taking the GIL on a runtime thread: results queue up here and a byte on
/// a socket pair wakes the loop, whose reader (`drain`, registered with
/// `loop.add_reader`) completes the calls' futures in the loop's thread.
/// Creating, tracking and completing the futures is done here rather than
/// in Python: it is the event loop thread's work per call, and the asyncio
/// throughput is bound by that thread.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct Bridge {
    inner: Arc<BridgeInner>,
    watch: UnixStream,
    /// The event loop, held weakly: the package's map from loops to bridges
    /// must not keep a finished loop alive.
    event_loop: Py<PyWeakrefReference>,
    /// The calls in flight, by id (touched only in the loop's thread).
    waiting: Mutex<HashMap<u64, Waiting>>,
    next_id: AtomicU64,
    /// The calls started during this turn of the event loop, started
    /// together by `flush` (scheduled with `call_soon` by the first).
    queued: Mutex<Vec<Job>>,
}

impl Bridge {
    /// Queues a call's work; the first of a turn schedules `flush`. All the
    /// calls the loop's tasks make in one turn then start as one runtime
    /// task: their commands reach each node's connection before it writes,
    /// so they go out in one write per node (as the Rust client's own tasks
    /// do), and the runtime is woken once, not once per call.
    fn submit(bridge: &Bound<'_, Bridge>, rt: &'static Runtime, job: Job) -> PyResult<()> {
        let native = bridge.get();
        let first = {
            let mut queued = native.queued.lock().unwrap_or_else(|p| p.into_inner());
            queued.push(job);
            queued.len() == 1
        };
        if first {
            let py = bridge.py();
            let scheduled = native.event_loop(py).and_then(|event_loop| {
                event_loop.call_method1(
                    intern!(py, "call_soon"),
                    (bridge.getattr(intern!(py, "flush"))?,),
                )
            });
            if let Err(e) = scheduled {
                // No turn to come (the loop is closed or gone): start the
                // work now; its result is dropped with the bridge.
                native.start_queued(rt);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Starts the queued calls as one task.
    fn start_queued(&self, rt: &'static Runtime) {
        let mut jobs = std::mem::take(&mut *self.queued.lock().unwrap_or_else(|p| p.into_inner()));
        if jobs.len() > 1 {
            // A panic in one call ends only that call (its report then says
            // so), not the others of the batch.
            let jobs = jobs
                .into_iter()
                .map(|job| AssertUnwindSafe(job).catch_unwind());
            rt.spawn(async move {
                futures_util::future::join_all(jobs).await;
            });
        } else if let Some(job) = jobs.pop() {
            rt.spawn(job);
        }
    }

    fn event_loop<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.event_loop
            .bind(py)
            .upgrade()
            .ok_or_else(|| errors::state("the event loop of this call is gone"))
    }

    fn waiting(&self) -> MutexGuard<'_, HashMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new future of the bridge's event loop (`loop.create_future()`).
    fn create_future<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.event_loop(py)?
            .call_method0(intern!(py, "create_future"))
    }

    /// Completes one call's future (unless its caller cancelled it: the
    /// result is then dropped, which releases a lock in it).
    fn complete(py: Python<'_>, waiting: Waiting, finish: Done) -> PyResult<()> {
        let future = waiting.future.bind(py);
        if future.call_method0(intern!(py, "done"))?.is_truthy()? {
            return Ok(());
        }
        let value = finish(py).and_then(|v| match &waiting.wrap {
            Some(wrap) => wrap.call1(py, (v,)),
            None => Ok(v),
        });
        match value {
            Ok(v) => future.call_method1(intern!(py, "set_result"), (v,))?,
            Err(e) => future.call_method1(intern!(py, "set_exception"), (e.into_value(py),))?,
        };
        Ok(())
    }
}

#[pymethods]
impl Bridge {
    /// A bridge to `event_loop`; the caller registers `drain` as the reader
    /// of `fileno()` on that loop.
    #[new]
    fn new(event_loop: &Bound<'_, PyAny>) -> PyResult<Self> {
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
            event_loop: PyWeakrefReference::new(event_loop)?.unbind(),
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            queued: Mutex::new(Vec::new()),
        })
    }

    /// The descriptor the event loop watches for results.
    fn fileno(&self) -> i32 {
        self.watch.as_raw_fd()
    }

    /// Completes the futures of the finished calls (the loop's reader).
    fn drain(&self, py: Python<'_>) {
        let mut buf = [0u8; 256];
        while matches!((&self.watch).read(&mut buf), Ok(n) if n > 0) {}
        let done = std::mem::take(&mut *self.inner.done.lock().unwrap_or_else(|p| p.into_inner()));
        for (id, finish) in done {
            let Some(waiting) = self.waiting().remove(&id) else {
                continue;
            };
            // One failure (a future in an unexpected state) must not keep
            // the others from being completed.
            if let Err(e) = Self::complete(py, waiting, finish) {
                e.write_unraisable(py, None);
            }
        }
    }

    /// Starts the calls queued during this turn of the loop (scheduled by
    /// the first of them).
    fn flush(&self) -> PyResult<()> {
        self.start_queued(runtime()?);
        Ok(())
    }

    /// How many calls are in flight on this loop.
    fn pending(&self) -> usize {
        self.waiting().len()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // Calls queued in the loop's last turn (a loop closed before its
        // `flush` ran) still run: a release among them must not be lost.
        let queued = !self
            .queued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if queued {
            if let Ok(rt) = runtime() {
                self.start_queued(rt);
            }
        }
    }
}

/// Aborts a call's task when its future is cancelled (the future's done
/// callback, for the calls that may be dropped: see [`OnCancel`]).
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct Canceller {
    abort: futures_util::future::AbortHandle,
}

#[pymethods]
impl Canceller {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future
            .call_method0(intern!(future.py(), "cancelled"))?
            .is_truthy()?
        {
            self.abort.abort();
        }
        Ok(())
    }
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
