//! The client's error type, and the per-node failures it is built from.

use std::fmt;
use std::time::Duration;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Every message says what happened and what to do about it. Node addresses
/// are `host:port`, never the full URL (which may carry a password).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the lock: enough nodes said "held" that no quorum
    /// was possible. [`Redlock::try_acquire`](crate::Redlock::try_acquire)
    /// turns this into `Ok(None)`.
    #[error("the lock is held by another owner ({holders} of {nodes} nodes said so): try again later or wait for its lease to end")]
    Busy {
        /// How many nodes answered "held by another owner". The attempt
        /// stops waiting once "busy" is certain, so this is at least what
        /// made it certain, not always every node that would have said so.
        holders: usize,
        /// How many nodes the client talks to.
        nodes: usize,
    },

    /// Too few nodes gave a usable answer to reach a quorum.
    #[error("no quorum: {answered} of {nodes} nodes answered, {quorum} needed; failing nodes: {}; check that a majority of the nodes is up and reachable", NodeList(errors))]
    NoQuorum {
        /// How many nodes the client talks to.
        nodes: usize,
        /// The majority needed (`nodes / 2 + 1`).
        quorum: usize,
        /// How many nodes gave a usable answer.
        answered: usize,
        /// Every failing node as `(address, reason)`, in the order the
        /// nodes were given to the builder.
        errors: Vec<(String, String)>,
    },

    /// A node answered "unknown command": the Redis server runs without the
    /// redlock module.
    #[error("the redlock module is not loaded on {node}: add `loadmodule /path/to/libredlock.so` to its redis.conf (or include modules.conf) and restart it")]
    ModuleNotLoaded {
        /// The node's address.
        node: String,
    },

    /// The resource server of a fenced command runs without the redlock
    /// module: it answered "unknown command" to `REDLOCK.FENCED` or
    /// `REDLOCK.GUARD`. Nothing ran.
    #[error("the redlock module is not loaded on the resource server{}: it answered \"unknown command\" to {command}; fenced commands need the module on the resource server, not only on the lock's nodes: add `loadmodule /path/to/libredlock.so` to its redis.conf (or include modules.conf) and restart it", ResourceName(.resource.as_deref()))]
    ResourceModuleNotLoaded {
        /// The resource server's address (`host:port`) when the caller
        /// knows it. [`LockInfo::fenced`](crate::LockInfo::fenced) and its
        /// siblings get a connection, not an address, and leave it `None`.
        resource: Option<String>,
        /// The module's command the server did not know (`REDLOCK.FENCED`
        /// or `REDLOCK.GUARD`).
        command: String,
    },

    /// The nodes' ACL does not let the connecting user run this command on
    /// this key (`NOPERM`).
    #[error("permission denied by the ACL of {}: {detail}; grant the user the REDLOCK commands on this key (e.g. ~locks:* +redlock.acquire +redlock.release +redlock.extend +redlock.fence +redlock.inspect)", .nodes.join(", "))]
    PermissionDenied {
        /// The nodes that refused.
        nodes: Vec<String>,
        /// The server's reply, e.g. `NOPERM this user has no permissions to
        /// access one of the keys used as arguments`.
        detail: String,
    },

    /// Nodes refused new locks because they restarted recently without
    /// durable persistence (the module's restart guard,
    /// `redlock.restart-grace-ms`).
    #[error("new locks are refused by {} (restart guard after a restart, redlock.restart-grace-ms){}", .nodes.join(", "), RetryHint(*.retry_after))]
    RestartGuard {
        /// The nodes in their grace window.
        nodes: Vec<String>,
        /// How long until the first of them accepts locks again, when the
        /// nodes said so.
        retry_after: Option<Duration>,
    },

    /// The lock was granted, but the time the acquisition (or extension) took
    /// ate the whole lease: the lock was released and must not be used.
    #[error("the lease ran out before the lock could be used ({elapsed:?} spent of a {ttl:?} ttl, after the clock-drift margin): use a longer ttl or a shorter node timeout")]
    ExpiredBeforeUse {
        /// The lease asked for.
        ttl: Duration,
        /// How long the acquisition took.
        elapsed: Duration,
    },

    /// An extension found that the lock is no longer held by this owner on a
    /// quorum: the lease ran out or the lock was released. Stop using the
    /// token.
    #[error("the lock on {key:?} is no longer held ({confirmed} of {nodes} nodes confirmed it, {quorum} needed): stop using its token and acquire it again")]
    Lost {
        /// The lock's key.
        key: String,
        /// How many nodes confirmed that this owner still held the lock.
        confirmed: usize,
        /// How many nodes the client talks to.
        nodes: usize,
        /// The majority needed.
        quorum: usize,
    },

    /// The lock's validity ended before an extension was confirmed (a pause
    /// past the lease, or a slow round): another owner may have held it
    /// since, even if the nodes still answer for this owner. Nothing is
    /// sent once the validity has ended. Stop using the token.
    #[error("the lock on {key:?} is no longer held: its validity ended {late:?} before the extension was confirmed, and another owner may have taken it since: stop using its token and acquire it again")]
    Lapsed {
        /// The lock's key.
        key: String,
        /// How long before the extension started, or was confirmed, the
        /// validity ended.
        late: Duration,
    },

    /// A fenced command was refused by the resource's guard: it has seen a
    /// newer token of this lock, so another holder took over. Nothing ran.
    /// Stop using this lock; never retry with the same token.
    #[error("stale fencing token {token}: guard {guard:?} has seen token {highest}; another holder took over, nothing was run")]
    Stale {
        /// The guard key on the resource.
        guard: String,
        /// This lock's token.
        token: u64,
        /// The highest token the guard has seen.
        highest: u64,
    },

    /// The resource server refused a fenced command for another reason
    /// (the inner command's own error, an ACL refusal, a connection
    /// failure). A lost reply leaves the outcome unknown.
    #[error("the resource refused the fenced command: {0}")]
    Resource(String),

    /// A bad argument: a node URL that does not parse, no nodes, a zero TTL,
    /// a TTL the nodes refuse, and so on.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// Whether trying again later may succeed (busy, no quorum, restart
    /// guard). [`Redlock::acquire`](crate::Redlock::acquire) retries these.
    ///
    /// # Examples
    ///
    /// ```
    /// use redlock_client::Error;
    /// assert!(Error::Busy { holders: 3, nodes: 5 }.is_transient());
    /// assert!(!Error::InvalidArgument("ttl".into()).is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Busy { .. } | Error::NoQuorum { .. } | Error::RestartGuard { .. }
        )
    }
}

struct NodeList<'a>(&'a [(String, String)]);

impl fmt::Display for NodeList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, (node, reason)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{node} ({reason})")?;
        }
        Ok(())
    }
}

struct ResourceName<'a>(Option<&'a str>);

impl fmt::Display for ResourceName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(addr) => write!(f, " {addr}"),
            None => Ok(()),
        }
    }
}

/// The module's command named by a server's "unknown command" reply (the
/// error's detail, after its code), when that reply says the server runs
/// without the module: Redis and Valkey answer a command they do not know
/// with `unknown command 'REDLOCK.FENCED', with args beginning with: …`.
/// `None` for any other reply: a command that is not the module's, and the
/// module's own refusal of a fenced command's unknown inner command
/// (`unknown command 'x' inside REDLOCK.FENCED`), which proves the module is
/// there.
pub fn unknown_module_command(detail: &str) -> Option<&str> {
    let rest = detail.strip_prefix("unknown command '")?;
    let (name, after) = rest.split_once('\'')?;
    let is_module_command = name
        .get(..8)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("redlock."));
    (is_module_command && after.starts_with(',')).then_some(name)
}

struct RetryHint(Option<Duration>);

impl fmt::Display for RetryHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => write!(f, ": retry in {} ms", d.as_millis()),
            None => f.write_str(": retry later"),
        }
    }
}

/// Why one node did not give a usable answer (internal; shown in
/// [`Error::NoQuorum`] as the reason string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFailure {
    /// No reply within the per-node timeout.
    Timeout(Duration),
    /// No connection right now; a reconnect runs in the background.
    NotConnected(String),
    /// The connection broke during the call.
    Connection(String),
    /// The server does not know the module's commands.
    ModuleNotLoaded,
    /// The restart guard refused the ACQUIRE (the server's whole message).
    Grace {
        message: String,
        remaining: Option<Duration>,
    },
    /// The node refused an argument (`ERR invalid …`).
    BadArgument(String),
    /// The node's ACL refused the command or key (`NOPERM …`).
    NoPermission(String),
    /// The node wants a password, or refused the one given (`NOAUTH`,
    /// `WRONGPASS`).
    AuthFailed(String),
    /// Any other error reply.
    Refused(String),
    /// A reply of a type the command never gives.
    Unexpected(String),
    /// Step 4: the write-back did not leave the node at the token.
    WriteBack(String),
    /// The node's reply came from the same server as another member's,
    /// which counted instead (one server, one vote).
    SameServer {
        /// The other member's URL (without credentials).
        twin: String,
    },
    /// The node's `redlock.sync-replicas` differs from the R the command
    /// stated (`SYNCREPLICAS r …`): nothing was changed; the member learns
    /// `r` and sends the command again.
    SyncStated(u64),
    /// The master refused a lock write under the replica-sync check: more
    /// replicas than R over its life (`TOOMANYREPLICAS`), fewer online
    /// (`NOSYNC`), or its replica set could not be recorded. Nothing was
    /// changed.
    SyncRefused(String),
    /// The lock write was applied on the master but fewer than R replicas
    /// acknowledged it (`WAIT R` answered less, or failed): it does not
    /// count, and a grant is released.
    NotSynced {
        /// R, as the master stated it.
        required: u64,
        /// How many replicas acknowledged.
        acks: u64,
        /// How long `WAIT` waited, in ms.
        waited_ms: u64,
        /// `WAIT`'s error, when it failed.
        error: Option<String>,
    },
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeFailure::Timeout(d) => write!(f, "no reply within {} ms", d.as_millis()),
            NodeFailure::NotConnected(e) => write!(f, "not connected: {e}"),
            NodeFailure::Connection(e) => write!(f, "connection error: {e}"),
            NodeFailure::ModuleNotLoaded => f.write_str("the redlock module is not loaded"),
            NodeFailure::Grace { message, .. } => f.write_str(message),
            NodeFailure::BadArgument(e) | NodeFailure::Refused(e) => f.write_str(e),
            NodeFailure::NoPermission(e) => write!(f, "permission denied: {e}"),
            NodeFailure::AuthFailed(e) => write!(f, "authentication failed: {e}"),
            NodeFailure::Unexpected(e) => write!(f, "unexpected reply: {e}"),
            NodeFailure::WriteBack(e) => write!(f, "write-back failed: {e}"),
            NodeFailure::SameServer { twin } => {
                write!(f, "same Redis server as {twin}, which counted instead")
            }
            NodeFailure::SyncStated(r) => write!(
                f,
                "the node's redlock.sync-replicas is {r}, not the R the command stated"
            ),
            NodeFailure::SyncRefused(e) => f.write_str(e),
            NodeFailure::NotSynced {
                required,
                acks,
                waited_ms,
                error,
            } => {
                write!(
                    f,
                    "replica-sync check failed: {acks} of the {required} replicas redlock.sync-replicas asks for acknowledged the write within {waited_ms} ms"
                )?;
                if let Some(e) = error {
                    write!(f, " (WAIT: {e})")?;
                }
                f.write_str("; not relied on")
            }
        }
    }
}

impl NodeFailure {
    /// Whether the node may have executed the command (so a lock may have
    /// been granted there and must be released after a failed attempt).
    pub fn maybe_executed(&self) -> bool {
        matches!(
            self,
            NodeFailure::Timeout(_)
                | NodeFailure::Connection(_)
                | NodeFailure::WriteBack(_)
                | NodeFailure::SameServer { .. }
                | NodeFailure::NotSynced { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_servers_unknown_module_command_means_no_module() {
        // Redis 7.0 and Valkey 8 word it alike.
        let redis = "unknown command 'REDLOCK.FENCED', with args beginning with: 'g' 'k' '5' 'SET' 'a' 'b' ";
        assert_eq!(unknown_module_command(redis), Some("REDLOCK.FENCED"));
        let lower = "unknown command 'redlock.acquire', with args beginning with: 'k' 'o' '100' ";
        assert_eq!(unknown_module_command(lower), Some("redlock.acquire"));
        let bare = "unknown command 'REDLOCK.INSPECT', with args beginning with: ";
        assert_eq!(unknown_module_command(bare), Some("REDLOCK.INSPECT"));
        // The module refusing an unknown inner command: the module is there.
        let inner = "unknown command 'nosuch' inside REDLOCK.FENCED";
        assert_eq!(unknown_module_command(inner), None);
        let inner_redlock = "unknown command 'redlock.nosuch' inside REDLOCK.FENCED";
        assert_eq!(unknown_module_command(inner_redlock), None);
        // Another command the server does not know.
        let other = "unknown command 'FOO', with args beginning with: ";
        assert_eq!(unknown_module_command(other), None);
        assert_eq!(unknown_module_command("unknown command 'é"), None);
        assert_eq!(unknown_module_command("wrong number of arguments"), None);
    }

    #[test]
    fn resource_module_not_loaded_names_the_server_and_the_fix() {
        let e = Error::ResourceModuleNotLoaded {
            resource: Some("10.0.0.9:6379".into()),
            command: "REDLOCK.FENCED".into(),
        };
        let text = e.to_string();
        assert!(
            text.starts_with("the redlock module is not loaded on the resource server 10.0.0.9:6379: it answered \"unknown command\" to REDLOCK.FENCED;"),
            "{text}"
        );
        assert!(text.contains("loadmodule /path/to/libredlock.so"), "{text}");
        let unnamed = Error::ResourceModuleNotLoaded {
            resource: None,
            command: "REDLOCK.GUARD".into(),
        };
        assert!(
            unnamed
                .to_string()
                .starts_with("the redlock module is not loaded on the resource server: "),
            "{unnamed}"
        );
        assert!(!unnamed.is_transient());
    }

    #[test]
    fn no_quorum_lists_nodes_with_reasons() {
        let e = Error::NoQuorum {
            nodes: 5,
            quorum: 3,
            answered: 2,
            errors: vec![
                ("a:1".into(), "no reply within 10 ms".into()),
                ("b:2".into(), "not connected: refused".into()),
            ],
        };
        let text = e.to_string();
        assert!(text.contains("2 of 5 nodes answered, 3 needed"), "{text}");
        assert!(
            text.contains("a:1 (no reply within 10 ms), b:2 (not connected: refused)"),
            "{text}"
        );
    }
}
