//! Which master taught a replica its longest lease (DESIGN §13; the
//! promotion holes of `tests/promotion_lease_rules.rs`).
//!
//! A replica promoted to master guards for the longest lease it knows
//! ([`crate::core::guard_rule`]), and one that knows nothing of its master's
//! leases guards for the longest lease any node grants. "Knows" must mean
//! "learned from the master it follows now": a node taught by another
//! master (pointed at a new one, promoted during its first sync with it), or
//! a standalone node that loaded its own data (its record holds only its
//! own `max-ttl-ms`), knows nothing of the leases of the master it follows,
//! which may be longer.
//!
//! So a replica keeps its *teacher*: the address (`host:port`, as
//! configured with `REPLICAOF`) of the master it followed when it applied a
//! node record from the replication stream or from a full sync; never from
//! its own files. It is taught only while the master it follows is its
//! teacher. Pointed at another master (`REPLICAOF`, Sentinel's
//! reconfiguration after a failover) it is untaught until it applies a
//! record of the new one, which the new master announces to every replica
//! that comes online (`host/events.rs`) right behind the sync: a replica
//! promoted inside that short window guards long (the longest lease any
//! node grants), which is conservative, never short.
//!
//! With the teacher the replica keeps what that master last said its own
//! replicas acknowledged knowing ([`Taught::acked_ms`], the master's
//! `LeaseAck::acked_ms`): a promoted replica starts its life as master from
//! it ([`crate::core::lease_ack_rule::LeaseAck::promoted`]).

use crate::core::mutant::{Mutant, Mutants};

/// The teacher a node's own files stand for under the `taught-by-any`
/// mutant (the rule before: any record taught).
const ANY: &str = "(any)";

/// What a node learned from which master.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Taught {
    /// The master (`host:port`) it last applied a node record from.
    teacher: Option<String>,
    /// The acknowledged length that master last announced (0: none yet).
    acked_ms: u64,
}

impl Taught {
    /// Nothing learned.
    pub const fn new() -> Self {
        Taught {
            teacher: None,
            acked_ms: 0,
        }
    }

    /// What the node's file says (`None`: no file). Its form: `teacher
    /// host:port acked-ms`. The marker of earlier versions (`1`) says only
    /// that some record was applied, also one of the node's own data or of
    /// another master: it teaches nothing (a replica restarted after the
    /// upgrade and promoted before its master's next announcement guards
    /// long, never short).
    pub fn parse(text: Option<&str>) -> Taught {
        let Some(text) = text else {
            return Taught::new();
        };
        let mut words = text.split_whitespace();
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("teacher"), Some(master), Some(acked), None) => match acked.parse::<u64>() {
                Ok(acked_ms) => Taught {
                    teacher: Some(master.to_string()),
                    acked_ms,
                },
                Err(_) => Taught::new(),
            },
            _ => Taught::new(),
        }
    }

    /// The file's text (empty when nothing is learned: the host removes
    /// the file).
    pub fn render(&self) -> String {
        match &self.teacher {
            Some(t) => format!("teacher {t} {}\n", self.acked_ms),
            None => String::new(),
        }
    }

    /// The node applied a node record from the replication stream or a
    /// full sync of `master`, the master it follows now. `true` when the
    /// teacher changed (the host writes the file before the node goes on).
    /// A new teacher's acknowledged length is unknown until it says it.
    pub fn record_from(&mut self, master: &str) -> bool {
        if self.teacher.as_deref() == Some(master) {
            return false;
        }
        self.teacher = Some(master.to_string());
        self.acked_ms = 0;
        true
    }

    /// The node became a master (a promotion, or a load that follows no
    /// master): its teacher is forgotten. `true` when the file must be
    /// written.
    ///
    /// Why: what a teacher taught belongs to that teacher's life as master,
    /// and this node does not see its later lives while it is not its
    /// replica. A node that was `B`'s replica, then master itself (a
    /// switchover to it), then pointed back at `B` (a switchover back) must
    /// not count as taught by `B` before a record of `B`'s new life: `B`
    /// may have raised its `max-ttl-ms` meanwhile, and this node's full
    /// sync may still be under way. Forgotten, it is untaught until `B`'s
    /// record arrives, and promoted in that window it guards for the
    /// longest lease any node grants: long, never short. (Under the
    /// `teacher-outlives-life` mutant the teacher is kept, as before.)
    pub fn became_master(&mut self, mutants: Mutants) -> bool {
        // The `taught-by-any` mutant is the rule before the teacher: any
        // record taught for good.
        if mutants.on(Mutant::TeacherOutlivesLife)
            || mutants.on(Mutant::TaughtByAny)
            || self.teacher.is_none()
        {
            return false;
        }
        *self = Taught::new();
        true
    }

    /// The node loaded a node record from its own files: it teaches
    /// nothing (under the `taught-by-any` mutant it counts, as before).
    /// `true` when the file must be written.
    pub fn record_from_file(&mut self, mutants: Mutants) -> bool {
        if mutants.on(Mutant::TaughtByAny) && self.teacher.is_none() {
            self.teacher = Some(ANY.to_string());
            return true;
        }
        false
    }

    /// `master` (the master followed now) announced that its replicas
    /// acknowledged knowing a longest lease of `acked_ms`. Counted only
    /// from the teacher (a record of it came first), and taken as said, not
    /// as a maximum: a master at the same address may be another life with
    /// a shorter one. `true` when the file must be written.
    pub fn acked_from(&mut self, master: &str, acked_ms: u64) -> bool {
        if self.teacher.as_deref() != Some(master) || self.acked_ms == acked_ms {
            return false;
        }
        self.acked_ms = acked_ms;
        true
    }

    /// Whether the node is taught by `following`, the master it follows
    /// (`None`: none, a standalone node).
    pub fn taught_by(&self, following: Option<&str>, mutants: Mutants) -> bool {
        if mutants.on(Mutant::TaughtByAny) {
            return self.teacher.is_some();
        }
        following.is_some() && self.teacher.as_deref() == following
    }

    /// The acknowledged length `following` last announced, when it is the
    /// teacher (0 otherwise: nothing is known of what its replicas know).
    pub fn acked_ms(&self, following: Option<&str>, mutants: Mutants) -> u64 {
        if mutants.on(Mutant::TaughtByAny) && self.teacher.is_some() {
            // The rule before: what a taught node knows, its fellow
            // replicas know (the promoted life starts from its longest).
            return u64::MAX;
        }
        if self.taught_by(following, mutants) {
            self.acked_ms
        } else {
            0
        }
    }

    /// The teacher, if any.
    pub fn teacher(&self) -> Option<&str> {
        self.teacher.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_the_master_followed_now_teaches() {
        let mut t = Taught::new();
        assert!(!t.taught_by(Some("q:1"), Mutants::NONE));
        // Its own files teach nothing.
        assert!(!t.record_from_file(Mutants::NONE));
        assert!(!t.taught_by(None, Mutants::NONE));
        assert!(t.record_from("q:1"));
        assert!(!t.record_from("q:1"));
        assert!(t.taught_by(Some("q:1"), Mutants::NONE));
        assert!(t.acked_from("q:1", 1_000));
        assert_eq!(t.acked_ms(Some("q:1"), Mutants::NONE), 1_000);
        // Pointed at another master: untaught until a record of it.
        assert!(!t.taught_by(Some("m:2"), Mutants::NONE));
        assert_eq!(t.acked_ms(Some("m:2"), Mutants::NONE), 0);
        // An acknowledged length of a master that taught nothing is ignored.
        assert!(!t.acked_from("m:2", 5_000));
        assert!(t.record_from("m:2"));
        assert_eq!(t.acked_ms(Some("m:2"), Mutants::NONE), 0);
        assert!(t.taught_by(Some("m:2"), Mutants::NONE));
        // Promoted (following nothing): not taught by anyone.
        assert!(!t.taught_by(None, Mutants::NONE));
    }

    #[test]
    fn a_life_as_master_forgets_the_teacher() {
        let mut t = Taught::new();
        assert!(!t.became_master(Mutants::NONE));
        t.record_from("b:1");
        t.acked_from("b:1", 3_000);
        assert!(t.taught_by(Some("b:1"), Mutants::NONE));
        // Switched over to this node, then pointed back at b.
        assert!(t.became_master(Mutants::NONE));
        assert_eq!(t, Taught::new());
        assert!(!t.taught_by(Some("b:1"), Mutants::NONE));
        assert_eq!(t.acked_ms(Some("b:1"), Mutants::NONE), 0);
        // An acknowledged length of b's new life before its record teaches
        // nothing; its record does.
        assert!(!t.acked_from("b:1", 1_000));
        assert!(t.record_from("b:1"));
        assert!(t.taught_by(Some("b:1"), Mutants::NONE));
    }

    /// The mutant keeps the teacher through a life as master.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_keeps_the_teacher_through_a_life_as_master() {
        let on = Mutants::NONE.with(Mutant::TeacherOutlivesLife, true);
        let mut t = Taught::new();
        t.record_from("b:1");
        assert!(!t.became_master(on));
        assert!(t.taught_by(Some("b:1"), on));
    }

    #[test]
    fn the_file_round_trips_and_the_old_marker_teaches_nothing() {
        let mut t = Taught::new();
        assert_eq!(Taught::parse(Some(&t.render())), Taught::new());
        t.record_from("127.0.0.1:6380");
        t.acked_from("127.0.0.1:6380", 5_000);
        assert_eq!(Taught::parse(Some(&t.render())), t);
        assert_eq!(Taught::parse(Some("1\n")), Taught::new());
        assert_eq!(Taught::parse(None), Taught::new());
        assert_eq!(Taught::parse(Some("teacher x y")), Taught::new());
    }

    /// The mutant puts the hole back: a node's own data teaches it.
    #[cfg(feature = "danger-mutants")]
    #[test]
    fn the_mutant_counts_any_record() {
        let on = Mutants::NONE.with(Mutant::TaughtByAny, true);
        let mut t = Taught::new();
        assert!(t.record_from_file(on));
        assert!(t.taught_by(Some("m:2"), on));
    }

    proptest! {
        /// Whatever the history of records, acknowledged lengths and lives
        /// as master, a node is taught by a master only if the last record
        /// it applied from the stream came from that master since its last
        /// life as master, and knows an acknowledged length only from it.
        #[test]
        fn taught_means_the_last_record_came_from_the_master_followed(
            events in proptest::collection::vec((0u8..4, 0u8..3, 0u64..10_000), 0..40),
            following in 0u8..3,
        ) {
            let mut t = Taught::new();
            let mut last: Option<u8> = None;
            let mut last_acked = 0;
            for (kind, m, ms) in events {
                let name = format!("m:{m}");
                match kind {
                    0 => {
                        if last != Some(m) {
                            last_acked = 0;
                        }
                        t.record_from(&name);
                        last = Some(m);
                    }
                    1 => {
                        t.acked_from(&name, ms);
                        if last == Some(m) {
                            last_acked = ms;
                        }
                    }
                    2 => {
                        t.record_from_file(Mutants::NONE);
                    }
                    _ => {
                        t.became_master(Mutants::NONE);
                        last = None;
                        last_acked = 0;
                    }
                }
                let t2 = Taught::parse(Some(&t.render()));
                prop_assert_eq!(&t2, &t);
            }
            let f = format!("m:{following}");
            prop_assert_eq!(t.taught_by(Some(&f), Mutants::NONE), last == Some(following));
            let expected = if last == Some(following) { last_acked } else { 0 };
            prop_assert_eq!(t.acked_ms(Some(&f), Mutants::NONE), expected);
        }
    }
}
