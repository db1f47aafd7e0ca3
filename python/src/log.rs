//! `tracing` events of the client, forwarded to Python's `logging` (loggers
//! named after the Rust module, `redlock_client.quorum` and so on). Fields
//! named `owner` are never forwarded: the owner id is a secret.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyAnyMethods;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Most verbose level forwarded: 0 error, 1 warn, 2 info, 3 debug, 4 trace.
/// Each record attaches to the interpreter from a runtime thread, so the
/// default is warn; `REDLOCK_FENCED_LOG=debug` or `set_log_level` raises it.
static MAX_LEVEL: AtomicU8 = AtomicU8::new(1);

fn rank(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 0,
        Level::WARN => 1,
        Level::INFO => 2,
        Level::DEBUG => 3,
        Level::TRACE => 4,
    }
}

fn parse(name: &str) -> Option<u8> {
    match name.to_ascii_lowercase().as_str() {
        "error" => Some(0),
        "warn" | "warning" => Some(1),
        "info" => Some(2),
        "debug" => Some(3),
        "trace" => Some(4),
        _ => None,
    }
}

/// Installs the bridge as this extension's global `tracing` subscriber.
pub(crate) fn install() {
    if let Some(level) = std::env::var("REDLOCK_FENCED_LOG")
        .ok()
        .and_then(|v| parse(&v))
    {
        MAX_LEVEL.store(level, Ordering::Relaxed);
    }
    let subscriber = tracing_subscriber::registry().with(PyLogLayer.with_filter(LevelGate));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Sets the most verbose level forwarded to `logging` (`"error"`,
/// `"warning"`, `"info"`, `"debug"`, `"trace"`).
#[pyfunction]
pub(crate) fn set_log_level(level: &str) -> PyResult<()> {
    let rank = parse(level).ok_or_else(|| {
        crate::errors::invalid(format!(
            "log level must be error, warning, info, debug or trace, got {level:?}"
        ))
    })?;
    MAX_LEVEL.store(rank, Ordering::Relaxed);
    tracing::callsite::rebuild_interest_cache();
    Ok(())
}

/// Lets through the events and spans `MAX_LEVEL` allows. A span of a
/// level that is not forwarded is not recorded either: the client opens a
/// debug span for every acquire and release, and recording each one (its
/// fields formatted, a registry slot taken and looked up on every poll)
/// cost the asyncio path several percent of its CPU for context that no
/// forwarded record used (the client's warnings carry their key, token or
/// node themselves).
struct LevelGate;

impl<S> Filter<S> for LevelGate {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        rank(meta.level()) <= MAX_LEVEL.load(Ordering::Relaxed)
    }

    /// Lets `tracing`'s macros skip whatever is more verbose than
    /// `MAX_LEVEL` before building anything (`set_log_level` rebuilds the
    /// callsites' interest when it changes).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(match MAX_LEVEL.load(Ordering::Relaxed) {
            0 => LevelFilter::ERROR,
            1 => LevelFilter::WARN,
            2 => LevelFilter::INFO,
            3 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        })
    }
}

/// The formatted fields of a span, kept in the registry.
struct SpanFields(String);

/// Formats fields as ` name=value`, leaving out `owner`; the `message`
/// field goes to `message`.
struct Fields<'a> {
    message: &'a mut String,
    rest: &'a mut String,
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "owner" => {}
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "owner" => {}
            "message" => self.message.push_str(value),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }
}

struct PyLogLayer;

impl<S> Layer<S> for PyLogLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let (mut message, mut rest) = (String::new(), String::new());
        attrs.record(&mut Fields {
            message: &mut message,
            rest: &mut rest,
        });
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(rest));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let (mut message, mut rest) = (String::new(), String::new());
        values.record(&mut Fields {
            message: &mut message,
            rest: &mut rest,
        });
        let mut ext = span.extensions_mut();
        if let Some(fields) = ext.get_mut::<SpanFields>() {
            fields.0.push_str(&rest);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let (mut message, mut rest) = (String::new(), String::new());
        event.record(&mut Fields {
            message: &mut message,
            rest: &mut rest,
        });
        let mut text = String::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let ext = span.extensions();
                let fields = ext.get::<SpanFields>().map(|f| f.0.as_str()).unwrap_or("");
                let _ = write!(text, "{}{{{}}}: ", span.name(), fields.trim_start());
            }
        }
        text.push_str(&message);
        text.push_str(&rest);
        let meta = event.metadata();
        let logger = meta.target().replace("::", ".");
        let level: u8 = match *meta.level() {
            Level::ERROR => 40,
            Level::WARN => 30,
            Level::INFO => 20,
            Level::DEBUG => 10,
            Level::TRACE => 5,
        };
        // Not at all during interpreter shutdown.
        Python::try_attach(|py| {
            let result = py.import("logging").and_then(|logging| {
                logging
                    .call_method1("getLogger", (logger,))?
                    .call_method1("log", (level, "%s", text))
            });
            if let Err(e) = result {
                e.write_unraisable(py, None);
            }
        });
    }
}
