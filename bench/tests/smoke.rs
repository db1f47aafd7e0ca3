//! Runs `redlock-bench --smoke`: every workload for a moment against real
//! nodes, failing unless every column of the table produced a number. The
//! benchmark itself is not a test; this only checks that it works.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(180);

#[test]
fn smoke_run_fills_every_column() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_redlock-bench"))
        .arg("--smoke")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock-bench");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for redlock-bench") {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redlock-bench --smoke took more than {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    assert!(
        status.success(),
        "redlock-bench --smoke failed ({status}):\n{out}\n{err}"
    );
    assert!(
        out.contains("smoke: all"),
        "no smoke verdict:\n{out}\n{err}"
    );
    for section in ["| 1 ", "| 2 ", "| 3 ", "| 4 ", "| 5 "] {
        assert!(out.contains(section), "section {section:?} missing:\n{out}");
    }
}
