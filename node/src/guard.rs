//! `NativeGuard`: a lock the client's keeper extends in the background
//! while a `using()` routine runs (`Redlock::with_lock`, so the extension
//! rule is the crate's own), with a promise that settles when it is lost.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::{Buffer, Either, Env, PromiseRaw};
use napi_derive::napi;
use redlock_client::{CancellationToken, Error, LockGuard, Redlock};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::errors;
use crate::fenced::{Reply, Resources};
use crate::lock;

/// A lock kept alive in the background until `exit()`.
#[napi]
pub struct NativeGuard {
    guard: LockGuard,
    /// The client's connections to resource servers.
    resources: Arc<Resources>,
    /// Fired (or dropped) when the routine ends: the keeper then releases.
    done: Mutex<Option<oneshot::Sender<()>>>,
    /// Cancelled once the hold ended, so that a pending `lost()` settles.
    ended: CancellationToken,
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
    /// out the guard and then waits for `exit()`. Dropping this future
    /// (an aborted call) aborts the task: a dropped acquisition releases
    /// what it may hold, a running keeper releases the lock.
    pub(crate) async fn start(
        redlock: Redlock,
        resources: Arc<Resources>,
        key: String,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> napi::Result<NativeGuard> {
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
        let mut task = AbortOnDrop(Some(task));
        match guard_rx.await {
            Ok(guard) => Ok(NativeGuard {
                guard,
                resources,
                done: Mutex::new(Some(done_tx)),
                ended: CancellationToken::new(),
                task: Mutex::new(task.0.take()),
            }),
            Err(_) => {
                let Some(handle) = task.0.take() else {
                    return Err(errors::internal("hold task missing"));
                };
                match handle.await {
                    Ok(Err(e)) => Err(errors::lock_error(e, None)),
                    Ok(Ok(())) => Err(errors::internal("hold ended before the routine ran")),
                    Err(join) => Err(errors::internal(&join.to_string())),
                }
            }
        }
    }

    /// Refuses a fenced command once the hold has ended (the lock was
    /// released then).
    fn check_fenceable(&self) -> napi::Result<()> {
        if self
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            return Err(errors::state(
                "cannot run a fenced command with the lock: its using() routine has ended",
            ));
        }
        Ok(())
    }
}

#[napi]
impl NativeGuard {
    /// The lock's name.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.guard.key().to_string()
    }

    /// The fencing token.
    #[napi(getter)]
    pub fn token(&self) -> u64 {
        self.guard.token()
    }

    /// Milliseconds of validity left (follows the background extensions);
    /// 0 once lost.
    #[napi]
    pub fn validity(&self) -> f64 {
        if self.guard.is_lost() {
            return 0.0;
        }
        self.guard.validity().as_secs_f64() * 1000.0
    }

    /// Whether the lock was lost (an extension failed or the validity ran
    /// out first).
    #[napi(getter)]
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Settles with `true` when the lock is lost, or with `false` once the
    /// hold ended without that (so that nothing stays pending).
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn lost<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, bool>> {
        let lost = self.guard.lost_token();
        let ended = self.ended.clone();
        crate::settle::promise(env, async move {
            tokio::select! {
                biased;
                () = lost.cancelled() => Ok(true),
                () = ended.cancelled() => Ok(lost.is_cancelled()),
            }
        })
    }

    /// Ends the hold: stops the keeper, which releases the lock, and waits
    /// for that release.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn exit<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        if let Some(done) = self.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = done.send(());
        }
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        let ended = self.ended.clone();
        crate::settle::promise(env, async move {
            if let Some(task) = task {
                // The keeper's release is bounded by the node timeout.
                let _ = task.await;
            }
            ended.cancel();
            Ok(())
        })
    }

    /// Runs `args` on `target` fenced by this lock's token on `guard`.
    #[napi(ts_return_type = "Promise<unknown>")]
    pub fn fenced<'env>(
        &self,
        env: &'env Env,
        target: Either<String, Vec<String>>,
        guard: String,
        args: Vec<Either<String, Buffer>>,
    ) -> napi::Result<PromiseRaw<'env, Reply>> {
        self.check_fenceable()?;
        lock::fenced(
            env,
            self.guard.clone(),
            &self.resources,
            target,
            guard,
            args,
        )
    }

    /// Runs `commands` fenced by this lock's token in one MULTI/EXEC.
    #[napi(ts_return_type = "Promise<unknown>")]
    pub fn fenced_transaction<'env>(
        &self,
        env: &'env Env,
        target: Either<String, Vec<String>>,
        guard: String,
        commands: Vec<Vec<Either<String, Buffer>>>,
    ) -> napi::Result<PromiseRaw<'env, Reply>> {
        self.check_fenceable()?;
        lock::fenced_transaction(
            env,
            self.guard.clone(),
            &self.resources,
            target,
            guard,
            commands,
        )
    }

    /// Shows this lock's token to `guard` on `target`.
    #[napi(ts_return_type = "Promise<bigint>")]
    pub fn announce<'env>(
        &self,
        env: &'env Env,
        target: Either<String, Vec<String>>,
        guard: String,
    ) -> napi::Result<PromiseRaw<'env, u64>> {
        self.check_fenceable()?;
        lock::announce(env, self.guard.clone(), &self.resources, target, guard)
    }
}

impl Drop for NativeGuard {
    fn drop(&mut self) {
        // A guard garbage-collected before its exit(): the keeper releases.
        if let Some(done) = self.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = done.send(());
        }
        self.ended.cancel();
    }
}
