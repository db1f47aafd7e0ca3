//! Section 7: one master with two replicas and three sentinels (issue 37).
//! Uncontended acquire+release at c=16 with the replica-sync check
//! (`redlock.sync-replicas 2`), against a hand-written `SET NX PX` + `WAIT 2`
//! pipelined on the same master, and against the same client without the
//! check (R 0); then the time from `kill -9` of the master to the first new
//! grant, with the check (a supervisor brings the old master back as a
//! replica at once) and without it (the promotion guard).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_bench::sync_handwritten::HandSyncLock;
use redlock_bench::workload::{self, Outcome, RunResult, Window};
use redlock_client::{Member, Redlock, RetryPolicy};
use redlock_testkit::{Node, SentinelGroup};

use crate::client::ClientLocker;
use crate::lockers::timed;
use crate::plan::Plan;
use crate::report::{
    cpu_text, med_lat, med_rate, med_ratio, opt, ratio, thousands, Report, Target,
};

/// Client tasks.
const TASKS: usize = 16;
/// The check's R: every replica of the group.
const R: u64 = 2;

/// The three measured forms.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Checked,
    Hand,
    Unchecked,
}

impl Form {
    const ALL: [Form; 3] = [Form::Checked, Form::Hand, Form::Unchecked];

    fn label(self) -> &'static str {
        match self {
            Form::Checked => "redlock-client, sync check R=2",
            Form::Hand => "hand-written SET NX PX + WAIT 2",
            Form::Unchecked => "redlock-client, no sync check",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Form::Checked => "sentinel.checked",
            Form::Hand => "sentinel.hand",
            Form::Unchecked => "sentinel.unchecked",
        }
    }
}

/// `CONFIG SET redlock.sync-replicas r` on every running node.
fn set_r(group: &SentinelGroup, r: u64) {
    for (i, n) in group.nodes().iter().enumerate() {
        if n.pid().is_some() {
            let _: redis::RedisResult<()> = redis::cmd("CONFIG")
                .arg("SET")
                .arg("redlock.sync-replicas")
                .arg(r)
                .query(&mut group.connection(i));
        }
    }
}

/// The promotion guard on at every replica (the nodes start with it off).
fn guard_on(group: &SentinelGroup) {
    for i in 0..group.nodes().len() {
        if group.role(i).as_deref() == Some("slave") {
            let _: redis::RedisResult<()> = redis::cmd("CONFIG")
                .arg("SET")
                .arg("redlock.restart-grace-ms")
                .arg(-1)
                .query(&mut group.connection(i));
        }
    }
}

async fn cycles(
    form: Form,
    client: &ClientLocker,
    hand: &HandSyncLock,
    pids: &[u32],
    window: Window,
    ttl: Duration,
) -> Result<RunResult, String> {
    let keys: Arc<Vec<String>> = Arc::new(
        (0..TASKS)
            .map(|t| format!("bench:s:{}:{t}", form.tag()))
            .collect(),
    );
    let (client, hand) = (client.clone(), hand.clone());
    timed(
        form.label(),
        window,
        workload::run(TASKS, window, pids, move |task| {
            let (client, hand, keys) = (client.clone(), hand.clone(), keys.clone());
            async move {
                let t = Instant::now();
                let key = &keys[task];
                match form {
                    Form::Hand => {
                        let owner = hand
                            .try_acquire(key, ttl)
                            .await
                            .map_err(|e| e.to_string())?
                            .ok_or("the hand-written lock was not synced")?;
                        hand.release(key, &owner).await.map_err(|e| e.to_string())?;
                    }
                    Form::Checked | Form::Unchecked => {
                        let lock = client.acquire(key, ttl).await?;
                        client.release(lock).await?;
                    }
                }
                Ok(Outcome {
                    ok: true,
                    latency: t.elapsed(),
                })
            }
        }),
    )
    .await
}

/// Waits until `form` grants once (every 20 ms, at most 20 s) after R
/// changed: the nodes apply `CONFIG SET redlock.sync-replicas` and the
/// master's announcement to its replicas one by one, and on a loaded
/// machine the first lock writes after it may be refused for a moment.
/// The error of the last try when none granted.
async fn ready(
    form: Form,
    client: &ClientLocker,
    hand: &HandSyncLock,
    ttl: Duration,
) -> Result<(), String> {
    let key = format!("bench:s:{}:ready", form.tag());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tried: Result<(), String> = match form {
            Form::Hand => match hand.try_acquire(&key, ttl).await {
                Ok(Some(owner)) => hand
                    .release(&key, &owner)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Ok(None) => Err("the hand-written lock was not synced".into()),
                Err(e) => Err(e.to_string()),
            },
            Form::Checked | Form::Unchecked => match client.acquire(&key, ttl).await {
                Ok(lock) => client.release(lock).await,
                Err(e) => Err(e),
            },
        };
        match tried {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("{}: no grant within 20 s: {e}", form.label()))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Kills the master and measures, from the kill: when the sentinels
/// promoted a replica that says it is the master, and when `probe` got its
/// first new grant (tried every 20 ms). With `supervise`, the old master is
/// brought back as a replica of the new one as soon as it is promoted.
async fn failover_times(
    group: SentinelGroup,
    probe: &Redlock,
    supervise: bool,
    limit: Duration,
) -> Result<(SentinelGroup, f64, f64), String> {
    let group = Arc::new(std::sync::Mutex::new(group));
    // The group works before the kill.
    let lock = probe
        .acquire("bench:s:probe", Duration::from_secs(1))
        .await
        .map_err(|e| format!("probe before the kill: {e}"))?;
    lock.release().await.map_err(|e| e.to_string())?;
    let old = {
        let mut g = group.lock().unwrap_or_else(|p| p.into_inner());
        tokio::task::block_in_place(|| {
            let old = g.master_index();
            g.kill(old);
            old
        })
    };
    let killed = Instant::now();
    let g = Arc::clone(&group);
    let promotion = tokio::task::spawn_blocking(move || {
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        let new = g.wait_master_change(old);
        let promoted = killed.elapsed();
        if supervise {
            g.restart_as_replica(old);
        }
        (promoted, new)
    });
    let granted = loop {
        if let Ok(Some(lock)) = probe
            .try_acquire("bench:s:probe", Duration::from_secs(1))
            .await
        {
            let at = killed.elapsed();
            let _ = lock.release().await;
            break at;
        }
        if killed.elapsed() > limit {
            return Err(format!("no grant within {limit:?} of the kill"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (promoted, _) = promotion.await.map_err(|e| e.to_string())?;
    let mut g = Arc::try_unwrap(group)
        .map_err(|_| "the group is still shared".to_string())?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    if !supervise {
        let g2 = &mut g;
        tokio::task::block_in_place(|| g2.restart_as_replica(old));
    }
    Ok((g, promoted.as_secs_f64(), granted.as_secs_f64()))
}

/// Runs the section and adds its rows, figures and targets.
pub(crate) async fn run(module: &Path, plan: &Plan, report: &mut Report) -> Result<(), String> {
    let window = plan.window;
    // The guard without the check lasts max-ttl-ms: short in a smoke run.
    let max_ttl_ms: u64 = if plan.smoke { 2_000 } else { 10_000 };
    let builder = Node::builder()
        .module(module.to_path_buf())
        .config("redlock.sync-replicas", &R.to_string())
        .config("redlock.max-ttl-ms", &max_ttl_ms.to_string());
    let group = tokio::task::spawn_blocking(move || SentinelGroup::builder().node(builder).start())
        .await
        .map_err(|e| format!("starting the Sentinel group: {e}"))?;
    let (name, sentinels) = (group.name().to_string(), group.sentinel_urls());
    let member = || Member::sentinel(name.clone(), sentinels.clone());

    // Failovers first, while R has been 2 since the nodes started (raising
    // R from 0 makes a promoted replica guard for the leases granted
    // without the check; the throughput rounds below switch R).
    let probe = Redlock::builder([member()])
        .retry(RetryPolicy::no_retry())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    {
        let group_ref = &group;
        tokio::task::block_in_place(|| guard_on(group_ref));
    }
    let limit = Duration::from_millis(max_ttl_ms) + Duration::from_secs(40);
    let (group, checked_promoted, checked_grant) =
        failover_times(group, &probe, true, limit).await?;
    let group = tokio::task::spawn_blocking(move || {
        group.settle();
        set_r(&group, 0);
        guard_on(&group);
        group
    })
    .await
    .map_err(|e| e.to_string())?;
    let (group, unchecked_promoted, unchecked_grant) =
        failover_times(group, &probe, false, limit).await?;
    drop(probe);
    let group = tokio::task::spawn_blocking(move || {
        group.settle();
        set_r(&group, R);
        group
    })
    .await
    .map_err(|e| e.to_string())?;
    eprintln!("  sentinel failovers done");

    let client = ClientLocker::connect_members(vec![member()]).await?;
    let master = group.master_index();
    let hand = HandSyncLock::connect(&group.node(master).url(), R, Duration::from_millis(250))
        .await
        .map_err(|e| e.to_string())?;
    let pids: Vec<u32> = group.nodes().iter().filter_map(Node::pid).collect();
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); Form::ALL.len()];
    for round in 0..plan.rounds {
        for k in 0..Form::ALL.len() {
            let form = Form::ALL[(k + round) % Form::ALL.len()];
            let r = if form == Form::Unchecked { 0 } else { R };
            let group_ref = &group;
            tokio::task::block_in_place(|| set_r(group_ref, r));
            let i = Form::ALL.iter().position(|f| *f == form).unwrap_or(0);
            let ttl = Duration::from_millis(max_ttl_ms);
            ready(form, &client, &hand, ttl).await?;
            runs[i].push(cycles(form, &client, &hand, &pids, window, ttl).await?);
        }
    }
    drop((client, hand));
    tokio::task::spawn_blocking(move || drop(group))
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("  sentinel throughput done");

    let figures = &mut report.figures;
    let [checked, hand_runs, unchecked] = [&runs[0], &runs[1], &runs[2]];
    let vs_hand = figures.put(
        "sentinel.checked_vs_hand_cycles",
        med_ratio(checked, hand_runs, |r| Some(r.ok_per_sec)),
    );
    let vs_unchecked = figures.put(
        "sentinel.checked_vs_unchecked_cycles",
        med_ratio(checked, unchecked, |r| Some(r.ok_per_sec)),
    );
    for (form, list) in Form::ALL.iter().zip(&runs) {
        let rate = figures.put(
            format!("{}.cycles_per_sec", form.tag()),
            med_rate(list, |r| r.ok_per_sec),
        );
        let lat = med_lat(list);
        figures.put(format!("{}.p50_us", form.tag()), lat.map(|p| p.p50));
        figures.put(format!("{}.p99_us", form.tag()), lat.map(|p| p.p99));
        let cpu = cpu_text(figures, form.tag(), list);
        report.table.row(
            "7",
            &format!("Sentinel group (master + 2 replicas), c={TASKS}, own key per task"),
            form.label(),
            opt(rate, |v| format!("{} cycles/s", thousands(v))),
            lat,
            cpu,
            match form {
                Form::Checked => format!(
                    "{} cycles vs hand; {} vs no check",
                    ratio(vs_hand),
                    ratio(vs_unchecked)
                ),
                _ => String::new(),
            },
        );
    }
    report.targets.push(Target {
        what: "Sentinel c=16 cycles/s, sync check ÷ hand-written SET NX PX + WAIT ≥ 1.00".into(),
        figure: vs_hand,
        met: vs_hand.map(|r| r >= 1.0),
    });

    let figures = &mut report.figures;
    figures.put(
        "sentinel.checked.kill_to_promoted_s",
        Some(checked_promoted),
    );
    figures.put(
        "sentinel.checked.kill_to_first_grant_s",
        Some(checked_grant),
    );
    figures.put(
        "sentinel.unchecked.kill_to_promoted_s",
        Some(unchecked_promoted),
    );
    figures.put(
        "sentinel.unchecked.kill_to_first_grant_s",
        Some(unchecked_grant),
    );
    let after = checked_grant - checked_promoted;
    report.targets.push(Target {
        what: "Sentinel kill -9 → first new grant with the sync check ≤ failover + 1 s".into(),
        figure: Some(after),
        met: Some(after <= 1.0),
    });
    report.notes.push(format!(
        "Sentinel failover (section 7, down-after 1 s): kill -9 of the master → a replica promoted in {checked_promoted:.2} s, \
         first new grant {checked_grant:.2} s after the kill with the sync check (R=2; the old master restarted as a replica \
         at once, as a supervisor that asks Sentinel for the master would, so that the new master has its two replicas), \
         {:.2} s after the promotion; without the check: promoted in {unchecked_promoted:.2} s, first new grant \
         {unchecked_grant:.2} s after the kill (the promotion guard, redlock.max-ttl-ms {max_ttl_ms} ms here, 60 s by default).",
        after
    ));
    Ok(())
}
