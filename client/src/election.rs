//! Leader election with fencing epochs: [`Election`], [`Leadership`],
//! [`Leader`] and [`Observer`].
//!
//! An election over `name` is the lock `name`: a candidate leads while it
//! holds the lock, and its **epoch** is the lock's fencing token, so it only
//! grows from one leader to the next and a resource that checks it
//! (`REDLOCK.FENCED`) refuses a deposed leader.
//!
//! - [`Election::campaign`] waits for the lock as [`Redlock::acquire_wait`]
//!   does (woken by the nodes, first come first served in the nodes' queues),
//!   then keeps it alive in the background as [`Redlock::with_lock`] does,
//!   until [`Leadership::resign`] or loss ([`Leadership::lost`]).
//! - **Proclaim.** Every term and every proclaimed value is an entry of a
//!   small stream on each node, `redlock:election:{name}:log`
//!   (fields `epoch`, `seq`, optionally `value`), appended through
//!   `REDLOCK.FENCED redlock:election:{name}:guard name epoch XADD …`. The
//!   guard refuses an epoch below one it has seen, so once the new leader's
//!   first entry (written as soon as it leads) reached a node, a deposed
//!   leader's late proclaim is refused there ([`Error::Stale`]), and a
//!   proclaim needs a quorum of nodes to accept it.
//! - [`Election::leader`] reads `REDLOCK.INSPECT` and the last entries of
//!   the stream from every node: the leader is the epoch held on a quorum,
//!   and its value is the highest `seq` written under that same epoch; an
//!   entry of an older epoch is never reported as the current value. The
//!   owner id is never read.
//! - [`Election::observe`] blocks on the nodes with `XREAD BLOCK` on the
//!   stream (a plain Redis read: it takes no place in the lock's waiter
//!   queue, unlike `REDLOCK.WAIT … QUEUE`, and `REDLOCK.WAIT` without
//!   `QUEUE` would not wake on a hand-off through a reservation), and reads
//!   the leader from a quorum after each wake-up. Nothing is sent while
//!   nothing changes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::Instrument;

use crate::core::error::{Error, NodeFailure};
use crate::fenced::stale_highest;
use crate::inspect::NodeState;
use crate::lock::LockInfo;
use crate::redlock::Redlock;
use crate::with_lock::keep_alive;

/// How long one campaign round waits before asking again (a campaign
/// waits as long as it takes; this only bounds each `acquire_wait`).
const CAMPAIGN_ROUND: Duration = Duration::from_secs(3600);

/// How many entries the stream keeps (about: `MAXLEN ~`).
const LOG_LENGTH: u64 = 64;

/// How long one `XREAD BLOCK` of an observer lasts before it reads again.
const OBSERVE_BLOCK_MS: u64 = 30_000;

impl Redlock {
    /// The election over `name` (see [`Election`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let election = redlock.election("scheduler");
    /// if let Some(leader) = election.leader().await? {
    ///     println!("epoch {} leads, value {:?}", leader.epoch, leader.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election::new(self, name)
    }
}

/// A leader election over one name: campaign, read who leads, observe the
/// changes. Cheap to clone.
///
/// # Examples
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
/// let election = redlock_client::Election::new(&redlock, "scheduler");
/// let leadership = election.campaign(Duration::from_secs(10)).await?;
/// leadership.proclaim("10.0.0.7:8080").await?;
/// // … lead, passing leadership.epoch() to resources as a fencing token …
/// leadership.resign().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    redlock: Redlock,
    name: Arc<str>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Who leads an election now: see [`Election::leader`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's epoch: its lock's fencing token.
    pub epoch: u64,
    /// How long the leader's lease still runs on a quorum (it is renewed
    /// while the leader lives).
    pub time_left: Duration,
    /// The value the leader proclaimed last, if any.
    pub value: Option<String>,
    /// How many values this leader proclaimed (0 before its first
    /// proclaim); with the epoch, it orders what an [`Observer`] reports.
    pub revision: u64,
}

/// One node's latest log entry of a term: (epoch, seq, value).
type Entry = (u64, u64, Option<String>);

impl Election {
    /// The election over `name` on `redlock`'s nodes.
    pub fn new(redlock: &Redlock, name: &str) -> Self {
        Election {
            redlock: redlock.clone(),
            name: Arc::from(name),
        }
    }

    /// The election's name (the lock's key).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn guard_key(&self) -> String {
        format!("redlock:election:{{{}}}:guard", self.name)
    }

    fn log_key(&self) -> String {
        format!("redlock:election:{{{}}}:log", self.name)
    }

    /// Waits until this candidate leads, and returns its [`Leadership`].
    ///
    /// Waiting is [`Redlock::acquire_wait`]'s: woken by the nodes when the
    /// leader resigns or its lease ends, candidates served in the order
    /// they started waiting. Once elected, the lease is renewed in the
    /// background about every `ttl / 3` until [`Leadership::resign`], the
    /// `Leadership` is dropped, or it is lost ([`Leadership::lost`]).
    /// The term's first log entry is written on the nodes at once, so
    /// that a deposed leader's proclaims are refused from then on.
    ///
    /// # Errors
    ///
    /// The acquisition's errors other than [`Error::Busy`] (a campaign
    /// waits as long as it takes), e.g. [`Error::InvalidArgument`] for a
    /// zero `ttl`, or [`Error::NoQuorum`] when too few nodes answered for
    /// an hour.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn work(_epoch: u64) {}
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let leadership = redlock.election("scheduler").campaign(Duration::from_secs(10)).await?;
    /// tokio::select! {
    ///     () = work(leadership.epoch()) => {}
    ///     () = leadership.lost() => eprintln!("deposed: stop at once"),
    /// }
    /// leadership.resign().await;
    /// # Ok(()) }
    /// ```
    pub async fn campaign(&self, ttl: Duration) -> Result<Leadership, Error> {
        let span = tracing::info_span!(
            "redlock.campaign",
            name = %self.name,
            ttl_ms = ttl.as_millis() as u64,
            epoch = tracing::field::Empty
        );
        async {
            let lock = loop {
                match self
                    .redlock
                    .acquire_wait(&self.name, ttl, CAMPAIGN_ROUND)
                    .await
                {
                    Ok(lock) => break lock,
                    Err(Error::Busy { .. }) => continue,
                    Err(e) => return Err(e),
                }
            };
            let epoch = lock.token();
            tracing::Span::current().record("epoch", epoch);
            let info = Arc::clone(lock.info());
            let lost = CancellationToken::new();
            let done = CancellationToken::new();
            let keeper = tokio::spawn(keep_alive(lock, ttl, lost.clone(), done.clone()));
            let leadership = Leadership {
                election: self.clone(),
                info,
                lost,
                done,
                keeper: Some(keeper),
                seq: AtomicU64::new(0),
            };
            // The term's first entry: raises every reachable node's guard
            // to this epoch (a deposed leader is refused from then on) and
            // wakes the observers. A newer epoch already there means this
            // term is over before it began.
            match leadership.append(0, None).await {
                Ok(()) => {}
                Err(e @ Error::Stale { .. }) => {
                    leadership.resign().await;
                    return Err(e);
                }
                Err(e) => tracing::warn!(%e, "the term's first entry reached too few nodes"),
            }
            tracing::info!("elected");
            Ok(leadership)
        }
        .instrument(span)
        .await
    }

    /// Who leads now, read from every node: the epoch held on a quorum,
    /// its time left and its latest proclaimed value; `None` when no
    /// epoch is held on a quorum. Never reports the owner id.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// match redlock.election("scheduler").leader().await? {
    ///     Some(leader) => println!("epoch {} for {:?}", leader.epoch, leader.time_left),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let span = tracing::debug_span!("redlock.leader", name = %self.name);
        Ok(self.read().instrument(span).await?.0)
    }

    /// The leader, and each node's last stream id (for `XREAD`).
    async fn read(&self) -> Result<(Option<Leader>, Vec<Option<String>>), Error> {
        let quorum = self.redlock.inner.quorum.quorum;
        let nodes = &self.redlock.inner.quorum.nodes;
        let mut range = redis::cmd("XREVRANGE");
        range
            .arg(self.log_key())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(LOG_LENGTH);
        let range = &range;
        let (views, logs) = tokio::join!(
            self.redlock.inspect(&self.name),
            futures_util::future::join_all(nodes.iter().map(|n| n.call(range)))
        );
        let mut errors = Vec::new();
        let mut held: Vec<(u64, Duration)> = Vec::new();
        for view in &views {
            match &view.state {
                NodeState::Present {
                    held: true,
                    pttl,
                    token,
                } => held.push((*token, pttl.unwrap_or_default())),
                NodeState::Present { .. } | NodeState::Missing => {}
                NodeState::Error(reason) => errors.push((view.node.clone(), reason.clone())),
            }
        }
        if nodes.len() - errors.len() < quorum {
            return Err(Error::NoQuorum {
                nodes: nodes.len(),
                quorum,
                answered: nodes.len() - errors.len(),
                errors,
            });
        }
        let mut last_ids = Vec::with_capacity(nodes.len());
        let mut entries: Vec<Entry> = Vec::new();
        for log in logs {
            match log {
                Ok(value) => {
                    let parsed = parse_log(value);
                    last_ids.push(Some(
                        parsed
                            .first()
                            .map(|(id, _)| id.clone())
                            .unwrap_or_else(|| "0-0".to_string()),
                    ));
                    entries.extend(parsed.into_iter().map(|(_, e)| e));
                }
                Err(_) => last_ids.push(None),
            }
        }
        Ok((leader_of(&held, quorum, &entries), last_ids))
    }

    /// The leadership changes, in order, as they happen: see [`Observer`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let mut changes = redlock.election("scheduler").observe();
    /// while let Some(leader) = changes.next().await {
    ///     let leader = leader?;
    ///     println!("epoch {} now leads, value {:?}", leader.epoch, leader.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            last: None,
        }
    }
}

/// The leader held on a quorum (`held`: each node's held token and time
/// left), with the latest value proclaimed under its epoch.
fn leader_of(held: &[(u64, Duration)], quorum: usize, entries: &[Entry]) -> Option<Leader> {
    let mut epochs: Vec<u64> = held.iter().map(|(t, _)| *t).collect();
    epochs.sort_unstable();
    epochs.dedup();
    let epoch = epochs
        .into_iter()
        .rev()
        .find(|e| held.iter().filter(|(t, _)| t == e).count() >= quorum)?;
    let mut left: Vec<Duration> = held
        .iter()
        .filter(|(t, _)| *t == epoch)
        .map(|(_, d)| *d)
        .collect();
    left.sort_unstable_by(|a, b| b.cmp(a));
    // The quorum-th longest: the time for which a quorum still holds it.
    let time_left = left.get(quorum - 1).copied().unwrap_or_default();
    let latest = entries
        .iter()
        .filter(|(e, _, _)| *e == epoch)
        .max_by_key(|(_, seq, _)| *seq);
    Some(Leader {
        epoch,
        time_left,
        value: latest.and_then(|(_, _, v)| v.clone()),
        revision: latest.map_or(0, |(_, seq, _)| *seq),
    })
}

/// An `XREVRANGE`/`XREAD` stream reply as `(id, (epoch, seq, value))`,
/// newest first for `XREVRANGE`; malformed entries are skipped.
fn parse_log(value: Value) -> Vec<(String, Entry)> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items {
        let Value::Array(parts) = item else { continue };
        let mut parts = parts.into_iter();
        let (Some(id), Some(fields)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some(id) = text(id) else { continue };
        let fields: Vec<Value> = match fields {
            Value::Array(f) => f,
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => continue,
        };
        let (mut epoch, mut seq, mut val) = (None, None, None);
        let mut it = fields.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            match text(k).as_deref() {
                Some("epoch") => epoch = text(v).and_then(|s| s.parse().ok()),
                Some("seq") => seq = text(v).and_then(|s| s.parse().ok()),
                Some("value") => val = text(v),
                _ => {}
            }
        }
        if let (Some(e), Some(s)) = (epoch, seq) {
            out.push((id, (e, s, val)));
        }
    }
    out
}

fn text(v: Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Value::SimpleString(s) => Some(s),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// This candidate's term as leader, from [`Election::campaign`]: the epoch
/// (its fencing token), a lost signal, [`Leadership::proclaim`] and
/// [`Leadership::resign`]. Renewed in the background; dropping it resigns
/// (in the background).
pub struct Leadership {
    election: Election,
    info: Arc<LockInfo>,
    lost: CancellationToken,
    done: CancellationToken,
    keeper: Option<JoinHandle<()>>,
    seq: AtomicU64,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.election.name)
            .field("epoch", &self.epoch())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// The epoch: this term's fencing token. Pass it to resources (e.g.
    /// [`LockInfo::fenced`] through [`Leadership::info`]) so that they
    /// refuse a deposed leader.
    pub fn epoch(&self) -> u64 {
        self.info.token()
    }

    /// The term's lock (key, token, validity that follows the renewals),
    /// with the fenced-write helpers of [`LockInfo`].
    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    /// Completes when leadership is lost (a renewal found the lock gone or
    /// the validity ran out first): stop acting as leader at once.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lost.cancelled()
    }

    /// A token cancelled when leadership is lost, to move into other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether leadership was lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Publishes `value` (an address, a name) as this leader's, under the
    /// same epoch; [`Election::leader`] and observers report it.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] once leadership is lost (nothing is sent);
    /// [`Error::Stale`] when a node's guard has seen a newer epoch (a newer
    /// leader exists); [`Error::NoQuorum`] when fewer than a quorum of
    /// nodes accepted it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(redlock: redlock_client::Redlock) -> Result<(), redlock_client::Error> {
    /// let leadership = redlock.election("scheduler").campaign(Duration::from_secs(10)).await?;
    /// leadership.proclaim("10.0.0.7:8080").await?;
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&self, value: &str) -> Result<(), Error> {
        let redlock = &self.election.redlock;
        if self.is_lost() {
            return Err(Error::Lost {
                key: self.election.name.to_string(),
                confirmed: 0,
                nodes: redlock.inner.quorum.nodes.len(),
                quorum: redlock.inner.quorum.quorum,
            });
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.append(seq, Some(value))
            .instrument(tracing::debug_span!(
                "redlock.proclaim",
                name = %self.election.name,
                epoch = self.epoch(),
                seq
            ))
            .await
    }

    /// Appends `(epoch, seq, value)` to the log on every node through the
    /// epoch's guard; `Ok` when a quorum accepted it.
    async fn append(&self, seq: u64, value: Option<&str>) -> Result<(), Error> {
        let election = &self.election;
        let quorum = election.redlock.inner.quorum.quorum;
        let nodes = &election.redlock.inner.quorum.nodes;
        let guard = election.guard_key();
        let mut cmd = redis::cmd("REDLOCK.FENCED");
        cmd.arg(&guard)
            .arg(&*election.name)
            .arg(self.epoch())
            .arg("XADD")
            .arg(election.log_key())
            .arg("MAXLEN")
            .arg("~")
            .arg(LOG_LENGTH)
            .arg("*")
            .arg("epoch")
            .arg(self.epoch())
            .arg("seq")
            .arg(seq);
        if let Some(value) = value {
            cmd.arg("value").arg(value);
        }
        let cmd = &cmd;
        let mut calls: FuturesUnordered<_> = nodes
            .iter()
            .map(|n| async move { (n.addr().to_string(), n.call(cmd).await) })
            .collect();
        let (mut accepted, mut stale, mut errors) = (0, None, Vec::new());
        while let Some((addr, reply)) = calls.next().await {
            match reply {
                Ok(_) => accepted += 1,
                Err(NodeFailure::Refused(text)) if text.starts_with("STALE") => {
                    stale = stale.max(stale_highest(&text));
                    errors.push((addr, text));
                }
                Err(e) => errors.push((addr, e.to_string())),
            }
        }
        if let Some(highest) = stale {
            return Err(Error::Stale {
                guard,
                token: self.epoch(),
                highest,
            });
        }
        if accepted >= quorum {
            Ok(())
        } else {
            Err(Error::NoQuorum {
                nodes: nodes.len(),
                quorum,
                answered: accepted,
                errors,
            })
        }
    }

    /// Steps down: stops the renewals and releases the lock, so that the
    /// next candidate is woken at once. Returns when the release was sent.
    pub async fn resign(mut self) {
        self.done.cancel();
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.await;
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        // The keeper releases in the background.
        self.done.cancel();
    }
}

/// The leadership changes of an election, from [`Election::observe`]:
/// each call to [`Observer::next`] returns the next leader (a new epoch, or
/// a new value proclaimed under the same epoch), in increasing
/// `(epoch, revision)` order.
///
/// Between changes the observer blocks on the nodes (`XREAD BLOCK` on the
/// election's log, on connections of its own) and sends nothing; it takes
/// no place in the candidates' queue. It reports the latest state after
/// each wake-up, so a term that began and ended between two reads (shorter
/// than one round trip to the nodes) is skipped, never reported out of
/// order. Not offered on cluster members.
#[derive(Debug)]
pub struct Observer {
    election: Election,
    last: Option<(u64, u64)>,
}

impl Observer {
    /// Waits for the next change and returns the new [`Leader`]; `None`
    /// never (the stream does not end), `Some(Err)` when too few nodes
    /// answered a read (the next call tries again).
    pub async fn next(&mut self) -> Option<Result<Leader, Error>> {
        loop {
            let (leader, last_ids) = match self.election.read().await {
                Ok(read) => read,
                Err(e) => {
                    // Not at once again: the nodes are down or slow.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return Some(Err(e));
                }
            };
            if let Some(leader) = leader {
                let at = (leader.epoch, leader.revision);
                if self.last.is_none_or(|last| at > last) {
                    self.last = Some(at);
                    return Some(Ok(leader));
                }
            }
            self.block(&last_ids).await;
        }
    }

    /// Blocks until a node's log gets an entry after `last_ids` (or the
    /// block times out on every node).
    #[tracing::instrument(level = "debug", name = "redlock.observe.block", skip_all, fields(name = %self.election.name))]
    async fn block(&self, last_ids: &[Option<String>]) {
        let nodes = &self.election.redlock.inner.quorum.nodes;
        let key = self.election.log_key();
        let mut calls = FuturesUnordered::new();
        for (node, id) in nodes.iter().zip(last_ids) {
            let Some(id) = id else { continue };
            let mut cmd = redis::cmd("XREAD");
            cmd.arg("COUNT")
                .arg(1)
                .arg("BLOCK")
                .arg(OBSERVE_BLOCK_MS)
                .arg("STREAMS")
                .arg(&key)
                .arg(id);
            calls.push(async move { node.call_blocking(&cmd).await });
        }
        if calls.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return;
        }
        while let Some(reply) = calls.next().await {
            match reply {
                Ok(Value::Nil) => {}
                // An entry arrived (or the node failed: read again).
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_leader_is_the_epoch_held_on_a_quorum_with_its_own_value() {
        let held = [(7, ms(900)), (7, ms(800)), (7, ms(700)), (6, ms(100))];
        let entries = [
            (6, 3, Some("old".to_string())),
            (7, 0, None),
            (7, 2, Some("new".to_string())),
            (7, 1, Some("first".to_string())),
        ];
        let leader = leader_of(&held, 3, &entries).unwrap();
        assert_eq!(leader.epoch, 7);
        assert_eq!(leader.time_left, ms(700));
        assert_eq!(leader.value.as_deref(), Some("new"));
        assert_eq!(leader.revision, 2);
    }

    #[test]
    fn an_older_epochs_value_is_never_the_new_leaders() {
        let held = [(8, ms(900)), (8, ms(900)), (8, ms(900))];
        let entries = [(7, 5, Some("deposed".to_string()))];
        let leader = leader_of(&held, 3, &entries).unwrap();
        assert_eq!(leader.value, None);
        assert_eq!(leader.revision, 0);
        assert_eq!(leader_of(&held[..2], 3, &entries), None);
    }
}
