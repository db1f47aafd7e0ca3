//! Section 6: the same client workload against five single nodes and
//! against five members that are Redis Clusters of [`SHARDS`] shards each:
//! cycles/s, latency, node CPU per cycle per shard, and how evenly the keys
//! and the commands spread over the shards.
//!
//! On this machine (few cores) throughput cannot grow with shards; what the
//! section shows is the cost a shard pays per cycle and the spread, from
//! which the capacity of a member with more cores follows (the last line).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use redlock_bench::cpu::pids_cpu;
use redlock_bench::stats::median;
use redlock_bench::workload::{self, Outcome, RunResult, Window};
use redlock_client::Member;
use redlock_testkit::{Cluster, Node};

use crate::client::ClientLocker;
use crate::lockers::{timed, TTL};
use crate::plan::Plan;
use crate::report::{cpu_text, med_lat, med_rate, med_ratio, opt, p50, ratio, thousands, Report};

/// Shards of every cluster member.
pub(crate) const SHARDS: usize = 3;
/// Members of the quorum, in both forms.
const MEMBERS: usize = 5;
/// Client tasks.
const TASKS: usize = 16;
/// Lock names each task cycles through (so that every shard gets keys).
const KEYS_PER_TASK: usize = 64;

/// One measured form: the client, the node processes, and (clusters) the
/// master processes of each shard.
struct Form {
    client: ClientLocker,
    pids: Vec<u32>,
    shard_pids: Vec<Vec<u32>>,
}

/// Per-round figures of the cluster form beyond the workload's own.
#[derive(Default)]
struct ShardRound {
    /// Share of the masters' CPU time spent by each shard.
    cpu_share: Vec<f64>,
    /// `REDLOCK.ACQUIRE` calls served by each shard.
    acquires: Vec<f64>,
}

fn key_pool() -> Arc<Vec<Vec<String>>> {
    Arc::new(
        (0..TASKS)
            .map(|t| {
                (0..KEYS_PER_TASK)
                    .map(|i| format!("bench:x:{t}:{i}"))
                    .collect()
            })
            .collect(),
    )
}

/// Uncontended cycles, each task going round its own keys.
async fn cycles(form: &Form, window: Window, what: &str) -> Result<RunResult, String> {
    let keys = key_pool();
    let client = form.client.clone();
    let next = Arc::new(
        (0..TASKS)
            .map(|_| std::sync::atomic::AtomicUsize::new(0))
            .collect::<Vec<_>>(),
    );
    timed(
        what,
        window,
        workload::run(TASKS, window, &form.pids, move |task| {
            let (c, keys, next) = (client.clone(), keys.clone(), next.clone());
            async move {
                let i = next[task].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = &keys[task][i % KEYS_PER_TASK];
                let t = Instant::now();
                let lock = c.acquire(key, TTL).await?;
                c.release(lock).await?;
                Ok(Outcome {
                    ok: true,
                    latency: t.elapsed(),
                })
            }
        }),
    )
    .await
}

/// How many names of the key pool each shard of `cluster` owns (one
/// `CLUSTER SLOTS`, then `CLUSTER KEYSLOT` per name on one connection).
fn keys_per_shard(cluster: &Cluster) -> Result<Vec<f64>, String> {
    let masters = cluster.masters();
    let mut con = masters[0].connection();
    let slots: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut con)
        .map_err(|e| format!("CLUSTER SLOTS: {e}"))?;
    let ranges = parse_slots(&slots);
    let mut counts = vec![0f64; cluster.shard_count()];
    for k in key_pool().iter().flatten() {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(k)
            .query(&mut con)
            .map_err(|e| format!("CLUSTER KEYSLOT: {e}"))?;
        let port = ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|(_, _, (_, port))| *port)
            .ok_or_else(|| format!("no shard serves slot {slot}"))?;
        let shard = cluster
            .shard_of_port(port)
            .ok_or_else(|| format!("no shard listens on {port}"))?;
        counts[shard] += 1.0;
    }
    Ok(counts)
}

/// `(first, last, (host, port))` of every range of a `CLUSTER SLOTS` reply.
fn parse_slots(v: &redis::Value) -> Vec<(u16, u16, (String, u16))> {
    let redis::Value::Array(ranges) = v else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|r| match r {
            redis::Value::Array(f) if f.len() >= 3 => {
                let first = redis::from_redis_value::<u16>(f[0].clone()).ok()?;
                let last = redis::from_redis_value::<u16>(f[1].clone()).ok()?;
                let redis::Value::Array(node) = &f[2] else {
                    return None;
                };
                let host = redis::from_redis_value::<String>(node.first()?.clone()).ok()?;
                let port = redis::from_redis_value::<u16>(node.get(1)?.clone()).ok()?;
                Some((first, last, (host, port)))
            }
            _ => None,
        })
        .collect()
}

/// `cmdstat_REDLOCK.ACQUIRE` calls of each master of a cluster, by shard
/// (`masters` from [`Cluster::masters`]).
fn acquire_calls(masters: &[&Node]) -> Vec<f64> {
    masters
        .iter()
        .map(|m| {
            redlock_bench::command_calls(m)
                .into_iter()
                .find(|(name, _)| name == "REDLOCK.ACQUIRE")
                .map_or(0.0, |(_, calls)| calls as f64)
        })
        .collect()
}

/// Largest over mean: 1.00 is a perfectly even spread.
fn max_over_mean(v: &[f64]) -> Option<f64> {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    (mean > 0.0).then(|| max / mean)
}

/// Runs the section: starts five clusters (and uses the five `singles`),
/// and adds rows and figures.
pub(crate) async fn run(
    module: &Path,
    singles: &[Node],
    plan: &Plan,
    report: &mut Report,
) -> Result<(), String> {
    let window = plan.window;
    let builder = Node::builder().module(module.to_path_buf());
    let clusters: Vec<Cluster> = tokio::task::spawn_blocking(move || {
        let starts: Vec<_> = (0..MEMBERS)
            .map(|_| {
                let b = Cluster::builder()
                    .shards(SHARDS)
                    .replicas(0)
                    .node(builder.clone());
                std::thread::spawn(move || b.start())
            })
            .collect();
        starts
            .into_iter()
            .map(|h| h.join().map_err(|_| "a cluster did not start".to_string()))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| format!("starting clusters: {e}"))??;

    // How the key pool falls on the shards (the slot map is the same on
    // every member: slots are split evenly in shard order).
    let keys_per_shard = keys_per_shard(&clusters[0])?;

    let single = Form {
        client: ClientLocker::connect(&singles.iter().map(Node::url).collect::<Vec<_>>()).await?,
        pids: singles.iter().filter_map(Node::pid).collect(),
        shard_pids: Vec::new(),
    };
    // No failover happens here: the masters stay the same all along.
    let masters: Vec<Vec<&Node>> = clusters.iter().map(Cluster::masters).collect();
    let shard_pids: Vec<Vec<u32>> = (0..SHARDS)
        .map(|s| masters.iter().filter_map(|m| m[s].pid()).collect())
        .collect();
    let sharded = Form {
        client: ClientLocker::connect_members(
            clusters
                .iter()
                .map(|c| Member::cluster(c.seed_urls()))
                .collect(),
        )
        .await?,
        pids: shard_pids.iter().flatten().copied().collect(),
        shard_pids,
    };

    // What the clusters spend with no client at all (cluster bus, cron).
    let idle_window = plan.window.duration.min(std::time::Duration::from_secs(1));
    let idle0 = pids_cpu(&sharded.pids);
    tokio::time::sleep(idle_window).await;
    let idle_share =
        pids_cpu(&sharded.pids).saturating_sub(idle0).as_secs_f64() / idle_window.as_secs_f64();
    report
        .figures
        .put("cluster.idle_cpu_share_all_masters", Some(idle_share));

    let mut single_runs = Vec::new();
    let mut cluster_runs = Vec::new();
    let mut shard_rounds: Vec<ShardRound> = Vec::new();
    for round in 0..plan.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            if which == 0 {
                single_runs.push(cycles(&single, window, "cluster section, single nodes").await?);
                continue;
            }
            let cpu0: Vec<_> = sharded.shard_pids.iter().map(|p| pids_cpu(p)).collect();
            let calls0: Vec<Vec<f64>> = masters.iter().map(|m| acquire_calls(m)).collect();
            cluster_runs.push(cycles(&sharded, window, "cluster section, clusters").await?);
            let cpu: Vec<f64> = sharded
                .shard_pids
                .iter()
                .zip(&cpu0)
                .map(|(p, c0)| pids_cpu(p).saturating_sub(*c0).as_secs_f64())
                .collect();
            let total: f64 = cpu.iter().sum();
            let mut acquires = vec![0f64; SHARDS];
            for (m, before) in masters.iter().zip(&calls0) {
                for (s, (after, b)) in acquire_calls(m).iter().zip(before).enumerate() {
                    acquires[s] += after - b;
                }
            }
            shard_rounds.push(ShardRound {
                cpu_share: cpu
                    .iter()
                    .map(|c| if total > 0.0 { c / total } else { 0.0 })
                    .collect(),
                acquires,
            });
        }
    }
    eprintln!("  cluster members done");

    let figures = &mut report.figures;
    let mut rows = Vec::new();
    for (tag, label, runs) in [
        ("cluster.singles", "5 single nodes", &single_runs),
        ("cluster.sharded", "5 clusters × 3 shards", &cluster_runs),
    ] {
        let rate = figures.put(
            format!("{tag}.cycles_per_sec"),
            med_rate(runs, |r| r.ok_per_sec),
        );
        let lat = med_lat(runs);
        figures.put(format!("{tag}.p50_us"), lat.map(|p| p.p50));
        figures.put(format!("{tag}.p99_us"), lat.map(|p| p.p99));
        let cpu = cpu_text(figures, tag, runs);
        rows.push((label, rate, lat, cpu));
    }
    let vs_rate = figures.put(
        "cluster.sharded_vs_singles_cycles",
        med_ratio(&cluster_runs, &single_runs, |r| Some(r.ok_per_sec)),
    );
    let vs_p50 = figures.put(
        "cluster.sharded_vs_singles_p50",
        med_ratio(&cluster_runs, &single_runs, p50),
    );
    let node_cpu = med_rate(&cluster_runs, |r| r.nodes_cpu_us);
    let single_cpu = med_rate(&single_runs, |r| r.nodes_cpu_us);
    // CPU per cycle of one shard of one member: the member's cost split by
    // each shard's share of the masters' CPU time.
    let per_shard: Vec<Option<f64>> = (0..SHARDS)
        .map(|s| {
            let shares: Vec<f64> = shard_rounds
                .iter()
                .filter_map(|r| r.cpu_share.get(s).copied())
                .collect();
            Some(node_cpu? / MEMBERS as f64 * median(&shares)?)
        })
        .collect();
    for (s, v) in per_shard.iter().enumerate() {
        figures.put(format!("cluster.shard{s}_cpu_us_per_cycle_per_member"), *v);
    }
    let key_spread = figures.put(
        "cluster.key_spread_max_over_mean",
        max_over_mean(&keys_per_shard),
    );
    let cmd_spread = figures.put(
        "cluster.acquire_spread_max_over_mean",
        median(
            &shard_rounds
                .iter()
                .filter_map(|r| max_over_mean(&r.acquires))
                .collect::<Vec<_>>(),
        ),
    );
    for (i, (label, rate, lat, cpu)) in rows.into_iter().enumerate() {
        report.table.row(
            "6",
            &format!("uncontended, c={TASKS}, {} names", TASKS * KEYS_PER_TASK),
            &format!("redlock-client, {label}"),
            opt(rate, |v| format!("{} cycles/s", thousands(v))),
            lat,
            cpu,
            if i == 1 {
                format!(
                    "{} cycles, {} p50 vs single nodes",
                    ratio(vs_rate),
                    ratio(vs_p50)
                )
            } else {
                String::new()
            },
        );
    }
    let us = |v: Option<f64>| opt(v, |v| format!("{v:.1}"));
    report.notes.push(format!(
        "Idle, the {} masters of the five clusters use {:.1} % of one core together (cluster bus and cron), \
         included in the figures above.",
        MEMBERS * SHARDS,
        idle_share * 100.0
    ));
    let shard_text: Vec<String> = per_shard.iter().map(|v| us(*v)).collect();
    report.notes.push(format!(
        "Cluster members (section 6): node CPU per cycle {} µs on 5 single nodes, {} µs on 5 clusters × {SHARDS} shards; \
         per cycle, one shard of one member spends {} µs (shards 0..{}); names per shard {} (max ÷ mean {}), \
         ACQUIREs per shard max ÷ mean {}.",
        us(single_cpu),
        us(node_cpu),
        shard_text.join(" / "),
        SHARDS - 1,
        keys_per_shard
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
            .join(" / "),
        ratio(key_spread),
        ratio(cmd_spread),
    ));
    if let Some(member_cpu) = node_cpu.map(|c| c / MEMBERS as f64) {
        figures.put("cluster.member_cpu_us_per_cycle", Some(member_cpu));
        report.notes.push(format!(
            "Capacity model: a cycle costs one member about {member_cpu:.1} µs of one core, spent on the shard \
             that owns the name; a member of S shards, each on a core of its own, therefore saturates near \
             S × {} cycles/s (when names spread evenly, as they do above), until the clients or the network limit it.",
            thousands(1e6 / member_cpu)
        ));
    }
    drop(sharded);
    drop(clusters);
    Ok(())
}
