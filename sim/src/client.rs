//! The clients: each runs a program of lock operations written as the
//! client crate's tokio code is (`redlock.rs`, `quorum.rs`, `waiting.rs`,
//! `lock.rs`, `with_lock.rs`), calling the same pure functions in the same
//! order (`client/src/core`: the attempt machine, the tallies, the extension
//! rule, the retries and the wait loop, the keep-alive), over the simulated
//! network instead of tokio and the redis crate.
//!
//! A program is an `async fn` polled by the world whenever something
//! happens for its client (a reply, a timer): no executor, no threads, and
//! so no other order than the event queue's. It talks to the world through
//! [`Io`]: what it sends, the timers it needs and what the checkers must
//! know go to the outbox, replies come in through the inbox.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use rand::Rng;
use redlock_client_rules::core::attempt::{attempt_error, Acquired, Attempt, AttemptStep, Next};
use redlock_client_rules::core::error::{Error, NodeFailure};
use redlock_client_rules::core::keep_alive::{Action, Event, KeepAlive};
use redlock_client_rules::core::lease::{lower, ExtendRule, Unconfirmed};
use redlock_client_rules::core::rules::Rules;
use redlock_client_rules::core::tally::{
    AcquireReply, Confirmation, ConfirmationOutcome, ConfirmationTally, FenceReply,
};
use redlock_client_rules::core::waiting::{
    after_failed_attempt, after_wake, wait_gives_up_at, wait_timeout_ms, AfterAttempt, AfterWake,
    Retry, Wake, WakeTally,
};

use crate::rng::{between, chance, skewed, stream, SimRng, Stream};
use crate::scenario::{FaultKind, Scenario};
use crate::time::{At, Clock, Time, MS};
use crate::world::{CheckEv, Cmd, Ev, Owner, Reply, Setup, World};

/// What a program asks of the world.
#[derive(Clone, Debug)]
pub enum Out {
    /// Send a command to a member for a round.
    Send {
        /// The member.
        member: usize,
        /// The round.
        round: u64,
        /// The command.
        cmd: Cmd,
        /// On a connection of its own (`REDLOCK.WAIT`).
        blocking: bool,
    },
    /// Close the `REDLOCK.WAIT` connections of a round that stopped waiting.
    CloseWaits {
        /// The round.
        round: u64,
        /// The lock name.
        key: u8,
    },
    /// Wake the program at this reading of its clock.
    Timer(At),
    /// An attempt starts (the token order is judged from here).
    AttemptStart {
        /// Lock name.
        key: u8,
        /// Its owner.
        owner: Owner,
    },
    /// An acquisition succeeded.
    Acquired {
        /// Lock name.
        key: u8,
        /// Its owner.
        owner: Owner,
        /// Its token.
        token: u64,
        /// End of the validity, on the client's clock.
        deadline: At,
    },
    /// A held lock's validity moved (an extension, a release, lost).
    Deadline {
        /// Its owner.
        owner: Owner,
        /// The new end of the validity.
        deadline: At,
    },
    /// A fenced operation on the resource.
    Use {
        /// Lock name.
        key: u8,
        /// The token shown.
        token: u64,
        /// A write (else a read).
        write: bool,
    },
    /// The program waits (`REDLOCK.WAIT`) for this key, or stopped.
    Waiting {
        /// Lock name.
        key: u8,
        /// Waiting now.
        on: bool,
    },
    /// A use of the token stalls between the validity check and the use.
    Stall,
    /// The owner released its grants (quiet phase: none may be left).
    Released {
        /// Lock name.
        key: u8,
        /// The owner.
        owner: Owner,
    },
}

/// A reply for a round.
#[derive(Clone, Copy, Debug)]
pub struct Incoming {
    round: u64,
    member: usize,
    reply: Reply,
}

/// A round in progress.
struct Round {
    id: u64,
    pending: Vec<(usize, Cmd)>,
    blocking: bool,
}

/// What a program sees of the world.
pub struct Io {
    /// The client's index.
    pub id: u32,
    now: Cell<Time>,
    clock: RefCell<Clock>,
    inbox: RefCell<Vec<Incoming>>,
    outbox: RefCell<Vec<Out>>,
    /// The rounds in progress, the members they wait for and the command
    /// each was sent, and whether they go on connections of their own.
    rounds: RefCell<Vec<Round>>,
    rng: RefCell<SimRng>,
    rules: Rules,
    members: usize,
    floor: bool,
    /// `Setup::release_before_wait`.
    release_before_wait: bool,
    node_timeout: Duration,
    retry: (u32, Duration, Duration),
    next: Cell<u64>,
    life: u32,
    /// The longest ttl the clients ask for (the masters' `max-ttl-ms`,
    /// raised when every master's is raised).
    pub max_ttl_ms: Cell<u64>,
    /// While above 0, the ttl the client asks for is longer than this (the
    /// application asks for the longer leases `max-ttl-ms` was raised for).
    pub ttl_floor_ms: Cell<u64>,
    keys: usize,
    /// No new operation from this true time on.
    stop_at: Cell<Time>,
    pause_use: f64,
}

impl Io {
    /// The client's monotonic clock now.
    pub fn local(&self) -> At {
        At(self.clock.borrow().local_us(self.now.get()))
    }

    fn wall_us(&self) -> u64 {
        self.clock.borrow().wall_us(self.now.get())
    }

    /// Sets the client's wall clock's offset from true time.
    pub fn set_wall_offset(&self, offset_us: i64) {
        self.clock.borrow_mut().set_wall_offset(offset_us);
    }

    fn out(&self, o: Out) {
        self.outbox.borrow_mut().push(o);
    }

    fn id(&self) -> u64 {
        let n = self.next.get() + 1;
        self.next.set(n);
        (u64::from(self.id) << 48) | (u64::from(self.life) << 40) | n
    }

    fn draw(&self, lo: u64, hi: u64) -> u64 {
        between(&mut self.rng.borrow_mut(), lo, hi)
    }

    fn draw_skewed(&self, lo: u64, hi: u64) -> u64 {
        skewed(&mut self.rng.borrow_mut(), lo, hi)
    }

    fn chance(&self, p: f64) -> bool {
        chance(&mut self.rng.borrow_mut(), p)
    }

    fn take_reply(&self, round: u64) -> Option<Incoming> {
        let mut inbox = self.inbox.borrow_mut();
        let i = inbox.iter().position(|r| r.round == round)?;
        Some(inbox.remove(i))
    }

    fn start_round(&self, targets: &[usize], cmd: Cmd, blocking: bool) -> u64 {
        let round = self.id();
        let mut pending = Vec::with_capacity(targets.len());
        for &m in targets {
            self.out(Out::Send {
                member: m,
                round,
                cmd,
                blocking,
            });
            pending.push((m, cmd));
        }
        self.rounds.borrow_mut().push(Round {
            id: round,
            pending,
            blocking,
        });
        round
    }

    fn end_round(&self, round: u64) {
        self.rounds.borrow_mut().retain(|r| r.id != round);
        self.inbox.borrow_mut().retain(|r| r.round != round);
    }

    /// Whether a reply for `round` from `member` is awaited (else dropped).
    pub fn awaits(&self, round: u64, member: usize) -> bool {
        self.rounds
            .borrow()
            .iter()
            .any(|r| r.id == round && r.pending.iter().any(|(m, _)| *m == member))
    }

    fn sleep_until(&self, at: At) -> SleepUntil<'_> {
        SleepUntil {
            io: self,
            at,
            armed: false,
        }
    }

    fn next_reply(&self, round: u64, until: At) -> NextReply<'_> {
        NextReply {
            io: self,
            round,
            until,
            armed: false,
        }
    }
}

struct SleepUntil<'a> {
    io: &'a Io,
    at: At,
    armed: bool,
}

impl Future for SleepUntil<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.io.local() >= self.at {
            return Poll::Ready(());
        }
        if !self.armed {
            self.armed = true;
            self.io.out(Out::Timer(self.at));
        }
        Poll::Pending
    }
}

enum Got {
    Reply(usize, Reply),
    Timer,
}

struct NextReply<'a> {
    io: &'a Io,
    round: u64,
    until: At,
    armed: bool,
}

impl Future for NextReply<'_> {
    type Output = Got;

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Got> {
        if let Some(r) = self.io.take_reply(self.round) {
            let mut rounds = self.io.rounds.borrow_mut();
            if let Some(round) = rounds.iter_mut().find(|x| x.id == self.round) {
                round.pending.retain(|(m, _)| *m != r.member);
            }
            return Poll::Ready(Got::Reply(r.member, r.reply));
        }
        if self.io.local() >= self.until {
            return Poll::Ready(Got::Timer);
        }
        if !self.armed {
            self.armed = true;
            self.io.out(Out::Timer(self.until));
        }
        Poll::Pending
    }
}

/// The first of two futures (biased: `a` first), as `tokio::select!`.
async fn race2<A: Future, B: Future>(a: A, b: B) -> Result<A::Output, B::Output> {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(x) = a.as_mut().poll(cx) {
            return Poll::Ready(Ok(x));
        }
        if let Poll::Ready(y) = b.as_mut().poll(cx) {
            return Poll::Ready(Err(y));
        }
        Poll::Pending
    })
    .await
}

/// Both futures, as `tokio::join!`.
async fn join2<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let (mut x, mut y) = (None, None);
    std::future::poll_fn(|cx| {
        if x.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                x = Some(v);
            }
        }
        if y.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                y = Some(v);
            }
        }
        match (x.take(), y.take()) {
            (Some(a), Some(b)) => Poll::Ready((a, b)),
            (a, b) => {
                x = a;
                y = b;
                Poll::Pending
            }
        }
    })
    .await
}

/// A flag another task waits on (`CancellationToken`).
#[derive(Clone, Default)]
struct Signal(Rc<Cell<bool>>);

impl Signal {
    fn set(&self) {
        self.0.set(true);
    }

    fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |_| {
            if self.0.get() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// How a round ended (`quorum.rs::RoundEnd`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum RoundEnd {
    Replied,
    TimedOut,
}

impl RoundEnd {
    fn failure(self, timeout: Duration) -> NodeFailure {
        match self {
            RoundEnd::TimedOut => NodeFailure::Timeout(timeout),
            RoundEnd::Replied => NodeFailure::Timeout(Duration::ZERO),
        }
    }
}

/// A node's failure as the client classifies it (`classify.rs`).
fn failure(reply: Reply) -> NodeFailure {
    match reply {
        Reply::Grace { remaining_ms } => NodeFailure::Grace {
            message: format!("GRACE new locks are refused for {remaining_ms} more ms"),
            remaining: Some(Duration::from_millis(remaining_ms)),
        },
        Reply::ReadOnly => NodeFailure::Refused("READONLY".into()),
        Reply::NoSync => {
            NodeFailure::SyncRefused("NOSYNC a lease longer than the replicas know".into())
        }
        Reply::BadArg => NodeFailure::BadArgument("ERR invalid argument".into()),
        Reply::Down => NodeFailure::NotConnected("refused".into()),
        Reply::Broken => NodeFailure::Connection("reset".into()),
        Reply::Int(_) | Reply::Nil => NodeFailure::Unexpected(format!("{reply:?}")),
    }
}

/// `quorum.rs::acquire_reply`.
fn acquire_reply(reply: Reply) -> AcquireReply {
    match reply {
        Reply::Int(n) if n > 0 => AcquireReply::Granted(n),
        Reply::Nil => AcquireReply::Held,
        other => AcquireReply::Failed(failure(other)),
    }
}

/// `quorum.rs::fence_reply`.
fn fence_reply(reply: Reply) -> FenceReply {
    match reply {
        Reply::Int(n) => FenceReply::Counter(n),
        Reply::Nil => FenceReply::NotHeld,
        other => FenceReply::Failed(failure(other)),
    }
}

/// `quorum.rs::confirmation`.
fn confirmation(reply: Reply) -> Confirmation {
    match reply {
        Reply::Int(1) => Confirmation::Held,
        Reply::Int(0) => Confirmation::NotHeld,
        other => Confirmation::Failed(failure(other)),
    }
}

/// `quorum.rs::fan_out`: `cmd` to `targets` at once, each reply fed to
/// `on_reply` until it says the round is decided, every target answered, or
/// the round's timer (the per-node timeout) ran out; a decided round may
/// linger for the replies still missing.
async fn fan_out(
    io: &Io,
    targets: &[usize],
    cmd: Cmd,
    mut on_reply: impl FnMut(usize, Reply, At) -> Next<At>,
) -> RoundEnd {
    let round = io.start_round(targets, cmd, false);
    let deadline = io.local() + io.node_timeout;
    let mut timer = deadline;
    let mut lingering = false;
    let mut pending = targets.len();
    let end = loop {
        if pending == 0 {
            break RoundEnd::Replied;
        }
        match io.next_reply(round, timer).await {
            Got::Reply(member, reply) => {
                pending -= 1;
                match on_reply(member, reply, io.local()) {
                    Next::Done => break RoundEnd::Replied,
                    Next::Wait => {}
                    Next::Linger(until) => {
                        if !lingering {
                            lingering = true;
                            timer = until.min(deadline);
                        }
                    }
                }
            }
            Got::Timer if lingering => break RoundEnd::Replied,
            Got::Timer => break RoundEnd::TimedOut,
        }
    };
    io.end_round(round);
    end
}

/// Sends `cmd` to `targets` without waiting (a background task's round).
fn send_and_forget(io: &Io, targets: &[usize], cmd: Cmd) {
    let round = io.start_round(targets, cmd, false);
    io.end_round(round);
}

/// What a failed attempt leaves (`quorum.rs::Leftover`).
struct Leftover {
    nodes: Vec<usize>,
    granted: usize,
}

/// A held lock (`lock.rs::Lock` and its `LockInfo`).
struct Held {
    key: u8,
    owner: Owner,
    token: u64,
    deadline: Rc<Cell<At>>,
    rule: ExtendRule<At>,
}

impl Held {
    fn lower(&self, io: &Io, bound: At) {
        let d = lower(self.deadline.get(), bound);
        self.deadline.set(d);
        io.out(Out::Deadline {
            owner: self.owner,
            deadline: d,
        });
    }

    fn set(&self, io: &Io, deadline: At) {
        self.deadline.set(deadline);
        io.out(Out::Deadline {
            owner: self.owner,
            deadline,
        });
    }
}

fn all(io: &Io) -> Vec<usize> {
    (0..io.members).collect()
}

/// One attempt (`Redlock::attempt` and `Quorum::attempt`).
async fn attempt(io: &Io, key: u8, ttl_ms: u64, owner: Owner) -> Result<Held, (Error, Leftover)> {
    let start = io.local();
    let floor = if io.floor { io.wall_us() } else { 0 };
    io.out(Out::AttemptStart { key, owner });
    let mut attempt = Attempt::new(io.rules, ttl_ms, start);
    let cmd = Cmd::Acquire {
        key,
        owner,
        ttl: ttl_ms,
        floor,
    };
    let end = fan_out(io, &all(io), cmd, |m, r, now| {
        attempt.on_acquire_reply(m, acquire_reply(r), now)
    })
    .await;
    let done = match attempt.acquire_round_ended(end.failure(io.node_timeout), io.local()) {
        AttemptStep::Done(done) => done,
        AttemptStep::WriteBack { token, targets } => {
            let fence = Cmd::Fence { key, owner, token };
            let end = fan_out(io, &targets, fence, |m, r, _| {
                attempt.on_fence_reply(m, fence_reply(r))
            })
            .await;
            attempt.fence_round_ended(end.failure(io.node_timeout), io.local())
        }
    };
    match done {
        Ok(Acquired { token, deadline }) => {
            io.out(Out::Acquired {
                key,
                owner,
                token,
                deadline,
            });
            Ok(Held {
                key,
                owner,
                token,
                deadline: Rc::new(Cell::new(deadline)),
                rule: ExtendRule::new(),
            })
        }
        Err(failed) => {
            let error = attempt_error(
                &io.rules,
                failed.reason,
                Duration::from_millis(ttl_ms),
                &|i| format!("member{i}"),
            );
            Err((
                error,
                Leftover {
                    nodes: failed.release,
                    granted: failed.granted,
                },
            ))
        }
    }
}

/// `Quorum::release_on`: RELEASE on `targets`, waiting for all of them
/// (each bounded by the per-node timeout).
async fn release_on(io: &Io, key: u8, owner: Owner, targets: &[usize]) {
    if targets.is_empty() {
        return;
    }
    fan_out(io, targets, Cmd::Release { key, owner }, |_, _, _| {
        Next::Wait
    })
    .await;
    io.out(Out::Released { key, owner });
}

/// `Quorum::release_queued`: RELEASE on `targets` without waiting.
fn release_queued(io: &Io, key: u8, owner: Owner, targets: &[usize]) {
    if targets.is_empty() {
        return;
    }
    send_and_forget(io, targets, Cmd::Release { key, owner });
    io.out(Out::Released { key, owner });
}

/// A RELEASE or EXTEND round on every node (`Quorum::confirmation_round`).
async fn confirmation_round(io: &Io, cmd: Cmd) -> ConfirmationOutcome {
    let mut tally = ConfirmationTally::new(io.members, io.rules.quorum);
    let mut decided = None;
    let end = fan_out(io, &all(io), cmd, |m, r, _| {
        decided = tally.record(m, confirmation(r));
        decided.is_some().into()
    })
    .await;
    match decided {
        Some(outcome) => outcome,
        None => tally.expire(end.failure(io.node_timeout)),
    }
}

fn new_owner(io: &Io) -> Owner {
    io.id()
}

/// `Redlock::acquire`: attempts per the retry policy.
async fn acquire(io: &Io, key: u8, ttl_ms: u64) -> Result<Held, Error> {
    let (attempts, base, jitter) = io.retry;
    let mut retry = Retry::new(attempts, base, jitter);
    loop {
        let owner = new_owner(io);
        match attempt(io, key, ttl_ms, owner).await {
            Ok(lock) => return Ok(lock),
            Err((error, leftovers)) => {
                let pause = retry.after_failure(&error, &mut *io.rng.borrow_mut());
                let Some(delay) = pause else {
                    release_on(io, key, owner, &leftovers.nodes).await;
                    return Err(error);
                };
                let until = io.local() + delay;
                join2(
                    release_on(io, key, owner, &leftovers.nodes),
                    io.sleep_until(until),
                )
                .await;
            }
        }
    }
}

/// `Redlock::try_acquire`: one attempt.
async fn try_acquire(io: &Io, key: u8, ttl_ms: u64) -> Result<Option<Held>, Error> {
    let owner = new_owner(io);
    match attempt(io, key, ttl_ms, owner).await {
        Ok(lock) => Ok(Some(lock)),
        Err((Error::Busy { .. }, leftovers)) => {
            release_queued(io, key, owner, &leftovers.nodes);
            Ok(None)
        }
        Err((error, leftovers)) => {
            release_on(io, key, owner, &leftovers.nodes).await;
            Err(error)
        }
    }
}

/// `Redlock::acquire_wait`: waits up to `max_wait`, woken by the nodes.
async fn acquire_wait(io: &Io, key: u8, ttl_ms: u64, max_wait: Duration) -> Result<Held, Error> {
    let until = io.local() + max_wait;
    let ticket = io.wall_us();
    let mut owner = new_owner(io);
    loop {
        let (error, leftovers) = match attempt(io, key, ttl_ms, owner).await {
            Ok(lock) => return Ok(lock),
            Err(failed) => failed,
        };
        let retry = (io.retry.1, io.retry.2);
        let decide = || {
            after_failed_attempt(
                &error,
                leftovers.granted,
                io.rules.quorum,
                until,
                io.local(),
                retry,
                &mut *io.rng.borrow_mut(),
            )
        };
        let next = if io.release_before_wait {
            release_on(io, key, owner, &leftovers.nodes).await;
            decide()
        } else {
            // As `waiting.rs`: before a WAIT the leftovers' RELEASEs are
            // queued, not awaited (`AfterAttempt::Wait`).
            let next = decide();
            if matches!(next, AfterAttempt::Wait { .. }) {
                release_queued(io, key, owner, &leftovers.nodes);
            } else {
                release_on(io, key, owner, &leftovers.nodes).await;
            }
            next
        };
        owner = new_owner(io);
        match next {
            AfterAttempt::GiveUp => return Err(error),
            AfterAttempt::Retry { at } => io.sleep_until(at).await,
            AfterAttempt::Wait { pause_until } => {
                if let Some(at) = pause_until {
                    io.sleep_until(at).await;
                }
                let wake = wait_for_free(io, key, until, owner, ticket).await;
                let next = after_wake(&wake, until, io.local(), retry, &mut *io.rng.borrow_mut());
                match next {
                    AfterWake::Attempt => {}
                    AfterWake::GiveUp => return Err(error),
                    AfterWake::Retry { at } => io.sleep_until(at).await,
                }
            }
        }
    }
}

/// `waiting.rs::wait_for_free`: `REDLOCK.WAIT` on every node, each on a
/// connection of its own, until a quorum says the lock is free.
async fn wait_for_free(io: &Io, key: u8, until: At, owner: Owner, ticket: u64) -> Wake {
    let cmd = Cmd::Wait {
        key,
        timeout_ms: wait_timeout_ms(until, io.local()),
        owner,
        ticket,
    };
    io.out(Out::Waiting { key, on: true });
    let round = io.start_round(&all(io), cmd, true);
    let mut tally = WakeTally::new(io.members, io.rules.quorum);
    let give_up = wait_gives_up_at(until, io.node_timeout);
    let mut pending = io.members;
    let wake = loop {
        if pending == 0 {
            break Wake::TimedOut;
        }
        match io.next_reply(round, give_up).await {
            Got::Timer => break Wake::TimedOut,
            Got::Reply(m, reply) => {
                pending -= 1;
                let reply = match reply {
                    Reply::Int(1) => Ok(true),
                    Reply::Int(0) => Ok(false),
                    other => Err(failure(other)),
                };
                if let Some(wake) = tally.record(m, reply) {
                    break wake;
                }
            }
        }
    };
    io.end_round(round);
    // The calls still blocked are closed (the connections are dropped).
    io.out(Out::CloseWaits { round, key });
    io.out(Out::Waiting { key, on: false });
    wake
}

/// `Lock::extend`.
async fn extend(io: &Io, lock: &mut Held, ttl_ms: u64) -> Result<(), Error> {
    let start = io.local();
    let ttl = Duration::from_millis(ttl_ms);
    let unconfirmed = |why| match why {
        Unconfirmed::Lapsed { late } => Error::Lapsed {
            key: String::new(),
            late,
        },
        Unconfirmed::Elapsed(elapsed) => Error::ExpiredBeforeUse { ttl, elapsed },
    };
    let extending = lock
        .rule
        .begin(&io.rules, ttl_ms, start, lock.deadline.get())
        .map_err(unconfirmed)?;
    lock.lower(io, extending.bound);
    let cmd = Cmd::Extend {
        key: lock.key,
        owner: lock.owner,
        ttl: ttl_ms,
    };
    match confirmation_round(io, cmd).await {
        ConfirmationOutcome::Confirmed => {
            match lock.rule.confirmed(&io.rules, &extending, io.local()) {
                Ok(deadline) => {
                    lock.set(io, deadline);
                    Ok(())
                }
                Err(why) => Err(unconfirmed(why)),
            }
        }
        ConfirmationOutcome::NotHeld { confirmed } => Err(Error::Lost {
            key: String::new(),
            confirmed,
            nodes: io.members,
            quorum: io.rules.quorum,
        }),
        ConfirmationOutcome::NoQuorum { answered, .. } => Err(Error::NoQuorum {
            nodes: io.members,
            quorum: io.rules.quorum,
            answered,
            errors: Vec::new(),
        }),
    }
}

/// `Lock::release`.
async fn release(io: &Io, lock: Held) {
    lock.lower(io, io.local());
    confirmation_round(
        io,
        Cmd::Release {
            key: lock.key,
            owner: lock.owner,
        },
    )
    .await;
    io.out(Out::Released {
        key: lock.key,
        owner: lock.owner,
    });
}

/// The drop of a `Lock` that was not released: a background release.
fn drop_lock(io: &Io, lock: Held) {
    lock.lower(io, io.local());
    send_and_forget(
        io,
        &all(io),
        Cmd::Release {
            key: lock.key,
            owner: lock.owner,
        },
    );
    io.out(Out::Released {
        key: lock.key,
        owner: lock.owner,
    });
}

/// Uses the protected resource while the lock is valid: the validity is
/// checked first, then (after a moment, or a long stall when the seed
/// stalls clients between the check and the use) the token goes out.
async fn use_resource(io: &Io, key: u8, token: u64, deadline: &Cell<At>) {
    if deadline.get() <= io.local() {
        return;
    }
    let stall = if io.chance(io.pause_use) {
        io.out(Out::Stall);
        io.draw_skewed(MS, 2 * io.max_ttl_ms.get() * MS)
    } else {
        io.draw(0, 500)
    };
    io.sleep_until(io.local() + Duration::from_micros(stall))
        .await;
    let write = io.chance(0.6);
    io.out(Out::Use { key, token, write });
}

/// The work under a lock: uses of the resource at random moments for a
/// random while.
async fn work(io: &Io, key: u8, token: u64, deadline: &Cell<At>, hold: Duration) {
    let end = io.local() + hold;
    let uses = io.draw(0, 3);
    for _ in 0..uses {
        let at = io.local() + Duration::from_micros(io.draw(0, hold.as_micros() as u64 / 2));
        io.sleep_until(at.min(end)).await;
        use_resource(io, key, token, deadline).await;
    }
    io.sleep_until(end).await;
}

/// `with_lock.rs::keep_alive`, carrying out the keep-alive machine.
async fn keep_alive(io: &Io, mut lock: Held, ttl_ms: u64, done: Signal) {
    let ttl = Duration::from_millis(ttl_ms);
    let mut machine = KeepAlive::new(ttl, io.local());
    let mut action = machine.first();
    loop {
        let deadline = lock.deadline.get();
        let event = match action {
            Action::Sleep { next } => {
                match race2(
                    done.wait(),
                    race2(io.sleep_until(deadline), io.sleep_until(next)),
                )
                .await
                {
                    Ok(()) => Event::Done,
                    Err(Ok(())) => Event::ValidityEnded,
                    Err(Err(())) => Event::Due,
                }
            }
            Action::Extend => {
                match race2(
                    done.wait(),
                    race2(io.sleep_until(deadline), extend(io, &mut lock, ttl_ms)),
                )
                .await
                {
                    Ok(()) => Event::Done,
                    Err(Ok(())) => Event::ValidityEnded,
                    Err(Err(Ok(()))) => Event::Extended(true),
                    Err(Err(Err(error))) if error.is_transient() => Event::Unanswered,
                    Err(Err(Err(_))) => Event::Extended(false),
                }
            }
            Action::Lost(_) => {
                // The deadline first, then the signal.
                lock.lower(io, io.local());
                done.wait().await;
                Event::Done
            }
            Action::AwaitDone => {
                done.wait().await;
                Event::Done
            }
            Action::Release => break,
        };
        action = machine.on(event, io.local());
    }
    release(io, lock).await;
}

/// What a client does with a lock it got (without a keep-alive): uses,
/// explicit extensions with varied ttls, then a release, a drop or a
/// detach.
async fn hold(io: &Io, mut lock: Held, ttl_ms: u64) {
    let steps = io.draw(0, 4);
    for _ in 0..steps {
        let gap = io.draw_skewed(100, ttl_ms * MS);
        io.sleep_until(io.local() + Duration::from_micros(gap))
            .await;
        let most = io.max_ttl_ms.get();
        let shorter = io.draw(ttl_ms / 4, ttl_ms).max(10);
        let longer = io.draw(ttl_ms, most).max(10);
        let extended = match io.draw(0, 19) {
            0..=9 => {
                let deadline = lock.deadline.clone();
                use_resource(io, lock.key, lock.token, &deadline).await;
                Ok(())
            }
            10..=11 => extend(io, &mut lock, shorter).await,
            12..=13 => extend(io, &mut lock, ttl_ms).await,
            14..=16 => extend(io, &mut lock, longer).await,
            // A short extension, then at once a long one.
            _ => match extend(io, &mut lock, shorter).await {
                Ok(()) => extend(io, &mut lock, longer).await,
                e => e,
            },
        };
        if extended.is_err() {
            // After any error the token is not used any more.
            break;
        }
    }
    // The rest of the work: most of what is left of the validity, with a
    // last use of the token at its end.
    let left = lock.deadline.get() - io.local();
    if !left.is_zero() && io.chance(0.7) {
        let work = io.draw(0, left.as_micros() as u64);
        io.sleep_until(io.local() + Duration::from_micros(work))
            .await;
        let deadline = lock.deadline.clone();
        use_resource(io, lock.key, lock.token, &deadline).await;
    }
    match io.draw(0, 9) {
        0 => drop_lock(io, lock),
        1 => {
            // Detached: the lease runs out.
            lock.lower(io, io.local());
        }
        _ => release(io, lock).await,
    }
}

/// A client's program: operations one after the other until the run
/// stops them.
async fn program(io: Rc<Io>) {
    let io = &*io;
    loop {
        let think = io.draw_skewed(100, 60 * MS);
        io.sleep_until(io.local() + Duration::from_micros(think))
            .await;
        if io.now.get() >= io.stop_at.get() {
            return;
        }
        let key = io.draw(0, io.keys as u64 - 1) as u8;
        let most = io.max_ttl_ms.get();
        let longer_than = io.ttl_floor_ms.get().min(most - 1);
        let least = if longer_than > 0 {
            longer_than + 1
        } else {
            (most / 8).max(20)
        };
        let ttl_ms = io.draw(least, most);
        let hold_for = Duration::from_micros(io.draw_skewed(100, ttl_ms * MS * 3 / 2));
        match io.draw(0, 99) {
            0..=29 => {
                if let Ok(lock) = acquire(io, key, ttl_ms).await {
                    hold(io, lock, ttl_ms).await;
                }
            }
            30..=49 => {
                if let Ok(Some(lock)) = try_acquire(io, key, ttl_ms).await {
                    hold(io, lock, ttl_ms).await;
                }
            }
            50..=79 => {
                let max_wait = Duration::from_millis(io.draw(ttl_ms / 4, 3 * ttl_ms));
                if let Ok(lock) = acquire_wait(io, key, ttl_ms, max_wait).await {
                    hold(io, lock, ttl_ms).await;
                }
            }
            _ => {
                // `with_lock`: the work and the keep-alive side by side.
                if let Ok(lock) = acquire(io, key, ttl_ms).await {
                    let done = Signal::default();
                    let deadline = lock.deadline.clone();
                    let token = lock.token;
                    let worker = async {
                        work(io, key, token, &deadline, hold_for).await;
                        done.set();
                    };
                    join2(worker, keep_alive(io, lock, ttl_ms, done.clone())).await;
                }
            }
        }
    }
}

/// A client.
pub struct Client {
    /// Its index.
    pub id: u32,
    /// Alive (not crashed).
    pub alive: bool,
    /// Its incarnation.
    pub life: u32,
    /// Stopped until then (a GC pause).
    pub paused_until: Option<Time>,
    /// What arrived while stopped.
    pub held: VecDeque<Ev>,
    /// Its program's view of the world.
    pub io: Rc<Io>,
    fut: Option<Pin<Box<dyn Future<Output = ()>>>>,
}

impl Client {
    /// Client `id` of scenario `sc`.
    pub fn new(id: u32, rate_ppm: i64, sc: &Scenario, setup: &Setup) -> Client {
        let mut rng = stream(sc.seed, Stream::Client(id));
        let wall_offset = if sc.canary {
            0
        } else {
            rng.gen_range(-20_000i64..=20_000)
        };
        #[allow(unused_mut)]
        let mut rules = Rules::new(sc.members, 0.01);
        rules.switches = setup.switches;
        let retry = (
            between(&mut rng, 1, 5) as u32,
            Duration::from_millis(between(&mut rng, 2, 40)),
            Duration::from_millis(between(&mut rng, 0, 40)),
        );
        let io = Io {
            id,
            now: Cell::new(0),
            clock: RefCell::new(Clock::new(rate_ppm, wall_offset)),
            inbox: RefCell::new(Vec::new()),
            outbox: RefCell::new(Vec::new()),
            rounds: RefCell::new(Vec::new()),
            rng: RefCell::new(rng),
            rules,
            members: sc.members,
            floor: sc.no_floor & (1 << id) == 0 && !setup.no_floor,
            release_before_wait: setup.release_before_wait,
            node_timeout: Duration::from_millis(sc.node_timeout_ms),
            retry,
            next: Cell::new(0),
            life: 0,
            max_ttl_ms: Cell::new(sc.max_ttl_ms),
            ttl_floor_ms: Cell::new(0),
            keys: sc.keys,
            stop_at: Cell::new(Time::MAX),
            pause_use: if sc.faults.has(FaultKind::ClientPause) {
                0.1
            } else {
                0.0
            },
        };
        Client {
            id,
            alive: true,
            life: 0,
            paused_until: None,
            held: VecDeque::new(),
            io: Rc::new(io),
            fut: None,
        }
    }
}

/// Builds a fresh `Io` for a restarted client (new incarnation), keeping
/// its clock and its random stream.
fn reborn(old: &Io, life: u32) -> Io {
    Io {
        id: old.id,
        now: Cell::new(old.now.get()),
        clock: RefCell::new(old.clock.borrow().clone()),
        inbox: RefCell::new(Vec::new()),
        outbox: RefCell::new(Vec::new()),
        rounds: RefCell::new(Vec::new()),
        rng: RefCell::new(old.rng.borrow().clone()),
        rules: old.rules,
        members: old.members,
        floor: old.floor,
        release_before_wait: old.release_before_wait,
        node_timeout: old.node_timeout,
        retry: old.retry,
        next: Cell::new(0),
        life,
        max_ttl_ms: Cell::new(old.max_ttl_ms.get()),
        ttl_floor_ms: Cell::new(old.ttl_floor_ms.get()),
        keys: old.keys,
        stop_at: Cell::new(old.stop_at.get()),
        pause_use: old.pause_use,
    }
}

impl World {
    /// Starts client `c`'s program.
    pub fn client_start(&mut self, c: usize) {
        let client = &mut self.clients[c];
        let io = Rc::clone(&client.io);
        client.fut = Some(Box::pin(program(io)));
        self.client_poll(c);
    }

    /// A reply reaches client `c`.
    pub fn client_reply(
        &mut self,
        c: u32,
        life: u32,
        round: u64,
        member: u8,
        _conn: u64,
        reply: Reply,
    ) {
        let ci = c as usize;
        let client = &mut self.clients[ci];
        if !client.alive || client.life != life {
            return;
        }
        if client.paused_until.is_some() {
            client.held.push_back(Ev::AtClient {
                client: c,
                life,
                round,
                member,
                conn: _conn,
                reply,
            });
            return;
        }
        if !client.io.awaits(round, member as usize) {
            return;
        }
        client.io.inbox.borrow_mut().push(Incoming {
            round,
            member: member as usize,
            reply,
        });
        self.client_poll(ci);
    }

    /// A timer of client `c` fires.
    pub fn client_timer(&mut self, c: u32, life: u32, tag: u64) {
        let ci = c as usize;
        let client = &mut self.clients[ci];
        if !client.alive || client.life != life {
            return;
        }
        if client.paused_until.is_some() {
            client.held.push_back(Ev::ClientTimer {
                client: c,
                life,
                tag,
            });
            return;
        }
        self.client_poll(ci);
    }

    /// Polls client `c`'s program and carries out what it asked for.
    pub fn client_poll(&mut self, c: usize) {
        let now = self.now;
        let client = &mut self.clients[c];
        client.io.now.set(now);
        client.io.stop_at.set(self.ops_until);
        let (longer_than, most) = match self.ttl_split {
            Some((before, longer)) if longer & World::client_bit(c) != 0 => {
                (before, self.ttl_ceiling_ms)
            }
            Some((before, _)) => (0, before),
            None => (0, self.ttl_ceiling_ms),
        };
        client.io.max_ttl_ms.set(most);
        client.io.ttl_floor_ms.set(longer_than);
        let Some(fut) = client.fut.as_mut() else {
            return;
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if fut.as_mut().poll(&mut cx).is_ready() {
            client.fut = None;
        }
        let outs: Vec<Out> = std::mem::take(&mut *client.io.outbox.borrow_mut());
        let life = client.life;
        for out in outs {
            self.client_out(c, life, out);
        }
    }

    fn client_out(&mut self, c: usize, life: u32, out: Out) {
        match out {
            Out::Send {
                member,
                round,
                cmd,
                blocking,
            } => {
                let conn = self.send(c, life, member, round, cmd, blocking);
                if blocking {
                    self.wait_conns.push((c, round, member, conn));
                }
            }
            Out::CloseWaits { round, key } => {
                let mut closing = Vec::new();
                self.wait_conns.retain(|&(cc, r, m, conn)| {
                    let hit = cc == c && r == round;
                    if hit {
                        closing.push((m, conn));
                    }
                    !hit
                });
                for (m, conn) in closing {
                    self.close_wait(c, life, m, conn, key);
                }
            }
            Out::Timer(at) => {
                let t = self.clients[c].io.clock.borrow().true_at(at.0);
                let tag = self.id();
                self.at(
                    t,
                    Ev::ClientTimer {
                        client: c as u32,
                        life,
                        tag,
                    },
                );
            }
            Out::AttemptStart { key, owner } => self.checker.attempt_start(key, owner, self.now),
            Out::Acquired {
                key,
                owner,
                token,
                deadline,
            } => {
                let until = self.clients[c].io.clock.borrow().true_at(deadline.0);
                self.stats.acquisitions += 1;
                self.checker.acquired(key, owner, token, self.now, until);
            }
            Out::Deadline { owner, deadline } => {
                let until = self.clients[c].io.clock.borrow().true_at(deadline.0);
                self.checker.deadline(owner, self.now, until);
            }
            Out::Use { key, token, write } => {
                let delay = crate::rng::skewed(&mut self.net_rng, 50, 2 * MS);
                self.after(
                    delay,
                    Ev::AtResource {
                        client: c as u32,
                        key,
                        token,
                        write,
                    },
                );
            }
            Out::Waiting { key, on } => self.checker.waiting(key, c, on, self.now),
            Out::Stall => self.stats.fault(FaultKind::ClientPause),
            Out::Released { key, owner } => {
                if self.now >= self.live_from {
                    let delay = 4 * self.sc.latency_us.1 + self.sc.node_timeout_ms * MS + 5 * MS;
                    self.after(delay, Ev::Check(CheckEv::Released { key, owner }));
                }
            }
        }
    }

    /// Closes a `REDLOCK.WAIT` connection: the node frees the waiter.
    fn close_wait(&mut self, c: usize, life: u32, member: usize, conn: u64, key: u8) {
        let node = self.members[member].master;
        let req = crate::world::Req {
            client: c as u32,
            life,
            round: 0,
            member: member as u8,
            node,
            conn,
            cmd: Cmd::Close { key },
            copy: false,
            blocking: true,
        };
        let delay = crate::rng::skewed(
            &mut self.net_rng,
            self.sc.latency_us.0,
            self.sc.latency_us.1,
        );
        self.after(delay, Ev::AtNode(req));
    }

    /// Client `c`'s connection to member `m` was reset: its calls in flight
    /// there fail with a broken connection, or, on a member whose connection
    /// resends, go again on the new connection.
    pub fn client_connection_reset(&mut self, c: usize, m: usize) {
        let client = &self.clients[c];
        if !client.alive {
            return;
        }
        let resend = self.sc.resending & (1 << m) != 0;
        let pending: Vec<(u64, Cmd)> = client
            .io
            .rounds
            .borrow()
            .iter()
            .filter(|r| !r.blocking)
            .flat_map(|r| {
                r.pending
                    .iter()
                    .filter(|(mm, _)| *mm == m)
                    .map(move |(_, cmd)| (r.id, *cmd))
            })
            .collect();
        let life = client.life;
        for (round, cmd) in pending {
            if resend {
                self.send(c, life, m, round, cmd, false);
            } else {
                let conn = self.conns[c][m].id;
                self.at(
                    self.now,
                    Ev::AtClient {
                        client: c as u32,
                        life,
                        round,
                        member: m as u8,
                        conn,
                        reply: Reply::Broken,
                    },
                );
            }
        }
    }

    /// Client `c` dies: its program stops where it is, its connections
    /// close; nothing it held is released (the leases run out).
    pub fn client_crash(&mut self, c: usize) {
        let client = &mut self.clients[c];
        if !client.alive {
            return;
        }
        client.alive = false;
        client.fut = None;
        client.paused_until = None;
        client.held.clear();
        self.checker.client_gone(c, self.now);
        self.drop_waiters_of(c as u32);
        self.wait_conns.retain(|&(cc, ..)| cc != c);
    }

    /// A dead client starts again (a new process: new owner ids).
    pub fn client_restart(&mut self, c: usize) {
        let client = &mut self.clients[c];
        if client.alive {
            return;
        }
        client.alive = true;
        client.life += 1;
        client.io = Rc::new(reborn(&client.io, client.life));
        self.client_start(c);
    }

    /// A stopped client resumes: what arrived meanwhile is taken in order.
    pub fn client_resume(&mut self, c: usize) {
        if self.clients[c].paused_until.take().is_none() {
            return;
        }
        while let Some(ev) = self.clients[c].held.pop_front() {
            match ev {
                Ev::AtClient {
                    client,
                    life,
                    round,
                    member,
                    conn,
                    reply,
                } => self.client_reply(client, life, round, member, conn, reply),
                Ev::ClientTimer { client, life, tag } => self.client_timer(client, life, tag),
                _ => {}
            }
        }
        self.client_poll(c);
    }
}
