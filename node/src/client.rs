//! `NativeRedlock`: a connected `redlock_client::Redlock` (the TypeScript
//! `Redlock` wraps it), `connect`, and `CancelHandle`, through which an
//! `AbortSignal` stops a call.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use napi::bindgen_prelude::{Either3, Env, PromiseRaw, ToNapiValue};
use napi_derive::napi;
use redlock_client::{CancellationToken, Error, Member, NodeState, Redlock, RetryPolicy};

use crate::errors::{self, DAY_MS};
use crate::fenced::Resources;
use crate::guard::NativeGuard;
use crate::lock::NativeLock;

/// The options of `connect`, checked and filled in by the TypeScript layer
/// (durations in milliseconds).
#[napi(object)]
pub struct NativeOptions {
    pub node_timeout: f64,
    pub connect_timeout: f64,
    pub retry_attempts: u32,
    pub retry_base_delay: f64,
    pub retry_jitter: f64,
    pub drift_factor: f64,
    pub clock_floor: bool,
    pub tls_ca_file: Option<String>,
    pub tls_cert_file: Option<String>,
    pub tls_key_file: Option<String>,
    /// Bound on the replica-sync check's `WAIT`.
    pub sync_timeout: f64,
}

/// A Sentinel member as the TypeScript `Sentinel(...)` gives it.
#[napi(object)]
pub struct NativeSentinel {
    /// The master's name in Sentinel.
    pub name: String,
    /// The sentinels' URLs.
    pub sentinels: Vec<String>,
    /// The data nodes' ACL user.
    pub data_user: Option<String>,
    /// The data nodes' password.
    pub data_password: Option<String>,
    /// The data nodes serve TLS.
    pub data_tls: bool,
}

/// One member's view of a lock (see `Redlock::inspect` in the client).
#[napi(object, object_from_js = false)]
pub struct NativeNodeView {
    /// `host:port`, or `cluster(host:port,…)` for a cluster member.
    pub node: String,
    /// `"missing"`, `"present"` or `"error"`.
    pub state: String,
    pub held: bool,
    /// Milliseconds left on the lease, when held.
    pub ttl: Option<f64>,
    /// The node's fencing counter for the key.
    pub token: Option<u64>,
    pub error: Option<String>,
    /// For a cluster member: the address of the shard master that answered.
    pub shard: Option<String>,
}

/// A flag an `AbortSignal` sets; a call given one stops when it is set.
#[napi]
pub struct CancelHandle {
    token: CancellationToken,
}

#[napi]
impl CancelHandle {
    /// A handle not yet cancelled.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        CancelHandle {
            token: CancellationToken::new(),
        }
    }

    /// Stops the call this handle was given to.
    #[napi]
    pub fn cancel(&self) {
        self.token.cancel();
    }
}

/// Runs `fut` unless `cancel` fires first; then `fut` is dropped (the
/// client's acquire paths release what a dropped attempt may hold).
pub(crate) async fn cancellable<T>(
    cancel: Option<CancellationToken>,
    fut: impl Future<Output = napi::Result<T>>,
) -> napi::Result<T> {
    match cancel {
        None => fut.await,
        Some(token) => {
            tokio::select! {
                biased;
                () = token.cancelled() => Err(errors::aborted()),
                result = fut => result,
            }
        }
    }
}

/// A connected client.
#[napi]
pub struct NativeRedlock {
    redlock: RwLock<Option<Redlock>>,
    nodes: Vec<String>,
    quorum: u32,
    /// Connections to the servers of fenced resources, shared by the locks.
    resources: Arc<Resources>,
}

/// The TLS files `connect` got, for the connections to `rediss://`
/// resources (the builder keeps its own copy for the nodes).
struct TlsFiles {
    ca: Option<PathBuf>,
    client: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// The certificates, read once the builder has checked the same files;
    /// `None` without TLS files.
    fn load(&self) -> Result<Option<redis::TlsCertificates>, Error> {
        if self.ca.is_none() && self.client.is_none() {
            return Ok(None);
        }
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| {
                Error::InvalidArgument(format!("cannot read the TLS file {}: {e}", path.display()))
            })
        };
        let root_cert = self.ca.as_ref().map(read).transpose()?;
        let client_tls = match &self.client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// Connects to `members` (URLs, lists of a cluster's seed URLs, or Sentinel
/// members).
#[napi(ts_return_type = "Promise<NativeRedlock>")]
pub fn connect<'env>(
    env: &'env Env,
    members: Vec<Either3<String, Vec<String>, NativeSentinel>>,
    options: NativeOptions,
) -> napi::Result<PromiseRaw<'env, NativeRedlock>> {
    let list: Vec<Member> = members
        .into_iter()
        .map(|m| match m {
            Either3::A(url) => Member::node(url),
            Either3::B(seeds) => Member::cluster(seeds),
            Either3::C(s) => {
                let mut member = Member::sentinel(s.name, s.sentinels);
                if let Some(password) = &s.data_password {
                    member = member.data_credentials(s.data_user.as_deref(), password);
                }
                if s.data_tls {
                    member = member.data_tls();
                }
                member
            }
        })
        .collect();
    if !options.drift_factor.is_finite() {
        return Err(errors::config(
            "driftFactor",
            format!("driftFactor must be in 0..1, got {}", options.drift_factor),
        ));
    }
    let connect_timeout = errors::duration("connectTimeout", options.connect_timeout, 1.0, DAY_MS)?;
    let mut builder = Redlock::builder(list)
        .node_timeout(errors::duration(
            "nodeTimeout",
            options.node_timeout,
            1.0,
            DAY_MS,
        )?)
        .connect_timeout(connect_timeout)
        .sync_timeout(errors::duration(
            "syncTimeout",
            options.sync_timeout,
            1.0,
            DAY_MS,
        )?)
        .retry(RetryPolicy {
            attempts: options.retry_attempts,
            base_delay: errors::duration("retry.baseDelay", options.retry_base_delay, 0.0, DAY_MS)?,
            jitter: errors::duration("retry.jitter", options.retry_jitter, 0.0, DAY_MS)?,
        })
        .drift_factor(options.drift_factor)
        .clock_floor(options.clock_floor);
    let tls = TlsFiles {
        ca: options.tls_ca_file.map(PathBuf::from),
        client: match (options.tls_cert_file, options.tls_key_file) {
            (Some(cert), Some(key)) => Some((cert.into(), key.into())),
            (None, None) => None,
            _ => {
                return Err(errors::config(
                    "tls",
                    "tls.cert and tls.key go together: give both or neither".into(),
                ))
            }
        },
    };
    if let Some(ca) = &tls.ca {
        builder = builder.tls_ca_file(ca);
    }
    if let Some((cert, key)) = &tls.client {
        builder = builder.tls_client_cert(cert, key);
    }
    crate::settle::promise(env, async move {
        let redlock = builder
            .build()
            .await
            .map_err(|e| errors::lock_error(e, None))?;
        let certs = tls.load().map_err(|e| errors::lock_error(e, None))?;
        Ok(NativeRedlock {
            nodes: redlock.nodes(),
            quorum: redlock.quorum() as u32,
            redlock: RwLock::new(Some(redlock)),
            resources: Resources::new(connect_timeout, certs),
        })
    })
}

fn ttl(ms: f64) -> napi::Result<Duration> {
    errors::duration("ttl", ms, 1.0, DAY_MS)
}

fn wait(ms: Option<f64>) -> napi::Result<Option<Duration>> {
    ms.map(|w| errors::duration("wait", w, 0.0, DAY_MS))
        .transpose()
}

/// `Option<T>` as `T | null` for a promise's value.
pub struct Nullable<T>(pub(crate) Option<T>);

impl<T: ToNapiValue> ToNapiValue for Nullable<T> {
    unsafe fn to_napi_value(
        env: napi::sys::napi_env,
        val: Self,
    ) -> napi::Result<napi::sys::napi_value> {
        unsafe {
            match val.0 {
                Some(v) => T::to_napi_value(env, v),
                None => {
                    napi::bindgen_prelude::Null::to_napi_value(env, napi::bindgen_prelude::Null)
                }
            }
        }
    }
}

#[napi]
impl NativeRedlock {
    fn get(&self) -> napi::Result<Redlock> {
        self.redlock
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| errors::state("the client is closed"))
    }

    /// The members' addresses, in the order given.
    #[napi(getter)]
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.clone()
    }

    /// How many members must agree.
    #[napi(getter)]
    pub fn quorum(&self) -> u32 {
        self.quorum
    }

    /// Takes the lock; `wait` ms waits for a busy lock (woken by the nodes).
    #[napi(ts_return_type = "Promise<NativeLock>")]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        key: String,
        ttl_ms: f64,
        wait_ms: Option<f64>,
        cancel: Option<&CancelHandle>,
    ) -> napi::Result<PromiseRaw<'env, NativeLock>> {
        let redlock = self.get()?;
        let resources = Arc::clone(&self.resources);
        let ttl = ttl(ttl_ms)?;
        let wait = wait(wait_ms)?;
        let cancel = cancel.map(|c| c.token.clone());
        crate::settle::promise(
            env,
            cancellable(cancel, async move {
                let lock = match wait {
                    None => redlock.acquire(&key, ttl).await,
                    Some(w) => redlock.acquire_wait(&key, ttl, w).await,
                };
                lock.map(|l| NativeLock::new(l, resources))
                    .map_err(|e| errors::lock_error(e, None))
            }),
        )
    }

    /// One attempt: `null` when another owner holds the lock.
    #[napi(ts_return_type = "Promise<NativeLock | null>")]
    pub fn try_acquire<'env>(
        &self,
        env: &'env Env,
        key: String,
        ttl_ms: f64,
        cancel: Option<&CancelHandle>,
    ) -> napi::Result<PromiseRaw<'env, Nullable<NativeLock>>> {
        let redlock = self.get()?;
        let resources = Arc::clone(&self.resources);
        let ttl = ttl(ttl_ms)?;
        let cancel = cancel.map(|c| c.token.clone());
        crate::settle::promise(
            env,
            cancellable(cancel, async move {
                let lock = redlock.try_acquire(&key, ttl).await;
                lock.map(|l| Nullable(l.map(|l| NativeLock::new(l, resources))))
                    .map_err(|e| errors::lock_error(e, None))
            }),
        )
    }

    /// Takes the lock and keeps it extended in the background until the
    /// guard's `exit()`; `wait` ms waits for a busy lock.
    #[napi(ts_return_type = "Promise<NativeGuard>")]
    pub fn hold<'env>(
        &self,
        env: &'env Env,
        key: String,
        ttl_ms: f64,
        wait_ms: Option<f64>,
        cancel: Option<&CancelHandle>,
    ) -> napi::Result<PromiseRaw<'env, NativeGuard>> {
        let redlock = self.get()?;
        let ttl = ttl(ttl_ms)?;
        let wait = wait(wait_ms)?;
        let cancel = cancel.map(|c| c.token.clone());
        let resources = Arc::clone(&self.resources);
        crate::settle::promise(
            env,
            cancellable(
                cancel,
                NativeGuard::start(redlock, resources, key, ttl, wait),
            ),
        )
    }

    /// Releases `key` for an owner id (from `Lock.detach()`).
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn release_owner<'env>(
        &self,
        env: &'env Env,
        key: String,
        owner: String,
    ) -> napi::Result<PromiseRaw<'env, bool>> {
        let redlock = self.get()?;
        crate::settle::promise(env, async move {
            redlock
                .release_owner(&key, &owner)
                .await
                .map_err(|e| errors::lock_error(e, None))
        })
    }

    /// Every member's view of `key`, read-only.
    #[napi(ts_return_type = "Promise<Array<NativeNodeView>>")]
    pub fn inspect<'env>(
        &self,
        env: &'env Env,
        key: String,
    ) -> napi::Result<PromiseRaw<'env, Vec<NativeNodeView>>> {
        let redlock = self.get()?;
        crate::settle::promise(env, async move {
            let views = redlock.inspect(&key).await;
            Ok(views
                .into_iter()
                .map(|v| {
                    let shard = v.shard.map(|s| s.addr);
                    let mut view = NativeNodeView {
                        node: v.node,
                        state: "missing".into(),
                        held: false,
                        ttl: None,
                        token: None,
                        error: None,
                        shard,
                    };
                    match v.state {
                        NodeState::Missing => {}
                        NodeState::Present { held, pttl, token } => {
                            view.state = "present".into();
                            view.held = held;
                            view.ttl = pttl.map(|d| d.as_secs_f64() * 1000.0);
                            view.token = Some(token);
                        }
                        NodeState::Error(e) => {
                            view.state = "error".into();
                            view.error = Some(e);
                        }
                    }
                    view
                })
                .collect())
        })
    }

    /// Drops the connections; later calls reject with `LockStateError`.
    /// Locks already taken keep their own reference and can be released.
    #[napi]
    pub fn close(&self) {
        self.redlock
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Whether `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.redlock
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}
