//! What `redlock run` holds while its command runs: one lock (a positional
//! name or a single `--lock`) or a set of names (`--lock a --lock b`), and
//! what the command's environment says about it.

use redlock_client::{LockGuard, LockSetGuard};
use tokio_util::sync::WaitForCancellationFuture;

/// A held lock or lock set, kept alive by `with_lock` / `with_lock_set`.
pub enum Held {
    /// One name: `REDLOCK_KEY`, `REDLOCK_TOKEN`.
    One(LockGuard),
    /// Several names: `REDLOCK_LOCKS` (how many), and for `i` from 1 on, in
    /// byte order of the names, `REDLOCK_KEY_i` and `REDLOCK_TOKEN_i`.
    Set(LockSetGuard),
}

impl Held {
    /// The variables the command gets (see the variants).
    pub fn env(&self) -> Vec<(String, String)> {
        match self {
            Held::One(guard) => vec![
                ("REDLOCK_TOKEN".into(), guard.token().to_string()),
                ("REDLOCK_KEY".into(), guard.key().to_string()),
            ],
            Held::Set(guard) => {
                let tokens = guard.tokens();
                let mut env = vec![("REDLOCK_LOCKS".into(), tokens.len().to_string())];
                for (i, (name, token)) in tokens.iter().enumerate() {
                    env.push((format!("REDLOCK_KEY_{}", i + 1), name.clone()));
                    env.push((format!("REDLOCK_TOKEN_{}", i + 1), token.to_string()));
                }
                env
            }
        }
    }

    /// Completes once the lock (or any name of the set) is lost.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        match self {
            Held::One(guard) => guard.lost(),
            Held::Set(guard) => guard.lost(),
        }
    }

    /// The single lock, for `--guard` (a set has no single token to show).
    pub fn single(&self) -> Option<&LockGuard> {
        match self {
            Held::One(guard) => Some(guard),
            Held::Set(_) => None,
        }
    }
}
