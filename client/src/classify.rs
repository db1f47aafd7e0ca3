//! How an error from redis-rs becomes a [`NodeFailure`]: the one place the
//! client reads the redis crate's error kinds (the failures themselves are
//! pure, in `core/error.rs`).

use crate::core::error::{unknown_module_command, Error, NodeFailure};

/// Classifies an error from redis-rs. The boolean is true when the
/// connection itself is broken and must be replaced.
pub(crate) fn node_failure(err: &redis::RedisError) -> (NodeFailure, bool) {
    use redis::ErrorKind;
    match err.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => {
            let code = err.code().unwrap_or("ERR");
            let detail = err.detail().unwrap_or("");
            let text = format!("{code} {detail}");
            let failure = if unknown_module_command(detail).is_some() {
                NodeFailure::ModuleNotLoaded
            } else if code == "GRACE" {
                NodeFailure::Grace {
                    remaining: parse_grace_remaining(detail),
                    message: text,
                }
            } else if code == "SYNCREPLICAS" {
                match detail.split_whitespace().next().map(str::parse::<u64>) {
                    Some(Ok(r)) => NodeFailure::SyncStated(r),
                    _ => NodeFailure::Refused(text),
                }
            } else if code == "TOOMANYREPLICAS" || code == "NOSYNC" {
                NodeFailure::SyncRefused(text)
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

/// The error for a failed call to the resource of a fenced command (other
/// than a stale token, which needs the lock's token):
/// [`Error::ResourceModuleNotLoaded`] when the server does not know the
/// module's command, else [`Error::Resource`] with the reply or the failure.
pub(crate) fn resource_error(e: &redis::RedisError) -> Error {
    // A transaction the server refused to queue comes back as one
    // EXECABORT error carrying each command's own reply.
    let missing = e.clone().into_server_errors().and_then(|errors| {
        errors.iter().find_map(|(_, server)| {
            server
                .details()
                .and_then(unknown_module_command)
                .map(str::to_ascii_uppercase)
        })
    });
    if let Some(command) = missing {
        return Error::ResourceModuleNotLoaded {
            resource: None,
            command,
        };
    }
    Error::Resource(e.to_string())
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

    #[test]
    fn a_servers_unknown_module_command_means_no_module() {
        let failure = |reply: &str| {
            let redis::Value::ServerError(e) =
                redis::parse_redis_value(format!("-{reply}\r\n").as_bytes()).unwrap()
            else {
                panic!("not an error reply: {reply}")
            };
            node_failure(&redis::RedisError::from(e)).0
        };
        assert_eq!(
            failure("ERR unknown command 'REDLOCK.ACQUIRE', with args beginning with: 'k' "),
            NodeFailure::ModuleNotLoaded
        );
        assert!(matches!(
            failure("ERR unknown command 'nosuch' inside REDLOCK.FENCED"),
            NodeFailure::Refused(text) if text.contains("inside REDLOCK.FENCED")
        ));
        assert!(matches!(
            failure("ERR unknown command 'FOO', with args beginning with: "),
            NodeFailure::Refused(_)
        ));
    }
}
