//! The compact form in which Redis holds a lock: 16 bytes while free, 32
//! while a lease (live or run out) is on it.
//!
//! ```text
//! free:   [counter | FLOOR_BIT] [freed_at]
//! leased: [counter | FLOOR_BIT] [deadline | LEASED_BIT] [owner hash, 16 bytes]
//! ```
//!
//! Both start with the same two words, and the second word's top bit tells
//! which one a pointer holds. Counters stay at most `i64::MAX` and monotonic
//! readings far below 2^63, so neither top bit is ever part of a value.
//!
//! Every record the module allocates goes through [`alloc`] and [`free`],
//! which keep [`live`] exact.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::core::lock::{LockState, OwnerHash};

const FLOOR_BIT: u64 = 1 << 63;
const LEASED_BIT: u64 = 1 << 63;

#[repr(C)]
struct Free {
    counter: u64,
    mark: u64,
}

#[repr(C)]
struct Leased {
    head: Free,
    owner: OwnerHash,
}

static LIVE: AtomicU64 = AtomicU64::new(0);

/// Lock records allocated and not yet freed, in every database (a record
/// freed lazily in the background counts until it is freed).
pub fn live() -> u64 {
    LIVE.load(Relaxed)
}

fn head_of(state: &LockState) -> Free {
    let counter = state.counter() | if state.floored() { FLOOR_BIT } else { 0 };
    match state.lease() {
        Some((_, deadline)) => Free {
            counter,
            mark: deadline.min(!LEASED_BIT) | LEASED_BIT,
        },
        None => Free {
            counter,
            mark: state.idle_since() & !LEASED_BIT,
        },
    }
}

/// A new record holding `state`; Redis owns it from [`free`]'s point of view.
pub fn alloc(state: &LockState) -> *mut c_void {
    LIVE.fetch_add(1, Relaxed);
    let head = head_of(state);
    match state.lease() {
        Some((owner, _)) => Box::into_raw(Box::new(Leased {
            head,
            owner: *owner,
        }))
        .cast(),
        None => Box::into_raw(Box::new(head)).cast(),
    }
}

/// The lock held by a record.
///
/// # Safety
/// `ptr` must come from [`alloc`] and not be freed.
pub unsafe fn read(ptr: *const c_void) -> LockState {
    let head = &*ptr.cast::<Free>();
    let counter = head.counter & !FLOOR_BIT;
    let floored = head.counter & FLOOR_BIT != 0;
    if head.mark & LEASED_BIT != 0 {
        let leased = &*ptr.cast::<Leased>();
        let deadline = head.mark & !LEASED_BIT;
        LockState::from_parts(counter, Some(leased.owner), deadline, 0, floored)
    } else {
        LockState::from_parts(counter, None, 0, head.mark, floored)
    }
}

/// Overwrites a record with `state` when it has the right size; `false`
/// (nothing written) when `state` needs the other form.
///
/// # Safety
/// `ptr` must come from [`alloc`], not be freed, and not be read meanwhile.
pub unsafe fn write_in_place(ptr: *mut c_void, state: &LockState) -> bool {
    let was_leased = (*ptr.cast::<Free>()).mark & LEASED_BIT != 0;
    match (state.lease(), was_leased) {
        (Some((owner, _)), true) => {
            *ptr.cast::<Leased>() = Leased {
                head: head_of(state),
                owner: *owner,
            };
            true
        }
        (None, false) => {
            *ptr.cast::<Free>() = head_of(state);
            true
        }
        _ => false,
    }
}

/// Bytes held by a record.
///
/// # Safety
/// `ptr` must come from [`alloc`] and not be freed.
pub unsafe fn size(ptr: *const c_void) -> usize {
    if (*ptr.cast::<Free>()).mark & LEASED_BIT != 0 {
        std::mem::size_of::<Leased>()
    } else {
        std::mem::size_of::<Free>()
    }
}

/// Frees a record.
///
/// # Safety
/// `ptr` must come from [`alloc`] and is not used afterwards.
pub unsafe fn free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    if (*ptr.cast::<Free>()).mark & LEASED_BIT != 0 {
        drop(Box::from_raw(ptr.cast::<Leased>()));
    } else {
        drop(Box::from_raw(ptr.cast::<Free>()));
    }
    LIVE.fetch_sub(1, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::MAX_TOKEN;

    fn round_trip(state: &LockState) -> (LockState, usize) {
        let ptr = alloc(state);
        // SAFETY: ptr comes from alloc and is freed once, below.
        unsafe {
            let back = (read(ptr), size(ptr));
            free(ptr);
            back
        }
    }

    #[test]
    fn both_forms_round_trip_and_a_free_lock_is_half_the_size() {
        let leased = LockState::from_parts(MAX_TOKEN, Some([9; 16]), 1 << 41, 0, true);
        assert_eq!(round_trip(&leased), (leased.clone(), 32));
        let free = LockState::from_parts(MAX_TOKEN, None, 0, 1 << 40, true);
        assert_eq!(round_trip(&free), (free.clone(), 16));
        let plain = LockState::from_parts(3, None, 0, 5, false);
        assert_eq!(round_trip(&plain), (plain.clone(), 16));
    }

    #[test]
    fn in_place_writes_only_within_a_form() {
        let leased = LockState::from_parts(1, Some([1; 16]), 10, 0, false);
        let relet = LockState::from_parts(2, Some([2; 16]), 20, 0, true);
        let freed = LockState::from_parts(2, None, 0, 15, true);
        let ptr = alloc(&leased);
        // SAFETY: ptr comes from alloc and is freed once, below.
        unsafe {
            assert!(write_in_place(ptr, &relet));
            assert_eq!(read(ptr), relet);
            assert!(!write_in_place(ptr, &freed));
            assert_eq!(read(ptr), relet);
            free(ptr);
        }
    }
}
