//! `redlock elect NAME -- CMD …` (run a command while this host leads) and
//! `redlock leader NAME` (who leads now).

use std::time::Duration;

use redlock_client::{Leader, Leadership, Redlock};
use serde_json::json;

use super::{job, status_code, Out, StopSignals, EXIT_LOST, EXIT_NOT_HELD, GROUP_POLL};

/// How one term of `elect` ended.
enum TermEnd {
    /// The command exited (its group is gone).
    Exited(std::process::ExitStatus),
    /// Leadership was lost; the command's group was terminated.
    Lost,
    /// A stop signal arrived; it was passed on and the group is gone.
    Stopped(std::process::ExitStatus),
    /// The command could not be started.
    NotStarted(std::io::Error),
    /// Waiting for the command failed.
    WaitFailed(std::io::Error),
}

/// `redlock elect`: campaigns for `name`, runs `argv` while leading (the
/// epoch in REDLOCK_EPOCH and REDLOCK_TOKEN, the name in REDLOCK_ELECTION
/// and REDLOCK_KEY), terminates its process group when leadership is lost,
/// resigns when it ends, and campaigns again when `again`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn elect(
    redlock: &Redlock,
    out: Out,
    name: &str,
    ttl: Duration,
    again: bool,
    value: Option<&str>,
    kill_after: Duration,
    argv: &[String],
) -> u8 {
    let Some((program, args)) = argv.split_first() else {
        return out.fail(
            "invalid_argument",
            "no command given after --",
            super::EXIT_USAGE,
        );
    };
    let election = redlock.election(name);
    let mut stop_signals = StopSignals::install();
    job::adopt_orphans();
    loop {
        let leadership = tokio::select! {
            result = election.campaign(ttl) => match result {
                Ok(leadership) => leadership,
                Err(e) => return out.error(&e),
            },
            sig = stop_signals.next() => return (128 + sig) as u8,
        };
        if let Some(value) = value {
            if let Err(e) = leadership.proclaim(value).await {
                leadership.resign().await;
                return out.error(&e);
            }
        }
        if out.json {
            eprintln!(
                "{}",
                json!({ "elected": name, "epoch": leadership.epoch() })
            );
        } else {
            eprintln!(
                "redlock: leading {name:?} with epoch {}",
                leadership.epoch()
            );
        }
        let end = lead(
            &leadership,
            name,
            program,
            args,
            kill_after,
            &mut stop_signals,
        )
        .await;
        leadership.resign().await;
        let code = match end {
            TermEnd::Exited(status) => status_code(status),
            TermEnd::Stopped(status) => return status_code(status),
            TermEnd::NotStarted(e) => {
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                return out.fail("not_started", &format!("cannot run {program:?}: {e}"), code);
            }
            TermEnd::WaitFailed(e) => {
                return out.fail(
                    "error",
                    &format!("lost track of the command: {e}"),
                    super::EXIT_ERROR,
                )
            }
            TermEnd::Lost => out.fail(
                "lost",
                &format!("lost the leadership of {name:?} (a renewal failed to reach a quorum); the command was terminated"),
                EXIT_LOST,
            ),
        };
        if !again {
            return code;
        }
    }
}

/// Runs the command in a process group of its own while `leadership`
/// lasts: SIGTERM to the group on loss or when the command exited and left
/// processes behind, a stop signal passed on, SIGKILL `kill_after` later.
async fn lead(
    leadership: &Leadership,
    name: &str,
    program: &str,
    args: &[String],
    kill_after: Duration,
    stop_signals: &mut StopSignals,
) -> TermEnd {
    let epoch = leadership.epoch().to_string();
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("REDLOCK_EPOCH", &epoch)
        .env("REDLOCK_TOKEN", &epoch)
        .env("REDLOCK_ELECTION", name)
        .env("REDLOCK_KEY", name)
        .kill_on_drop(true);
    let (mut child, group) = match job::spawn(&mut command, None) {
        Ok(started) => started,
        Err(e) => return TermEnd::NotStarted(e),
    };
    let mut status: Option<std::io::Result<std::process::ExitStatus>> = None;
    let (mut lost, mut stopped) = (false, false);
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    let stop = |sig: libc::c_int, kill_at: &mut Option<tokio::time::Instant>| {
        group.signal(sig);
        kill_at.get_or_insert_with(|| tokio::time::Instant::now() + kill_after);
    };
    loop {
        if status.is_some() {
            if group.is_gone() {
                break;
            }
            if kill_at.is_none() {
                stop(libc::SIGTERM, &mut kill_at);
            }
        }
        let escalate = kill_at.filter(|_| !killed);
        tokio::select! {
            s = child.wait(), if status.is_none() => status = Some(s),
            _ = leadership.lost(), if !lost => {
                lost = true;
                stop(libc::SIGTERM, &mut kill_at);
            }
            sig = stop_signals.next() => {
                stopped = true;
                stop(sig, &mut kill_at);
            }
            _ = tokio::time::sleep_until(escalate.unwrap_or_else(tokio::time::Instant::now)), if escalate.is_some() => {
                group.signal(libc::SIGKILL);
                killed = true;
            }
            _ = tokio::time::sleep(GROUP_POLL), if status.is_some() => {}
        }
    }
    match status {
        _ if lost => TermEnd::Lost,
        Some(Ok(s)) if stopped => TermEnd::Stopped(s),
        Some(Ok(s)) => TermEnd::Exited(s),
        Some(Err(e)) => TermEnd::WaitFailed(e),
        None => TermEnd::WaitFailed(std::io::Error::other("no exit status")),
    }
}

/// One leader as JSON.
fn leader_json(name: &str, leader: Option<&Leader>) -> serde_json::Value {
    match leader {
        None => json!({ "election": name, "leader": null }),
        Some(l) => json!({
            "election": name,
            "leader": {
                "epoch": l.epoch,
                "time_left_ms": l.time_left.as_millis() as u64,
                "value": l.value,
                "revision": l.revision,
            }
        }),
    }
}

fn print_leader(out: Out, name: &str, leader: Option<&Leader>) {
    if out.json {
        println!("{}", leader_json(name, leader));
        return;
    }
    match leader {
        None => println!("{name}: nobody leads"),
        Some(l) => println!(
            "{name}: epoch {} for {} ms{}",
            l.epoch,
            l.time_left.as_millis(),
            l.value
                .as_deref()
                .map_or(String::new(), |v| format!(", value {v}"))
        ),
    }
}

/// `redlock leader NAME [--watch]`: the current leader (exit code 5 when
/// nobody leads), or every change as it happens with `--watch`.
pub(crate) async fn leader(redlock: &Redlock, out: Out, name: &str, watch: bool) -> u8 {
    let election = redlock.election(name);
    if !watch {
        return match election.leader().await {
            Ok(leader) => {
                print_leader(out, name, leader.as_ref());
                if leader.is_some() {
                    super::EXIT_OK
                } else {
                    EXIT_NOT_HELD
                }
            }
            Err(e) => out.error(&e),
        };
    }
    let mut changes = election.observe();
    let mut stop_signals = StopSignals::install();
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(leader)) => print_leader(out, name, Some(&leader)),
                Some(Err(e)) => tracing::debug!(%e, "a read reached too few nodes"),
                None => return super::EXIT_OK,
            },
            _ = stop_signals.next() => return super::EXIT_OK,
        }
    }
}
