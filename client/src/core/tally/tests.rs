//! Table-driven tests for every rule of DESIGN.md section 4, and property
//! tests over random reply sequences.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const TIMER: NodeFailure = NodeFailure::Timeout(Duration::from_millis(100));

/// A reply in the tables.
#[derive(Clone, Copy, Debug)]
enum R {
    /// Granted with this token.
    G(u64),
    /// Held by another owner.
    H,
    /// Not connected (the command was never sent).
    Down,
    /// An error reply (the node ran the command and refused it).
    Refused,
    /// The connection broke after sending (the node may have run it).
    Broken,
}

fn failure(r: R) -> Option<NodeFailure> {
    match r {
        R::Down => Some(NodeFailure::NotConnected("refused".into())),
        R::Refused => Some(NodeFailure::Refused("ERR no".into())),
        R::Broken => Some(NodeFailure::Connection("reset".into())),
        R::G(_) | R::H => None,
    }
}

fn acquire_reply(r: R) -> AcquireReply {
    match r {
        R::G(t) => AcquireReply::Granted(t),
        R::H => AcquireReply::Held,
        other => AcquireReply::Failed(failure(other).unwrap_or(TIMER)),
    }
}

/// What a table row expects.
#[derive(Debug)]
enum Expect {
    Acquired(u64),
    WriteBack {
        token: u64,
        targets: &'static [usize],
    },
    Busy(usize),
    NoQuorum {
        answered: usize,
        failing: &'static [usize],
    },
}

fn check(outcome: &AcquireOutcome, expect: &Expect, rule: &str) {
    match (outcome, expect) {
        (AcquireOutcome::Acquired { token }, Expect::Acquired(t)) => assert_eq!(token, t, "{rule}"),
        (AcquireOutcome::WriteBack(wb), Expect::WriteBack { token, targets }) => {
            assert_eq!(wb.token(), *token, "{rule}");
            assert_eq!(wb.targets(), *targets, "{rule}");
        }
        (AcquireOutcome::Busy { holders }, Expect::Busy(h)) => assert_eq!(holders, h, "{rule}"),
        (
            AcquireOutcome::NoQuorum { answered, failures },
            Expect::NoQuorum {
                answered: a,
                failing,
            },
        ) => {
            assert_eq!(answered, a, "{rule}");
            let nodes: Vec<usize> = failures.iter().map(|(i, _)| *i).collect();
            assert_eq!(nodes, *failing, "{rule}");
        }
        _ => panic!("{rule}: got {outcome:?}, expected {expect:?}"),
    }
}

struct AcquireCase {
    rule: &'static str,
    nodes: usize,
    /// `(node, reply)` in arrival order.
    replies: &'static [(usize, R)],
    /// After how many replies the round is decided; `None`: only when the
    /// timer runs out after all of `replies`.
    decided_after: Option<usize>,
    expect: Expect,
    /// What `may_hold` lists once decided.
    release: &'static [usize],
}

const ACQUIRE_CASES: &[AcquireCase] = &[
    AcquireCase {
        rule: "healthy: stop at a quorum of equal grants, one round trip",
        nodes: 5,
        replies: &[(2, R::G(7)), (0, R::G(7)), (4, R::G(7))],
        decided_after: Some(3),
        expect: Expect::Acquired(7),
        release: &[0, 1, 2, 3, 4],
    },
    AcquireCase {
        rule: "T is the highest grant; lagging grants get the write-back",
        nodes: 5,
        replies: &[(0, R::G(4)), (1, R::G(3)), (2, R::G(3))],
        decided_after: Some(3),
        expect: Expect::WriteBack {
            token: 4,
            targets: &[1, 2],
        },
        release: &[0, 1, 2, 3, 4],
    },
    AcquireCase {
        rule: "a quorum of grants is waited for past refusals",
        nodes: 5,
        replies: &[
            (0, R::Down),
            (1, R::G(5)),
            (2, R::Refused),
            (3, R::G(5)),
            (4, R::G(5)),
        ],
        decided_after: Some(5),
        expect: Expect::Acquired(5),
        release: &[1, 3, 4],
    },
    AcquireCase {
        rule: "busy: held + grants make a quorum and no quorum of grants can come",
        nodes: 5,
        replies: &[(0, R::H), (1, R::H), (2, R::G(9)), (3, R::H)],
        decided_after: Some(4),
        expect: Expect::Busy(3),
        release: &[2, 4],
    },
    AcquireCase {
        rule: "busy: a quorum of held answers",
        nodes: 5,
        replies: &[(4, R::H), (3, R::H), (2, R::H)],
        decided_after: Some(3),
        expect: Expect::Busy(3),
        release: &[0, 1],
    },
    AcquireCase {
        rule: "not busy while grants can still make a quorum",
        nodes: 5,
        replies: &[
            (0, R::H),
            (1, R::H),
            (2, R::G(1)),
            (3, R::G(1)),
            (4, R::G(1)),
        ],
        decided_after: Some(5),
        expect: Expect::Acquired(1),
        release: &[2, 3, 4],
    },
    AcquireCase {
        rule: "no quorum: too few nodes can still answer, with each failure",
        nodes: 5,
        replies: &[(0, R::Down), (3, R::Refused), (4, R::Down)],
        decided_after: Some(3),
        expect: Expect::NoQuorum {
            answered: 0,
            failing: &[0, 3, 4],
        },
        release: &[1, 2],
    },
    AcquireCase {
        rule: "neither busy nor no quorum yet: wait for the last reply (then held: busy)",
        nodes: 5,
        replies: &[(0, R::H), (1, R::H), (2, R::Down), (3, R::Down), (4, R::H)],
        decided_after: Some(5),
        expect: Expect::Busy(3),
        release: &[],
    },
    AcquireCase {
        rule: "neither busy nor no quorum yet: wait for the last reply (then failed: no quorum)",
        nodes: 5,
        replies: &[
            (0, R::H),
            (1, R::H),
            (2, R::Down),
            (3, R::Down),
            (4, R::Broken),
        ],
        decided_after: Some(5),
        expect: Expect::NoQuorum {
            answered: 2,
            failing: &[2, 3, 4],
        },
        release: &[4],
    },
    AcquireCase {
        rule: "the timer: silent nodes fail with a timeout and are released",
        nodes: 5,
        replies: &[(0, R::G(2)), (1, R::G(2))],
        decided_after: None,
        expect: Expect::NoQuorum {
            answered: 2,
            failing: &[2, 3, 4],
        },
        release: &[0, 1, 2, 3, 4],
    },
    AcquireCase {
        rule: "the timer: held + timeouts is busy when held + grants make a quorum",
        nodes: 3,
        replies: &[(0, R::H), (1, R::G(3))],
        decided_after: None,
        expect: Expect::Busy(1),
        release: &[1, 2],
    },
    AcquireCase {
        rule: "one node is its own quorum",
        nodes: 1,
        replies: &[(0, R::G(1))],
        decided_after: Some(1),
        expect: Expect::Acquired(1),
        release: &[0],
    },
    AcquireCase {
        rule: "four nodes need three",
        nodes: 4,
        replies: &[(0, R::G(2)), (1, R::G(2)), (2, R::H), (3, R::G(2))],
        decided_after: Some(4),
        expect: Expect::Acquired(2),
        release: &[0, 1, 3],
    },
    AcquireCase {
        rule: "four nodes: two held and one grant is busy",
        nodes: 4,
        replies: &[(0, R::H), (1, R::H), (2, R::G(2))],
        decided_after: Some(3),
        expect: Expect::Busy(2),
        release: &[2, 3],
    },
];

#[test]
fn acquire_rules() {
    for case in ACQUIRE_CASES {
        let q = case.nodes / 2 + 1;
        let mut tally = AcquireTally::new(case.nodes, q);
        let mut outcome = None;
        for (k, (node, reply)) in case.replies.iter().enumerate() {
            let step = tally.record(*node, acquire_reply(*reply));
            match case.decided_after {
                Some(after) if k + 1 == after => {
                    outcome = Some(step.unwrap_or_else(|| panic!("{}: not decided", case.rule)));
                    break;
                }
                _ => assert!(step.is_none(), "{}: decided early: {step:?}", case.rule),
            }
        }
        let outcome = outcome.unwrap_or_else(|| tally.expire(TIMER));
        check(&outcome, &case.expect, case.rule);
        assert_eq!(tally.may_hold(), case.release, "{}: release", case.rule);
    }
}

#[test]
fn drifted_counters_take_the_highest_token_and_fence_it() {
    // DESIGN.md §4: after L1..L4 the counters are A=4 B=4 C=4 D=3 E=3.
    // L5 reaches {B,C,D}: 5, 5, 4. Using 5 needs a quorum at 5: D is fenced.
    let mut tally = AcquireTally::new(5, 3);
    assert!(tally.record(1, AcquireReply::Granted(5)).is_none());
    assert!(tally.record(3, AcquireReply::Granted(4)).is_none());
    let Some(AcquireOutcome::WriteBack(mut wb)) = tally.record(2, AcquireReply::Granted(5)) else {
        panic!("two of three at the highest token: write-back expected");
    };
    assert_eq!((wb.token(), wb.targets()), (5, &[3][..]));
    assert_eq!(
        wb.record(3, FenceReply::Counter(5)),
        Some(WriteBackOutcome::Acquired { token: 5 })
    );
}

struct WriteBackCase {
    rule: &'static str,
    /// ACQUIRE replies of a five-node round that end in a write-back.
    grants: &'static [(usize, u64)],
    fences: &'static [(usize, FenceReplyKind)],
    decided_after: Option<usize>,
    expect: Result<u64, (usize, &'static [usize])>,
}

#[derive(Clone, Copy, Debug)]
enum FenceReplyKind {
    At(u64),
    NotHeld,
    Broken,
}

fn fence_reply(kind: FenceReplyKind) -> FenceReply {
    match kind {
        FenceReplyKind::At(t) => FenceReply::Counter(t),
        FenceReplyKind::NotHeld => FenceReply::NotHeld,
        FenceReplyKind::Broken => FenceReply::Failed(NodeFailure::Connection("reset".into())),
    }
}

const WRITE_BACK_CASES: &[WriteBackCase] = &[
    WriteBackCase {
        rule: "a FENCE answering T makes the node count",
        grants: &[(0, 9), (1, 8), (2, 9)],
        fences: &[(1, FenceReplyKind::At(9))],
        decided_after: Some(1),
        expect: Ok(9),
    },
    WriteBackCase {
        rule: "a quorum at T is enough: slower FENCEs are not waited for",
        grants: &[(0, 9), (1, 8), (2, 7)],
        fences: &[(2, FenceReplyKind::At(9)), (1, FenceReplyKind::At(9))],
        decided_after: Some(2),
        expect: Ok(9),
    },
    WriteBackCase {
        rule: "no longer held there: fail as soon as a quorum at T is impossible",
        grants: &[(0, 9), (1, 8), (2, 7)],
        fences: &[(1, FenceReplyKind::NotHeld), (2, FenceReplyKind::At(9))],
        decided_after: Some(1),
        expect: Err((1, &[1])),
    },
    WriteBackCase {
        rule: "a FENCE answering another counter does not count",
        grants: &[(0, 9), (1, 8), (2, 9)],
        fences: &[(1, FenceReplyKind::At(10))],
        decided_after: Some(1),
        expect: Err((2, &[1])),
    },
    WriteBackCase {
        rule: "a broken FENCE does not count; the timer fails the rest",
        grants: &[(0, 9), (1, 8), (2, 8), (3, 8)],
        fences: &[(1, FenceReplyKind::Broken)],
        decided_after: None,
        expect: Err((1, &[1, 2, 3])),
    },
];

#[test]
fn write_back_rules() {
    for case in WRITE_BACK_CASES {
        let mut tally = AcquireTally::new(5, 3);
        let mut outcome = None;
        for &(node, token) in case.grants {
            outcome = tally.record(node, AcquireReply::Granted(token));
        }
        let Some(AcquireOutcome::WriteBack(mut wb)) = outcome else {
            panic!("{}: write-back expected, got {outcome:?}", case.rule);
        };
        let mut decided = None;
        for (k, (node, reply)) in case.fences.iter().enumerate() {
            let step = wb.record(*node, fence_reply(*reply));
            match case.decided_after {
                Some(after) if k + 1 == after => {
                    decided = Some(step.unwrap_or_else(|| panic!("{}: not decided", case.rule)));
                    break;
                }
                _ => assert!(step.is_none(), "{}: decided early: {step:?}", case.rule),
            }
        }
        let decided = decided.unwrap_or_else(|| wb.expire(TIMER));
        match (decided, case.expect) {
            (WriteBackOutcome::Acquired { token }, Ok(t)) => assert_eq!(token, t, "{}", case.rule),
            (WriteBackOutcome::NoQuorum { answered, failures }, Err((a, failing))) => {
                assert_eq!(answered, a, "{}", case.rule);
                let nodes: Vec<usize> = failures.iter().map(|(i, _)| *i).collect();
                assert_eq!(nodes, failing, "{}", case.rule);
                assert!(
                    failures
                        .iter()
                        .all(|(_, e)| matches!(e, NodeFailure::WriteBack(_))),
                    "{}",
                    case.rule
                );
            }
            (other, expect) => panic!("{}: got {other:?}, expected {expect:?}", case.rule),
        }
    }
}

#[test]
fn write_back_reasons_say_what_the_node_answered() {
    let mut tally = AcquireTally::new(3, 2);
    tally.record(0, AcquireReply::Granted(4));
    let Some(AcquireOutcome::WriteBack(mut wb)) = tally.record(1, AcquireReply::Granted(3)) else {
        panic!("write-back expected");
    };
    let Some(WriteBackOutcome::NoQuorum { failures, .. }) = wb.record(1, FenceReply::Counter(6))
    else {
        panic!("no quorum expected");
    };
    assert_eq!(
        failures,
        vec![(1, NodeFailure::WriteBack("FENCE answered 6, not 4".into()))]
    );
}

/// Confirmation rows: replies in arrival order (`Some(true)` 1, `Some(false)`
/// 0, `None` a failure), when decided, and the outcome.
struct ConfirmationCase {
    rule: &'static str,
    nodes: usize,
    replies: &'static [(usize, Option<bool>)],
    decided_after: Option<usize>,
    expect: ConfirmationExpect,
}

#[derive(Debug)]
enum ConfirmationExpect {
    Confirmed,
    NotHeld(usize),
    NoQuorum(usize, &'static [usize]),
}

const CONFIRMATION_CASES: &[ConfirmationCase] = &[
    ConfirmationCase {
        rule: "a quorum of 1s confirms without waiting for the rest",
        nodes: 5,
        replies: &[(0, Some(true)), (1, Some(true)), (4, Some(true))],
        decided_after: Some(3),
        expect: ConfirmationExpect::Confirmed,
    },
    ConfirmationCase {
        rule: "1s can still reach a quorum: keep waiting past 0s",
        nodes: 5,
        replies: &[
            (0, Some(false)),
            (1, Some(false)),
            (2, Some(true)),
            (3, Some(true)),
            (4, Some(true)),
        ],
        decided_after: Some(5),
        expect: ConfirmationExpect::Confirmed,
    },
    ConfirmationCase {
        rule: "not held: 1s cannot reach a quorum and a quorum answered",
        nodes: 5,
        replies: &[
            (0, Some(false)),
            (1, Some(true)),
            (2, Some(false)),
            (3, Some(false)),
        ],
        decided_after: Some(4),
        expect: ConfirmationExpect::NotHeld(1),
    },
    ConfirmationCase {
        rule: "no quorum: too few can still answer",
        nodes: 5,
        replies: &[(0, None), (1, Some(true)), (2, None), (3, None)],
        decided_after: Some(4),
        expect: ConfirmationExpect::NoQuorum(1, &[0, 2, 3]),
    },
    ConfirmationCase {
        rule: "undecided between not held and no quorum: wait",
        nodes: 5,
        replies: &[
            (0, Some(false)),
            (1, Some(false)),
            (2, None),
            (3, None),
            (4, Some(false)),
        ],
        decided_after: Some(5),
        expect: ConfirmationExpect::NotHeld(0),
    },
    ConfirmationCase {
        rule: "the timer fails the silent nodes",
        nodes: 5,
        replies: &[(0, Some(true)), (1, Some(true))],
        decided_after: None,
        expect: ConfirmationExpect::NoQuorum(2, &[2, 3, 4]),
    },
];

#[test]
fn confirmation_rules() {
    for case in CONFIRMATION_CASES {
        let mut tally = ConfirmationTally::new(case.nodes, case.nodes / 2 + 1);
        let mut decided = None;
        for (k, (node, reply)) in case.replies.iter().enumerate() {
            let reply = match reply {
                Some(true) => Confirmation::Held,
                Some(false) => Confirmation::NotHeld,
                None => Confirmation::Failed(NodeFailure::NotConnected("refused".into())),
            };
            let step = tally.record(*node, reply);
            match case.decided_after {
                Some(after) if k + 1 == after => {
                    decided = Some(step.unwrap_or_else(|| panic!("{}: not decided", case.rule)));
                    break;
                }
                _ => assert!(step.is_none(), "{}: decided early: {step:?}", case.rule),
            }
        }
        let decided = decided.unwrap_or_else(|| tally.expire(TIMER));
        match (&decided, &case.expect) {
            (ConfirmationOutcome::Confirmed, ConfirmationExpect::Confirmed) => {}
            (ConfirmationOutcome::NotHeld { confirmed }, ConfirmationExpect::NotHeld(c)) => {
                assert_eq!(confirmed, c, "{}", case.rule)
            }
            (
                ConfirmationOutcome::NoQuorum { answered, failures },
                ConfirmationExpect::NoQuorum(a, failing),
            ) => {
                assert_eq!(answered, a, "{}", case.rule);
                let nodes: Vec<usize> = failures.iter().map(|(i, _)| *i).collect();
                assert_eq!(nodes, *failing, "{}", case.rule);
            }
            _ => panic!("{}: got {decided:?}, expected {:?}", case.rule, case.expect),
        }
    }
}

/// What a node really did with an ACQUIRE, whether or not the client saw it.
#[derive(Clone, Copy, Debug)]
enum Truth {
    /// Granted with this token.
    Grant(u64),
    /// Held by another owner.
    Held,
    /// Never got the command.
    Down,
    /// Ran it and answered an error.
    Refused,
    /// The reply was lost (timeout, broken connection); `true` if the node
    /// granted before.
    Lost(bool),
}

impl Truth {
    fn holds_grant(self) -> bool {
        matches!(self, Truth::Grant(_) | Truth::Lost(true))
    }

    fn reply(self) -> AcquireReply {
        match self {
            Truth::Grant(t) => AcquireReply::Granted(t),
            Truth::Held => AcquireReply::Held,
            Truth::Down => AcquireReply::Failed(NodeFailure::NotConnected("refused".into())),
            Truth::Refused => AcquireReply::Failed(NodeFailure::Refused("ERR".into())),
            Truth::Lost(_) => AcquireReply::Failed(NodeFailure::Connection("reset".into())),
        }
    }
}

fn truth() -> impl Strategy<Value = Truth> {
    prop_oneof![
        4 => (1u64..5).prop_map(Truth::Grant),
        2 => Just(Truth::Held),
        1 => Just(Truth::Down),
        1 => Just(Truth::Refused),
        1 => any::<bool>().prop_map(Truth::Lost),
    ]
}

/// A round: each node's truth, the arrival order, how many replies arrive
/// before the timer, and each FENCE's truth (`Some(token)` for the counter
/// it answers, `None` for no usable answer).
fn round() -> impl Strategy<Value = (Vec<Truth>, Vec<usize>, usize, Vec<Option<u64>>)> {
    prop_oneof![Just(1usize), Just(2), Just(3), Just(4), Just(5), Just(7)].prop_flat_map(|n| {
        (
            proptest::collection::vec(truth(), n),
            Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
            0..=n,
            proptest::collection::vec(proptest::option::of(1u64..6), n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn acquire_never_overstates(round in round()) {
        let (truths, order, arrive, fences) = round;
        let n = truths.len();
        let q = n / 2 + 1;
        let mut tally = AcquireTally::new(n, q);
        let mut fed = vec![false; n];
        let mut outcome = None;
        for &i in order.iter().take(arrive) {
            fed[i] = true;
            let step = tally.record(i, truths[i].reply());
            let grants = (0..n).filter(|&j| fed[j] && matches!(truths[j], Truth::Grant(_))).count();
            let held = (0..n).filter(|&j| fed[j] && matches!(truths[j], Truth::Held)).count();
            let pending = fed.iter().filter(|f| !**f).count();
            if step.is_none() {
                // Undecided only while a quorum of grants can still come, or
                // while busy and no quorum are both still possible.
                prop_assert!(grants < q);
                prop_assert!(grants + pending >= q || (held + grants < q && held + grants + pending >= q));
            } else {
                outcome = step;
                // Decided with every reply in: the timer is not needed.
                break;
            }
        }
        let replied = fed.clone();
        let all_fed = fed.iter().all(|f| *f);
        if outcome.is_none() {
            prop_assert!(!all_fed, "every node answered and the round is undecided");
        }
        let outcome = match outcome {
            Some(o) => o,
            None => {
                for f in fed.iter_mut() { *f = true; }
                tally.expire(TIMER)
            }
        };
        // The replies the tally decided on; nodes the timer expired count
        // as failed, and none is pending after the timer.
        let seen = |j: usize| replied[j];
        let grants: Vec<(usize, u64)> = (0..n)
            .filter_map(|j| match truths[j] { Truth::Grant(t) if seen(j) => Some((j, t)), _ => None })
            .collect();
        let held = (0..n).filter(|&j| seen(j) && matches!(truths[j], Truth::Held)).count();
        let pending = (0..n).filter(|&j| !fed[j]).count();
        match outcome {
            AcquireOutcome::Acquired { token } => {
                prop_assert!(grants.iter().filter(|(_, t)| *t == token).count() >= q);
                prop_assert!(grants.iter().all(|(_, t)| *t <= token));
            }
            AcquireOutcome::WriteBack(mut wb) => {
                let token = wb.token();
                prop_assert!(grants.len() >= q);
                prop_assert_eq!(Some(token), grants.iter().map(|(_, t)| *t).max());
                let at_token = grants.iter().filter(|(_, t)| *t == token).count();
                prop_assert!(at_token < q);
                let lagging: Vec<usize> = grants.iter().filter(|(_, t)| *t < token).map(|(i, _)| *i).collect();
                prop_assert_eq!(wb.targets(), &lagging[..]);
                let mut result = None;
                let mut fenced_at_token = 0;
                for &i in &lagging {
                    let reply = match fences[i] {
                        Some(t) => FenceReply::Counter(token + t % 2),
                        None => FenceReply::NotHeld,
                    };
                    if reply == FenceReply::Counter(token) { fenced_at_token += 1; }
                    if let Some(done) = wb.record(i, reply) { result = Some(done); break; }
                }
                let result = result.unwrap_or_else(|| wb.expire(TIMER));
                match result {
                    WriteBackOutcome::Acquired { token: t } => {
                        prop_assert_eq!(t, token);
                        prop_assert!(at_token + fenced_at_token >= q);
                    }
                    WriteBackOutcome::NoQuorum { answered, .. } => {
                        prop_assert!(answered < q);
                    }
                }
            }
            AcquireOutcome::Busy { holders } => {
                prop_assert_eq!(holders, held);
                // Never busy while a quorum of grants could still come.
                prop_assert!(grants.len() + pending < q);
                prop_assert!(held + grants.len() >= q);
            }
            AcquireOutcome::NoQuorum { answered, failures } => {
                prop_assert_eq!(answered, held + grants.len());
                prop_assert!(grants.len() + pending < q);
                prop_assert!(held + grants.len() + pending < q);
                let failing: Vec<usize> = (0..n)
                    .filter(|&j| fed[j] && !(seen(j) && matches!(truths[j], Truth::Grant(_) | Truth::Held)))
                    .collect();
                let listed: Vec<usize> = failures.iter().map(|(i, _)| *i).collect();
                prop_assert_eq!(listed, failing);
            }
        }
        // Every node that holds a grant, seen or not, is released on failure.
        let release = tally.may_hold();
        for j in 0..n {
            if truths[j].holds_grant() {
                prop_assert!(release.contains(&j), "node {} may hold a grant: {:?}", j, release);
            }
            // A node whose reply says it did not grant needs no release.
            if replied[j] && matches!(truths[j], Truth::Held | Truth::Down | Truth::Refused) {
                prop_assert!(!release.contains(&j));
            }
        }
    }

    #[test]
    fn confirmation_stops_exactly_when_decided(
        (replies, order, arrive) in prop_oneof![Just(1usize), Just(3), Just(4), Just(5), Just(7)]
            .prop_flat_map(|n| (
                proptest::collection::vec(0u8..3, n),
                Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
                0..=n,
            ))
    ) {
        let n = replies.len();
        let q = n / 2 + 1;
        let mut tally = ConfirmationTally::new(n, q);
        let mut fed = vec![false; n];
        let mut outcome = None;
        let as_reply = |r: u8| match r {
            0 => Confirmation::NotHeld,
            1 => Confirmation::Held,
            _ => Confirmation::Failed(NodeFailure::Timeout(Duration::from_millis(1))),
        };
        for &i in order.iter().take(arrive) {
            fed[i] = true;
            let step = tally.record(i, as_reply(replies[i]));
            let ones = (0..n).filter(|&j| fed[j] && replies[j] == 1).count();
            let answered = (0..n).filter(|&j| fed[j] && replies[j] < 2).count();
            let pending = fed.iter().filter(|f| !**f).count();
            match step {
                None => {
                    prop_assert!(ones < q);
                    prop_assert!(ones + pending >= q || (answered < q && answered + pending >= q));
                }
                Some(o) => { outcome = Some(o); break; }
            }
        }
        if outcome.is_none() {
            prop_assert!(fed.iter().any(|f| !*f), "every node answered and the round is undecided");
        }
        let replied = fed.clone();
        let outcome = match outcome {
            Some(o) => o,
            None => { for f in fed.iter_mut() { *f = true; } tally.expire(TIMER) }
        };
        let ones = (0..n).filter(|&j| replied[j] && replies[j] == 1).count();
        let answered = (0..n).filter(|&j| replied[j] && replies[j] < 2).count();
        let pending = fed.iter().filter(|f| !**f).count();
        match outcome {
            ConfirmationOutcome::Confirmed => prop_assert!(ones >= q),
            ConfirmationOutcome::NotHeld { confirmed } => {
                prop_assert_eq!(confirmed, ones);
                prop_assert!(ones + pending < q);
                prop_assert!(answered >= q);
            }
            ConfirmationOutcome::NoQuorum { answered: a, failures } => {
                prop_assert_eq!(a, answered);
                prop_assert!(ones + pending < q);
                prop_assert!(answered + pending < q);
                let failing: Vec<usize> = (0..n).filter(|&j| fed[j] && !(replied[j] && replies[j] < 2)).collect();
                let listed: Vec<usize> = failures.iter().map(|(i, _)| *i).collect();
                prop_assert_eq!(listed, failing);
            }
        }
    }
}
