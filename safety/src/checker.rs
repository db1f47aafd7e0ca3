//! The checker: reads a history and counts what the guarantees exclude.
//!
//! | count | definition |
//! |---|---|
//! | `duplicate_tokens` | two successful acquisitions of one key with the same token (each extra one counts) |
//! | `token_inversions` | an acquisition whose token is ≤ the token of an acquisition of the same key that *completed before it was invoked* |
//! | `stale_accepted` | a resource operation accepted although an operation with a higher token had been accepted for the key before it (resource order) |
//! | `lost_updates` | an accepted write whose read version is not the version it replaced |
//! | `overlaps_*` | two holds of one key at once; a hold runs from the acquisition's completion to the earlier of its release and the end of the validity the client reported (moved by successful extensions). *Explained* when a timing fault (pause, delay, clock jump…) was active within two TTLs of the overlap |
//! | `valid_after_end` | acquisitions whose reported validity reached past start + ttl of the acquisition (or of its last successful extension): the earliest moment a majority's leases can end. The client reads its start clock during the first poll of the acquire future; the history brackets that moment (`t` .. `first_poll`) and the check uses the later bound, so a thread descheduled between the stamp and the client's clock read raises no false alarm |
//! | `counter_regressions` | a node's counter for a key read after a restart lower than before the kill |
//!
//! Every count except `overlaps_explained` is a violation, except
//! `counter_regressions` when the run does not promise durable counters.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::history::{Event, Kind, ResOp};

/// What the checker found in one history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Run name from the `run_start` event (empty without one).
    pub run: String,
    /// Fault type of the run.
    pub fault: String,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Failed acquisitions.
    pub acquire_failures: u64,
    /// Faults injected (fault_start events).
    pub faults: u64,
    /// Resource operations.
    pub resource_ops: u64,
    /// Resource operations refused as stale (fencing at work).
    pub stale_refused: u64,
    /// Duplicate tokens for one key.
    pub duplicate_tokens: u64,
    /// Token inversions.
    pub token_inversions: u64,
    /// Stale operations accepted by the resource.
    pub stale_accepted: u64,
    /// Lost updates at the resource.
    pub lost_updates: u64,
    /// Overlapping holds near an injected timing fault.
    pub overlaps_explained: u64,
    /// Overlapping holds with no timing fault near them.
    pub overlaps_unexplained: u64,
    /// Validities reported past the earliest possible end of the lease.
    pub valid_after_end: u64,
    /// Per-node counter regressions observed after restarts.
    pub counter_regressions: u64,
    /// The run promises durable per-node counters.
    pub durable_counters: bool,
    /// Holds still valid on their client's clock right after a failover
    /// inside a Sentinel member, as checked against the new master.
    #[serde(default)]
    pub locks_checked: u64,
    /// Of those, holds the new master did not have (a lock lost by its
    /// holder: not a violation while the promotion guard keeps others out,
    /// but the holder's extensions fail).
    #[serde(default)]
    pub locks_lost: u64,
    /// Milliseconds from the first event to the first violation.
    pub first_violation_ms: Option<u64>,
    /// A few violations, described.
    pub examples: Vec<String>,
}

impl Report {
    /// Violations of what the run guarantees.
    pub fn violations(&self) -> u64 {
        self.duplicate_tokens
            + self.token_inversions
            + self.stale_accepted
            + self.lost_updates
            + self.overlaps_unexplained
            + self.valid_after_end
            + if self.durable_counters {
                self.counter_regressions
            } else {
                0
            }
    }

    /// Adds `other`'s counts to these (for totals over runs).
    pub fn add(&mut self, other: &Report) {
        self.acquisitions += other.acquisitions;
        self.acquire_failures += other.acquire_failures;
        self.faults += other.faults;
        self.resource_ops += other.resource_ops;
        self.stale_refused += other.stale_refused;
        self.duplicate_tokens += other.duplicate_tokens;
        self.token_inversions += other.token_inversions;
        self.stale_accepted += other.stale_accepted;
        self.lost_updates += other.lost_updates;
        self.overlaps_explained += other.overlaps_explained;
        self.overlaps_unexplained += other.overlaps_unexplained;
        self.valid_after_end += other.valid_after_end;
        self.counter_regressions += other.counter_regressions;
        self.locks_checked += other.locks_checked;
        self.locks_lost += other.locks_lost;
        self.durable_counters |= other.durable_counters;
        if self.examples.len() < 10 {
            self.examples.extend(other.examples.iter().take(3).cloned());
        }
    }

    /// The counts as `name=value` pairs, for the report line.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("duplicates", self.duplicate_tokens),
            ("inversions", self.token_inversions),
            ("stale_accepted", self.stale_accepted),
            ("lost_updates", self.lost_updates),
            ("overlap_explained", self.overlaps_explained),
            ("overlap_unexplained", self.overlaps_unexplained),
            ("valid_after_end", self.valid_after_end),
            ("counter_regressions", self.counter_regressions),
        ]
    }
}

#[derive(Default, Clone)]
struct Acq {
    key: String,
    client: String,
    ttl_ns: u64,
    invoke: Option<u64>,
    ok: Option<u64>,
    token: u64,
    /// Earliest possible end of the nodes' lease (invoke + ttl, moved by extensions).
    lease_floor_end: u64,
    /// End of the validity the client reported last.
    claimed_end: u64,
    release: Option<u64>,
    extend_invoke: Option<(u64, u64)>,
    /// Already counted as valid after its end.
    late: bool,
}

struct Fault {
    start: u64,
    stop: Option<u64>,
    timing: bool,
}

struct Findings {
    report: Report,
    first: Option<u64>,
}

impl Findings {
    fn hit(&mut self, t: u64, what: String) {
        self.first = Some(self.first.map_or(t, |f| f.min(t)));
        if self.report.examples.len() < 20 {
            self.report.examples.push(what);
        }
    }
}

/// Checks one history (events in time order, as [`crate::history::load`] gives them).
pub fn check(events: &[Event]) -> Report {
    let mut f = Findings {
        report: Report::default(),
        first: None,
    };
    let t0 = events.first().map_or(0, |e| e.t);
    let mut ttl_default_ns = 0u64;
    let mut acqs: HashMap<String, Acq> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut faults: BTreeMap<u64, Fault> = BTreeMap::new();
    let mut resource: Vec<(u64, &Event)> = Vec::new();
    let mut before_kill: HashMap<(usize, String), u64> = HashMap::new();

    for ev in events {
        let t = ev.t;
        match &ev.kind {
            Kind::RunStart {
                run,
                fault,
                ttl_ms,
                guarantees,
                ..
            } => {
                f.report.run = run.clone();
                f.report.fault = fault.clone();
                f.report.durable_counters = guarantees.durable_counters;
                ttl_default_ns = ttl_ms * 1_000_000;
            }
            Kind::AcquireInvoke {
                op,
                client,
                key,
                ttl_ms,
                first_poll,
            } => {
                let a = acqs.entry(op.clone()).or_default();
                a.key = key.clone();
                a.client = client.clone();
                a.ttl_ns = ttl_ms * 1_000_000;
                a.invoke = Some(t);
                a.lease_floor_end = first_poll.unwrap_or(t).max(t) + a.ttl_ns;
                order.push(op.clone());
            }
            Kind::AcquireOk {
                op,
                token,
                validity_ns,
                key,
                ..
            } => {
                f.report.acquisitions += 1;
                let a = acqs.entry(op.clone()).or_default();
                a.ok = Some(t);
                a.token = *token;
                a.key = key.clone();
                a.claimed_end = t + validity_ns;
                // A validity of zero claims nothing: the client checked the
                // lease in time, and the process was paused (or descheduled)
                // between that check and this stamp, so the lock is already
                // over when the caller sees it (the `Use` rule below skips it
                // for the same reason). A positive validity never reaches
                // past the lease from a correct client: it is measured from
                // a start no later than the first poll.
                if a.invoke.is_some() && *validity_ns > 0 && a.claimed_end > a.lease_floor_end {
                    a.late = true;
                    f.report.valid_after_end += 1;
                    let over = (a.claimed_end - a.lease_floor_end) / 1_000;
                    f.hit(
                        t,
                        format!("{op}: validity reported {over} µs past invoke + ttl"),
                    );
                }
            }
            Kind::AcquireFail { .. } => f.report.acquire_failures += 1,
            Kind::Use { op, validity_ns } => {
                if let Some(a) = acqs.get_mut(op) {
                    if validity_ns > &0 && t + validity_ns > a.lease_floor_end && !a.late {
                        a.late = true;
                        f.report.valid_after_end += 1;
                        let over = (t + validity_ns - a.lease_floor_end) / 1_000;
                        f.hit(t, format!("{op}: valid at use {over} µs past the lease"));
                    }
                }
            }
            Kind::ExtendInvoke {
                op,
                ttl_ms,
                first_poll,
            } => {
                if let Some(a) = acqs.get_mut(op) {
                    let start = first_poll.unwrap_or(t).max(t);
                    a.extend_invoke = Some((start, ttl_ms * 1_000_000));
                }
            }
            Kind::ExtendDone {
                op,
                ok,
                validity_ns,
            } => {
                if let Some(a) = acqs.get_mut(op) {
                    if let (true, Some((ti, ttl))) = (*ok, a.extend_invoke.take()) {
                        a.lease_floor_end = ti + ttl;
                        a.claimed_end = t + validity_ns;
                        if a.claimed_end > a.lease_floor_end && !a.late {
                            a.late = true;
                            f.report.valid_after_end += 1;
                            f.hit(t, format!("{op}: extension reported valid past its lease"));
                        }
                    }
                }
            }
            Kind::ReleaseInvoke { op } => {
                if let Some(a) = acqs.get_mut(op) {
                    a.release.get_or_insert(t);
                }
            }
            Kind::ReleaseDone { .. } => {}
            Kind::Resource { seq, .. } => resource.push((*seq, ev)),
            Kind::FaultStart { id, timing, .. } => {
                f.report.faults += 1;
                faults.insert(
                    *id,
                    Fault {
                        start: t,
                        stop: None,
                        timing: *timing,
                    },
                );
            }
            Kind::FaultStop { id } => {
                if let Some(fl) = faults.get_mut(id) {
                    fl.stop = Some(t);
                }
            }
            Kind::LockAfterFailover {
                key,
                held,
                token,
                pttl_ms,
            } => {
                // Read before this stamp: the lease ends no later than this.
                let pttl = pttl_ms.filter(|&p| p <= 86_400_000).unwrap_or(0);
                let node_end = t.saturating_add(pttl * 1_000_000);
                // Events come in time order: a hold whose release is not
                // recorded yet was not released before this reading.
                for (op, a) in &acqs {
                    let live =
                        a.key == *key && a.ok.is_some() && a.release.is_none() && a.claimed_end > t;
                    if !live {
                        continue;
                    }
                    f.report.locks_checked += 1;
                    let kept = *held
                        && (*token > a.token || (*token == a.token && node_end >= a.claimed_end));
                    if !kept {
                        f.report.locks_lost += 1;
                        if f.report.examples.len() < 20 {
                            f.report.examples.push(format!(
                                "{op} (token {}, valid {} ms more) lost in a failover: the new master has {key} {} at {token}{}",
                                a.token,
                                a.claimed_end.saturating_sub(t) / 1_000_000,
                                if *held { "held" } else { "free" },
                                pttl_ms.map(|p| format!(" for {p} ms")).unwrap_or_default()
                            ));
                        }
                    }
                }
            }
            Kind::NodeCounter {
                node,
                key,
                counter,
                phase,
            } => {
                if phase == "before_kill" {
                    before_kill.insert((*node, key.clone()), *counter);
                } else if let Some(before) = before_kill.get(&(*node, key.clone())) {
                    if counter < before {
                        f.report.counter_regressions += 1;
                        if !f.report.durable_counters {
                            continue;
                        }
                        f.hit(
                            t,
                            format!("node n{node} key {key}: counter {before} -> {counter} after restart"),
                        );
                    }
                }
            }
        }
    }

    // Duplicates and inversions, per key.
    let mut by_key: HashMap<&str, Vec<&Acq>> = HashMap::new();
    for op in &order {
        if let Some(a) = acqs.get(op) {
            if a.ok.is_some() {
                by_key.entry(a.key.as_str()).or_default().push(a);
            }
        }
    }
    // Acquisitions with an ok but no invoke (truncated history) still count
    // for duplicates.
    for a in acqs
        .values()
        .filter(|a| a.ok.is_some() && a.invoke.is_none())
    {
        by_key.entry(a.key.as_str()).or_default().push(a);
    }
    for (key, list) in &by_key {
        let mut seen: HashMap<u64, u64> = HashMap::new();
        let mut by_ok: Vec<&&Acq> = list.iter().collect();
        by_ok.sort_by_key(|a| a.ok);
        for a in &by_ok {
            if let Some(prev) = seen.insert(a.token, a.ok.unwrap_or(0)) {
                let _ = prev;
                f.report.duplicate_tokens += 1;
                f.hit(
                    a.ok.unwrap_or(0),
                    format!("key {key}: token {} granted twice", a.token),
                );
            }
        }
        // Inversions: sweep invocations against earlier completions.
        let mut by_invoke: Vec<&&Acq> = list.iter().filter(|a| a.invoke.is_some()).collect();
        by_invoke.sort_by_key(|a| a.invoke);
        let mut i = 0;
        let mut max_done: Option<u64> = None;
        for a in by_invoke {
            let inv = a.invoke.unwrap_or(0);
            while i < by_ok.len() && by_ok[i].ok.unwrap_or(0) < inv {
                max_done = Some(max_done.map_or(by_ok[i].token, |m| m.max(by_ok[i].token)));
                i += 1;
            }
            if let Some(m) = max_done {
                if a.token <= m {
                    f.report.token_inversions += 1;
                    f.hit(
                        a.ok.unwrap_or(inv),
                        format!(
                            "key {key}: token {} after token {m} had completed ({})",
                            a.token, a.client
                        ),
                    );
                }
            }
        }
    }

    // Overlapping holds.
    let timing: Vec<(u64, u64)> = faults
        .values()
        .filter(|fl| fl.timing)
        .map(|fl| (fl.start, fl.stop.unwrap_or(u64::MAX)))
        .collect();
    for (key, list) in &by_key {
        let mut holds: Vec<(u64, u64, &Acq)> = list
            .iter()
            .filter_map(|a| {
                let start = a.ok?;
                let end = a.release.map_or(a.claimed_end, |r| r.min(a.claimed_end));
                (end > start).then_some((start, end, *a))
            })
            .collect();
        holds.sort_by_key(|h| h.0);
        let mut active: Vec<(u64, u64, &Acq)> = Vec::new();
        for h in holds {
            active.retain(|a| a.1 > h.0);
            for a in &active {
                let (lo, hi) = (h.0, a.1.min(h.1));
                let slack = 2 * a.2.ttl_ns.max(h.2.ttl_ns).max(ttl_default_ns);
                let explained = timing
                    .iter()
                    .any(|&(s, e)| s <= hi && e.saturating_add(slack) >= lo);
                if explained {
                    f.report.overlaps_explained += 1;
                } else {
                    f.report.overlaps_unexplained += 1;
                    f.hit(
                        lo,
                        format!(
                            "key {key}: holds of tokens {} and {} overlap {} µs",
                            a.2.token,
                            h.2.token,
                            (hi - lo) / 1_000
                        ),
                    );
                }
            }
            active.push(h);
        }
    }

    // The resource, in its own order.
    resource.sort_by_key(|r| r.0);
    let mut highest: HashMap<&str, u64> = HashMap::new();
    for (_, ev) in &resource {
        let Kind::Resource {
            op,
            key,
            kind,
            token,
            accepted,
            version,
            based_on,
            ..
        } = &ev.kind
        else {
            continue;
        };
        f.report.resource_ops += 1;
        if !accepted {
            f.report.stale_refused += 1;
            continue;
        }
        let h = highest.entry(key.as_str()).or_insert(0);
        if token < h {
            f.report.stale_accepted += 1;
            f.hit(
                ev.t,
                format!("key {key}: {kind:?} with token {token} accepted after token {h} ({op})"),
            );
        }
        *h = (*h).max(*token);
        if *kind == ResOp::Write {
            if let Some(b) = based_on {
                if *b + 1 != *version {
                    f.report.lost_updates += 1;
                    f.hit(
                        ev.t,
                        format!(
                            "key {key}: write by {op} based on version {b} replaced version {}",
                            version - 1
                        ),
                    );
                }
            }
        }
    }

    f.report.first_violation_ms = f.first.map(|t| t.saturating_sub(t0) / 1_000_000);
    f.report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Guarantees;

    const MS: u64 = 1_000_000;

    /// Builds a synthetic history.
    #[derive(Default)]
    struct H {
        evs: Vec<Event>,
        seq: u64,
    }

    impl H {
        fn push(&mut self, t_ms: u64, kind: Kind) -> &mut Self {
            self.evs.push(Event { t: t_ms * MS, kind });
            self
        }
        fn start(&mut self, durable: bool) -> &mut Self {
            self.push(
                0,
                Kind::RunStart {
                    run: "synthetic".into(),
                    fault: "none".into(),
                    persistence: "always".into(),
                    seed: 1,
                    ttl_ms: 100,
                    nodes: 5,
                    keys: vec!["k".into()],
                    guarantees: Guarantees {
                        durable_counters: durable,
                    },
                },
            )
        }
        /// An acquisition of key `k` with ttl 100 ms: invoked at `inv`, ok
        /// at `ok` with `token` and the validity a correct client reports,
        /// released at `rel`.
        fn acq(&mut self, op: &str, inv: u64, ok: u64, token: u64, rel: u64) -> &mut Self {
            let validity = (inv + 100 - 3).saturating_sub(ok) * MS;
            self.push(
                inv,
                Kind::AcquireInvoke {
                    op: op.into(),
                    client: format!("c-{op}"),
                    key: "k".into(),
                    ttl_ms: 100,
                    first_poll: None,
                },
            )
            .push(
                ok,
                Kind::AcquireOk {
                    op: op.into(),
                    client: format!("c-{op}"),
                    key: "k".into(),
                    token,
                    validity_ns: validity,
                    nodes: vec![],
                },
            )
            .push(rel, Kind::ReleaseInvoke { op: op.into() })
        }
        /// An acquisition of key `k` (ttl 100 ms) that reports
        /// `validity_ns` at `ok`: invoked at `inv`, first polled at `poll`.
        fn claim(&mut self, op: &str, inv: u64, poll: u64, ok: u64, validity_ns: u64) -> &mut Self {
            self.push(
                inv,
                Kind::AcquireInvoke {
                    op: op.into(),
                    client: op.into(),
                    key: "k".into(),
                    ttl_ms: 100,
                    first_poll: Some(poll * MS),
                },
            )
            .push(
                ok,
                Kind::AcquireOk {
                    op: op.into(),
                    client: op.into(),
                    key: "k".into(),
                    token: 3,
                    validity_ns,
                    nodes: vec![],
                },
            )
        }
        #[allow(clippy::too_many_arguments)]
        fn res(
            &mut self,
            t: u64,
            op: &str,
            kind: ResOp,
            token: u64,
            ok: bool,
            v: u64,
            b: Option<u64>,
        ) -> &mut Self {
            self.seq += 1;
            let seq = self.seq;
            self.push(
                t,
                Kind::Resource {
                    seq,
                    op: op.into(),
                    key: "k".into(),
                    kind,
                    token,
                    accepted: ok,
                    version: v,
                    based_on: b,
                },
            )
        }
        fn fault(&mut self, id: u64, start: u64, stop: u64, timing: bool) -> &mut Self {
            self.push(
                start,
                Kind::FaultStart {
                    id,
                    kind: "x".into(),
                    target: "n0".into(),
                    detail: String::new(),
                    timing,
                },
            )
            .push(stop, Kind::FaultStop { id })
        }
        fn check(&mut self) -> Report {
            self.evs.sort_by_key(|e| e.t);
            check(&self.evs)
        }
    }

    fn clean() -> H {
        let mut h = H::default();
        h.start(true)
            .acq("a", 10, 12, 1, 20)
            .res(14, "a", ResOp::Read, 1, true, 0, None)
            .res(15, "a", ResOp::Write, 1, true, 1, Some(0))
            .acq("b", 21, 23, 2, 40)
            .res(25, "b", ResOp::Read, 2, true, 1, None)
            .res(26, "b", ResOp::Write, 2, true, 2, Some(1));
        h
    }

    #[test]
    fn clean_history_has_no_violation() {
        let r = clean().check();
        assert_eq!(r.violations(), 0, "{r:?}");
        assert_eq!(r.acquisitions, 2);
        assert_eq!(r.resource_ops, 4);
        assert_eq!(r.first_violation_ms, None);
    }

    #[test]
    fn concurrent_acquisitions_may_complete_in_any_token_order() {
        // b is invoked before a completes: no order is promised between them.
        let mut h = H::default();
        h.start(true)
            .acq("a", 10, 15, 2, 16)
            .acq("b", 11, 30, 1, 31);
        let r = h.check();
        assert_eq!(r.token_inversions, 0, "{r:?}");
    }

    #[test]
    fn duplicate_token() {
        let mut h = clean();
        h.acq("c", 50, 52, 2, 60);
        let r = h.check();
        assert_eq!(r.duplicate_tokens, 1, "{r:?}");
        // Token 2 after token 2 completed is also an inversion.
        assert_eq!(r.token_inversions, 1);
        assert_eq!(r.first_violation_ms, Some(52));
    }

    #[test]
    fn token_inversion() {
        let mut h = clean();
        h.acq("c", 50, 52, 1, 60);
        let r = h.check();
        assert_eq!(r.token_inversions, 1, "{r:?}");
        assert!(
            r.examples
                .iter()
                .any(|e| e.contains("token 1 after token 2")),
            "{r:?}"
        );
    }

    #[test]
    fn stale_operation_accepted() {
        let mut h = clean();
        h.res(45, "a", ResOp::Read, 1, true, 2, None);
        let r = h.check();
        assert_eq!(r.stale_accepted, 1, "{r:?}");
        assert_eq!(r.violations(), 1);
    }

    #[test]
    fn refused_stale_operation_is_fine() {
        let mut h = clean();
        h.res(45, "a", ResOp::Write, 1, false, 2, Some(0));
        let r = h.check();
        assert_eq!(r.violations(), 0, "{r:?}");
        assert_eq!(r.stale_refused, 1);
    }

    #[test]
    fn lost_update() {
        let mut h = clean();
        // Writer read version 1 but replaced version 2.
        h.acq("c", 50, 52, 3, 60)
            .res(55, "c", ResOp::Write, 3, true, 3, Some(1));
        let r = h.check();
        assert_eq!(r.lost_updates, 1, "{r:?}");
    }

    #[test]
    fn overlap_unexplained_and_explained() {
        let mut h = H::default();
        h.start(true)
            .acq("a", 10, 12, 1, 60)
            .acq("b", 20, 22, 2, 70);
        let r = h.check();
        assert_eq!(r.overlaps_unexplained, 1, "{r:?}");
        assert_eq!(r.overlaps_explained, 0);

        let mut h = H::default();
        h.start(true)
            .fault(1, 5, 8, true)
            .acq("a", 10, 12, 1, 60)
            .acq("b", 20, 22, 2, 70);
        let r = h.check();
        assert_eq!(r.overlaps_explained, 1, "{r:?}");
        assert_eq!(r.overlaps_unexplained, 0);
        assert_eq!(r.violations(), 0);

        // A fault that does not bend timing explains nothing.
        let mut h = H::default();
        h.start(true)
            .fault(1, 5, 8, false)
            .acq("a", 10, 12, 1, 60)
            .acq("b", 20, 22, 2, 70);
        assert_eq!(h.check().overlaps_unexplained, 1);
    }

    #[test]
    fn hold_ends_at_validity_not_release() {
        // a never releases before b, but its validity (ends at 107) is over.
        let mut h = H::default();
        h.start(true)
            .acq("a", 10, 12, 1, 500)
            .acq("b", 120, 122, 2, 130);
        assert_eq!(h.check().violations(), 0);
    }

    #[test]
    fn a_zero_validity_seen_after_the_lease_claims_nothing() {
        // Paused right after the client's own validity check: the lock comes
        // back 130 ms after its 100 ms lease began, with nothing left.
        let acquisition = |validity_ns: u64| clean().claim("c", 50, 50, 180, validity_ns).check();
        let r = acquisition(0);
        assert_eq!(r.violations(), 0, "{r:?}");
        // Any time claimed past the lease is still a violation.
        assert_eq!(acquisition(MS).valid_after_end, 1);
    }

    #[test]
    fn valid_after_end() {
        let mut h = clean();
        // A client that forgot to subtract the 30 ms it spent.
        h.claim("c", 50, 51, 80, 100 * MS);
        let r = h.check();
        assert_eq!(r.valid_after_end, 1, "{r:?}");
        // The same at use time.
        let mut h = clean();
        h.push(
            29,
            Kind::Use {
                op: "b".into(),
                validity_ns: 100 * MS,
            },
        );
        assert_eq!(h.check().valid_after_end, 1);
    }

    #[test]
    fn client_start_is_bracketed_by_the_first_poll() {
        // The thread was descheduled 30 ms between the stamp (10) and the
        // client's clock read (before 40): a correct claim up to 40 + 100
        // is no violation; one past it is.
        let invoke = |op: &str| Kind::AcquireInvoke {
            op: op.into(),
            client: op.into(),
            key: "k".into(),
            ttl_ms: 100,
            first_poll: Some(40 * MS),
        };
        let ok = |op: &str, token, validity_ms| Kind::AcquireOk {
            op: op.into(),
            client: op.into(),
            key: "k".into(),
            token,
            validity_ns: validity_ms * MS,
            nodes: vec![],
        };
        let mut h = H::default();
        h.start(true).push(10, invoke("a")).push(41, ok("a", 1, 96));
        assert_eq!(h.check().valid_after_end, 0);
        let mut h = H::default();
        h.start(true)
            .push(10, invoke("a"))
            .push(41, ok("a", 1, 100));
        assert_eq!(h.check().valid_after_end, 1);
    }

    #[test]
    fn extension_moves_the_lease_end() {
        let mut h = H::default();
        h.start(true)
            .acq("a", 10, 12, 1, 300)
            .push(
                50,
                Kind::ExtendInvoke {
                    op: "a".into(),
                    ttl_ms: 100,
                    first_poll: Some(50 * MS),
                },
            )
            .push(
                52,
                Kind::ExtendDone {
                    op: "a".into(),
                    ok: true,
                    validity_ns: 95 * MS,
                },
            )
            .push(
                130,
                Kind::Use {
                    op: "a".into(),
                    validity_ns: 17 * MS,
                },
            );
        let r = h.check();
        assert_eq!(r.violations(), 0, "{r:?}");
        // b overlaps the extended hold (a valid until 147).
        h.acq("b", 140, 142, 2, 150);
        assert_eq!(h.check().overlaps_unexplained, 1);
    }

    #[test]
    fn counter_regression_counts_only_when_durable() {
        let counter = |phase: &str, c: u64| Kind::NodeCounter {
            node: 2,
            key: "k".into(),
            counter: c,
            phase: phase.into(),
        };
        let mut h = H::default();
        h.start(true)
            .push(10, counter("before_kill", 9))
            .push(20, counter("after_restart", 4));
        let r = h.check();
        assert_eq!(r.counter_regressions, 1);
        assert_eq!(r.violations(), 1);
        let mut h = H::default();
        h.start(false)
            .push(10, counter("before_kill", 9))
            .push(20, counter("after_restart", 0));
        let r = h.check();
        assert_eq!(r.counter_regressions, 1);
        assert_eq!(r.violations(), 0);
    }

    #[test]
    fn offline_recheck_gives_same_counts() {
        let mut h = clean();
        h.acq("c", 50, 52, 1, 60);
        let r1 = h.check();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.jsonl");
        crate::history::save(&p, &h.evs).unwrap();
        let r2 = check(&crate::history::load(&p).unwrap());
        assert_eq!(r1, r2);
    }
}
