//! `NativeLock`: one acquisition (the TypeScript `Lock` wraps it), and the
//! fenced commands every held lock can send (shared with `NativeGuard`).

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use napi::bindgen_prelude::{Buffer, Either, Env, PromiseRaw};
use napi_derive::napi;
use redlock_client::{Lock, LockInfo};

use crate::errors::{self, DAY_MS};
use crate::fenced::{Reply, Resources, Target};

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

/// What a `NativeLock` shares with the calls working on it.
struct Shared {
    slot: Mutex<Slot>,
    /// Set when an extension failed: the token must not be used again.
    lost: AtomicBool,
}

impl Shared {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the lock out for one call; it goes back when the returned value
    /// is dropped, unless the call consumed it.
    fn take(self: &Arc<Self>, what: &str) -> napi::Result<Taken> {
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
/// puts the lock back.
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

/// One acquisition.
#[napi]
pub struct NativeLock {
    key: String,
    token: u64,
    shared: Arc<Shared>,
    /// Key, token and validity, usable while an extend runs.
    info: Arc<LockInfo>,
    /// The client's connections to resource servers.
    resources: Arc<Resources>,
    /// The runtime that made the lock, for a background release on drop.
    runtime: Option<tokio::runtime::Handle>,
}

impl NativeLock {
    /// Wraps a fresh lock of a client with these resource connections.
    pub(crate) fn new(lock: Lock, resources: Arc<Resources>) -> Self {
        NativeLock {
            key: lock.key().to_string(),
            token: lock.token(),
            info: Arc::clone(lock.info()),
            resources,
            runtime: tokio::runtime::Handle::try_current().ok(),
            shared: Arc::new(Shared {
                slot: Mutex::new(Slot::Held(lock)),
                lost: AtomicBool::new(false),
            }),
        }
    }

    /// Refuses a fenced command on a released or detached lock (a held or
    /// busy one may run it: the resource's guard decides).
    fn check_fenceable(&self) -> napi::Result<()> {
        match self.shared.slot().describe() {
            state @ ("released" | "detached") => Err(errors::state(&format!(
                "cannot run a fenced command with the lock: it was already {state}"
            ))),
            _ => Ok(()),
        }
    }
}

#[napi]
impl NativeLock {
    /// The lock's name.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.key.clone()
    }

    /// The fencing token.
    #[napi(getter)]
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Milliseconds of validity left; 0 once it ran out, after a failed
    /// extension, and once released.
    #[napi]
    pub fn validity(&self) -> f64 {
        if self.shared.lost.load(Ordering::Acquire) {
            return 0.0;
        }
        self.info.validity().as_secs_f64() * 1000.0
    }

    /// `"held"`, `"busy"`, `"released"` or `"detached"`.
    #[napi]
    pub fn state(&self) -> String {
        self.shared.slot().describe().to_string()
    }

    /// Extends the lease to `ttl` ms from now on a quorum of nodes.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn extend<'env>(&self, env: &'env Env, ttl_ms: f64) -> napi::Result<PromiseRaw<'env, ()>> {
        let ttl = errors::duration("ttl", ttl_ms, 1.0, DAY_MS)?;
        let mut taken = self.shared.take("extend")?;
        let (key, token) = (self.key.clone(), self.token);
        crate::settle::promise(env, async move {
            let Some(lock) = taken.lock.as_mut() else {
                return Err(errors::internal("extend without a lock"));
            };
            lock.extend(ttl).await.map_err(|e| {
                // After a failed extension the token must not be used again.
                taken.shared.lost.store(true, Ordering::Release);
                errors::lock_error(e, Some((&key, token)))
            })
        })
    }

    /// Releases the lock: true when it was still held.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, bool>> {
        let mut taken = self.shared.take("release")?;
        let (key, token) = (self.key.clone(), self.token);
        crate::settle::promise(env, async move {
            let Some(lock) = taken.lock.take() else {
                return Err(errors::internal("release without a lock"));
            };
            *taken.shared.slot() = Slot::Released;
            lock.release()
                .await
                .map_err(|e| errors::lock_error(e, Some((&key, token))))
        })
    }

    /// Stops tracking the lock without releasing it; returns the owner id
    /// (a secret: anyone who has it can release the lock).
    #[napi]
    pub fn detach(&self) -> napi::Result<String> {
        let mut taken = self.shared.take("detach")?;
        match taken.lock.take() {
            Some(lock) => {
                *taken.shared.slot() = Slot::Detached;
                Ok(lock.detach())
            }
            None => Err(errors::internal("detach without a lock")),
        }
    }

    /// Runs `args` on `target` fenced by this lock's token on `guard`: the
    /// command's reply.
    #[napi(ts_return_type = "Promise<unknown>")]
    pub fn fenced<'env>(
        &self,
        env: &'env Env,
        target: Either<String, Vec<String>>,
        guard: String,
        args: Vec<Either<String, Buffer>>,
    ) -> napi::Result<PromiseRaw<'env, Reply>> {
        self.check_fenceable()?;
        fenced(
            env,
            Arc::clone(&self.info),
            &self.resources,
            target,
            guard,
            args,
        )
    }

    /// Runs `commands` fenced by this lock's token on `guard` in one
    /// MULTI/EXEC on `target`: the list of their replies.
    #[napi(ts_return_type = "Promise<unknown>")]
    pub fn fenced_transaction<'env>(
        &self,
        env: &'env Env,
        target: Either<String, Vec<String>>,
        guard: String,
        commands: Vec<Vec<Either<String, Buffer>>>,
    ) -> napi::Result<PromiseRaw<'env, Reply>> {
        self.check_fenceable()?;
        fenced_transaction(
            env,
            Arc::clone(&self.info),
            &self.resources,
            target,
            guard,
            commands,
        )
    }

    /// Shows this lock's token to `guard` on `target` (`REDLOCK.GUARD`):
    /// the guard's highest token.
    #[napi(ts_return_type = "Promise<bigint>")]
    pub fn announce<'env>(
        &self,
        env: &'env Env,
        target: Either<String, Vec<String>>,
        guard: String,
    ) -> napi::Result<PromiseRaw<'env, u64>> {
        self.check_fenceable()?;
        announce(env, Arc::clone(&self.info), &self.resources, target, guard)
    }
}

impl Drop for NativeLock {
    fn drop(&mut self) {
        // A lock garbage-collected while held is released in the background
        // (the client's `Lock` does that when it finds a runtime). At exit the
        // runtime may be shut down already: spawning then does nothing (the
        // lease runs out), and nothing here may panic inside a finalizer.
        let taken = std::mem::replace(&mut *self.shared.slot(), Slot::Released);
        if let Slot::Held(lock) = taken {
            let runtime = self.runtime.take();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || match runtime {
                Some(handle) => {
                    let _entered = handle.enter();
                    drop(lock);
                }
                None => std::mem::forget(lock),
            }));
        }
    }
}

/// A command's arguments, copied out of JavaScript.
fn byte_args(args: Vec<Either<String, Buffer>>) -> Vec<Vec<u8>> {
    args.into_iter()
        .map(|a| match a {
            Either::A(text) => text.into_bytes(),
            Either::B(bytes) => bytes.to_vec(),
        })
        .collect()
}

/// `REDLOCK.FENCED` with the lock `info` (an `Arc<LockInfo>` or a
/// `LockGuard`) on `target`.
pub(crate) fn fenced<'env, I: Deref<Target = LockInfo> + Send + 'static>(
    env: &'env Env,
    info: I,
    resources: &Arc<Resources>,
    target: Either<String, Vec<String>>,
    guard: String,
    args: Vec<Either<String, Buffer>>,
) -> napi::Result<PromiseRaw<'env, Reply>> {
    let target = Target::from_js(target);
    let args = byte_args(args);
    let resources = Arc::clone(resources);
    crate::settle::promise(env, async move {
        resources
            .fenced(&info, &target, &guard, &args)
            .await
            .map_err(|e| errors::lock_error(e, Some((info.key(), info.token()))))
    })
}

/// A fenced transaction with the lock `info` on `target`.
pub(crate) fn fenced_transaction<'env, I: Deref<Target = LockInfo> + Send + 'static>(
    env: &'env Env,
    info: I,
    resources: &Arc<Resources>,
    target: Either<String, Vec<String>>,
    guard: String,
    commands: Vec<Vec<Either<String, Buffer>>>,
) -> napi::Result<PromiseRaw<'env, Reply>> {
    let target = Target::from_js(target);
    let commands: Vec<Vec<Vec<u8>>> = commands.into_iter().map(byte_args).collect();
    let resources = Arc::clone(resources);
    crate::settle::promise(env, async move {
        resources
            .fenced_transaction(&info, &target, &guard, &commands)
            .await
            .map_err(|e| errors::lock_error(e, Some((info.key(), info.token()))))
    })
}

/// `REDLOCK.GUARD` with the lock `info` on `target`.
pub(crate) fn announce<'env, I: Deref<Target = LockInfo> + Send + 'static>(
    env: &'env Env,
    info: I,
    resources: &Arc<Resources>,
    target: Either<String, Vec<String>>,
    guard: String,
) -> napi::Result<PromiseRaw<'env, u64>> {
    let target = Target::from_js(target);
    let resources = Arc::clone(resources);
    crate::settle::promise(env, async move {
        resources
            .announce(&info, &target, &guard)
            .await
            .map_err(|e| errors::lock_error(e, Some((info.key(), info.token()))))
    })
}
