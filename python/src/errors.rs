//! The one place where Rust errors become the package's exceptions (defined
//! in Python, `redlock_fenced.errors`, with the error's detail as
//! attributes). The owner id never appears in any of them.

use std::time::Duration;

use pyo3::prelude::*;
use redlock_client::Error;

mod py {
    pyo3::import_exception!(redlock_fenced.errors, LockError);
    pyo3::import_exception!(redlock_fenced.errors, LockBusyError);
    pyo3::import_exception!(redlock_fenced.errors, NoQuorumError);
    pyo3::import_exception!(redlock_fenced.errors, RestartGuardError);
    pyo3::import_exception!(redlock_fenced.errors, LockLostError);
    pyo3::import_exception!(redlock_fenced.errors, ExpiredBeforeUseError);
    pyo3::import_exception!(redlock_fenced.errors, ModuleNotLoadedError);
    pyo3::import_exception!(redlock_fenced.errors, PermissionDeniedError);
    pyo3::import_exception!(redlock_fenced.errors, InvalidArgumentError);
    pyo3::import_exception!(redlock_fenced.errors, LockStateError);
    pyo3::import_exception!(redlock_fenced.errors, StaleTokenError);
    pyo3::import_exception!(redlock_fenced.errors, ResourceError);
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Maps a client error. `token` is the lock's token when the error is about
/// a held lock (for `LockLostError.token`).
pub(crate) fn lock_error(e: Error, token: Option<u64>) -> PyErr {
    let message = e.to_string();
    match e {
        Error::Busy { holders, nodes } => py::LockBusyError::new_err((message, holders, nodes)),
        Error::NoQuorum {
            nodes,
            quorum,
            answered,
            errors,
        } => py::NoQuorumError::new_err((message, nodes, quorum, answered, errors)),
        Error::RestartGuard { nodes, retry_after } => {
            py::RestartGuardError::new_err((message, nodes, retry_after.map(secs)))
        }
        Error::Lost { key, .. } | Error::Lapsed { key, .. } => {
            py::LockLostError::new_err((message, key, token))
        }
        Error::ExpiredBeforeUse { ttl, elapsed } => {
            py::ExpiredBeforeUseError::new_err((message, secs(ttl), secs(elapsed)))
        }
        Error::ModuleNotLoaded { node } => {
            py::ModuleNotLoadedError::new_err((message, node, false))
        }
        Error::ResourceModuleNotLoaded { resource, .. } => {
            py::ModuleNotLoadedError::new_err((message, resource.unwrap_or_default(), true))
        }
        Error::PermissionDenied { nodes, detail } => {
            py::PermissionDeniedError::new_err((message, nodes, detail))
        }
        Error::InvalidArgument(_) => py::InvalidArgumentError::new_err((message,)),
        Error::Stale {
            guard,
            token,
            highest,
        } => py::StaleTokenError::new_err((message, String::new(), token, guard, highest)),
        Error::Resource(detail) => py::ResourceError::new_err((message, detail)),
        // `Error` is non-exhaustive: a future variant is still a LockError.
        _ => py::LockError::new_err((message,)),
    }
}

/// Maps an error of a fenced command run with the lock on `key`
/// (`StaleTokenError.key` names it).
pub(crate) fn fenced_error(e: Error, key: &str) -> PyErr {
    let message = e.to_string();
    match e {
        Error::Stale {
            guard,
            token,
            highest,
        } => py::StaleTokenError::new_err((message, key.to_string(), token, guard, highest)),
        other => lock_error(other, None),
    }
}

/// `InvalidArgumentError` (also a `ValueError`).
pub(crate) fn invalid(message: String) -> PyErr {
    py::InvalidArgumentError::new_err((format!("invalid argument: {message}"),))
}

/// `LockStateError` (also a `RuntimeError`): a released lock, a closed
/// client, a fork child.
pub(crate) fn state(message: &str) -> PyErr {
    py::LockStateError::new_err((message.to_string(),))
}

/// A task of the binding panicked or was cancelled unexpectedly: reported as
/// a `LockError`, never as a Rust panic exception.
pub(crate) fn internal(detail: &str) -> PyErr {
    py::LockError::new_err((format!("internal error in redlock_fenced: {detail}"),))
}

/// A duration given in seconds, checked: finite, at least `min`, at most
/// `max` (Python checks first; this keeps a bad value from ever reaching a
/// panicking conversion).
pub(crate) fn duration(name: &str, seconds: f64, min: f64, max: f64) -> PyResult<Duration> {
    if !seconds.is_finite() || seconds < min || seconds > max {
        return Err(invalid(format!(
            "{name} must be a finite number of seconds from {min} to {max}, got {seconds}"
        )));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| invalid(format!("{name}: {e}")))
}
