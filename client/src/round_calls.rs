//! The calls of one quorum round, side by side in one allocation.
//!
//! A round sends one command to every target node and takes the replies as
//! they come. `FuturesUnordered` would give each call a task node of its own
//! (an allocation, reference counts and a waker per call), plus a ready
//! queue per round, on top of a boxed future per call: about 10k
//! instructions and 22 allocations per acquire + release cycle over five
//! nodes (callgrind, `docs/performance.md`, third per-cycle round). A round
//! has a handful of calls, so they live in one boxed slice and every pending
//! call is polled when the round's task wakes, as `futures`' `join_all` does
//! for small sets; polling a call whose reply has not come is a look at its
//! reply channel.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The pending calls of one round, each polled in place.
pub(crate) struct RoundCalls<F> {
    slots: Pin<Box<[Option<F>]>>,
    pending: usize,
}

impl<F: Future> RoundCalls<F> {
    /// The calls, not polled yet, in the order they are to be started.
    pub(crate) fn new(calls: impl Iterator<Item = F>) -> Self {
        let slots: Box<[Option<F>]> = calls.map(Some).collect();
        let pending = slots.len();
        Self {
            slots: Box::into_pin(slots),
            pending,
        }
    }

    /// Whether every call has finished.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Whether the `slot`-th call (in the order given to `new`) is still
    /// pending.
    pub(crate) fn is_pending(&self, slot: usize) -> bool {
        self.slots.get(slot).is_some_and(Option::is_some)
    }

    /// Polls every pending call once, in order, and hands the output of each
    /// one that finished to `on_ready` before the next call is polled.
    pub(crate) fn poll_each(&mut self, cx: &mut Context<'_>, mut on_ready: impl FnMut(F::Output)) {
        for i in 0..self.slots.len() {
            if let Some(output) = self.poll_slot(i, cx) {
                on_ready(output);
            }
        }
    }

    /// The output of the first pending call (in order) that is ready; `None`
    /// once every call has finished.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        if self.pending == 0 {
            return Poll::Ready(None);
        }
        for i in 0..self.slots.len() {
            if let Some(output) = self.poll_slot(i, cx) {
                return Poll::Ready(Some(output));
            }
        }
        Poll::Pending
    }

    /// [`RoundCalls::poll_next`] as a future.
    pub(crate) async fn next(&mut self) -> Option<F::Output> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls slot `i` if its call is pending; a finished call is dropped in
    /// place and its output returned.
    fn poll_slot(&mut self, i: usize, cx: &mut Context<'_>) -> Option<F::Output> {
        // SAFETY: the slice's elements are pinned structurally: the box is
        // never reallocated and no element is moved out of it (a finished
        // call is dropped in place by `Pin::set` below), so a pinned
        // reference to one element upholds the pinning of the whole.
        let mut slot = unsafe { self.slots.as_mut().map_unchecked_mut(|s| &mut s[i]) };
        let call = slot.as_mut().as_pin_mut()?;
        match call.poll(cx) {
            Poll::Ready(output) => {
                slot.set(None);
                self.pending -= 1;
                Some(output)
            }
            Poll::Pending => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A call that is ready after `polls` polls, counting its polls and its drop.
    struct Countdown {
        id: usize,
        polls: usize,
        polled: Arc<AtomicUsize>,
        dropped: Arc<AtomicUsize>,
    }

    impl Future for Countdown {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polled.fetch_add(1, Ordering::Relaxed);
            if self.polls == 0 {
                Poll::Ready(self.id)
            } else {
                self.polls -= 1;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    impl Drop for Countdown {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn calls(polls: &[usize]) -> (RoundCalls<Countdown>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let polled = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let calls = RoundCalls::new(polls.iter().enumerate().map(|(id, &polls)| Countdown {
            id,
            polls,
            polled: Arc::clone(&polled),
            dropped: Arc::clone(&dropped),
        }));
        (calls, polled, dropped)
    }

    #[test]
    fn the_first_poll_starts_every_call_in_order_and_reports_the_ready_ones() {
        let (mut calls, polled, dropped) = calls(&[1, 0, 2, 0]);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut ready = Vec::new();
        calls.poll_each(&mut cx, |id| ready.push(id));
        assert_eq!(ready, [1, 3]);
        assert_eq!(polled.load(Ordering::Relaxed), 4);
        // A finished call is dropped at once, not when the round ends.
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
        assert!(!calls.is_empty());
    }

    #[test]
    fn replies_come_as_they_are_ready_and_the_round_ends_empty() {
        // Every pass polls the pending calls in order: call 1 is ready at
        // the first, calls 0 and 2 at the third (0 first, being first).
        let (mut calls, _, dropped) = calls(&[2, 0, 1]);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut order = Vec::new();
        for _ in 0..10 {
            match calls.poll_next(&mut cx) {
                Poll::Ready(Some(id)) => order.push(id),
                Poll::Ready(None) => break,
                Poll::Pending => {}
            }
        }
        assert_eq!(order, [1, 0, 2]);
        assert!(calls.is_empty());
        assert_eq!(dropped.load(Ordering::Relaxed), 3);
        assert_eq!(calls.poll_next(&mut cx), Poll::Ready(None));
    }

    #[test]
    fn dropping_the_round_drops_the_pending_calls() {
        let (mut calls, _, dropped) = calls(&[5, 5, 0]);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        calls.poll_each(&mut cx, |_| {});
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
        drop(calls);
        assert_eq!(dropped.load(Ordering::Relaxed), 3);
    }
}
