//! The protected resource of each lock name: it remembers the highest
//! fencing token it has seen and refuses a lower one, with the module's own
//! rule for fenced writes (`core/fence_rule.rs`, what `REDLOCK.FENCED`
//! runs).

use redlock_module_rules::core::fence_rule::{self, GuardState};

use crate::world::World;

/// The resource's deliberately broken variants (the safety suite's
/// resource mutants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResourceMutant {
    /// The rule as it is.
    #[default]
    None,
    /// The check is off: every token passes (`FENCED-CHECK 0`).
    CheckOff,
    /// The guard never rises (`FENCED-RAISE 0`).
    RaiseOff,
    /// Reads are sent unfenced: only writes are checked.
    ReadsUnfenced,
}

/// One lock's resource.
#[derive(Clone, Debug, Default)]
pub struct Resource {
    guard: Option<GuardState>,
}

const GUARD: &[u8] = b"resource:guard";
const LOCK: &[u8] = b"lock";

impl World {
    /// A fenced operation with `token` reaches `key`'s resource.
    pub fn resource_op(&mut self, _client: u32, key: u8, token: u64, write: bool) {
        let mutant = self.setup.resource;
        let resource = &mut self.resources[key as usize];
        let checked = mutant != ResourceMutant::ReadsUnfenced || write;
        let passes = mutant == ResourceMutant::CheckOff
            || !checked
            || fence_rule::check(GUARD, resource.guard.as_ref(), LOCK, token).is_ok();
        if passes && checked {
            // With the raise off, a new guard records its first token and
            // never rises after.
            if mutant != ResourceMutant::RaiseOff || resource.guard.is_none() {
                resource.guard = Some(fence_rule::raised(resource.guard.as_ref(), LOCK, token));
            }
        }
        if passes {
            self.stats.resource_accepted += 1;
        } else {
            self.stats.resource_refused += 1;
        }
        self.checker.resource(key, token, passes, self.now);
    }
}
