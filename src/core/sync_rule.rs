//! The replica-sync check (DESIGN §13), apart from Redis: when a master may
//! take a lock write, when a promoted replica may grant at once, and when a
//! replica has caught up with what it acknowledged before a restart.
//!
//! **R** is `redlock.sync-replicas`, the same on every node of a group of one
//! master with replicas; 0 (the default) turns the check off. A client states
//! the R it will wait for in every lock write (`SYNC r` on ACQUIRE, EXTEND and
//! FENCE) and relies on the write only after `WAIT r` counted r replicas. The
//! node compares: a client that states another R (an operator changed it, the
//! client never asked) is refused with the node's R and tries again. So no
//! client ever relies on fewer acknowledgements than the node requires.
//!
//! **Every replica acknowledges.** A master counts its replicas by identity
//! (`ip:port`) over its life as master, kept in a file across restarts, and
//! refuses lock writes while that count is above R: with count ≤ R, `WAIT R`
//! succeeds only when every replica it ever had acknowledged, so no replica
//! that missed a write can have been part of it. A replica that left and one
//! that joined in its place are two; the one that left may still be promoted.
//!
//! **A promoted replica grants at once** ([`promotion`]) only when all of
//! these hold, otherwise it keeps the guard of DESIGN §7:
//! - its own R is above 0, and its master said (in its last announcement) that
//!   it had the same R, so the check was in force on both;
//! - it completed a sync with its current master since it started and since
//!   it was pointed at that master: it applied an announcement of that master
//!   that is *fresh* ([`fresh`]) — a replica that restarted replays its
//!   master's backlog from its own old files, and only an announcement it had
//!   not seen before its restart proves that it is past everything it
//!   acknowledged then;
//! - the master's own guard window, and the time during which it may have
//!   granted leases without the check (before R was raised), were over; the
//!   announcement carries what was left of them ([`hold_ms`]), and a replica
//!   promoted earlier guards for the rest.

use std::collections::BTreeSet;

use crate::core::lock::MonoMillis;
use crate::core::mutant::{Mutant, Mutants};

/// Largest accepted `redlock.sync-replicas`.
pub const MAX_SYNC_REPLICAS: i64 = 64;

/// Why a master refuses a lock write under the check. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncRefusal {
    /// The command stated another R than this node's (`SYNC r`, none = 0).
    Stated {
        /// This node's `redlock.sync-replicas`.
        node: u64,
        /// What the command stated.
        stated: u64,
    },
    /// More replicas than R have been this master's since it became master.
    TooMany {
        /// How many.
        known: usize,
        /// This node's R.
        r: u64,
    },
    /// Fewer than R replicas are online: `WAIT R` cannot succeed.
    TooFew {
        /// How many are online.
        online: usize,
        /// This node's R.
        r: u64,
    },
}

/// Whether a master with R = `r`, `known` replicas over its life and `online`
/// replicas now may take a lock write that stated `stated`.
pub fn check_write(r: u64, stated: u64, known: usize, online: usize) -> Result<(), SyncRefusal> {
    if stated != r {
        return Err(SyncRefusal::Stated { node: r, stated });
    }
    if r == 0 {
        return Ok(());
    }
    if known as u64 > r {
        return Err(SyncRefusal::TooMany { known, r });
    }
    if (online as u64) < r {
        return Err(SyncRefusal::TooFew { online, r });
    }
    Ok(())
}

/// What a replica's current master last announced, from a fresh
/// announcement: its R, and until when (on this node's monotonic clock) a
/// promoted replica must still guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vouch {
    /// The master's `redlock.sync-replicas` when it announced.
    pub master_r: u64,
    /// The end of the master's hold on this node's clock.
    pub hold_until: MonoMillis,
    /// The master's new-disk wait ([`new_disk_wait`]): how long a restart
    /// of it on a new disk waits, by its configuration, before it grants;
    /// 0 from a master that does not say (an earlier version).
    pub new_disk_wait_ms: u64,
}

/// A master's *new-disk wait*: how long its next start waits before it
/// grants when its data disk is lost (no run record, no lease record, no
/// replica set), by what its configuration guarantees that start reads.
/// `longest_ms`: the longest lease it reads at that start, the larger of
/// its `redlock.max-ttl-ms` and `redlock.longest-lease-ms` as read at this
/// start (from the file or the command line), raised by every
/// `redlock.longest-lease-ms` the module has written to its configuration
/// file since (a run-time raise that could not be written is not in it:
/// no configuration file, `CONFIG` renamed, a file it cannot write);
/// `explicit_grace_ms`: the smallest `redlock.restart-grace-ms` above 0
/// (an explicit window) in force at this start or set since (any `CONFIG
/// REWRITE` may have written it), `None` when there was none (-1: the
/// window is the longest lease; 0, the guard off, is the operator's
/// choice and not counted: every promotion of its replicas would keep the
/// guard). A window follows the explicit
/// value when there is one, so the wait is at least the smaller of the
/// two. Lower than the truth is safe (the cut-off of [`promotion`] comes
/// sooner); higher is not.
pub fn new_disk_wait(longest_ms: u64, explicit_grace_ms: Option<u64>) -> u64 {
    explicit_grace_ms.map_or(longest_ms, |g| g.min(longest_ms))
}

/// How a promoted replica starts as master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// Grants at once: every condition of the check holds.
    AtOnce,
    /// Guards for the rest of its master's hold, this many ms.
    Rest(u64),
    /// Today's guard, for the longest lease (DESIGN §7).
    Guard,
}

/// The promotion rule: a replica with R = `own_r` whose current master
/// vouched `vouch` (`None`: no fresh announcement of this master since the
/// replica started or was pointed at it) is promoted at `now`;
/// `link_down_since` is when its link to that master went down (`None`: up
/// until the promotion), `longest_ms` the longest lease it knows of.
///
/// The cut-off: a link down for the master's new-disk wait (the vouch's
/// `new_disk_wait_ms`, [`new_disk_wait`]) or for the longest lease the
/// replica knows, whichever is shorter, keeps the guard.
///
/// Why (finding D): under the check a master grants with R replicas of its
/// life, every one of which has the write, and it keeps that replica set on
/// its disk. The one way it grants without this replica while this one
/// still holds its vouch is a life that lost the set with its disk. Such a
/// life starts after the life this replica followed ended, so after this
/// replica's link to it went down (the link breaks when that process ends),
/// and it grants nothing before its restart window is over, which by its
/// configuration lasts at least its new-disk wait W. A link down for less
/// than W at the promotion therefore hides no such grant. W, not the
/// replica's longest lease: that may come from a run-time raise the new
/// disk does not keep (no configuration file), and the new life then waits
/// only what its configuration says. W only grows over the master's life
/// except by an explicit lower `restart-grace-ms`, which is announced at
/// once; an older announcement says no more than the configuration did.
/// The replica's longest lease stays as a bound too: the rule is never
/// later than before. A master that does not announce W (an earlier
/// version) counts as 0: any link down time cuts off.
///
/// What it assumes: the link counts as down no later than the old life
/// ended. It counts from the last moment the replica's running server saw
/// it up ([`link_down_since`]), so a replica paused through the master's
/// end is covered; a partition that resets nothing is noticed only at
/// `repl-timeout`, later than the truth, and is not.
pub fn promotion(
    own_r: u64,
    vouch: Option<Vouch>,
    link_down_since: Option<MonoMillis>,
    longest_ms: u64,
    now: MonoMillis,
    mutants: Mutants,
) -> Promotion {
    match vouch {
        Some(v) if own_r > 0 && v.master_r == own_r => {
            let limit = if mutants.on(Mutant::NewDiskWaitIgnored) {
                longest_ms
            } else {
                longest_ms.min(v.new_disk_wait_ms)
            };
            let cut_off = link_down_since.is_some_and(|since| now.saturating_sub(since) >= limit);
            if cut_off {
                Promotion::Guard
            } else if v.hold_until > now {
                Promotion::Rest(v.hold_until - now)
            } else {
                Promotion::AtOnce
            }
        }
        _ => Promotion::Guard,
    }
}

/// When a replica's link to its master counts as gone down, for the
/// cut-off of [`promotion`]: it noticed at `noticed_at` (the link-down
/// event), and its server, running, last saw the link up at `seen_up` (0:
/// not since it came up). The earlier of the two.
///
/// Why not the event alone: the cut-off's argument needs the link to count
/// as down no later than the master's life ended. A replica notices the end
/// at once only while it runs: one paused (stopped, a frozen VM, a long
/// blocking command) when its master ends reads the closed connection when
/// it resumes, maybe after that master came back on a new disk, waited and
/// granted. The server's cron (every `1000/hz` ms) sees the link up only
/// while the server runs, so `seen_up` is before any such pause: the host
/// takes the tick before the last one, since one tick may run after a
/// pause before the closed connection is read. Not covered: a partition
/// that resets nothing, which the replica notices at `repl-timeout`.
pub fn link_down_since(
    noticed_at: MonoMillis,
    seen_up: MonoMillis,
    mutants: Mutants,
) -> MonoMillis {
    if seen_up == 0 || mutants.on(Mutant::LinkDownWhenNoticed) {
        noticed_at
    } else {
        seen_up.min(noticed_at)
    }
}

/// Whether a replica promoted at `now` counts as taught by the master it
/// followed ([`crate::core::guard_rule::Guard::on_promotion`]'s `taught`):
/// `taught`, it applied a node record of that master
/// ([`crate::core::teacher::Taught::taught_by`]); `announced_hold_until`,
/// the end of that master's hold (its guard window, its unchecked leases)
/// on this node's clock, from the fresh announcement of that master it
/// applied since it started, was pointed at it, or began a full sync from
/// it (`None`: none); `longest_ms`, the longest lease it knows.
///
/// Taught, it guards for `longest_ms`; untaught, for a day
/// ([`crate::core::guard_rule::LEASE_LIMIT_MS`]). It counts as taught only
/// when the master's hold ends within `longest_ms` from now.
///
/// Why: a master S promoted untaught guards a day, because the master M0
/// it replaced may have granted leases longer than anything S knows. A
/// replica R that syncs from S learns S's longest lease only, not M0's;
/// promoted after S is lost, guarding that long it would grant while M0's
/// lease runs. The day is S's window, and the window is what S announces
/// (`hold`). If S's hold ends within R's `longest_ms` from now, R's window
/// covers the rest of S's window (which covered M0's leases) and every
/// lease S granted that R may lack (at most S's longest lease, which R
/// learned with S's record, from its grant). Otherwise R cannot cover it
/// and guards a day, which covers any lease granted before its promotion.
/// The hold reaches R as a length, timed from its arrival: later than the
/// master's moment, so the end R computes is later than the true one
/// (longer, never shorter). Without a fresh announcement of the master
/// followed now R cannot tell: a master announces to every replica that
/// comes online, right behind the sync, so this is the short time after a
/// full sync, a restart, a repoint, or a master of an earlier version
/// that announces only with `sync-replicas` above 0. It guards a day then:
/// long, never short.
pub fn taught_at_promotion(
    taught: bool,
    announced_hold_until: Option<MonoMillis>,
    longest_ms: u64,
    now: MonoMillis,
    mutants: Mutants,
) -> bool {
    if mutants.on(Mutant::UntaughtNotTaughtOn) {
        return taught;
    }
    taught && announced_hold_until.is_some_and(|until| until.saturating_sub(now) <= longest_ms)
}

/// How long a replica promoted now must still guard, as a master announces
/// it: the rest of its own guard window (`window_left_ms`), and the rest of
/// the longest lease it may have granted without the check
/// (`unchecked_until`, on its monotonic clock: when it loaded, or when R was
/// raised from 0).
pub fn hold_ms(window_left_ms: u64, unchecked_until: MonoMillis, now: MonoMillis) -> u64 {
    window_left_ms.max(unchecked_until.saturating_sub(now))
}

/// Whether an announcement emitted at master offset `offset` is fresh for a
/// replica whose next unseen offset is `seen_next` (`None`: unknown, so only
/// a full sync makes the replica current).
///
/// Why it proves the replica current: every announcement a node applied or
/// emitted raised `seen_next` past its offset on disk before the node went
/// on (and so before it acknowledged anything after it). After a restart,
/// the backlog replays from the node's old files; an announcement it had
/// already applied before the restart is not fresh, and every announcement
/// positioned before the last offset it acknowledged was applied then. So a
/// fresh one lies past everything the node acknowledged before its restart.
pub fn fresh(offset: u64, seen_next: Option<u64>) -> bool {
    seen_next.is_some_and(|next| offset >= next)
}

/// A replica's identity in a master's `INFO replication` line
/// (`ip=…,port=…,state=…,offset=…,lag=…`): `ip:port` and whether it is
/// online (port 0 for one without a listening port, see [`listens`]).
/// `None` for a line without an address.
pub fn parse_replica(line: &str) -> Option<(String, bool)> {
    let mut ip = None;
    let mut port = None;
    let mut online = false;
    for field in line.split(',') {
        match field.split_once('=') {
            Some(("ip", v)) => ip = Some(v.trim()),
            Some(("port", v)) => port = v.trim().parse::<u16>().ok(),
            Some(("state", v)) => online = v.trim() == "online",
            _ => {}
        }
    }
    match (ip, port) {
        (Some(ip), Some(port)) if !ip.is_empty() => Some((format!("{ip}:{port}"), online)),
        _ => None,
    }
}

/// Whether a replica identity has a listening port. One without (`ip:0`:
/// a client of the replication protocol that never sent
/// `REPLCONF listening-port`, such as a migration or change-data-capture
/// tool, or a server on a unix socket only) is not kept in the replica set
/// of the master's life (Sentinel cannot promote it), but counts while it is
/// online: `WAIT` counts its acknowledgements like any replica's, so left
/// out, it could meet `WAIT R` in place of a replica that missed the write.
pub fn listens(id: &str) -> bool {
    id.rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok_and(|p| p != 0))
}

/// The identities of the replicas online now, from their `ip:port` as the
/// master sees them (one per replica line): a second, third … replica at
/// an address already seen is `ip#2:port`, `ip#3:port` …. Two replicas at
/// one address (behind one NAT address on the same port, or announcing the
/// same `replica-announce-ip`/`-port`) are two replicas: counted as one,
/// `WAIT R` could be met by either while the other, which missed the write,
/// may be promoted.
pub fn replica_identities(online: &[String]) -> Vec<String> {
    let mut seen: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    online
        .iter()
        .map(|id| {
            let n = seen.entry(id.as_str()).or_insert(0);
            *n += 1;
            match (*n, id.rsplit_once(':')) {
                (1, _) | (_, None) => id.clone(),
                (k, Some((ip, port))) => format!("{ip}#{k}:{port}"),
            }
        })
        .collect()
}

/// The ids of the clients blocked in `WAIT`, from `CLIENT LIST` (`id=…`,
/// flag `b`, `cmd=wait`).
///
/// The replica set is checked when a lock write is taken, but `WAIT` counts
/// the replicas online when the acknowledgements come: one that comes
/// online during a blocked `WAIT` (it synced the write with its snapshot)
/// would meet it in place of a known replica that lacks the write. So when
/// a replica comes online and the master then has more than R, the `WAIT`s
/// blocked at that moment are ended with an error (`CLIENT UNBLOCK id
/// ERROR`, in `host::sync::on_replica_online`): their writes do not count.
pub fn blocked_waits(client_list: &str) -> Vec<u64> {
    client_list
        .lines()
        .filter_map(|line| {
            let mut id = None;
            let mut blocked = false;
            let mut wait = false;
            for field in line.split_whitespace() {
                match field.split_once('=') {
                    Some(("id", v)) => id = v.parse::<u64>().ok(),
                    Some(("flags", v)) => blocked = v.contains('b'),
                    Some(("cmd", v)) => wait = v.eq_ignore_ascii_case("wait"),
                    _ => {}
                }
            }
            id.filter(|_| blocked && wait)
        })
        .collect()
}

/// A replica's line in a master's `INFO replication` with the offset it
/// last acknowledged: `ip:port`, whether it is online, and `offset`.
pub fn parse_replica_ack(line: &str) -> Option<(String, bool, u64)> {
    let (id, online) = parse_replica(line)?;
    let offset = line
        .split(',')
        .find_map(|field| field.trim().strip_prefix("offset="))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Some((id, online, offset))
}

/// R lowered to 0 while replicas may still hold their master's vouch for a
/// higher R: a replica that has not applied the announcement saying 0 (it
/// lags, or its link is cut) would be promoted at once and lack every grant
/// made without the check. So the master takes no lock write without the
/// check until every replica of its life (`known`) is online and has
/// acknowledged `target`, an offset past that announcement. Returns the
/// replicas still waited for (empty: the lowering is complete).
pub fn lowering_waits_for(
    known: &BTreeSet<String>,
    replicas: &[(String, bool, u64)],
    target: u64,
) -> Vec<String> {
    known
        .iter()
        .filter(|id| {
            !replicas
                .iter()
                .any(|(r, online, offset)| r == *id && *online && *offset >= target)
        })
        .cloned()
        .collect()
}

/// What a node keeps for the check across restarts: the replicas of its
/// life as master, and, as a replica, the next announcement offset it has
/// not seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncFile {
    /// See [`fresh`]; `None` until a full sync (or when unknown).
    pub seen_next: Option<u64>,
    /// `ip:port` of every replica of this master's life.
    pub replicas: BTreeSet<String>,
}

impl SyncFile {
    /// The file's text.
    pub fn render(&self) -> String {
        let mut text = String::from("redlock-sync-state 1\n");
        match self.seen_next {
            Some(n) => text.push_str(&format!("seen {n}\n")),
            None => text.push_str("seen none\n"),
        }
        for r in &self.replicas {
            text.push_str("replica ");
            text.push_str(r);
            text.push('\n');
        }
        text
    }

    /// Reads a file; `None` for anything that is not exactly one (a torn or
    /// foreign file: no replica has been seen to be current, and the caller
    /// decides what an unknown replica set means).
    pub fn parse(text: &str) -> Option<SyncFile> {
        let mut lines = text.lines();
        if lines.next()? != "redlock-sync-state 1" {
            return None;
        }
        let seen_next = match lines.next()?.strip_prefix("seen ")? {
            "none" => None,
            n => Some(n.parse::<u64>().ok()?),
        };
        let mut replicas = BTreeSet::new();
        for line in lines {
            let id = line.strip_prefix("replica ")?;
            let (ip, port) = id.rsplit_once(':')?;
            if ip.is_empty()
                || id.contains(char::is_whitespace)
                || !port.parse::<u16>().is_ok_and(|p| p != 0)
            {
                return None;
            }
            replicas.insert(id.to_string());
        }
        Some(SyncFile {
            seen_next,
            replicas,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_write_must_state_the_nodes_r() {
        assert_eq!(check_write(0, 0, 5, 0), Ok(()));
        assert_eq!(
            check_write(2, 0, 2, 2),
            Err(SyncRefusal::Stated { node: 2, stated: 0 })
        );
        assert_eq!(
            check_write(0, 2, 0, 0),
            Err(SyncRefusal::Stated { node: 0, stated: 2 })
        );
        assert_eq!(
            check_write(2, 1, 1, 1),
            Err(SyncRefusal::Stated { node: 2, stated: 1 })
        );
        assert_eq!(check_write(2, 2, 2, 2), Ok(()));
        // Fewer known than R: WAIT R cannot succeed, but that is for WAIT
        // to say; only fewer online is refused up front.
        assert_eq!(
            check_write(2, 2, 1, 1),
            Err(SyncRefusal::TooFew { online: 1, r: 2 })
        );
    }

    #[test]
    fn a_master_with_more_replicas_than_r_refuses() {
        assert_eq!(
            check_write(2, 2, 3, 3),
            Err(SyncRefusal::TooMany { known: 3, r: 2 })
        );
        // A replica that left still counts: two online, three known.
        assert_eq!(
            check_write(2, 2, 3, 2),
            Err(SyncRefusal::TooMany { known: 3, r: 2 })
        );
        // R 0: the check is off whatever the replicas.
        assert_eq!(check_write(0, 0, 9, 9), Ok(()));
    }

    #[test]
    fn promotion_at_once_only_when_every_condition_holds() {
        let vouch = Vouch {
            master_r: 2,
            hold_until: 1_000,
            new_disk_wait_ms: 60_000,
        };
        let p = |own, vouch, now| promotion(own, vouch, None, 60_000, now, Mutants::NONE);
        assert_eq!(p(2, Some(vouch), 1_000), Promotion::AtOnce);
        assert_eq!(p(2, Some(vouch), 400), Promotion::Rest(600));
        // Off here, off on the master, different R, never synced.
        assert_eq!(p(0, Some(vouch), 5_000), Promotion::Guard);
        let off = Vouch {
            master_r: 0,
            ..vouch
        };
        assert_eq!(p(0, Some(off), 5_000), Promotion::Guard);
        assert_eq!(p(2, Some(off), 5_000), Promotion::Guard);
        assert_eq!(p(1, Some(vouch), 5_000), Promotion::Guard);
        assert_eq!(p(2, None, 5_000), Promotion::Guard);
        // Cut off from its master for a whole longest lease: the guard.
        let cut = |vouch, since, now| promotion(2, Some(vouch), since, 60_000, now, Mutants::NONE);
        assert_eq!(cut(vouch, Some(1_000), 60_999), Promotion::AtOnce);
        assert_eq!(cut(vouch, Some(1_000), 61_000), Promotion::Guard);
        // A link down for less, inside a hold: the rest of the hold.
        assert_eq!(cut(vouch, Some(1), 500), Promotion::Rest(500));
    }

    /// Finding D: the master's new disk waits only what its configuration
    /// says (2 s), though the replica knows a 5 s lease (a run-time raise
    /// the configuration lacks).
    #[test]
    fn a_cut_off_longer_than_the_new_disk_wait_keeps_the_guard() {
        let vouch = Vouch {
            master_r: 1,
            hold_until: 0,
            new_disk_wait_ms: 2_000,
        };
        let p = |since, now| promotion(1, Some(vouch), Some(since), 5_000, now, Mutants::NONE);
        assert_eq!(p(10_000, 11_999), Promotion::AtOnce);
        assert_eq!(p(10_000, 12_000), Promotion::Guard);
        assert_eq!(p(10_000, 14_999), Promotion::Guard);
        // The replica's own longest lease still bounds it.
        let long = Vouch {
            new_disk_wait_ms: 9_000,
            ..vouch
        };
        assert_eq!(
            promotion(1, Some(long), Some(10_000), 5_000, 15_000, Mutants::NONE),
            Promotion::Guard
        );
        // An announcement without the wait (an earlier master) says 0: any
        // link down time cuts off; a link up until the promotion does not.
        let old = Vouch {
            new_disk_wait_ms: 0,
            ..vouch
        };
        assert_eq!(
            promotion(1, Some(old), Some(10_000), 5_000, 10_000, Mutants::NONE),
            Promotion::Guard
        );
        assert_eq!(
            promotion(1, Some(old), None, 5_000, 10_000, Mutants::NONE),
            Promotion::AtOnce
        );
    }

    #[test]
    fn the_new_disk_wait_is_the_explicit_window_when_shorter() {
        assert_eq!(new_disk_wait(2_000, None), 2_000);
        assert_eq!(new_disk_wait(2_000, Some(500)), 500);
        assert_eq!(new_disk_wait(2_000, Some(0)), 0);
        assert_eq!(new_disk_wait(2_000, Some(9_000)), 2_000);
    }

    #[test]
    fn the_link_counts_as_down_from_when_it_was_last_seen_up() {
        assert_eq!(link_down_since(5_000, 0, Mutants::NONE), 5_000);
        assert_eq!(link_down_since(5_000, 4_900, Mutants::NONE), 4_900);
        // A pause: seen up before it, noticed after it.
        assert_eq!(link_down_since(9_000, 1_000, Mutants::NONE), 1_000);
        assert_eq!(link_down_since(9_000, 9_500, Mutants::NONE), 9_000);
    }

    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_link_mutant_measures_from_when_it_was_noticed() {
        let on = Mutants::NONE.with(Mutant::LinkDownWhenNoticed, true);
        assert_eq!(link_down_since(9_000, 1_000, on), 9_000);
    }

    /// The mutant puts the hole back: the replica's longest lease alone.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_cuts_off_at_the_replicas_longest_lease_only() {
        let on = Mutants::NONE.with(Mutant::NewDiskWaitIgnored, true);
        let vouch = Vouch {
            master_r: 1,
            hold_until: 0,
            new_disk_wait_ms: 2_000,
        };
        assert_eq!(
            promotion(1, Some(vouch), Some(10_000), 5_000, 14_000, on),
            Promotion::AtOnce
        );
        assert_eq!(
            promotion(1, Some(vouch), Some(10_000), 5_000, 15_000, on),
            Promotion::Guard
        );
    }

    #[test]
    fn a_replica_of_a_master_inside_a_longer_window_is_untaught_at_promotion() {
        let t = |taught, hold, now| taught_at_promotion(taught, hold, 1_000, now, Mutants::NONE);
        // The master's hold (its window) ends within the replica's longest
        // lease: taught.
        assert!(t(true, Some(0), 5_000));
        assert!(t(true, Some(6_000), 5_000));
        // An untaught master's day (or any hold longer than what the
        // replica covers): untaught.
        assert!(!t(true, Some(6_001), 5_000));
        assert!(!t(true, Some(5_000 + 86_400_000), 5_000));
        // No announcement of the master followed now: untaught.
        assert!(!t(true, None, 5_000));
        // Untaught stays untaught.
        assert!(!t(false, Some(0), 5_000));
        assert!(!t(false, None, 5_000));
    }

    /// The mutant puts the hole back: the teacher's day is ignored.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_counts_a_replica_of_a_master_in_its_day_as_taught() {
        let on = Mutants::NONE.with(Mutant::UntaughtNotTaughtOn, true);
        assert!(taught_at_promotion(true, Some(86_400_000), 1_000, 0, on));
        assert!(taught_at_promotion(true, None, 1_000, 0, on));
        assert!(!taught_at_promotion(false, Some(0), 1_000, 0, on));
    }

    #[test]
    fn the_hold_covers_the_window_and_the_unchecked_leases() {
        assert_eq!(hold_ms(0, 0, 100), 0);
        assert_eq!(hold_ms(500, 0, 100), 500);
        assert_eq!(hold_ms(500, 1_100, 100), 1_000);
        assert_eq!(hold_ms(0, 50, 100), 0);
    }

    #[test]
    fn freshness_needs_a_known_offset() {
        assert!(!fresh(10, None));
        assert!(fresh(0, Some(0)));
        assert!(fresh(10, Some(10)));
        assert!(!fresh(9, Some(10)));
    }

    #[test]
    fn replica_lines_give_their_address_and_state() {
        assert_eq!(
            parse_replica("ip=127.0.0.1,port=6380,state=online,offset=10,lag=0"),
            Some(("127.0.0.1:6380".into(), true))
        );
        assert_eq!(
            parse_replica("ip=::1,port=7001,state=wait_bgsave,offset=0,lag=0"),
            Some(("::1:7001".into(), false))
        );
        assert_eq!(
            parse_replica("ip=10.0.0.1,port=0,state=online,offset=1,lag=0"),
            Some(("10.0.0.1:0".into(), true))
        );
        assert!(!listens("10.0.0.1:0"));
        assert!(!listens("10.0.0.1#2:0"));
        assert!(listens("10.0.0.1:6379"));
        assert!(listens("::1:6379"));
        assert_eq!(parse_replica("port=6380,state=online"), None);
        assert_eq!(parse_replica(""), None);
    }

    #[test]
    fn a_lowering_to_zero_waits_for_every_known_replica_past_the_target() {
        let known: BTreeSet<String> = ["a:1", "b:2"].iter().map(|s| s.to_string()).collect();
        let line = |id: &str, online: bool, off: u64| (id.to_string(), online, off);
        assert_eq!(
            lowering_waits_for(&known, &[line("a:1", true, 10), line("b:2", true, 9)], 10),
            vec!["b:2".to_string()]
        );
        // Offline (or missing) replicas are waited for: they may be promoted.
        assert_eq!(
            lowering_waits_for(&known, &[line("a:1", true, 10), line("b:2", false, 50)], 10),
            vec!["b:2".to_string()]
        );
        assert_eq!(
            lowering_waits_for(&known, &[line("a:1", true, 10)], 10),
            vec!["b:2".to_string()]
        );
        assert!(
            lowering_waits_for(&known, &[line("a:1", true, 10), line("b:2", true, 11)], 10)
                .is_empty()
        );
        assert!(lowering_waits_for(&BTreeSet::new(), &[], 10).is_empty());
        assert_eq!(
            parse_replica_ack("ip=127.0.0.1,port=6380,state=online,offset=1234,lag=0"),
            Some(("127.0.0.1:6380".into(), true, 1234))
        );
        assert_eq!(
            parse_replica_ack("ip=127.0.0.1,port=6380,state=send_bulk"),
            Some(("127.0.0.1:6380".into(), false, 0))
        );
    }

    #[test]
    fn replicas_at_one_address_are_told_apart() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            replica_identities(&ids(&["10.0.0.1:6379", "10.0.0.2:6379"])),
            ids(&["10.0.0.1:6379", "10.0.0.2:6379"])
        );
        assert_eq!(
            replica_identities(&ids(&[
                "10.0.0.1:6379",
                "10.0.0.1:6379",
                "::1:7",
                "10.0.0.1:6379"
            ])),
            ids(&[
                "10.0.0.1:6379",
                "10.0.0.1#2:6379",
                "::1:7",
                "10.0.0.1#3:6379"
            ])
        );
        // The twin's name is a valid line of the state file.
        let mut f = SyncFile::default();
        f.replicas.insert("10.0.0.1#2:6379".into());
        assert_eq!(SyncFile::parse(&f.render()), Some(f));
    }

    #[test]
    fn the_clients_blocked_in_wait_are_found() {
        let list = "id=3 addr=127.0.0.1:5 laddr=x fd=7 name= age=0 idle=0 flags=N db=0 cmd=client|list user=default\n\
                    id=7 addr=127.0.0.1:6 laddr=x fd=8 name= age=1 idle=1 flags=b db=0 cmd=wait user=default\n\
                    id=9 addr=127.0.0.1:7 laddr=x fd=9 name= age=1 idle=1 flags=b db=0 cmd=blpop user=default\n\
                    id=11 addr=127.0.0.1:8 laddr=x fd=10 name= age=1 idle=0 flags=N db=0 cmd=wait user=default\n";
        assert_eq!(blocked_waits(list), vec![7]);
        assert!(blocked_waits("").is_empty());
    }

    #[test]
    fn files_round_trip_and_anything_else_is_no_file() {
        let mut f = SyncFile {
            seen_next: Some(42),
            replicas: BTreeSet::new(),
        };
        f.replicas.insert("127.0.0.1:7001".into());
        f.replicas.insert("127.0.0.1:7002".into());
        assert_eq!(SyncFile::parse(&f.render()), Some(f.clone()));
        let none = SyncFile::default();
        assert_eq!(SyncFile::parse(&none.render()), Some(none));
        let good = f.render();
        for bad in [
            "",
            "redlock-sync-state 2\nseen 1\n",
            "redlock-sync-state 1\n",
            "redlock-sync-state 1\nseen x\n",
            "redlock-sync-state 1\nseen 1\nreplica \n",
            "redlock-sync-state 1\nseen 1\nother a:1\n",
            &good[..good.len() - 5],
        ] {
            assert_eq!(SyncFile::parse(bad), None, "{bad:?}");
        }
    }

    /// The sequences of the freshness argument: a node applies (or emits)
    /// announcements at increasing offsets, persisting `seen_next` each time,
    /// acknowledges up to some offset, restarts from older files and replays
    /// the stream from there. No announcement it counts as fresh lies at or
    /// before the offset it had acknowledged.
    fn replay_never_counts_an_old_announcement(
        announcements: &[u64],
        acked_upto: u64,
        file_at: u64,
    ) -> bool {
        // Before the restart: everything up to `acked_upto` was applied.
        let mut seen = Some(0u64);
        for &a in announcements.iter().filter(|&&a| a <= acked_upto) {
            seen = seen.map(|s| s.max(a + 1));
        }
        // After: the replay starts at `file_at <= acked_upto`.
        announcements
            .iter()
            .filter(|&&a| a >= file_at)
            .all(|&a| !fresh(a, seen) || a > acked_upto)
    }

    proptest! {
        #[test]
        fn a_replayed_backlog_proves_nothing_it_already_had(
            mut announcements in proptest::collection::vec(0u64..1_000, 0..20),
            acked in 0u64..1_000,
            back in 0u64..1_000,
        ) {
            announcements.sort_unstable();
            announcements.dedup();
            let file_at = acked.saturating_sub(back);
            prop_assert!(replay_never_counts_an_old_announcement(&announcements, acked, file_at));
        }

        #[test]
        fn known_replicas_above_r_always_refuse(r in 1u64..8, known in 0usize..12, online in 0usize..12) {
            let online = online.min(known);
            let verdict = check_write(r, r, known, online);
            if known as u64 > r {
                prop_assert_eq!(verdict, Err(SyncRefusal::TooMany { known, r }));
            } else if (online as u64) < r {
                prop_assert_eq!(verdict, Err(SyncRefusal::TooFew { online, r }));
            } else {
                // Accepted only when the replicas WAIT R counts are all of them.
                prop_assert_eq!(known as u64, r);
                prop_assert_eq!(verdict, Ok(()));
            }
        }

        /// Counted as taught, the replica's window (its longest lease from
        /// now) reaches the end of every hold its master announced.
        #[test]
        fn a_taught_promotion_covers_the_masters_hold(
            taught: bool,
            hold in proptest::option::of(0u64..200_000),
            longest in 0u64..100_000,
            now in 0u64..100_000,
        ) {
            if taught_at_promotion(taught, hold, longest, now, Mutants::NONE) {
                prop_assert!(taught);
                prop_assert!(hold.is_some_and(|h| now + longest >= h));
            }
        }

        #[test]
        fn promotion_never_skips_a_hold(
            own in 0u64..4,
            master in 0u64..4,
            hold in 0u64..10_000,
            now in 0u64..10_000,
            down in proptest::option::of(0u64..10_000),
            longest in 1u64..10_000,
            wait in 0u64..10_000,
        ) {
            let vouch = Vouch { master_r: master, hold_until: hold, new_disk_wait_ms: wait };
            let p = promotion(own, Some(vouch), down, longest, now, Mutants::NONE);
            let cut_off = down.is_some_and(|d| now.saturating_sub(d) >= longest.min(wait));
            match p {
                Promotion::AtOnce => prop_assert!(own > 0 && own == master && hold <= now && !cut_off),
                Promotion::Rest(ms) => prop_assert!(own > 0 && own == master && now + ms == hold && !cut_off),
                Promotion::Guard => prop_assert!(own == 0 || own != master || cut_off),
            }
        }

        /// The argument of the cut-off, played: a master's life that lost
        /// its disk starts at `new_start`, no earlier than the replica's
        /// link went down (`down`), waits its configured window (at least
        /// the new-disk wait its old life announced, `wait`, plus
        /// `longer`), and grants at `grant`, at or after that window's
        /// end; the replica, promoted at `now`, has not seen the grant. It
        /// never grants at once (nor for the rest of a hold) after such a
        /// grant, whatever the longest lease it knows (a run-time raise of
        /// the old life may make it longer than the wait).
        #[test]
        fn no_grant_of_a_life_on_a_new_disk_precedes_a_promotion_at_once(
            down in 0u64..100_000,
            after_down in 0u64..10_000,
            wait in 0u64..10_000,
            longer in 0u64..5_000,
            late in 0u64..5_000,
            now in 0u64..130_000,
            longest in 0u64..20_000,
            hold in 0u64..130_000,
        ) {
            let new_start = down + after_down;
            let grant = new_start + wait + longer + late;
            let vouch = Vouch { master_r: 1, hold_until: hold, new_disk_wait_ms: wait };
            let p = promotion(1, Some(vouch), Some(down), longest, now, Mutants::NONE);
            if grant <= now {
                prop_assert_eq!(p, Promotion::Guard);
            }
        }

        /// The wait a master announces is never longer than what a start
        /// from its configuration waits: the window follows an explicit
        /// `restart-grace-ms` when there is one, the longest lease else.
        #[test]
        fn the_new_disk_wait_never_exceeds_the_configured_window(
            longest in 0u64..100_000,
            grace in proptest::option::of(0u64..100_000),
        ) {
            let window = grace.unwrap_or(longest);
            prop_assert!(new_disk_wait(longest, grace) <= window);
        }
    }
}
