//! Locks over several names at once: the pure parts. Checking the names of
//! a set, splitting one node's all-or-none reply into one ACQUIRE reply per
//! name, and combining the per-name [`Attempt`](super::attempt::Attempt)
//! machines' decisions into one for the round.
//!
//! Every node takes the whole set or nothing (one script per node, see
//! `lock_set.rs`), so each name's attempt sees the same nodes grant, refuse
//! or fail; each name keeps its own token, tally and write-back.

use super::attempt::Next;
use super::error::NodeFailure;
use super::rules::Moment;
use super::tally::AcquireReply;
use super::waiting::Wake;

/// The per-node step of a set (sent with `EVAL`, `lock_set.rs`): `KEYS`
/// are the names in byte order, `ARGV` = owner, ttl in ms, then ACQUIRE's
/// options as they are to be given to every name (`FLOOR n` for the clock
/// floor, `SYNC r` when the replica-sync check states the node's R,
/// `sync_check.rs`). Answers the tokens (one per name, in `KEYS` order) or
/// nil when a name was held by another owner; on nil or an error, nothing
/// of the set is left on the node (`pcall`: an error reply does not stop
/// the script half-way). A node whose R differs from the stated one refuses
/// the first ACQUIRE, so the script answers that refusal and changed
/// nothing.
pub const ACQUIRE_SET: &str = r#"
local taken = {}
for i, name in ipairs(KEYS) do
  local reply = redis.pcall('REDLOCK.ACQUIRE', name, ARGV[1], ARGV[2], unpack(ARGV, 3))
  if type(reply) ~= 'number' then
    for j = 1, #taken do
      redis.pcall('REDLOCK.RELEASE', KEYS[j], ARGV[1])
    end
    if type(reply) == 'table' and reply.err then
      return reply
    end
    return false
  end
  taken[i] = reply
end
return taken
"#;

/// Why a set of names was refused before anything was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamesError {
    /// No names at all.
    Empty,
    /// A name given more than once.
    Duplicate(String),
}

impl std::fmt::Display for NamesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamesError::Empty => f.write_str("a lock set needs at least one name, got none"),
            NamesError::Duplicate(name) => {
                write!(f, "lock name {name:?} is given more than once in the set")
            }
        }
    }
}

/// The names in the fixed order every node takes them in (byte order),
/// or why the set is refused: empty, or a name given twice. The fixed
/// order is what keeps two callers with overlapping sets from waiting on
/// each other in a cycle (and each node takes the set in one atomic step
/// anyway).
pub fn sorted_names<S: AsRef<str>>(names: &[S]) -> Result<Vec<String>, NamesError> {
    if names.is_empty() {
        return Err(NamesError::Empty);
    }
    let mut sorted: Vec<String> = names.iter().map(|n| n.as_ref().to_string()).collect();
    sorted.sort_unstable();
    if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(NamesError::Duplicate(pair[0].clone()));
    }
    Ok(sorted)
}

/// One node's reply to the set's ACQUIRE step, as the tally of each name
/// sees it (in the order of `names`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetReply {
    /// The node granted every name, with these tokens (one per name).
    Granted(Vec<u64>),
    /// Some name was held by another owner; the node took none.
    Held,
    /// The node failed (no answer, an error reply, an unexpected reply).
    Failed(NodeFailure),
}

impl SetReply {
    /// The reply of name `i` of a set of `count` names. A grant with the
    /// wrong number of tokens, or a token of 0, is a failure of that node.
    pub fn for_name(&self, i: usize, count: usize) -> AcquireReply {
        match self {
            SetReply::Granted(tokens) if tokens.len() == count => match tokens.get(i) {
                Some(&t) if t > 0 => AcquireReply::Granted(t),
                _ => AcquireReply::Failed(NodeFailure::Unexpected(format!(
                    "set grant without a token for name {i}: {tokens:?}"
                ))),
            },
            SetReply::Granted(tokens) => AcquireReply::Failed(NodeFailure::Unexpected(format!(
                "set grant of {} tokens for {count} names",
                tokens.len()
            ))),
            SetReply::Held => AcquireReply::Held,
            SetReply::Failed(f) => AcquireReply::Failed(f.clone()),
        }
    }
}

/// The round's decision from the names' decisions: wait while any name
/// waits; linger (until the latest instant any name lingers to) while any
/// lingers; done when all are done.
pub fn combine_next<M: Moment>(decisions: impl IntoIterator<Item = Next<M>>) -> Next<M> {
    let mut combined = Next::Done;
    for next in decisions {
        combined = match (combined, next) {
            (Next::Wait, _) | (_, Next::Wait) => Next::Wait,
            (Next::Linger(a), Next::Linger(b)) => Next::Linger(if b > a { b } else { a }),
            (Next::Linger(a), Next::Done) | (Next::Done, Next::Linger(a)) => Next::Linger(a),
            (Next::Done, Next::Done) => Next::Done,
        };
    }
    combined
}

/// A waiting set's round of `REDLOCK.WAIT`, one per name (each name's
/// own [`Wake`] from a quorum of nodes): the set may be tried once every
/// name was free; the first name whose wait ran out, or that too few nodes
/// can answer for, decides the round at once.
#[derive(Clone, Debug)]
pub struct SetWake {
    pending: usize,
}

impl SetWake {
    /// A round over `names` names.
    pub fn new(names: usize) -> Self {
        SetWake { pending: names }
    }

    /// A name's wait ended with `wake`; `Some` once the round is decided.
    pub fn record(&mut self, wake: Wake) -> Option<Wake> {
        match wake {
            Wake::Free => {
                self.pending = self.pending.saturating_sub(1);
                (self.pending == 0).then_some(Wake::Free)
            }
            other => Some(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_free_once_every_name_was_and_stops_at_the_first_failure() {
        let mut round = SetWake::new(3);
        assert_eq!(round.record(Wake::Free), None);
        assert_eq!(round.record(Wake::Free), None);
        assert_eq!(round.record(Wake::Free), Some(Wake::Free));
        let mut round = SetWake::new(3);
        assert_eq!(round.record(Wake::Free), None);
        assert_eq!(round.record(Wake::TimedOut), Some(Wake::TimedOut));
        let mut round = SetWake::new(2);
        let down = Wake::Unreachable(vec![(0, NodeFailure::NotConnected("refused".into()))]);
        assert_eq!(round.record(down.clone()), Some(down));
    }

    #[test]
    fn names_are_sorted_and_checked() {
        assert_eq!(sorted_names(&["b", "a", "c"]).unwrap(), ["a", "b", "c"]);
        assert_eq!(sorted_names::<&str>(&[]), Err(NamesError::Empty));
        let dup = sorted_names(&["x", "y", "x"]).unwrap_err();
        assert_eq!(dup, NamesError::Duplicate("x".into()));
        assert!(dup.to_string().contains("\"x\" is given more than once"));
    }

    #[test]
    fn a_set_reply_splits_per_name() {
        let granted = SetReply::Granted(vec![4, 9]);
        assert_eq!(granted.for_name(0, 2), AcquireReply::Granted(4));
        assert_eq!(granted.for_name(1, 2), AcquireReply::Granted(9));
        assert!(matches!(granted.for_name(0, 3), AcquireReply::Failed(_)));
        assert!(matches!(
            SetReply::Granted(vec![0]).for_name(0, 1),
            AcquireReply::Failed(_)
        ));
        assert_eq!(SetReply::Held.for_name(1, 2), AcquireReply::Held);
    }

    #[test]
    fn decisions_combine() {
        use std::time::Instant;
        let t = Instant::now();
        let later = t + std::time::Duration::from_millis(5);
        assert_eq!(
            combine_next::<Instant>([Next::Done, Next::Done]),
            Next::Done
        );
        assert_eq!(
            combine_next::<Instant>([Next::Done, Next::Wait]),
            Next::Wait
        );
        assert_eq!(
            combine_next([Next::Linger(later), Next::Done, Next::Linger(t)]),
            Next::Linger(later)
        );
        assert_eq!(combine_next([Next::Linger(t), Next::Wait]), Next::Wait);
    }
}
