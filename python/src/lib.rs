//! `redlock_fenced._native`: the PyO3 extension under the `redlock-fenced`
//! Python package. It binds [`redlock_client`] (the one quorum
//! implementation) and adds only what Python needs around it: one shared
//! tokio runtime, blocking calls that release the GIL and react to Ctrl-C,
//! asyncio futures, and the mapping of errors onto the package's exceptions.
//! The Python layer (`pysrc/redlock_fenced`) checks arguments and gives the
//! public API its shape.

mod bridge;
mod client;
mod election;
mod errors;
mod fenced;
mod lock;
mod lock_set;
mod log;
mod metrics;
mod runtime;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    log::install();
    metrics::install();
    m.add_class::<client::Client>()?;
    m.add_class::<lock::NativeLock>()?;
    m.add_class::<lock::NativeGuard>()?;
    m.add_class::<lock::Signal>()?;
    m.add_class::<bridge::NativeFuture>()?;
    m.add_class::<lock_set::NativeLockSet>()?;
    m.add_function(wrap_pyfunction!(lock_set::acquire_many, m)?)?;
    m.add_function(wrap_pyfunction!(lock_set::acquire_many_async, m)?)?;
    m.add_function(wrap_pyfunction!(lock_set::try_acquire_many, m)?)?;
    m.add_function(wrap_pyfunction!(lock_set::try_acquire_many_async, m)?)?;
    m.add_class::<election::NativeLeadership>()?;
    m.add_class::<election::NativeObserver>()?;
    m.add_function(wrap_pyfunction!(election::campaign, m)?)?;
    m.add_function(wrap_pyfunction!(election::campaign_async, m)?)?;
    m.add_function(wrap_pyfunction!(election::leader, m)?)?;
    m.add_function(wrap_pyfunction!(election::leader_async, m)?)?;
    m.add_function(wrap_pyfunction!(election::observe, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::flush_background, m)?)?;
    m.add_function(wrap_pyfunction!(log::set_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::metrics, m)?)?;
    Ok(())
}
