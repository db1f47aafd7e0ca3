//! `redlock run --metrics-addr`: the client's metrics as Prometheus text,
//! scraped over HTTP while `run` waits for a busy lock, holds it, loses it
//! and lingers after the command ended.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{five, Frozen};

const BIN: &str = env!("CARGO_BIN_EXE_redlock");

/// One scrape: `name{sorted labels}` → value.
type Scrape = BTreeMap<String, f64>;

/// GET / on `port`; `None` while nothing listens there.
fn scrape(port: u16) -> Option<Scrape> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Some(parse(body))
}

/// Prometheus text format, samples only: the labels sorted so that a
/// test can name them in any order.
fn parse(text: &str) -> Scrape {
    let mut out = Scrape::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let value: f64 = value.parse().expect("sample value");
        let series = match series.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                labels.sort();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => series.to_string(),
        };
        out.insert(series, value);
    }
    out
}

/// The value of `series` (labels in sorted order), 0 when absent.
fn value(scrape: &Scrape, series: &str) -> f64 {
    scrape.get(series).copied().unwrap_or(0.0)
}

/// Scrapes until `done` holds, for at most 20 s.
fn scrape_until(port: u16, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(s) = scrape(port) {
            if done(&s) {
                return s;
            }
            last = Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not seen within 20 s; last scrape: {last:#?}");
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A scratch folder, removed at the end.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Ends the child when a test fails halfway.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Busy, granted, extended, lost: each family of the scrape counts what
/// happened, at each stage.
#[test]
fn run_serves_prometheus_metrics_through_busy_granted_and_lost() {
    let nodes = five();
    let urls = common::urls(&nodes).join(",");
    let dir = std::env::temp_dir().join(format!("redlock-cli-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scratch = Scratch(dir);
    let (started, term, done) = (
        scratch.0.join("started"),
        scratch.0.join("term"),
        scratch.0.join("done"),
    );
    let port = redlock_testkit::free_port();

    // Someone else holds the lock first.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let holder = runtime.block_on(async {
        let redlock = common::client(&nodes).await;
        redlock
            .try_acquire("job", Duration::from_secs(30))
            .await
            .unwrap()
            .expect("free")
    });

    // The command: says it started, notes SIGTERM (and outlives it), and
    // ends when the test says so.
    let script = r#"trap 'touch "$1"' TERM; touch "$0"; while [ ! -f "$2" ]; do sleep 0.05; done"#;
    let child = Command::new(BIN)
        .env("REDLOCK_NODES", &urls)
        .args([
            "--node-timeout",
            "100ms",
            "run",
            "job",
            "--ttl",
            "900ms",
            "--wait",
            "30s",
            "--kill-after",
            "30s",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--metrics-linger",
            "60s",
            "--",
            "sh",
            "-c",
            script,
            started.to_str().unwrap(),
            term.to_str().unwrap(),
            done.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock run");
    let mut child = Reaped(child);

    // 1. Busy: one attempt found the lock held; run waits.
    let busy = "redlock_acquisitions_total{outcome=\"busy\"}";
    let granted = "redlock_acquisitions_total{outcome=\"granted\"}";
    let s = scrape_until(port, "a busy attempt", |s| value(s, busy) >= 1.0);
    assert_eq!(value(&s, busy), 1.0, "{s:#?}");
    assert_eq!(value(&s, granted), 0.0, "{s:#?}");
    assert_eq!(
        value(&s, "redlock_acquire_seconds_count{outcome=\"busy\"}"),
        1.0,
        "{s:#?}"
    );
    assert!(!started.exists());

    // 2. Granted once the holder lets go; the lease is extended.
    assert!(runtime.block_on(holder.release()).unwrap());
    wait_for_file(&started);
    let ok = "redlock_extensions_total{outcome=\"ok\"}";
    let s = scrape_until(port, "an extension", |s| value(s, ok) >= 1.0);
    assert_eq!(value(&s, busy), 1.0, "{s:#?}");
    assert_eq!(value(&s, granted), 1.0, "{s:#?}");
    assert_eq!(
        value(&s, "redlock_acquire_seconds_count{outcome=\"granted\"}"),
        1.0,
        "{s:#?}"
    );
    assert_eq!(value(&s, "redlock_wait_seconds_count"), 1.0, "{s:#?}");
    assert_eq!(value(&s, "redlock_locks_lost_total"), 0.0, "{s:#?}");
    assert_eq!(value(&s, "redlock_hold_seconds_count"), 0.0, "{s:#?}");
    // The wait took at least until the release (the histogram's sum).
    assert!(value(&s, "redlock_wait_seconds_sum") > 0.0, "{s:#?}");

    // 3. Lost: three nodes frozen, no extension reaches a quorum and the
    // validity runs out; the command gets SIGTERM.
    let frozen = Frozen::new(&nodes[..3]);
    wait_for_file(&term);
    let s = scrape_until(port, "the loss", |s| {
        value(s, "redlock_locks_lost_total") >= 1.0
    });
    drop(frozen);
    assert_eq!(value(&s, "redlock_locks_lost_total"), 1.0, "{s:#?}");
    assert!(
        value(&s, "redlock_extensions_total{outcome=\"failed\"}") >= 1.0,
        "{s:#?}"
    );
    for node in &nodes[..3] {
        let series = format!(
            "redlock_node_errors_total{{kind=\"timeout\",node=\"{}\"}}",
            node.url()
        );
        assert!(value(&s, &series) >= 1.0, "{series}: {s:#?}");
    }
    for node in &nodes[3..] {
        assert!(
            s.keys()
                .all(|k| !k.starts_with("redlock_node_errors_total") || !k.contains(&node.url())),
            "{s:#?}"
        );
    }

    // 4. The command ends; run releases what is left and lingers with the
    // final counts: the hold is recorded.
    std::fs::write(&done, b"").unwrap();
    let s = scrape_until(port, "the hold", |s| {
        value(s, "redlock_hold_seconds_count") >= 1.0
    });
    assert_eq!(value(&s, "redlock_hold_seconds_count"), 1.0, "{s:#?}");
    assert_eq!(value(&s, granted), 1.0, "{s:#?}");
    assert_eq!(value(&s, busy), 1.0, "{s:#?}");
    assert_eq!(value(&s, "redlock_locks_lost_total"), 1.0, "{s:#?}");
    assert_eq!(
        value(&s, "redlock_stale_refusals_total"),
        0.0,
        "nothing was fenced: {s:#?}"
    );
    // Buckets are cumulative and end at +Inf with the count.
    assert_eq!(
        value(&s, "redlock_hold_seconds_bucket{le=\"+Inf\"}"),
        1.0,
        "{s:#?}"
    );

    // SIGTERM ends the linger; the exit code is still the loss's.
    // SAFETY: a signal to our own child's pid.
    unsafe {
        libc::kill(child.0.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "run did not end after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(4), "{err}");
    assert!(err.contains("lost the lock on"), "{err}");
    assert!(scrape(port).is_none(), "the endpoint ends with run");
}

/// A taken or bad address fails at once, before anything is locked.
#[test]
fn run_refuses_a_metrics_address_it_cannot_bind() {
    let nodes = five();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .env("REDLOCK_NODES", common::urls(&nodes).join(","))
        .args(["run", "job", "--metrics-addr", &addr, "--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("--metrics-addr {addr}")), "{err}");
}
