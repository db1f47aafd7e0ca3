//! Asyncio calls: a Rust future runs on the shared runtime and its result
//! reaches the event loop's thread without a runtime thread ever waiting for
//! the GIL.
//!
//! Each event loop has one [`Bridge`]. A call returns a [`NativeFuture`]
//! (awaitable, and a future as asyncio's tasks see them); finished calls
//! queue up in Rust and one byte on a socket pair wakes the loop, whose
//! reader ([`Bridge::drain`]) completes the futures. The event loop's
//! thread bounds the asyncio throughput, so the work per call there is kept
//! out of Python: a `NativeFuture` is completed without `call_soon` (the
//! awaiting task's step runs from the reader at once), and the calls made
//! in one turn of the loop start together as one runtime task, so that
//! their commands leave in one write per node.

use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::AbortHandle;
use futures_util::FutureExt;
use pyo3::exceptions::{PyException, PyStopIteration};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyWeakrefReference};
use pyo3::IntoPyObjectExt;
use tokio::runtime::Runtime;

use crate::errors;
use crate::runtime::{block, runtime, OnCancel};

mod asyncio_errors {
    pyo3::import_exception!(asyncio, CancelledError);
    pyo3::import_exception!(asyncio, InvalidStateError);
}
use asyncio_errors::{CancelledError, InvalidStateError};

/// How an asyncio call hands its result back: through the running event
/// loop's `bridge`, passed to `wrap` (a Python callable, e.g. the class
/// that wraps a native lock) when one is given.
pub(crate) struct Asyncio<'a, 'py> {
    pub(crate) bridge: Bound<'py, Bridge>,
    pub(crate) wrap: Option<&'a Bound<'py, PyAny>>,
}

impl<'a, 'py> Asyncio<'a, 'py> {
    /// Through the running loop's bridge, results as they are. Raises
    /// `RuntimeError` outside a running event loop.
    pub(crate) fn current(py: Python<'py>) -> PyResult<Self> {
        Ok(Asyncio {
            bridge: Bridge::current(py)?,
            wrap: None,
        })
    }

    /// As [`Asyncio::current`], each result passed to `wrap` when given.
    pub(crate) fn wrapped(py: Python<'py>, wrap: Option<&'a Bound<'py, PyAny>>) -> PyResult<Self> {
        Ok(Asyncio {
            bridge: Bridge::current(py)?,
            wrap,
        })
    }
}

/// The bridges of the event loops that made calls, each with its loop held
/// weakly; a finished loop's entry goes when the next loop registers.
/// Touched with the GIL held only.
static BRIDGES: Mutex<Vec<(Py<PyWeakrefReference>, Py<Bridge>)>> = Mutex::new(Vec::new());

/// `asyncio.get_running_loop`, looked up once.
static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Runs `fut` blocking (see [`block`]) or, for asyncio, starts it and
/// returns a [`NativeFuture`] for its result; cancelling that future drops
/// the work when `on_cancel` allows it.
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
    let bridge = &bridge;
    let rt = runtime()?;
    let native = bridge.get();
    let id = native.next_id.fetch_add(1, Ordering::Relaxed);
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
    let (job, abort): (Job, _) = if on_cancel == OnCancel::Drop {
        let (body, abort) = futures_util::future::abortable(body);
        let job = Box::pin(async move {
            let _ = body.await;
        });
        (job, Some(abort))
    } else {
        (Box::pin(body), None)
    };
    let future = Bound::new(
        py,
        NativeFuture {
            event_loop: native.event_loop(py)?.unbind(),
            state: Mutex::new(State {
                outcome: None,
                callbacks: Vec::new(),
                blocking: false,
                abort,
            }),
        },
    )?;
    native.waiting().insert(
        id,
        Waiting {
            future: future.clone().unbind(),
            wrap: wrap.map(|w| w.clone().unbind()),
        },
    );
    Bridge::submit(bridge, rt, job)?;
    Ok(future.into_any().unbind())
}

/// Reports a call that ended without a result (its task panicked or was
/// aborted), so that no future waits for ever.
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

/// The work of one asyncio call, waiting to be started.
type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

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

/// An asyncio call in flight: its future, and what wraps its result.
struct Waiting {
    future: Py<NativeFuture>,
    wrap: Option<Py<PyAny>>,
}

/// Delivers the results of asyncio calls to one event loop (see the module
/// docs).
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
    /// The calls started during this turn of the loop, started together by
    /// `flush` (scheduled with `call_soon` by the first) or at the end of
    /// `drain` (for the calls made by the tasks it resumed).
    queued: Mutex<Vec<Job>>,
    /// Whether `drain` is running (it starts the queued calls when done).
    draining: AtomicBool,
}

impl Bridge {
    /// A bridge to `event_loop`; the caller registers `drain` as the reader
    /// of the socket on that loop (`Bridge::current` does both).
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
            draining: AtomicBool::new(false),
        })
    }

    /// The running event loop's bridge, made and registered (its reader
    /// added to the loop) on the loop's first call. Raises `RuntimeError`
    /// outside a running loop.
    fn current(py: Python<'_>) -> PyResult<Bound<'_, Bridge>> {
        let get_running_loop = GET_RUNNING_LOOP.get_or_try_init(py, || {
            py.import("asyncio")?
                .getattr("get_running_loop")
                .map(Bound::unbind)
        })?;
        let event_loop = get_running_loop.call0(py)?.into_bound(py);
        // The lock is never held across Python code: another thread can take
        // the GIL there and block on the lock with it (a deadlock).
        let finished: Vec<_> = {
            let mut bridges = BRIDGES.lock().unwrap_or_else(|p| p.into_inner());
            for (weak, bridge) in bridges.iter() {
                if weak.bind(py).upgrade().is_some_and(|l| l.is(&event_loop)) {
                    return Ok(bridge.bind(py).clone());
                }
            }
            let (alive, finished) = std::mem::take(&mut *bridges)
                .into_iter()
                .partition(|(weak, _)| weak.bind(py).upgrade().is_some());
            *bridges = alive;
            finished
        };
        // Dropped outside the lock: a finished loop's bridge may hold the
        // last references to coroutines, whose finalization runs Python.
        drop(finished);
        // Only this thread runs this loop, so no other thread registers it
        // meanwhile.
        let bridge = Bound::new(py, Bridge::new(&event_loop)?)?;
        event_loop.call_method1(
            intern!(py, "add_reader"),
            (
                bridge.get().watch.as_raw_fd(),
                bridge.getattr(intern!(py, "drain"))?,
            ),
        )?;
        let weak = PyWeakrefReference::new(&event_loop)?.unbind();
        BRIDGES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((weak, bridge.clone().unbind()));
        Ok(bridge)
    }

    /// Queues a call's work. All the calls the loop's tasks make in one turn
    /// start as one runtime task: their commands reach each node's
    /// connection before it writes, so they go out in one write per node
    /// (as the Rust client's own tasks do), and the runtime is woken once,
    /// not once per call.
    fn submit(bridge: &Bound<'_, Bridge>, rt: &'static Runtime, job: Job) -> PyResult<()> {
        let native = bridge.get();
        let first = {
            let mut queued = native.queued.lock().unwrap_or_else(|p| p.into_inner());
            queued.push(job);
            queued.len() == 1
        };
        if first && !native.draining.load(Ordering::Relaxed) {
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

    /// Completes one call's future (unless its caller cancelled it: the
    /// result is then dropped, which releases a lock in it). An error is an
    /// exception a callback let through that must not be swallowed
    /// (`KeyboardInterrupt`, `SystemExit`).
    fn complete(py: Python<'_>, waiting: Waiting, finish: Done) -> PyResult<()> {
        let future = waiting.future.bind(py);
        if future.get().is_done() {
            return Ok(());
        }
        let value = finish(py).and_then(|v| match &waiting.wrap {
            Some(wrap) => wrap.call1(py, (v,)),
            None => Ok(v),
        });
        let outcome = match value {
            Ok(v) => Outcome::Value(v),
            Err(e) => Outcome::Error(e.into_value(py).into_any()),
        };
        NativeFuture::resolve(future, outcome)
    }
}

#[pymethods]
impl Bridge {
    /// Completes the futures of the finished calls (the loop's reader);
    /// the tasks awaiting them run their next step from here, and the calls
    /// they make start together at the end.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let mut buf = [0u8; 256];
        while matches!((&self.watch).read(&mut buf), Ok(n) if n > 0) {}
        let done = std::mem::take(&mut *self.inner.done.lock().unwrap_or_else(|p| p.into_inner()));
        self.draining.store(true, Ordering::Relaxed);
        let mut fatal = None;
        for (id, finish) in done {
            let Some(waiting) = self.waiting().remove(&id) else {
                continue;
            };
            // Every future is completed, even after a callback let a
            // KeyboardInterrupt through; that is raised at the end.
            if let Err(e) = Self::complete(py, waiting, finish) {
                fatal.get_or_insert(e);
            }
        }
        self.draining.store(false, Ordering::Relaxed);
        self.start_queued(runtime()?);
        fatal.map_or(Ok(()), Err)
    }

    /// Starts the calls queued during this turn of the loop (scheduled by
    /// the first of them).
    fn flush(&self) -> PyResult<()> {
        self.start_queued(runtime()?);
        Ok(())
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

/// How a [`NativeFuture`] ended.
enum Outcome {
    Value(Py<PyAny>),
    /// The exception instance.
    Error(Py<PyAny>),
    /// Cancelled, with the message given to `cancel()`.
    Cancelled(Option<Py<PyAny>>),
}

/// The mutable part of a [`NativeFuture`].
struct State {
    outcome: Option<Outcome>,
    /// `(callback, context)` pairs, called with the future once it is done.
    callbacks: Vec<(Py<PyAny>, Option<Py<PyAny>>)>,
    /// asyncio's `_asyncio_future_blocking` flag (set while a task waits).
    blocking: bool,
    /// Drops the call's work when the future is cancelled (the calls that
    /// may be dropped, see [`OnCancel`]).
    abort: Option<AbortHandle>,
}

/// The result of one asyncio call: awaitable, and a future as asyncio's
/// tasks and `asyncio.isfuture` see them (`_asyncio_future_blocking`,
/// `get_loop`, `add_done_callback`, `result`, `cancel`, …). It differs
/// from `asyncio.Future` in one way: when the call finishes, its callbacks
/// (the awaiting task's wake-up) run at once from the loop's reader instead
/// of being scheduled with `call_soon`, which saves the event loop a
/// handle and a turn per call. Cancelling it runs the callbacks with
/// `call_soon`, as asyncio does.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct NativeFuture {
    event_loop: Py<PyAny>,
    state: Mutex<State>,
}

impl NativeFuture {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_done(&self) -> bool {
        self.state().outcome.is_some()
    }

    /// The exception `result()` raises for a cancelled future.
    fn cancelled_error(py: Python<'_>, message: Option<&Py<PyAny>>) -> PyErr {
        match message {
            Some(message) => CancelledError::new_err((message.clone_ref(py),)),
            None => CancelledError::new_err(()),
        }
    }

    /// Sets the outcome and runs the callbacks at once (from the loop's
    /// reader). A callback's exception is reported to the loop's exception
    /// handler, as `Handle._run` does; one that is not an `Exception`
    /// (`KeyboardInterrupt`, `SystemExit`) is returned after the other
    /// callbacks ran.
    fn resolve(future: &Bound<'_, NativeFuture>, outcome: Outcome) -> PyResult<()> {
        let py = future.py();
        let callbacks = {
            let mut state = future.get().state();
            if state.outcome.is_some() {
                return Ok(());
            }
            state.outcome = Some(outcome);
            state.abort = None;
            std::mem::take(&mut state.callbacks)
        };
        let mut fatal = None;
        for (callback, context) in callbacks {
            let called = match &context {
                Some(context) => context.call_method1(py, intern!(py, "run"), (&callback, future)),
                None => callback.call1(py, (future,)),
            };
            let Err(e) = called else { continue };
            if e.is_instance_of::<PyException>(py) {
                let report = PyDict::new(py);
                let handled = report
                    .set_item("message", "Exception in a redlock_fenced future callback")
                    .and_then(|()| report.set_item("exception", e.value(py)))
                    .and_then(|()| report.set_item("future", future))
                    .and_then(|()| {
                        future.get().event_loop.call_method1(
                            py,
                            intern!(py, "call_exception_handler"),
                            (report,),
                        )
                    });
                if let Err(e) = handled {
                    e.write_unraisable(py, None);
                }
            } else {
                fatal.get_or_insert(e);
            }
        }
        fatal.map_or(Ok(()), Err)
    }

    /// Schedules `callback(self)` with `call_soon`, in `context`.
    fn schedule(
        slf: &Bound<'_, Self>,
        callback: &Py<PyAny>,
        context: Option<&Py<PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let kwargs = PyDict::new(py);
        if let Some(context) = context {
            kwargs.set_item(intern!(py, "context"), context)?;
        }
        slf.get().event_loop.bind(py).call_method(
            intern!(py, "call_soon"),
            (callback, slf),
            Some(&kwargs),
        )?;
        Ok(())
    }
}

#[pymethods]
impl NativeFuture {
    /// asyncio's marker of a future-compatible object (set while a task
    /// waits on it).
    #[getter(_asyncio_future_blocking)]
    fn get_blocking(&self) -> bool {
        self.state().blocking
    }

    #[setter(_asyncio_future_blocking)]
    fn set_blocking(&self, value: bool) {
        self.state().blocking = value;
    }

    /// The event loop the future belongs to.
    fn get_loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.event_loop.clone_ref(py)
    }

    /// Whether the call finished or the future was cancelled.
    fn done(&self) -> bool {
        self.is_done()
    }

    /// Whether the future was cancelled.
    fn cancelled(&self) -> bool {
        matches!(self.state().outcome, Some(Outcome::Cancelled(_)))
    }

    /// The call's result; raises its exception, `CancelledError`, or
    /// `InvalidStateError` while it runs.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.state().outcome {
            Some(Outcome::Value(v)) => Ok(v.clone_ref(py)),
            Some(Outcome::Error(e)) => Err(PyErr::from_value(e.bind(py).clone())),
            Some(Outcome::Cancelled(message)) => Err(Self::cancelled_error(py, message.as_ref())),
            None => Err(InvalidStateError::new_err("Result is not set.")),
        }
    }

    /// The call's exception, or None.
    fn exception(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.state().outcome {
            Some(Outcome::Value(_)) => Ok(None),
            Some(Outcome::Error(e)) => Ok(Some(e.clone_ref(py))),
            Some(Outcome::Cancelled(message)) => Err(Self::cancelled_error(py, message.as_ref())),
            None => Err(InvalidStateError::new_err("Exception is not set.")),
        }
    }

    /// Calls `callback(future)` once done (with `call_soon` when it already
    /// is), in `context` when given.
    #[pyo3(signature = (callback, *, context=None))]
    fn add_done_callback(
        slf: &Bound<'_, Self>,
        callback: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        {
            let mut state = slf.get().state();
            if state.outcome.is_none() {
                state.callbacks.push((callback, context));
                return Ok(());
            }
        }
        Self::schedule(slf, &callback, context.as_ref())
    }

    /// Removes every registration of `callback`; returns how many.
    fn remove_done_callback(&self, py: Python<'_>, callback: &Bound<'_, PyAny>) -> PyResult<usize> {
        let registered = std::mem::take(&mut self.state().callbacks);
        let mut kept = Vec::with_capacity(registered.len());
        let mut removed = 0;
        for (cb, context) in registered {
            if cb.bind(py).eq(callback)? {
                removed += 1;
            } else {
                kept.push((cb, context));
            }
        }
        self.state().callbacks.extend(kept);
        Ok(removed)
    }

    /// Cancels the future (and drops the call's work when it may be
    /// dropped); False when it was already done.
    #[pyo3(signature = (msg=None))]
    fn cancel(slf: &Bound<'_, Self>, msg: Option<Py<PyAny>>) -> PyResult<bool> {
        let (callbacks, abort) = {
            let mut state = slf.get().state();
            if state.outcome.is_some() {
                return Ok(false);
            }
            state.outcome = Some(Outcome::Cancelled(msg));
            (std::mem::take(&mut state.callbacks), state.abort.take())
        };
        if let Some(abort) = abort {
            abort.abort();
        }
        for (callback, context) in &callbacks {
            Self::schedule(slf, callback, context.as_ref())?;
        }
        Ok(true)
    }

    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Yields the future to the awaiting task until it is done, then ends
    /// with its result (or raises its exception).
    fn __next__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        {
            let mut state = slf.get().state();
            match &state.outcome {
                None => state.blocking = true,
                Some(Outcome::Value(v)) => {
                    return Err(PyStopIteration::new_err((v.clone_ref(py),)))
                }
                Some(Outcome::Error(e)) => return Err(PyErr::from_value(e.bind(py).clone())),
                Some(Outcome::Cancelled(message)) => {
                    return Err(Self::cancelled_error(py, message.as_ref()))
                }
            }
        }
        Ok(slf)
    }

    fn __repr__(&self) -> String {
        let state = match &self.state().outcome {
            None => "pending",
            Some(Outcome::Value(_)) => "finished",
            Some(Outcome::Error(_)) => "failed",
            Some(Outcome::Cancelled(_)) => "cancelled",
        };
        format!("<NativeFuture {state}>")
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.event_loop)?;
        // The collector runs with the GIL held, as every user of the state
        // does: the lock is free unless held across this very call.
        let Ok(state) = self.state.try_lock() else {
            return Ok(());
        };
        match &state.outcome {
            Some(Outcome::Value(v) | Outcome::Error(v)) => visit.call(v)?,
            Some(Outcome::Cancelled(message)) => visit.call(message)?,
            None => {}
        }
        for (callback, context) in &state.callbacks {
            visit.call(callback)?;
            visit.call(context)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // Dropped outside the lock: a dropped object's finalizer may call
        // back into this future.
        let dropped = {
            let mut state = self.state();
            (std::mem::take(&mut state.callbacks), state.outcome.take())
        };
        drop(dropped);
    }
}
