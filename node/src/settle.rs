//! Promises settled in batches: every call's future runs on the runtime,
//! and its result reaches JavaScript through one threadsafe function per
//! Node environment.
//!
//! napi-rs's `Env::spawn_future` creates a threadsafe function (a libuv
//! async handle, its queue and lock, an environment cleanup hook) for each
//! promise, wakes the event loop once per result, and closes the handle
//! again: on the event loop's thread that costs more than the quorum round
//! itself. Here a finished call queues its result in Rust ([`Bridge`]); the
//! first result of a batch wakes the loop through the environment's one
//! threadsafe function, whose callback ([`drain`]) settles every queued
//! promise in the same turn.
//!
//! The other way, the calls JavaScript makes in one turn of the event loop
//! start together as one runtime task, from a `setImmediate` callback
//! ([`start`]): their commands reach each node's connection before it
//! writes, so they leave in one write per node (as the Rust client's own
//! tasks do), and the runtime is woken once per batch, not once per call.
//!
//! The threadsafe function keeps the event loop alive only while calls are
//! pending (it is referenced on the first and unreferenced after the last),
//! so that a process with nothing pending can exit, as with one handle per
//! promise.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::ptr;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;

use napi::bindgen_prelude::{Env, PromiseRaw, ToNapiValue};
use napi::{check_status, sys};

use crate::errors;

/// Turns a call's outcome into its JavaScript value on the event loop's
/// thread; an error rejects the promise.
type Outcome = Box<dyn FnOnce(sys::napi_env) -> napi::Result<sys::napi_value> + Send>;

/// A finished call waiting for the event loop's thread.
struct Done {
    deferred: sys::napi_deferred,
    outcome: Outcome,
}

// SAFETY: the deferred is an opaque handle that is only used (settled) on
// the event loop's thread, in `drain`; other threads only move it.
unsafe impl Send for Done {}

/// The threadsafe function, movable to the runtime's threads (calling it
/// from any thread is its purpose).
#[derive(Clone, Copy)]
struct Tsfn(sys::napi_threadsafe_function);

// SAFETY: see above; it is used only under the lock of `Bridge::tsfn`,
// which the environment's teardown empties (under that lock) before it is
// released.
unsafe impl Send for Tsfn {}

struct Queue {
    done: Vec<Done>,
    /// The threadsafe function was (or is about to be) called and its
    /// `drain` has not yet taken the queue: later results join that batch
    /// without a call.
    woken: bool,
    /// The environment tore down: results are dropped.
    closed: bool,
}

/// Where one environment's finished calls meet its event loop.
///
/// Two locks: `queue`, which `drain` takes on the event loop's thread, and
/// `tsfn`, held by a runtime thread only while it calls the function. The
/// call writes to the loop's wake-up file and so wakes the loop's thread at
/// once: under one lock, that thread's `drain` found the lock still held
/// and slept on it, and was woken again by its release (measured with
/// `perf`: 2.5 % of the event loop's samples in `lock_contended` under
/// `drain`, plus the extra sleeps and wake-ups).
struct Bridge {
    queue: Mutex<Queue>,
    /// `None` once the environment tears down: results are dropped then.
    tsfn: Mutex<Option<Tsfn>>,
}

impl Bridge {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tsfn(&self) -> MutexGuard<'_, Option<Tsfn>> {
        self.tsfn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a result; the first of a batch wakes the event loop.
    ///
    /// No result is left unsettled: a push that finds `woken` set was
    /// queued before the `drain` that clears it takes the queue (both under
    /// the queue's lock), and the push that set it calls the function after
    /// (a call whose batch an earlier `drain` already took finds the queue
    /// empty, which is harmless).
    fn push(&self, done: Done) {
        let wake = {
            let mut queue = self.queue();
            if queue.closed {
                return; // the environment is gone, and its promises with it
            }
            queue.done.push(done);
            !std::mem::replace(&mut queue.woken, true)
        };
        if wake {
            // Called under `tsfn`'s lock, so that the teardown (which takes
            // it before it aborts the function) cannot free it meanwhile.
            // Non-blocking on an unbounded queue: it only fails once the
            // function is closing, when there is nothing left to settle.
            if let Some(tsfn) = *self.tsfn() {
                unsafe {
                    sys::napi_call_threadsafe_function(
                        tsfn.0,
                        ptr::null_mut(),
                        sys::ThreadsafeFunctionCallMode::nonblocking,
                    )
                };
            }
        }
    }
}

/// A call's work, settling its own promise.
type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The event loop thread's side of its environment's bridge.
struct Local {
    env: sys::napi_env,
    bridge: Arc<Bridge>,
    tsfn: sys::napi_threadsafe_function,
    /// Promises made and not yet settled; the function is referenced while
    /// this is above zero.
    pending: Cell<usize>,
    /// Calls made since the last start, started together by the next.
    queued: RefCell<Vec<Job>>,
    /// The global `setImmediate`, and the native function it is given
    /// ([`start_queued`]).
    set_immediate: sys::napi_ref,
    start_queued: sys::napi_ref,
}

impl Local {
    /// Counts `n` more pending promises (negative: settled), referencing or
    /// unreferencing the threadsafe function as the count leaves or
    /// reaches zero.
    fn adjust(&self, started: usize, settled: usize) {
        let before = self.pending.get();
        let after = before + started - settled.min(before + started);
        self.pending.set(after);
        // Failures here only change whether the loop waits for the
        // function; there is nothing better to do with them.
        if before == 0 && after > 0 {
            unsafe { sys::napi_ref_threadsafe_function(self.env, self.tsfn) };
        } else if before > 0 && after == 0 {
            unsafe { sys::napi_unref_threadsafe_function(self.env, self.tsfn) };
        }
    }
}

thread_local! {
    /// The bridge of the environment whose event loop runs on this thread
    /// (the main thread, or a worker's).
    static LOCAL: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
}

/// This thread's bridge for `env`, made on first use.
fn local(env: sys::napi_env) -> napi::Result<Rc<Local>> {
    if let Some(local) = LOCAL.with_borrow(|l| l.clone()) {
        if local.env == env {
            return Ok(local);
        }
    }
    let local = Rc::new(open(env)?);
    LOCAL.set(Some(Rc::clone(&local)));
    Ok(local)
}

/// The threadsafe function's name (its async resource's, for async hooks).
const NAME: &str = "redlock-fenced";

/// Creates the environment's threadsafe function, unreferenced, and the
/// teardown hook that stops it.
fn open(env: sys::napi_env) -> napi::Result<Local> {
    let bridge = Arc::new(Bridge {
        queue: Mutex::new(Queue {
            done: Vec::new(),
            woken: false,
            closed: false,
        }),
        tsfn: Mutex::new(None),
    });
    let mut name = ptr::null_mut();
    check_status!(
        unsafe {
            sys::napi_create_string_utf8(env, NAME.as_ptr().cast(), NAME.len() as isize, &mut name)
        },
        "cannot name the threadsafe function"
    )?;
    // The function's context and finalize data: one reference to the
    // bridge, given back in `finalize`.
    let data = Arc::into_raw(Arc::clone(&bridge))
        .cast_mut()
        .cast::<c_void>();
    let mut tsfn = ptr::null_mut();
    let created = check_status!(
        unsafe {
            sys::napi_create_threadsafe_function(
                env,
                ptr::null_mut(),
                ptr::null_mut(),
                name,
                0,
                1,
                data,
                Some(finalize),
                data,
                Some(drain),
                &mut tsfn,
            )
        },
        "cannot create the threadsafe function"
    );
    if let Err(e) = created {
        drop(unsafe { Arc::from_raw(data.cast::<Bridge>()) });
        return Err(e);
    }
    *bridge.tsfn() = Some(Tsfn(tsfn));
    unsafe { sys::napi_unref_threadsafe_function(env, tsfn) };
    // Registered after the function, so it runs before Node's own teardown
    // of the function (cleanup hooks run last registered first).
    let hook = Arc::into_raw(Arc::clone(&bridge))
        .cast_mut()
        .cast::<c_void>();
    let hooked = check_status!(
        unsafe { sys::napi_add_env_cleanup_hook(env, Some(teardown), hook) },
        "cannot register the teardown of the threadsafe function"
    );
    if let Err(e) = hooked {
        drop(unsafe { Arc::from_raw(hook.cast::<Bridge>()) });
        close(&bridge);
        return Err(e);
    }
    let (set_immediate, start_queued) = match scheduler(env) {
        Ok(refs) => refs,
        Err(e) => {
            close(&bridge);
            return Err(e);
        }
    };
    Ok(Local {
        env,
        bridge,
        tsfn,
        pending: Cell::new(0),
        queued: RefCell::new(Vec::new()),
        set_immediate,
        start_queued,
    })
}

/// References to the global `setImmediate` and to a native function that
/// starts the queued calls (they live as long as the environment).
fn scheduler(env: sys::napi_env) -> napi::Result<(sys::napi_ref, sys::napi_ref)> {
    let mut global = ptr::null_mut();
    check_status!(unsafe { sys::napi_get_global(env, &mut global) })?;
    let mut set_immediate = ptr::null_mut();
    check_status!(
        unsafe {
            sys::napi_get_named_property(env, global, c"setImmediate".as_ptr(), &mut set_immediate)
        },
        "cannot find setImmediate"
    )?;
    let mut start = ptr::null_mut();
    check_status!(
        unsafe {
            sys::napi_create_function(
                env,
                NAME.as_ptr().cast(),
                NAME.len() as isize,
                Some(start_queued),
                ptr::null_mut(),
                &mut start,
            )
        },
        "cannot create the start function"
    )?;
    let (mut set_immediate_ref, mut start_ref) = (ptr::null_mut(), ptr::null_mut());
    check_status!(unsafe {
        sys::napi_create_reference(env, set_immediate, 1, &mut set_immediate_ref)
    })?;
    check_status!(unsafe { sys::napi_create_reference(env, start, 1, &mut start_ref) })?;
    Ok((set_immediate_ref, start_ref))
}

impl Local {
    /// Queues a call's work; the first of a turn schedules [`start_queued`]
    /// with `setImmediate`, which runs once the current callback and its
    /// promise reactions are done. If that cannot be scheduled, the work
    /// starts at once.
    fn submit(&self, job: Job) {
        let first = {
            let mut queued = self.queued.borrow_mut();
            queued.push(job);
            queued.len() == 1
        };
        if first && self.schedule().is_err() {
            start(std::mem::take(&mut *self.queued.borrow_mut()));
        }
    }

    fn schedule(&self) -> napi::Result<()> {
        let (mut set_immediate, mut start, mut global, mut result) = (
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        );
        check_status!(unsafe {
            sys::napi_get_reference_value(self.env, self.set_immediate, &mut set_immediate)
        })?;
        check_status!(unsafe {
            sys::napi_get_reference_value(self.env, self.start_queued, &mut start)
        })?;
        check_status!(unsafe { sys::napi_get_global(self.env, &mut global) })?;
        check_status!(unsafe {
            sys::napi_call_function(self.env, global, set_immediate, 1, &start, &mut result)
        })
    }
}

/// `setImmediate`'s callback: starts the calls queued during the turn.
unsafe extern "C" fn start_queued(
    _env: sys::napi_env,
    _info: sys::napi_callback_info,
) -> sys::napi_value {
    if let Some(local) = LOCAL.with_borrow(|l| l.clone()) {
        let jobs = std::mem::take(&mut *local.queued.borrow_mut());
        start(jobs);
    }
    ptr::null_mut()
}

/// Starts `jobs` on napi's runtime as one task. A job that panics ends
/// alone (its promise rejects, see [`Settler`]); the others go on. Without
/// a runtime (the environment is exiting) the jobs are dropped, which
/// rejects their promises.
fn start(mut jobs: Vec<Job>) {
    let spawn = |job: Job| {
        // napi's spawn panics once its runtime is shut down; a panic must
        // not cross into Node from `start_queued`.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
            napi::bindgen_prelude::spawn(job);
        }));
    };
    if jobs.len() > 1 {
        let mut batch: FuturesUnordered<_> = jobs
            .into_iter()
            .map(|job| AssertUnwindSafe(job).catch_unwind())
            .collect();
        spawn(Box::pin(
            async move { while batch.next().await.is_some() {} },
        ));
    } else if let Some(job) = jobs.pop() {
        spawn(job);
    }
}

/// Stops `bridge`'s function: later results are dropped.
fn close(bridge: &Bridge) {
    let queued = {
        let mut queue = bridge.queue();
        queue.closed = true;
        std::mem::take(&mut queue.done)
    };
    drop(queued);
    // No call of the function is under way once this lock is taken, and
    // none starts after.
    let tsfn = bridge.tsfn().take();
    if let Some(tsfn) = tsfn {
        unsafe {
            sys::napi_release_threadsafe_function(tsfn.0, sys::ThreadsafeFunctionReleaseMode::abort)
        };
    }
}

/// The environment tears down (the process exits, a worker ends): no
/// result may reach the function from now on.
unsafe extern "C" fn teardown(hook: *mut c_void) {
    let bridge = unsafe { Arc::from_raw(hook.cast::<Bridge>()) };
    close(&bridge);
    // Drops the calls not yet started: their promises go with the
    // environment.
    LOCAL.set(None);
}

/// The function's finalizer: gives back the bridge reference it held.
unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    drop(unsafe { Arc::from_raw(data.cast::<Bridge>()) });
}

/// The function's callback, on the event loop's thread: settles every
/// promise whose call finished.
unsafe extern "C" fn drain(
    env: sys::napi_env,
    _js_callback: sys::napi_value,
    context: *mut c_void,
    _data: *mut c_void,
) {
    if env.is_null() {
        return; // the function is being torn down
    }
    let bridge = unsafe { &*context.cast::<Bridge>() };
    let batch = {
        let mut queue = bridge.queue();
        queue.woken = false;
        std::mem::take(&mut queue.done)
    };
    let settled = batch.len();
    for done in batch {
        unsafe { settle(env, done) };
    }
    if let Some(local) = LOCAL.with_borrow(|l| l.clone()) {
        local.adjust(0, settled);
    }
}

/// Resolves or rejects one promise.
unsafe fn settle(env: sys::napi_env, done: Done) {
    let mut scope = ptr::null_mut();
    let opened = unsafe { sys::napi_open_handle_scope(env, &mut scope) } == sys::Status::napi_ok;
    match (done.outcome)(env) {
        Ok(value) => unsafe { sys::napi_resolve_deferred(env, done.deferred, value) },
        Err(error) => match unsafe { ToNapiValue::to_napi_value(env, error) } {
            Ok(value) => unsafe { sys::napi_reject_deferred(env, done.deferred, value) },
            // No error value could be made (the environment is failing):
            // the promise settles with `undefined` rather than never.
            Err(_) => {
                let mut undefined = ptr::null_mut();
                unsafe { sys::napi_get_undefined(env, &mut undefined) };
                unsafe { sys::napi_reject_deferred(env, done.deferred, undefined) }
            }
        },
    };
    if opened {
        unsafe { sys::napi_close_handle_scope(env, scope) };
    }
}

/// A promise's settling end, owned by its task. Dropped without a result
/// (the task panicked, or the runtime shut down under it), it rejects the
/// promise, so that no promise stays pending for ever.
struct Settler<T> {
    bridge: Arc<Bridge>,
    deferred: Option<Deferred>,
    _value: PhantomData<fn(T)>,
}

struct Deferred(sys::napi_deferred);

// SAFETY: as for `Done`.
unsafe impl Send for Deferred {}

impl<T: ToNapiValue + Send + 'static> Settler<T> {
    fn settle(mut self, result: napi::Result<T>) {
        if let Some(deferred) = self.deferred.take() {
            self.bridge.push(Done {
                deferred: deferred.0,
                outcome: Box::new(move |env| unsafe { T::to_napi_value(env, result?) }),
            });
        }
    }
}

impl<T> Drop for Settler<T> {
    fn drop(&mut self) {
        if let Some(deferred) = self.deferred.take() {
            self.bridge.push(Done {
                deferred: deferred.0,
                outcome: Box::new(|_| Err(errors::internal("the call ended without a result"))),
            });
        }
    }
}

/// Runs `fut` on the runtime and returns a promise of its result (an
/// `Err` rejects it), settled through the environment's bridge.
pub(crate) fn promise<'env, T, F>(env: &'env Env, fut: F) -> napi::Result<PromiseRaw<'env, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = napi::Result<T>> + Send + 'static,
{
    let raw_env = env.raw();
    let local = local(raw_env)?;
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    check_status!(
        unsafe { sys::napi_create_promise(raw_env, &mut deferred, &mut promise) },
        "cannot create a promise"
    )?;
    let settler = Settler::<T> {
        bridge: Arc::clone(&local.bridge),
        deferred: Some(Deferred(deferred)),
        _value: PhantomData,
    };
    local.adjust(1, 0);
    local.submit(Box::pin(async move {
        let result = fut.await;
        settler.settle(result);
    }));
    Ok(PromiseRaw::new(raw_env, promise))
}
