//! How an error from redis-rs becomes a [`NodeFailure`]: the one place the
//! client reads the redis crate's error kinds (the failures themselves are
//! pure, in `core/error.rs`).

use crate::core::error::NodeFailure;

/// Classifies an error from redis-rs. The boolean is true when the
/// connection itself is broken and must be replaced.
pub(crate) fn node_failure(err: &redis::RedisError) -> (NodeFailure, bool) {
    use redis::ErrorKind;
    match err.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => {
            let code = err.code().unwrap_or("ERR");
            let detail = err.detail().unwrap_or("");
            let text = format!("{code} {detail}");
            let failure = if detail.starts_with("unknown command") {
                NodeFailure::ModuleNotLoaded
            } else if code == "GRACE" {
                NodeFailure::Grace {
                    remaining: parse_grace_remaining(detail),
                    message: text,
                }
            } else if code == "NOAUTH" || code == "WRONGPASS" {
                NodeFailure::AuthFailed(text)
            } else if code == "NOPERM" {
                NodeFailure::NoPermission(text)
            } else if code == "ERR" && detail.starts_with("invalid ") {
                NodeFailure::BadArgument(text)
            } else {
                NodeFailure::Refused(text)
            };
            (failure, false)
        }
        _ if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error() => {
            (NodeFailure::Connection(err.to_string()), true)
        }
        _ => (NodeFailure::Refused(err.to_string()), false),
    }
}

/// `… new locks are refused for 1234 more ms …` → 1234 ms.
fn parse_grace_remaining(detail: &str) -> Option<std::time::Duration> {
    let (_, rest) = detail.split_once("refused for ")?;
    let ms = rest.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn grace_remaining_is_read_from_the_server_text() {
        let detail = "node restarted 10 ms ago: new locks are refused for 59990 more ms (redlock.restart-grace-ms)";
        assert_eq!(
            parse_grace_remaining(detail),
            Some(Duration::from_millis(59990))
        );
        assert_eq!(parse_grace_remaining("something else"), None);
    }
}
