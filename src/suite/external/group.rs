//! Stopping the benchmark's process group however the run ends: SIGINT first (Python
//! benchmarks clean up their shared memory and workers on it), then SIGTERM, then
//! SIGKILL, each step ending early once no process of the group is left.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, signal, SigHandler, Signal};
use nix::unistd::Pid;

/// How long the group has after SIGINT, and again after SIGTERM, before the next
/// signal. Both together stay well inside the agent's grace for the worker itself.
pub const STEP_GRACE: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(50);

/// Makes `command` start a process group of its own, so that [`stop`] reaches every
/// process it starts, with SIGINT and SIGTERM acted on. A launcher without job control
/// (a `&` in a script, `nohup`) leaves SIGINT ignored, and an ignored signal stays
/// ignored across exec: the benchmark would never see the signal it cleans up on.
pub fn own_group(command: &mut Command) -> &mut Command {
    command.process_group(0);
    // SAFETY: between fork and exec only sigaction is called, which is
    // async-signal-safe; no memory is allocated and no lock is taken.
    unsafe {
        command.pre_exec(|| {
            for sig in [Signal::SIGINT, Signal::SIGTERM] {
                signal(sig, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            Ok(())
        })
    }
}

/// Signals the group of `leader` (started with its own process group) until none of
/// it is left; returns the signal that ended it, `None` when nothing was left to stop.
/// The leader is reaped.
pub fn stop(leader: &mut Child) -> Option<Signal> {
    let pgid = Pid::from_raw(leader.id() as i32);
    let mut leader_done = matches!(leader.try_wait(), Ok(Some(_)));
    if leader_done && !alive(pgid) {
        return None;
    }
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        let _ = killpg(pgid, signal);
        let until = Instant::now() + STEP_GRACE;
        while Instant::now() < until {
            leader_done = leader_done || matches!(leader.try_wait(), Ok(Some(_)));
            if leader_done && !alive(pgid) {
                return Some(signal);
            }
            std::thread::sleep(POLL);
        }
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    let _ = leader.wait();
    Some(Signal::SIGKILL)
}

/// Whether any process is left in the group.
fn alive(pgid: Pid) -> bool {
    killpg(pgid, None).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn group(script: &str) -> Child {
        let mut command = Command::new("sh");
        command.args(["-c", script]).stdout(Stdio::null());
        own_group(&mut command).spawn().unwrap()
    }

    #[test]
    fn sigint_reaches_a_group_started_where_it_was_ignored() {
        // SAFETY: the test process ignores SIGINT for a moment, as a shell's `&` would
        // have it; nothing else in this process handles SIGINT.
        let before = unsafe { signal(Signal::SIGINT, SigHandler::SigIgn) }.unwrap();
        let mut child = group("sleep 30");
        unsafe { signal(Signal::SIGINT, before) }.unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(stop(&mut child), Some(Signal::SIGINT));
    }

    #[test]
    fn a_group_that_obeys_sigint_ends_there() {
        let mut child = group("sleep 30");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(stop(&mut child), Some(Signal::SIGINT));
    }

    #[test]
    fn a_group_that_ignores_sigint_and_sigterm_is_killed() {
        let mut child = group("trap '' INT TERM; while :; do sleep 0.05; done");
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        assert_eq!(stop(&mut child), Some(Signal::SIGKILL));
        assert!(started.elapsed() >= STEP_GRACE * 2);
        // The killed children are reaped by whoever adopted them, a moment later.
        let pgid = Pid::from_raw(child.id() as i32);
        let until = Instant::now() + Duration::from_secs(5);
        while alive(pgid) && Instant::now() < until {
            std::thread::sleep(POLL);
        }
        assert!(!alive(pgid));
    }

    #[test]
    fn nothing_left_means_nothing_to_stop() {
        let mut child = group("true");
        child.wait().unwrap();
        assert_eq!(stop(&mut child), None);
    }
}
