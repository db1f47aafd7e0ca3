//! docs/grafana: the dashboard's queries name only metrics that exist (the
//! client's, and the INFO redlock fields that redlock-info.lua gives
//! redis_exporter from a real node), and every client metric has a panel.

use std::collections::BTreeSet;
use std::path::PathBuf;

use redlock_client::metrics::{
    ACQUIRE_SECONDS, ACQUISITIONS, EXTENSIONS, HOLD_SECONDS, LOCKS_LOST, NODE_ERRORS,
    STALE_REFUSALS, WAIT_SECONDS, WRITE_BACKS,
};
use redlock_testkit::{workspace_dir, Node};

fn grafana(file: &str) -> PathBuf {
    workspace_dir().join("docs/grafana").join(file)
}

/// Every query (`expr`) of the dashboard's panels.
fn queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The `redlock_…` words of `text`, with what precedes each (`key="` for
/// the INFO fields).
fn redlock_words(text: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("redlock_") {
        let quoted = rest[..at].ends_with("key=\"");
        let word: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + word.len()..];
        out.push((quoted, word));
    }
    out
}

#[test]
fn the_dashboard_queries_metrics_that_exist() {
    let text = std::fs::read_to_string(grafana("redlock-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    assert!(exprs.len() >= 14, "{exprs:?}");

    // The INFO fields the script gives redis_exporter, from a real node
    // that granted a lock.
    let node = Node::builder().start();
    let mut con = node.connection();
    let _: u64 = redis::cmd("REDLOCK.ACQUIRE")
        .arg("dash")
        .arg("owner")
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    let script = std::fs::read_to_string(grafana("redlock-info.lua")).unwrap();
    let pairs: Vec<String> = redis::cmd("EVAL")
        .arg(&script)
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert!(
        pairs.len() > 20 && pairs.len().is_multiple_of(2),
        "{pairs:?}"
    );
    let fields: Vec<(&str, i64)> = pairs
        .chunks(2)
        .map(|kv| (kv[0].as_str(), kv[1].parse().expect("a number")))
        .collect();
    assert!(
        fields.contains(&("redlock_acquire_granted", 1)),
        "{fields:?}"
    );
    assert!(fields.iter().all(|(k, _)| *k != "redlock_version"));
    let info: BTreeSet<&str> = fields.iter().map(|(k, _)| *k).collect();

    let client = [
        ACQUISITIONS,
        ACQUIRE_SECONDS,
        WAIT_SECONDS,
        HOLD_SECONDS,
        EXTENSIONS,
        LOCKS_LOST,
        NODE_ERRORS,
        WRITE_BACKS,
        STALE_REFUSALS,
    ];
    let mut used = BTreeSet::new();
    for expr in &exprs {
        for (quoted, word) in redlock_words(expr) {
            if quoted {
                assert!(
                    info.contains(word.as_str()),
                    "{word} is not in INFO redlock: {expr}"
                );
            } else {
                let name = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(&word);
                assert!(client.contains(&name), "{word} is no client metric: {expr}");
                used.insert(name.to_string());
            }
        }
    }
    for name in client {
        assert!(used.contains(name), "no panel shows {name}");
    }
}
