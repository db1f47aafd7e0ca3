//! The election workload: each client task is a candidate of one election
//! (`redlock_client::Election` over the spec's first key). It campaigns,
//! and while it leads it uses the fenced resource with its epoch as the
//! token (read, then write the value read plus one) until its term ends,
//! then resigns and campaigns again.
//!
//! Each term is recorded as an acquisition of the key whose token is the
//! epoch, so the checker's counts say what the election promises: epochs
//! strictly increase (no duplicate, no inversion), no two terms overlap
//! outside a timing fault, and the resource accepts no write of a deposed
//! leader (no stale operation accepted, no lost update).
//!
//! The term is renewed by the client in the background; the workload sees a
//! renewal as a later validity deadline and records it as an extension that
//! started when it was seen. The renewal really started earlier, so the
//! checker's "earliest end of the lease" for it is later than the truth:
//! the `valid_after_end` check gets looser for renewals, never a false
//! alarm, and the overlap check follows the renewed validity.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::clock::mono_ns;
use crate::history::{Event, Kind, Recorder};
use crate::workload::{build_client, classify, Res, WorkerSpec};

/// Runs a worker's candidates to the spec's deadline. Returns the number of
/// terms won.
pub async fn run_candidates(spec: WorkerSpec) -> Result<u64, String> {
    let rec =
        Arc::new(Recorder::create(&spec.out).map_err(|e| format!("{}: {e}", spec.out.display()))?);
    let client = build_client(&spec.clusters, &spec.nodes, &spec.client).await?;
    let spec = Arc::new(spec);
    let mut handles = Vec::new();
    for task in 0..spec.tasks {
        let (spec, rec, client) = (Arc::clone(&spec), Arc::clone(&rec), client.clone());
        handles.push(tokio::spawn(async move {
            candidate(task, &spec, &rec, &client).await
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.map_err(|e| e.to_string())??;
    }
    rec.flush().map_err(|e| e.to_string())?;
    Ok(total)
}

async fn candidate(
    task: usize,
    spec: &WorkerSpec,
    rec: &Recorder,
    client: &redlock_client::Redlock,
) -> Result<u64, String> {
    let name = format!("w{}.c{}", spec.index, task);
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed ^ ((spec.index as u64) << 32) ^ task as u64);
    let key = spec.keys.first().ok_or("no election name")?.clone();
    let election = client.election(&key);
    let ttl = Duration::from_millis(spec.ttl_ms);
    let mut resource: Option<Res> = None;
    let mut terms = 0u64;
    let mut n = 0u64;
    while mono_ns() < spec.deadline_ns {
        if resource.is_none() {
            resource = Res::connect(spec).await?;
            if resource.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        }
        n += 1;
        let op = format!("{name}.{n}");
        let called = mono_ns();
        let left = Duration::from_nanos(spec.deadline_ns.saturating_sub(called));
        // A campaign waits as long as it takes: the run's end stops it
        // (dropped while it waits, it leaves no grant behind).
        let Ok(result) = tokio::time::timeout(left, election.campaign(ttl)).await else {
            break;
        };
        // The round that won started after the wait: the history takes
        // its start as the invocation (as the waiting lock workload does).
        let started = match &result {
            Ok(term) => mono_ns()
                .saturating_sub(term.info().started_at().elapsed().as_nanos() as u64)
                .max(called),
            Err(_) => called,
        };
        rec.record_at(&Event {
            t: started,
            kind: Kind::AcquireInvoke {
                op: op.clone(),
                client: name.clone(),
                key: key.clone(),
                ttl_ms: spec.ttl_ms,
                first_poll: Some(started),
            },
        });
        let term = match result {
            Ok(term) => term,
            Err(e) => {
                rec.record(Kind::AcquireFail {
                    op,
                    client: name.clone(),
                    key: key.clone(),
                    error: classify(&e),
                });
                tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
                continue;
            }
        };
        let t = mono_ns();
        let validity = term.info().validity();
        // A renewal before this reading (the term's first entry took long)
        // gave a validity the first lease does not cover: claim nothing
        // here, the renewal is recorded below.
        let renewed = Instant::now() + validity > term.info().started_at() + ttl;
        rec.record_at(&Event {
            t,
            kind: Kind::AcquireOk {
                op: op.clone(),
                client: name.clone(),
                key: key.clone(),
                token: term.epoch(),
                validity_ns: if renewed {
                    0
                } else {
                    validity.as_nanos() as u64
                },
                nodes: Vec::new(),
            },
        });
        terms += 1;
        if let Some(file) = &spec.leader_file {
            // Written whole then renamed: the runner never reads half.
            let tmp = file.with_extension(format!("w{}", spec.index));
            if std::fs::write(&tmp, spec.index.to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, file);
            }
        }
        let mut last_deadline = if renewed {
            None
        } else {
            Some(Instant::now() + validity)
        };
        // Terms of a quarter lease to a lease and a half: most see a renewal.
        let term_end = mono_ns() + rng.gen_range(spec.ttl_ms / 4..=spec.ttl_ms * 3 / 2) * 1_000_000;
        while mono_ns() < term_end.min(spec.deadline_ns) && !term.is_lost() {
            // The stamp first: `t + validity` never passes the deadline.
            let t = mono_ns();
            let validity = term.info().validity();
            if validity.is_zero() {
                break;
            }
            let deadline = Instant::now() + validity;
            if last_deadline.is_none_or(|d| deadline > d + Duration::from_millis(1)) {
                last_deadline = Some(deadline);
                rec.record_at(&Event {
                    t,
                    kind: Kind::ExtendInvoke {
                        op: op.clone(),
                        ttl_ms: spec.ttl_ms,
                        first_poll: Some(t),
                    },
                });
                rec.record_at(&Event {
                    t,
                    kind: Kind::ExtendDone {
                        op: op.clone(),
                        ok: true,
                        validity_ns: validity.as_nanos() as u64,
                    },
                });
            }
            rec.record_at(&Event {
                t,
                kind: Kind::Use {
                    op: op.clone(),
                    validity_ns: validity.as_nanos() as u64,
                },
            });
            let epoch = term.epoch();
            let res = resource.as_mut().ok_or("no resource")?;
            match res.read(rec, &op, &key, epoch).await {
                Ok(Some((value, version))) => {
                    // Time between the read and the write: a pause of the
                    // process lands here most of the time, and the write
                    // that follows it carries a deposed leader's epoch.
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(5..30))).await;
                    if res
                        .write(rec, &op, &key, epoch, value + 1, version)
                        .await
                        .is_err()
                    {
                        resource = None;
                        break;
                    }
                }
                // Refused: a newer leader has written; this term is over.
                Ok(None) => break,
                Err(_) => {
                    resource = None;
                    break;
                }
            }
        }
        rec.record(Kind::ReleaseInvoke { op: op.clone() });
        term.resign().await;
        rec.record(Kind::ReleaseDone { op, ok: true });
    }
    Ok(terms)
}
