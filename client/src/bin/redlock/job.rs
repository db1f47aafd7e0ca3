//! The command under `redlock run`: started in a process group of its own
//! (as GNU `timeout` does), signalled and waited for as a whole group, and
//! given the terminal when `redlock` is the terminal's foreground job.
//!
//! Everything here is Unix process control through `libc`; the policy (when
//! to stop, when to escalate) is in `redlock.rs`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// The process group the command runs in: the command itself (the group
/// leader) and every process it started that stayed in the group.
#[derive(Clone, Copy, Debug)]
pub struct ProcessGroup {
    pgid: libc::pid_t,
}

impl ProcessGroup {
    /// Sends `sig` to every process of the group.
    pub fn signal(self, sig: libc::c_int) {
        // SAFETY: kill(2) on a process group we created; no memory involved.
        unsafe {
            libc::kill(-self.pgid, sig);
        }
    }

    /// Whether no process of the group is left.
    ///
    /// Call only after the group leader (the command) has been reaped: this
    /// reaps the group's members that were adopted by `redlock` (see
    /// [`adopt_orphans`]), which would otherwise stay as zombies and keep
    /// the group alive.
    pub fn is_gone(self) -> bool {
        loop {
            // SAFETY: waitpid(2) without a status pointer; WNOHANG never blocks.
            let reaped = unsafe { libc::waitpid(-self.pgid, std::ptr::null_mut(), libc::WNOHANG) };
            if reaped <= 0 {
                break;
            }
        }
        // SAFETY: signal 0 only checks whether the group has a member.
        let alive = unsafe { libc::kill(-self.pgid, 0) } == 0;
        !alive && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
}

/// Makes `redlock` the reaper of orphaned descendants (Linux
/// `PR_SET_CHILD_SUBREAPER`): a process of the command's group whose parent
/// exits is re-parented to `redlock` instead of to PID 1, so that
/// [`ProcessGroup::is_gone`] can reap it and see the group empty even where
/// PID 1 does not reap zombies (containers).
pub fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// The controlling terminal, while `redlock` is its foreground job.
///
/// The command runs in a group of its own, so it would be a background job
/// of the terminal: its reads would stop it with SIGTTIN, and Ctrl-C would
/// reach `redlock` only. The terminal is therefore handed to the command's
/// group (as a shell does for a job) and taken back when the group is gone;
/// Ctrl-C, Ctrl-\ and Ctrl-Z then reach the command's whole group.
pub struct Terminal {
    tty: File,
    own_group: libc::pid_t,
}

impl Terminal {
    /// The controlling terminal, if there is one and `redlock`'s process
    /// group is in its foreground (not for `redlock … &`, not without a
    /// terminal).
    pub fn foreground() -> Option<Terminal> {
        let tty = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open("/dev/tty")
            .ok()?;
        // SAFETY: getpgrp(2) and tcgetpgrp(3) on an open descriptor.
        let (own_group, foreground) =
            unsafe { (libc::getpgrp(), libc::tcgetpgrp(tty.as_raw_fd())) };
        (foreground == own_group).then_some(Terminal { tty, own_group })
    }

    /// The terminal's descriptor (close-on-exec: the command does not
    /// inherit it).
    pub fn fd(&self) -> RawFd {
        self.tty.as_raw_fd()
    }

    /// Whether `redlock`'s own group is the foreground group (after `fg`;
    /// not after `bg`).
    pub fn owned(&self) -> bool {
        // SAFETY: tcgetpgrp(3) on an open descriptor.
        unsafe { libc::tcgetpgrp(self.fd()) == self.own_group }
    }

    /// Puts `redlock`'s own group back in the foreground.
    pub fn take_back(&self) {
        set_foreground(self.fd(), self.own_group);
    }

    /// Puts `group` in the foreground.
    pub fn give_to(&self, group: ProcessGroup) {
        set_foreground(self.fd(), group.pgid);
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.take_back();
    }
}

/// `tcsetpgrp` with SIGTTOU blocked in the calling thread: a process of a
/// background group may then change the foreground group (instead of being
/// stopped). Only async-signal-safe calls: it also runs in the child between
/// fork and exec. Returns tcsetpgrp's result.
fn set_foreground(fd: RawFd, pgid: libc::pid_t) -> libc::c_int {
    // SAFETY: sigset operations on local values, tcsetpgrp(3) on an open
    // descriptor; the previous mask is restored before returning.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut previous);
        let result = libc::tcsetpgrp(fd, pgid);
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        result
    }
}

/// Starts `command` as the leader of a new process group; with a
/// `terminal`, the new group becomes the terminal's foreground group before
/// the program starts (so that it can read from the terminal at once).
pub fn spawn(
    command: &mut tokio::process::Command,
    terminal: Option<&Terminal>,
) -> io::Result<(tokio::process::Child, ProcessGroup)> {
    command.process_group(0);
    if let Some(terminal) = terminal {
        let fd = terminal.fd();
        // SAFETY: the closure runs between fork and exec and only makes
        // async-signal-safe calls (getpid, sigprocmask, tcsetpgrp).
        unsafe {
            command.pre_exec(move || {
                // Best effort: without the terminal the command still runs,
                // as a background job of it.
                set_foreground(fd, libc::getpid());
                Ok(())
            });
        }
    }
    let child = command.spawn()?;
    let pgid = child
        .id()
        .ok_or_else(|| io::Error::other("the command exited before its pid was known"))?
        as libc::pid_t;
    Ok((child, ProcessGroup { pgid }))
}

/// Whether the group leader `pid` is stopped (Ctrl-Z, SIGSTOP); consumes
/// the stop notification. Its exit is left to tokio's reaper.
pub fn leader_stopped(pid: u32) -> bool {
    // SAFETY: waitid(2) with a zeroed siginfo that it fills in; WNOHANG
    // never blocks and WSTOPPED without WEXITED never reaps.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WSTOPPED | libc::WNOHANG,
        );
        r == 0 && info.si_pid() != 0
    }
}

/// Stops `redlock` itself (SIGSTOP), as a shell job is stopped; returns
/// once it is continued (`fg`, `bg`, SIGCONT).
pub fn stop_self() {
    // SAFETY: raise(3) with a valid signal.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}
