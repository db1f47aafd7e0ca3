//! Acceptance test 9: the `redlock` binary as a real subprocess.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{five, Frozen};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_redlock");

fn nodes_arg(nodes: &[redlock_testkit::Node]) -> String {
    common::urls(nodes).join(",")
}

/// Runs `redlock ARGS` and waits at most 20 s.
fn redlock(nodes: &str, args: &[&str]) -> Output {
    let child = Command::new(BIN)
        .env("REDLOCK_NODES", nodes)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock");
    wait_bounded(child, Duration::from_secs(20))
}

fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "redlock did not exit within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", stdout(o), stderr(o)))
}

#[test]
fn acquire_inspect_release() {
    let nodes = five();
    let urls = nodes_arg(&nodes);

    let out = redlock(&urls, &["--json", "acquire", "deploy", "--ttl", "20s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let token = v["token"].as_u64().expect("token");
    let owner = v["owner"].as_str().expect("owner").to_string();
    assert_eq!(v["key"], "deploy");
    assert!(v["validity_ms"].as_u64().unwrap() > 19_000);
    assert_eq!(owner.len(), 36);

    // Held by someone else: exit code 3, one line saying what to do.
    let out = redlock(&urls, &["acquire", "deploy", "--ttl", "20s"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("held by another owner"), "{err}");
    let out = redlock(&urls, &["--json", "acquire", "deploy"]);
    assert_eq!(out.status.code(), Some(3));
    let e: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(e["error"], "busy");

    // Human output of acquire shows the token and the owner.
    let out = redlock(&urls, &["acquire", "other", "--ttl", "5s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("  token  "), "{text}");
    assert!(text.contains("  owner  "), "{text}");
    assert!(text.contains("redlock release other --owner "), "{text}");

    // Inspect, side by side; --nodes works as well as REDLOCK_NODES.
    let out = Command::new(BIN)
        .args(["--nodes", &urls, "inspect", "deploy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("held on 5 of 5 nodes: locked"), "{text}");
    assert_eq!(text.matches(&format!("  {token}\n")).count(), 5, "{text}");
    for n in &nodes {
        assert!(text.contains(&format!("127.0.0.1:{}", n.port())), "{text}");
    }
    let v = json(&redlock(&urls, &["--json", "inspect", "deploy"]));
    assert_eq!(v["held_on"], 5);
    for node in v["nodes"].as_array().unwrap() {
        assert_eq!(node["held"], true, "{node}");
        assert_eq!(node["token"].as_u64(), Some(token), "{node}");
        assert!(node["pttl_ms"].as_u64().unwrap() > 15_000, "{node}");
    }

    // Release with the owner id; a second release says it was not held.
    let out = redlock(&urls, &["release", "deploy", "--owner", &owner]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("released \"deploy\""));
    let out = redlock(&urls, &["--json", "release", "deploy", "--owner", &owner]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(json(&out)["released"], false);
    let v = json(&redlock(&urls, &["--json", "inspect", "deploy"]));
    assert_eq!(v["held_on"], 0);
    let out = redlock(&urls, &["--json", "inspect", "never-used"]);
    assert_eq!(json(&out)["nodes"][0]["exists"], false);

    // Usage errors: exit code 2.
    let out = Command::new(BIN)
        .env_remove("REDLOCK_NODES")
        .args(["inspect", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no nodes"), "{}", stderr(&out));
    let out = redlock(&urls, &["acquire", "x", "--ttl", "30"]);
    assert_eq!(out.status.code(), Some(2));
    // The timeouts reach the client (which refuses zero).
    for flag in ["--node-timeout", "--connect-timeout"] {
        let out = redlock(&urls, &[flag, "0s", "inspect", "x"]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        assert!(
            stderr(&out).contains("timeouts must be above zero"),
            "{flag}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn run_passes_the_token_and_exits_with_the_child_status() {
    let nodes = five();
    let urls = nodes_arg(&nodes);
    let out = redlock(
        &urls,
        &[
            "run",
            "job",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo \"token=$REDLOCK_TOKEN key=$REDLOCK_KEY\"; exit 7",
        ],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let text = stdout(&out);
    let token: u64 = text
        .trim()
        .strip_prefix("token=")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {text:?}"));
    assert!(token > 0);
    assert!(text.contains("key=job"), "{text}");

    // Released at the end: the next run gets a higher token and exit 0.
    let out = redlock(
        &urls,
        &["run", "job", "--", "sh", "-c", "echo $REDLOCK_TOKEN"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let next: u64 = stdout(&out).trim().parse().unwrap();
    assert!(next > token);

    // Runs longer than its TTL thanks to the extensions.
    let out = redlock(
        &urls,
        &[
            "run",
            "job",
            "--ttl",
            "1s",
            "--",
            "sh",
            "-c",
            "sleep 2.2; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));

    // Busy: the command does not run.
    let held = redlock(&urls, &["--json", "acquire", "job", "--ttl", "20s"]);
    assert_eq!(held.status.code(), Some(0));
    let out = redlock(&urls, &["run", "job", "--", "sh", "-c", "echo ran"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(!stdout(&out).contains("ran"));

    // A command that cannot be started.
    let out = redlock(&urls, &["run", "job2", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still count.
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The processes (zombies included) whose process group is `pgid`, read
/// from the pgrp field of /proc/PID/stat.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp …": comm may hold spaces and ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if rest
            .split_whitespace()
            .nth(2)
            .and_then(|g| g.parse::<u32>().ok())
            == Some(pgid)
        {
            members.push(pid);
        }
    }
    members
}

/// The state letter of /proc/PID/stat (R, S, T, Z, …).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Waits until `count` processes of the group `pgid` run `sleep` (their
/// shell has forked them and they have started the program: a signal sent
/// earlier could reach a shell between fork and exec, where it handles
/// signals its own way).
fn wait_for_sleeps(pgid: u32, count: usize) {
    let sleeping = || {
        group_members(pgid)
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "sleep")
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleeping() < count {
        assert!(
            Instant::now() < deadline,
            "group {pgid} never had {count} sleep processes: {:?}",
            group_members(pgid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read_pids(path: &Path) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                if let Ok(pids) = text.split_whitespace().map(str::parse).collect() {
                    return pids;
                }
            }
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read_pid(path: &Path) -> u32 {
    read_pids(path)[0]
}

/// A scratch folder for pid files, removed at the end.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("redlock-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str) -> std::path::PathBuf {
        let path = self.0.join(name);
        let _ = std::fs::remove_file(&path);
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `redlock run KEY --ttl … --kill-after … -- sh -c SCRIPT PIDFILE`, with
/// piped output.
fn spawn_run(
    urls: &str,
    key: &str,
    ttl: &str,
    kill_after: &str,
    script: &str,
    pidfile: &Path,
) -> Child {
    Command::new(BIN)
        .env("REDLOCK_NODES", urls)
        .args([
            "--node-timeout",
            "100ms",
            "run",
            key,
            "--ttl",
            ttl,
            "--kill-after",
            kill_after,
            "--",
            "sh",
            "-c",
            script,
            pidfile.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The lock is lost while the command runs: its whole process group is
/// terminated (SIGTERM, then SIGKILL after --kill-after), exit code 4.
#[test]
fn run_terminates_the_whole_group_when_the_lock_is_lost() {
    let nodes = five();
    let urls = nodes_arg(&nodes);
    let scratch = Scratch::new("lost");

    for (name, script, kill_after) in [
        // Every process exits on SIGTERM.
        (
            "term",
            "echo $$ > \"$0\"; sleep 60 & sleep 60; echo done",
            "5s",
        ),
        // Every process ignores SIGTERM: killed after --kill-after.
        (
            "kill",
            "trap '' TERM; echo $$ > \"$0\"; sh -c 'sleep 60; echo inner' & sleep 60; echo done",
            "300ms",
        ),
    ] {
        let pidfile = scratch.file(name);
        let child = spawn_run(&urls, name, "900ms", kill_after, script, &pidfile);
        let pgid = read_pid(&pidfile);
        wait_for_sleeps(pgid, 2);
        let started = Instant::now();
        let frozen = Frozen::new(&nodes[..3]);
        let out = wait_bounded(child, Duration::from_secs(15));
        drop(frozen);
        assert_eq!(out.status.code(), Some(4), "{name}: {}", stderr(&out));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{name}: took {:?}",
            started.elapsed()
        );
        let err = stderr(&out);
        assert!(err.contains("lost the lock on"), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(
            !stdout(&out).contains("done"),
            "{name}: the command finished"
        );
        assert_eq!(
            group_members(pgid),
            Vec::<u32>::new(),
            "{name}: processes left"
        );
    }
}

/// SIGTERM to `redlock run` (systemd stop, pod shutdown): the group gets
/// SIGTERM; members that ignore it get SIGKILL after --kill-after; `run`
/// exits, and only then is the lock released.
#[test]
fn run_escalates_to_sigkill_when_asked_to_stop() {
    let nodes = five();
    let urls = nodes_arg(&nodes);
    let scratch = Scratch::new("stop");
    let pidfile = scratch.file("pid");
    let script =
        "trap '' TERM; echo $$ > \"$0\"; sh -c 'trap \"\" TERM; sleep 60' & sleep 60; echo done";
    let child = spawn_run(&urls, "stopped", "2s", "700ms", script, &pidfile);
    let pgid = read_pid(&pidfile);
    wait_for_sleeps(pgid, 2);
    let v = json(&redlock(&urls, &["--json", "inspect", "stopped"]));
    assert_eq!(v["held_on"], 5, "{v}");

    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let asked = Instant::now();
    let out = wait_bounded(child, Duration::from_secs(15));
    let took = asked.elapsed();
    // The group leader died of SIGKILL: 128 + 9.
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert!(
        took >= Duration::from_millis(650) && took < Duration::from_secs(5),
        "run exited {took:?} after SIGTERM"
    );
    assert!(!stdout(&out).contains("done"));
    assert_eq!(group_members(pgid), Vec::<u32>::new(), "processes left");
    let v = json(&redlock(&urls, &["--json", "inspect", "stopped"]));
    assert_eq!(v["held_on"], 0, "the lock is still held: {v}");
}

/// A command that exits but leaves a background process in its group:
/// the process is terminated before the lock is released; `run` exits with
/// the command's own status.
#[test]
fn run_terminates_what_the_command_left_behind() {
    let nodes = five();
    let urls = nodes_arg(&nodes);
    let scratch = Scratch::new("left");
    let pidfile = scratch.file("pids");
    let out = wait_bounded(
        spawn_run(
            &urls,
            "left",
            "2s",
            "5s",
            "sleep 60 & echo $$ $! > \"$0\"; exit 3",
            &pidfile,
        ),
        Duration::from_secs(15),
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let pids = read_pids(&pidfile);
    assert!(!alive(pids[1]), "the background sleep still runs");
    assert_eq!(group_members(pids[0]), Vec::<u32>::new());
    let v = json(&redlock(&urls, &["--json", "inspect", "left"]));
    assert_eq!(v["held_on"], 0, "{v}");
}

/// A pseudo-terminal: `redlock run` started as the foreground job of its
/// slave side (a session of its own with the slave as controlling
/// terminal), the test typing on the master side.
struct Pty {
    master: std::fs::File,
    output: std::sync::mpsc::Receiver<u8>,
    seen: String,
}

impl Pty {
    /// Starts `redlock ARGS` on a new pseudo-terminal.
    fn spawn(urls: &str, args: &[&str]) -> (Pty, Child) {
        use std::os::fd::FromRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::process::CommandExt;
        // SAFETY: the pty calls of libc on descriptors owned here; ptsname_r
        // writes into a local buffer of the given size.
        let (master, slave) = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
            assert_eq!(libc::grantpt(fd), 0);
            assert_eq!(libc::unlockpt(fd), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
            let path = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_str()
                .unwrap()
                .to_owned();
            let slave = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open(path)
                .expect("open the pty slave");
            (std::fs::File::from_raw_fd(fd), slave)
        };
        let mut command = Command::new(BIN);
        command
            .env("REDLOCK_NODES", urls)
            .args(args)
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap());
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("start redlock on a pty");
        drop(slave);
        let (tx, output) = std::sync::mpsc::channel();
        let mut reader = master.try_clone().unwrap();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 256];
            // Ends with EIO once every slave descriptor is closed.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if buf[..n].iter().any(|b| tx.send(*b).is_err()) {
                    return;
                }
            }
        });
        (
            Pty {
                master,
                output,
                seen: String::new(),
            },
            child,
        )
    }

    /// Waits at most 10 s for `redlock` to exit; on a timeout, the panic
    /// shows what the terminal showed and the processes' states.
    fn wait(&mut self, child: Child) -> Output {
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut child = child;
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                while let Ok(b) = self.output.try_recv() {
                    self.seen.push(b as char);
                }
                let states: Vec<_> = std::fs::read_dir("/proc")
                    .unwrap()
                    .flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                    .filter(|stat| {
                        stat.rsplit_once(')')
                            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                            == Some(&pid.to_string())
                    })
                    .collect();
                let run_state = process_state(pid);
                let _ = child.kill();
                panic!(
                    "redlock ({run_state:?}) did not exit within 10 s; terminal: {:?}; children: {states:?}",
                    self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.wait_with_output().expect("output")
    }

    fn type_text(&mut self, text: &[u8]) {
        use std::io::Write;
        self.master.write_all(text).expect("write to the pty");
    }

    /// Waits until the terminal has shown `text`.
    fn expect(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.seen.contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(b) => self.seen.push(b as char),
                Err(_) => panic!(
                    "the terminal never showed {text:?}; it showed {:?}",
                    self.seen
                ),
            }
        }
    }
}

/// Interactive use: `run` hands the terminal to the command's group, so the
/// command reads typed input, and Ctrl-C reaches the whole group; the lock
/// is released after.
#[test]
fn run_keeps_the_terminal_usable() {
    let nodes = five();
    let urls = nodes_arg(&nodes);

    let (mut pty, child) = Pty::spawn(
        &urls,
        &[
            "run",
            "tty",
            "--",
            "sh",
            "-c",
            "echo ready; read line; echo \"got:$line\"",
        ],
    );
    pty.expect("ready");
    pty.type_text(b"hello\n");
    pty.expect("got:hello");
    let out = pty.wait(child);
    assert_eq!(out.status.code(), Some(0), "{}", pty.seen);

    // Ctrl-Z stops the command and `run` (so that a shell would get the
    // terminal back); SIGCONT to `run` (what `fg` sends) resumes both.
    let (mut pty, child) = Pty::spawn(
        &urls,
        &[
            "run",
            "tty",
            "--",
            "sh",
            "-c",
            "echo ready; read line; echo \"got:$line\"",
        ],
    );
    pty.expect("ready");
    pty.type_text(b"\x1a");
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_state(child.id()) != Some('T') {
        assert!(Instant::now() < deadline, "Ctrl-Z did not stop run");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
    }
    pty.type_text(b"again\n");
    pty.expect("got:again");
    let out = pty.wait(child);
    assert_eq!(out.status.code(), Some(0), "{}", pty.seen);

    let scratch = Scratch::new("tty");
    let pidfile = scratch.file("pid");
    let (mut pty, child) = Pty::spawn(
        &urls,
        &[
            "run",
            "tty",
            "--kill-after",
            "20s",
            "--",
            "sh",
            "-c",
            "echo $$ > \"$0\"; sleep 60 & sleep 60; echo done",
            pidfile.to_str().unwrap(),
        ],
    );
    let pgid = read_pid(&pidfile);
    wait_for_sleeps(pgid, 2);
    pty.type_text(b"\x03");
    let out = pty.wait(child);
    // The command died of SIGINT, and so does `run` (so that a calling
    // script stops too), after its group is gone, long before --kill-after.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGINT),
        "{:?} {}",
        out.status,
        pty.seen
    );
    assert!(!pty.seen.contains("done"), "{}", pty.seen);
    assert_eq!(group_members(pgid), Vec::<u32>::new(), "processes left");
    let v = json(&redlock(&urls, &["--json", "inspect", "tty"]));
    assert_eq!(v["held_on"], 0, "{v}");
}

/// `--wait` waits for the lock to free, woken by the nodes (`REDLOCK.WAIT`),
/// for `acquire` and for `run`; without it a busy lock is exit code 3.
#[test]
fn wait_is_woken_by_the_nodes() {
    let nodes = five();
    let urls = nodes_arg(&nodes);
    let woken = |nodes: &[redlock_testkit::Node]| -> u64 {
        nodes
            .iter()
            .map(|n| {
                let mut con = n.connection();
                let info: String = redis::cmd("INFO").arg("redlock").query(&mut con).unwrap();
                info.lines()
                    .find_map(|l| l.strip_prefix("redlock_wait_woken:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    };
    // Held for 800 ms by someone who never releases.
    let out = redlock(&urls, &["--json", "acquire", "busy", "--ttl", "800ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first = json(&out)["token"].as_u64().unwrap();
    let started = Instant::now();
    let out = redlock(
        &urls,
        &[
            "--json", "acquire", "busy", "--ttl", "800ms", "--wait", "10s",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(json(&out)["token"].as_u64().unwrap() > first);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert!(
        woken(&nodes) >= 3,
        "acquire --wait did not block in REDLOCK.WAIT"
    );

    // run --wait: runs the command once the lock frees.
    let before = woken(&nodes);
    let out = redlock(
        &urls,
        &[
            "run",
            "busy",
            "--ttl",
            "5s",
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            "echo ran-$REDLOCK_TOKEN",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("ran-"), "{}", stdout(&out));
    assert!(
        woken(&nodes) >= before + 3,
        "run --wait did not block in REDLOCK.WAIT"
    );

    // A short --wait on a held lock: busy after about that long.
    let out = redlock(&urls, &["acquire", "held", "--ttl", "20s"]);
    assert_eq!(out.status.code(), Some(0));
    let started = Instant::now();
    let out = redlock(&urls, &["acquire", "held", "--wait", "300ms"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// Runs `redlock ARGS` with `env` added to the environment, at most 20 s.
fn redlock_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDLOCK_NODES")
        .env_remove("REDLOCK_CLUSTERS");
    for (name, value) in env {
        cmd.env(name, value);
    }
    let child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlock");
    wait_bounded(child, Duration::from_secs(20))
}

/// Cluster members: `--cluster SEEDS` (one member per option) next to
/// `--nodes`, or `REDLOCK_CLUSTERS` (clusters separated by `;`); `inspect`
/// names the shard that holds the key; `--help` documents the syntax.
#[test]
fn cluster_members_by_option_and_environment() {
    let cluster = redlock_testkit::Cluster::builder().shards(3).start();
    let nodes = five();
    let seeds = cluster.seed_urls().join(",");
    let two_nodes = common::urls(&nodes[..2]).join(",");
    let master = cluster.master_for_slot(cluster.slot_of(b"cli:cluster"));

    let out = redlock_env(
        &[],
        &[
            "--nodes",
            &two_nodes,
            "--cluster",
            &seeds,
            "--json",
            "acquire",
            "cli:cluster",
            "--ttl",
            "20s",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let token = v["token"].as_u64().expect("token");
    let owner = v["owner"].as_str().expect("owner").to_string();

    // The same quorum from the environment: REDLOCK_NODES + REDLOCK_CLUSTERS.
    let env = [
        ("REDLOCK_NODES", two_nodes.as_str()),
        ("REDLOCK_CLUSTERS", seeds.as_str()),
    ];
    let out = redlock_env(&env, &["--json", "inspect", "cli:cluster"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["quorum"], 2);
    assert_eq!(v["held_on"], 3, "{v}");
    let members = v["nodes"].as_array().expect("nodes");
    assert_eq!(members.len(), 3);
    assert!(
        members[0].get("shard").is_none(),
        "a node has no shard: {v}"
    );
    let shard = &members[2]["shard"];
    assert_eq!(shard["addr"], format!("127.0.0.1:{}", master.port()), "{v}");
    assert_eq!(shard["node_id"].as_str().map(str::len), Some(40), "{v}");
    assert_eq!(members[2]["token"].as_u64(), Some(token));
    assert!(members[2]["node"]
        .as_str()
        .unwrap()
        .starts_with("cluster(127.0.0.1:"));

    let out = redlock_env(&env, &["inspect", "cli:cluster"]);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("shard 127.0.0.1:{} (node ", master.port())),
        "{text}"
    );

    // Busy through the cluster syntax too, then released by owner.
    let out = redlock_env(&env, &["acquire", "cli:cluster"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = redlock_env(&env, &["release", "cli:cluster", "--owner", &owner]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let fields: Vec<redis::Value> = redis::cmd("REDLOCK.INSPECT")
        .arg("cli:cluster")
        .query(&mut master.connection())
        .expect("INSPECT on the shard");
    let held: i64 = redis::from_redis_value(fields[1].clone()).unwrap();
    assert_eq!(held, 0, "released on the shard that holds the key");

    // Two clusters in one variable are two members; here the same cluster
    // twice, which is one server counted twice: refused.
    let twice = format!("{seeds};{seeds}");
    let out = redlock_env(
        &[
            ("REDLOCK_NODES", two_nodes.as_str()),
            ("REDLOCK_CLUSTERS", &twice),
        ],
        &["inspect", "cli:cluster"],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("same node"), "{}", stderr(&out));

    let help = stdout(&redlock_env(&[], &["--help"]));
    assert!(help.contains("--cluster <SEEDS>"), "{help}");
    assert!(help.contains("REDLOCK_CLUSTERS"), "{help}");
}

/// `--sentinel NAME@host:port,…` (and `REDLOCK_SENTINELS`): a lock through
/// a Sentinel group with the replica-sync check, the master found through
/// the sentinels.
#[test]
fn sentinel_members_from_the_command_line() {
    let group = redlock_testkit::SentinelGroup::builder()
        .node(redlock_testkit::Node::builder().config("redlock.sync-replicas", "2"))
        .start();
    let spec = format!(
        "{}@{}",
        group.name(),
        group
            .sentinels()
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let out = redlock(
        "",
        &[
            "--sentinel",
            &spec,
            "--json",
            "acquire",
            "job",
            "--ttl",
            "20s",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let owner = v["owner"].as_str().expect("owner").to_string();
    // Every replica has the grant: the check waited for both.
    for i in 0..3 {
        let held: Vec<redis::Value> = redis::cmd("REDLOCK.INSPECT")
            .arg("job")
            .query(&mut group.connection(i))
            .unwrap();
        assert_eq!(held[1], redis::Value::Int(1), "node {i}");
    }
    let child = Command::new(BIN)
        .env_remove("REDLOCK_NODES")
        .env("REDLOCK_SENTINELS", &spec)
        .args(["release", "job", "--owner", &owner])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = redlock("", &["--sentinel", "no-at-sign", "inspect", "job"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("NAME@host:port"), "{}", stderr(&out));
}
