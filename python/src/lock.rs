//! `NativeLock` (one acquisition), `NativeGuard` (what `hold()` gives) and
//! `Signal` (the "lost" event both carry).

use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyResourceWarning;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use redlock_client::{CancellationToken, Error, Lock, LockGuard, LockInfo};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::bridge::{dispatch, Asyncio};
use crate::errors;
use crate::fenced::{Reply, Resources, Target};
use crate::runtime::{self, OnCancel};

/// One day: the longest ttl or wait a call accepts (the module's own ceiling
/// for `redlock.max-ttl-ms`).
pub(crate) const DAY: f64 = 86_400.0;
/// The shortest ttl: the nodes get whole milliseconds.
pub(crate) const MIN_TTL: f64 = 0.001;

/// Where a lock is in its life.
enum Slot {
    /// Held, and no call is using it.
    Held(Lock),
    /// An `extend` or `release` has it right now.
    Busy,
    /// Released (or given up to a background release).
    Released,
    /// Handed over with `detach()`.
    Detached,
}

impl Slot {
    fn describe(&self) -> &'static str {
        match self {
            Slot::Held(_) => "held",
            Slot::Busy => "busy",
            Slot::Released => "released",
            Slot::Detached => "detached",
        }
    }
}

/// What a `NativeLock` shares with the tasks working on it.
struct Shared {
    slot: Mutex<Slot>,
    /// The end of the validity (local monotonic clock); `None` once released.
    deadline: watch::Sender<Option<Instant>>,
    lost: CancellationToken,
    /// Whether a task watches the deadline (started by the first wait on
    /// `lost`: most locks are released long before anyone waits).
    watching: AtomicBool,
    /// The Rust lock's own validity, which an extension lowers the moment
    /// it starts (a shorter lease may reach the nodes whatever the call
    /// returns, also when it is cancelled): `deadline` never outlasts it.
    info: Arc<LockInfo>,
}

impl Shared {
    /// Whether the lock is lost: an extend failed or the validity ran out.
    fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        let ran_out = self
            .deadline
            .borrow()
            .is_some_and(|d| Instant::now() >= d || self.info.validity().is_zero());
        if ran_out {
            self.lost.cancel();
        }
        ran_out
    }

    /// Starts the task that fires `lost` at the deadline, once.
    fn watch(&self) -> PyResult<()> {
        if !self.watching.swap(true, Ordering::AcqRel) {
            let rt = runtime::runtime()?;
            rt.spawn(watch_deadline(self.deadline.subscribe(), self.lost.clone()));
        }
        Ok(())
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the lock out for one call; it goes back when the returned value
    /// is dropped, unless the call consumed it.
    fn take(self: &Arc<Self>, what: &str) -> PyResult<Taken> {
        let mut slot = self.slot();
        match std::mem::replace(&mut *slot, Slot::Busy) {
            Slot::Held(lock) => Ok(Taken {
                shared: Arc::clone(self),
                lock: Some(lock),
            }),
            other => {
                let state = other.describe();
                *slot = other;
                Err(errors::state(&match state {
                    "busy" => format!(
                        "cannot {what} the lock: another extend() or release() on it is running"
                    ),
                    _ => format!("cannot {what} the lock: it was already {state}"),
                }))
            }
        }
    }
}

/// A lock taken out of its slot for the length of one call. Dropping it
/// (also when the call is cancelled) puts the lock back.
struct Taken {
    shared: Arc<Shared>,
    lock: Option<Lock>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            *self.shared.slot() = Slot::Held(lock);
        }
    }
}

/// Fires `lost` at the end of the validity; a successful extend moves it,
/// a release stops the watch.
async fn watch_deadline(mut rx: watch::Receiver<Option<Instant>>, lost: CancellationToken) {
    loop {
        let Some(deadline) = *rx.borrow_and_update() else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep_until(deadline.into()) => {
                lost.cancel();
                return;
            }
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// One acquisition (`redlock_fenced.Lock` / `AsyncLock` wrap it).
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct NativeLock {
    /// The lock's key.
    #[pyo3(get)]
    key: String,
    /// The fencing token.
    #[pyo3(get)]
    token: u64,
    owner: String,
    shared: Arc<Shared>,
    /// Key and token for fenced commands, usable while an extend runs.
    info: Arc<LockInfo>,
    /// The client's connections to resource servers.
    resources: Arc<Resources>,
    /// Whether it was handed to the caller ([`Handout`]): a lock dropped
    /// while still held then warns (`ResourceWarning`) as it is released
    /// in the background. A result nobody received (a cancelled call) is
    /// released without a warning.
    handed_out: AtomicBool,
}

/// A fresh lock on its way to the caller: converting it into a Python object
/// marks it handed out (see `NativeLock::handed_out`).
pub(crate) struct Handout(pub(crate) NativeLock);

impl<'py> IntoPyObject<'py> for Handout {
    type Target = NativeLock;
    type Output = Bound<'py, NativeLock>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, NativeLock>> {
        self.0.handed_out.store(true, Ordering::Relaxed);
        Bound::new(py, self.0)
    }
}

impl NativeLock {
    /// Wraps a fresh lock of a client with these resource connections.
    pub(crate) fn new(lock: Lock, resources: Arc<Resources>) -> Self {
        let deadline = Instant::now() + lock.validity();
        let (tx, _) = watch::channel(Some(deadline));
        let lost = CancellationToken::new();
        let info = Arc::clone(lock.info());
        NativeLock {
            key: lock.key().to_string(),
            token: lock.token(),
            owner: lock.owner().to_string(),
            info: Arc::clone(lock.info()),
            resources,
            handed_out: AtomicBool::new(false),
            shared: Arc::new(Shared {
                slot: Mutex::new(Slot::Held(lock)),
                deadline: tx,
                info: Arc::clone(&info),
                lost,
                watching: AtomicBool::new(false),
            }),
        }
    }

    fn extend_future(&self, ttl: f64) -> PyResult<impl Future<Output = PyResult<()>> + use<>> {
        let ttl = errors::duration("ttl", ttl, MIN_TTL, DAY)?;
        let mut taken = self.shared.take("extend")?;
        let token = self.token;
        Ok(async move {
            let Some(lock) = taken.lock.as_mut() else {
                return Err(errors::internal("extend without a lock"));
            };
            let extending = lock.extend(ttl);
            let mut extending = std::pin::pin!(extending);
            // The first poll starts the extension, which lowers the Rust
            // lock's validity to the new lease's bound before anything is
            // sent: mirror it now, so that the validity and the lost event
            // never count on the old lease while the nodes may apply a
            // shorter one (a cancelled extend keeps the lowered bound).
            let first =
                std::future::poll_fn(|cx| std::task::Poll::Ready(extending.as_mut().poll(cx)))
                    .await;
            let bound = Instant::now() + taken.shared.info.validity();
            taken.shared.deadline.send_modify(|d| {
                if let Some(d) = d {
                    *d = (*d).min(bound);
                }
            });
            let result = match first {
                std::task::Poll::Ready(result) => result,
                std::task::Poll::Pending => extending.await,
            };
            match result.map(|()| taken.shared.info.validity()) {
                Ok(validity) => {
                    let deadline = Instant::now() + validity;
                    taken.shared.deadline.send_replace(Some(deadline));
                    Ok(())
                }
                Err(e) => {
                    // After a failed extend the token must not be used again.
                    taken.shared.lost.cancel();
                    Err(errors::lock_error(e, Some(token)))
                }
            }
        })
    }

    /// Refuses a fenced command on a released or detached lock (a held or
    /// busy one may run it: the resource's guard decides).
    fn check_fenceable(&self) -> PyResult<()> {
        match self.shared.slot().describe() {
            state @ ("released" | "detached") => Err(errors::state(&format!(
                "cannot run a fenced command with the lock: it was already {state}"
            ))),
            _ => Ok(()),
        }
    }

    fn fenced_future(
        &self,
        resource: &Bound<'_, PyAny>,
        guard: String,
        args: &Bound<'_, PyList>,
    ) -> PyResult<impl Future<Output = PyResult<Reply>> + use<>> {
        self.check_fenceable()?;
        fenced_future(
            Arc::clone(&self.info),
            self.shared.lost.clone(),
            &self.resources,
            resource,
            guard,
            args,
        )
    }

    fn transaction_future(
        &self,
        resource: &Bound<'_, PyAny>,
        guard: String,
        commands: &Bound<'_, PyList>,
    ) -> PyResult<impl Future<Output = PyResult<Reply>> + use<>> {
        self.check_fenceable()?;
        transaction_future(
            Arc::clone(&self.info),
            self.shared.lost.clone(),
            &self.resources,
            resource,
            guard,
            commands,
        )
    }

    fn announce_future(
        &self,
        resource: &Bound<'_, PyAny>,
        guard: String,
    ) -> PyResult<impl Future<Output = PyResult<u64>> + use<>> {
        self.check_fenceable()?;
        announce_future(
            Arc::clone(&self.info),
            self.shared.lost.clone(),
            &self.resources,
            resource,
            guard,
        )
    }

    fn release_future(&self) -> PyResult<impl Future<Output = PyResult<bool>> + use<>> {
        let mut taken = self.shared.take("release")?;
        let token = self.token;
        Ok(async move {
            let Some(lock) = taken.lock.take() else {
                return Err(errors::internal("release without a lock"));
            };
            *taken.shared.slot() = Slot::Released;
            taken.shared.deadline.send_replace(None);
            lock.release()
                .await
                .map_err(|e| errors::lock_error(e, Some(token)))
        })
    }
}

#[pymethods]
impl NativeLock {
    /// The owner id (a secret: never in repr, logs or messages).
    #[getter]
    fn owner(&self) -> &str {
        &self.owner
    }

    /// Seconds of validity left; 0.0 once lost or released.
    fn validity(&self) -> f64 {
        if self.shared.is_lost() {
            return 0.0;
        }
        match *self.shared.deadline.borrow() {
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .min(self.info.validity())
                .as_secs_f64(),
            None => 0.0,
        }
    }

    /// The "lost" event: set at the end of the validity or when an extend
    /// fails; it never clears.
    #[getter]
    fn lost(&self) -> Signal {
        Signal {
            source: Source::Lock(Arc::clone(&self.shared)),
        }
    }

    /// `"held"`, `"busy"`, `"released"` or `"detached"`.
    fn state(&self) -> &'static str {
        self.shared.slot().describe()
    }

    /// Extends the lease to `ttl` seconds from now (blocking).
    fn extend(&self, py: Python<'_>, ttl: f64) -> PyResult<Py<PyAny>> {
        let fut = self.extend_future(ttl)?;
        dispatch(py, None, OnCancel::Finish, fut)
    }

    /// Extends the lease (asyncio future). On cancellation the nodes'
    /// extends finish in the background and the old deadline stays.
    fn extend_async(&self, py: Python<'_>, ttl: f64) -> PyResult<Py<PyAny>> {
        let fut = self.extend_future(ttl)?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Releases (blocking): True when it was still held.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let fut = self.release_future()?;
        dispatch(py, None, OnCancel::Finish, fut)
    }

    /// Releases (asyncio future); a cancelled caller stops waiting, the
    /// release goes on.
    fn release_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let fut = self.release_future()?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Finish, fut)
    }

    /// Runs `args` on the resource server `resource` (a URL), fenced by this
    /// lock's token on `guard` (blocking): the command's reply.
    fn fenced(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        args: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        let fut = self.fenced_future(resource, guard, args)?;
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
        let fut = self.fenced_future(resource, guard, args)?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Shows this lock's token to `guard` on `resource` (blocking): the
    /// guard's highest token.
    fn announce(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
    ) -> PyResult<Py<PyAny>> {
        let fut = self.announce_future(resource, guard)?;
        dispatch(py, None, OnCancel::Drop, fut)
    }

    /// Shows this lock's token to `guard` (asyncio future).
    fn announce_async(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
    ) -> PyResult<Py<PyAny>> {
        let fut = self.announce_future(resource, guard)?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Runs `commands` (lists of `bytes`), each fenced by this lock's token
    /// on `guard`, in one MULTI/EXEC on `resource` (blocking): the list of
    /// their replies.
    fn fenced_transaction(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        commands: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        let fut = self.transaction_future(resource, guard, commands)?;
        dispatch(py, None, OnCancel::Drop, fut)
    }

    /// Runs a fenced transaction (asyncio future).
    fn fenced_transaction_async(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        commands: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        let fut = self.transaction_future(resource, guard, commands)?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Stops tracking the lock without releasing it; returns the owner id.
    fn detach(&self) -> PyResult<String> {
        let mut taken = self.shared.take("detach")?;
        if let Some(lock) = taken.lock.take() {
            *taken.shared.slot() = Slot::Detached;
            taken.shared.deadline.send_replace(None);
            return Ok(lock.detach());
        }
        Err(errors::internal("detach without a lock"))
    }
}

impl Drop for NativeLock {
    fn drop(&mut self) {
        let taken = std::mem::replace(&mut *self.shared.slot(), Slot::Released);
        let Slot::Held(lock) = taken else {
            return;
        };
        if runtime::forked() {
            // The runtime's threads are gone in a fork child: nothing can
            // run the release (the lease runs out on its own).
            std::mem::forget(lock);
            return;
        }
        if let Ok(rt) = runtime::runtime() {
            let _enter = rt.enter();
            runtime::background().spawn(async move {
                let _ = lock.release().await;
            });
        }
        if self.handed_out.load(Ordering::Relaxed) {
            // Dropped with its Python object, so attached; not at all
            // during interpreter shutdown. A warning turned into an error
            // cannot be raised from here: it is dropped, as an exception in
            // `__del__` would be.
            let message = format!(
                "a lock on {:?} (token {}) was garbage-collected while held: released in the background; release it explicitly or use `with` / `async with`",
                self.key, self.token
            );
            Python::try_attach(|py| {
                let Ok(message) = std::ffi::CString::new(message) else {
                    return;
                };
                // The object may be dropped while an exception is on its
                // way (a Ctrl-C that interrupted the caller): it is set
                // aside around the warning and put back, as CPython's own
                // deallocators do (and `__del__` gets done for it).
                let (mut kind, mut value, mut traceback) = (
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                );
                // SAFETY: attached; the three pointers are handed back
                // unchanged by `PyErr_Restore` (which takes their references).
                unsafe { pyo3::ffi::PyErr_Fetch(&mut kind, &mut value, &mut traceback) };
                let category = py.get_type::<PyResourceWarning>();
                let _ = PyErr::warn(py, &category, &message, 1);
                // SAFETY: as above.
                unsafe { pyo3::ffi::PyErr_Restore(kind, value, traceback) };
            });
        }
    }
}

/// The error of a fenced call on the lock `info`, with the lock's `lost`
/// signal set when the guard had seen a newer token: another holder took
/// over, so this lock is lost whatever its validity says (its token must
/// not be used again).
fn fenced_failure(e: Error, info: &LockInfo, lost: &CancellationToken) -> PyErr {
    if matches!(e, Error::Stale { .. }) {
        lost.cancel();
    }
    errors::fenced_error(e, info.key())
}

/// The fenced command `args` (a list of `bytes`) on `resource` with the
/// lock `info` (an `Arc<LockInfo>` or a `LockGuard`), as a future that owns
/// what it needs; a stale token sets `lost`.
pub(crate) fn fenced_future<I: Deref<Target = LockInfo> + Send + 'static>(
    info: I,
    lost: CancellationToken,
    resources: &Arc<Resources>,
    resource: &Bound<'_, PyAny>,
    guard: String,
    args: &Bound<'_, PyList>,
) -> PyResult<impl Future<Output = PyResult<Reply>> + use<I>> {
    let target = Target::from_py(resource)?;
    let args = byte_args(args)?;
    let resources = Arc::clone(resources);
    Ok(async move {
        resources
            .fenced(&info, &target, &guard, &args)
            .await
            .map_err(|e| fenced_failure(e, &info, &lost))
    })
}

/// The fenced transaction `commands` (a list of lists of `bytes`) on
/// `resource`, as a future that owns what it needs; a stale token sets
/// `lost`.
fn transaction_future<I: Deref<Target = LockInfo> + Send + 'static>(
    info: I,
    lost: CancellationToken,
    resources: &Arc<Resources>,
    resource: &Bound<'_, PyAny>,
    guard: String,
    commands: &Bound<'_, PyList>,
) -> PyResult<impl Future<Output = PyResult<Reply>> + use<I>> {
    let target = Target::from_py(resource)?;
    let commands = commands
        .iter()
        .map(|c| byte_args(c.cast::<PyList>()?))
        .collect::<PyResult<Vec<_>>>()?;
    let resources = Arc::clone(resources);
    Ok(async move {
        resources
            .fenced_transaction(&info, &target, &guard, &commands)
            .await
            .map_err(|e| fenced_failure(e, &info, &lost))
    })
}

/// A command's arguments (a list of `bytes`), copied out of Python.
fn byte_args(args: &Bound<'_, PyList>) -> PyResult<Vec<Vec<u8>>> {
    args.iter()
        .map(|a| Ok(a.cast::<PyBytes>()?.as_bytes().to_vec()))
        .collect()
}

/// `REDLOCK.GUARD` on `resource`, as a future that owns what it needs; a
/// stale token sets `lost`.
pub(crate) fn announce_future<I: Deref<Target = LockInfo> + Send + 'static>(
    info: I,
    lost: CancellationToken,
    resources: &Arc<Resources>,
    resource: &Bound<'_, PyAny>,
    guard: String,
) -> PyResult<impl Future<Output = PyResult<u64>> + use<I>> {
    let target = Target::from_py(resource)?;
    let resources = Arc::clone(resources);
    Ok(async move {
        resources
            .announce(&info, &target, &guard)
            .await
            .map_err(|e| fenced_failure(e, &info, &lost))
    })
}

/// What a [`Signal`] reports on.
enum Source {
    /// A guard's token (its keeper fires it).
    Token(CancellationToken),
    /// A lock's deadline and token (a task fires it once someone waits).
    Lock(Arc<Shared>),
}

/// An event that is set once and stays set (a lock was lost).
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct Signal {
    source: Source,
}

impl Signal {
    /// The event fired by `token` (a leadership's lost token).
    pub(crate) fn from_token(token: CancellationToken) -> Self {
        Signal {
            source: Source::Token(token),
        }
    }

    /// The token to wait on, with whatever fires it running.
    fn token(&self) -> PyResult<CancellationToken> {
        match &self.source {
            Source::Token(token) => Ok(token.clone()),
            Source::Lock(shared) => {
                shared.watch()?;
                Ok(shared.lost.clone())
            }
        }
    }
}

#[pymethods]
impl Signal {
    /// Whether the event is set.
    fn is_set(&self) -> bool {
        match &self.source {
            Source::Token(token) => token.is_cancelled(),
            Source::Lock(shared) => shared.is_lost(),
        }
    }

    /// Waits (GIL released, Ctrl-C works) until set or `timeout` seconds
    /// passed; returns whether it is set.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if self.is_set() {
            return Ok(true);
        }
        let limit = match timeout {
            None => None,
            Some(t) if t <= 0.0 && !t.is_nan() => return Ok(false),
            Some(t) => Some(errors::duration("timeout", t, 0.0, 1e9)?),
        };
        let token = self.token()?;
        runtime::block(py, OnCancel::Drop, async move {
            match limit {
                None => {
                    token.cancelled().await;
                    true
                }
                Some(limit) => tokio::time::timeout(limit, token.cancelled()).await.is_ok(),
            }
        })
    }

    /// An asyncio future that completes when the event is set.
    fn wait_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let token = self.token()?;
        dispatch(
            py,
            Some(Asyncio::current(py)?),
            OnCancel::Drop,
            async move {
                token.cancelled_owned().await;
                Ok(())
            },
        )
    }
}

/// A lock kept alive in the background while a `hold()` block runs.
#[pyclass(frozen, module = "redlock_fenced._native")]
pub(crate) struct NativeGuard {
    /// The lock's key.
    #[pyo3(get)]
    key: String,
    /// The fencing token.
    #[pyo3(get)]
    token: u64,
    owner: String,
    guard: LockGuard,
    /// The client's connections to resource servers.
    resources: Arc<Resources>,
    /// Fired (or dropped) when the block ends: the keeper then releases.
    done: Mutex<Option<oneshot::Sender<()>>>,
    /// The `with_lock` task; it ends once the release is done.
    task: Mutex<Option<JoinHandle<Result<(), Error>>>>,
}

/// Aborts a task when dropped, unless disarmed.
struct AbortOnDrop(Option<JoinHandle<Result<(), Error>>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl NativeGuard {
    /// Starts `with_lock` (or `with_lock_wait`) as a task whose body hands
    /// out the guard and then waits for the end of the Python block.
    /// Runs inside the runtime.
    pub(crate) async fn start(
        redlock: redlock_client::Redlock,
        resources: Arc<Resources>,
        key: String,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> PyResult<NativeGuard> {
        let (guard_tx, guard_rx) = oneshot::channel::<LockGuard>();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let body = move |guard: LockGuard| async move {
            // Nobody receives the guard (the caller gave up): end at once,
            // which releases the lock.
            if guard_tx.send(guard).is_ok() {
                let _ = done_rx.await;
            }
        };
        let task = tokio::spawn(async move {
            match wait {
                None => redlock.with_lock(&key, ttl, body).await,
                Some(w) => redlock.with_lock_wait(&key, ttl, w, body).await,
            }
        });
        // A waiting acquisition may be dropped (it leaves nothing behind);
        // a plain one runs as a task the caller never cuts (`OnCancel`).
        let mut task = AbortOnDrop(Some(task));
        match guard_rx.await {
            Ok(guard) => Ok(NativeGuard {
                key: guard.key().to_string(),
                token: guard.token(),
                owner: guard.owner().to_string(),
                guard,
                resources,
                done: Mutex::new(Some(done_tx)),
                task: Mutex::new(task.0.take()),
            }),
            Err(_) => {
                let Some(handle) = task.0.take() else {
                    return Err(errors::internal("hold task missing"));
                };
                match handle.await {
                    Ok(Err(e)) => Err(errors::lock_error(e, None)),
                    Ok(Ok(())) => Err(errors::internal("hold ended before the block ran")),
                    Err(join) => Err(errors::internal(&join.to_string())),
                }
            }
        }
    }

    /// Refuses a fenced command once the block has ended (the lock was
    /// released then).
    fn check_fenceable(&self) -> PyResult<()> {
        if self
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            return Err(errors::state(
                "cannot run a fenced command with the guard: its hold() block has ended",
            ));
        }
        Ok(())
    }

    fn exit_future(&self) -> impl Future<Output = PyResult<()>> + use<> {
        if let Some(done) = self.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = done.send(());
        }
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        async move {
            if let Some(task) = task {
                // The keeper's release is bounded by the node timeout.
                let _ = task.await;
            }
            Ok(())
        }
    }
}

#[pymethods]
impl NativeGuard {
    /// The owner id (a secret).
    #[getter]
    fn owner(&self) -> &str {
        &self.owner
    }

    /// Seconds of validity left (follows the background extensions); 0.0
    /// once lost.
    fn validity(&self) -> f64 {
        if self.guard.is_lost() {
            return 0.0;
        }
        self.guard.validity().as_secs_f64()
    }

    /// The "lost" event.
    #[getter]
    fn lost(&self) -> Signal {
        Signal {
            source: Source::Token(self.guard.lost_token()),
        }
    }

    /// Runs `args` on the resource server `resource`, fenced by this lock's
    /// token on `guard` (blocking): the command's reply.
    fn fenced(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        args: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        self.check_fenceable()?;
        let fut = fenced_future(
            self.guard.clone(),
            self.guard.lost_token(),
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
        self.check_fenceable()?;
        let fut = fenced_future(
            self.guard.clone(),
            self.guard.lost_token(),
            &self.resources,
            resource,
            guard,
            args,
        )?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Shows this lock's token to `guard` on `resource` (blocking): the
    /// guard's highest token.
    fn announce(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
    ) -> PyResult<Py<PyAny>> {
        self.check_fenceable()?;
        let fut = announce_future(
            self.guard.clone(),
            self.guard.lost_token(),
            &self.resources,
            resource,
            guard,
        )?;
        dispatch(py, None, OnCancel::Drop, fut)
    }

    /// Shows this lock's token to `guard` (asyncio future).
    fn announce_async(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
    ) -> PyResult<Py<PyAny>> {
        self.check_fenceable()?;
        let fut = announce_future(
            self.guard.clone(),
            self.guard.lost_token(),
            &self.resources,
            resource,
            guard,
        )?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Runs `commands`, each fenced by this lock's token on `guard`, in one
    /// MULTI/EXEC on `resource` (blocking): the list of their replies.
    fn fenced_transaction(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        commands: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        self.check_fenceable()?;
        let fut = transaction_future(
            self.guard.clone(),
            self.guard.lost_token(),
            &self.resources,
            resource,
            guard,
            commands,
        )?;
        dispatch(py, None, OnCancel::Drop, fut)
    }

    /// Runs a fenced transaction (asyncio future).
    fn fenced_transaction_async(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        guard: String,
        commands: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyAny>> {
        self.check_fenceable()?;
        let fut = transaction_future(
            self.guard.clone(),
            self.guard.lost_token(),
            &self.resources,
            resource,
            guard,
            commands,
        )?;
        dispatch(py, Some(Asyncio::current(py)?), OnCancel::Drop, fut)
    }

    /// Ends the block (blocking): stops the keeper, which releases the lock,
    /// and waits for that release.
    fn exit(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        dispatch(py, None, OnCancel::Finish, self.exit_future())
    }

    /// Ends the block (asyncio future).
    fn exit_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        dispatch(
            py,
            Some(Asyncio::current(py)?),
            OnCancel::Finish,
            self.exit_future(),
        )
    }
}
