//! A worker's session: every process it starts, however deep, outside the reach of
//! one process group.
//!
//! A worker is started as the leader of a session of its own. What it runs may make
//! process groups of its own (an external benchmark does, so that cancelling it reaches
//! its children), and those survive a `killpg` of the worker's group; none leaves the
//! session without calling `setsid` itself. So once a worker is gone, whatever is left
//! in its session is killed, found through `/proc`.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Rounds of scanning: a process forked between a scan and the kill is found by the
/// next, and one that is SIGKILLed forks no more.
const ROUNDS: usize = 8;

/// Sends SIGKILL to every process in session `sid` until a scan finds none (or after
/// a few rounds); returns how many were signalled.
pub fn kill_session(sid: i32) -> usize {
    let mut killed = 0;
    for _ in 0..ROUNDS {
        let members = members(sid);
        if members.is_empty() {
            break;
        }
        for pid in members {
            // ESRCH: it ended between the scan and now.
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

/// The live (not zombie) processes whose session is `sid`.
fn members(sid: i32) -> Vec<i32> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.filter_map(Result::ok)
        .filter_map(|process| process.stat().ok())
        .filter(|stat| stat.session == sid && stat.state != 'Z')
        .map(|stat| stat.pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use super::*;

    fn alive(pid: i32) -> bool {
        procfs::process::Process::new(pid)
            .and_then(|p| p.stat())
            .is_ok_and(|stat| stat.state != 'Z')
    }

    #[test]
    fn processes_in_other_groups_of_the_session_are_killed() {
        // A session leader that starts a child in a process group of its own, as an
        // external benchmark does, then exits: the child is the session's only member.
        let mut leader = Command::new("sh");
        leader
            .args([
                "-c",
                "perl -e 'setpgrp(0, 0); exec q(sleep), 300' >/dev/null & echo $!",
            ])
            .stdout(Stdio::piped());
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            leader.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let mut leader = leader.spawn().unwrap();
        let sid = leader.id() as i32;
        let output = std::io::read_to_string(leader.stdout.take().unwrap()).unwrap();
        leader.wait().unwrap();
        let child: i32 = output.trim().parse().unwrap();
        // Its own group, so killing the leader's group would miss it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while nix::unistd::getpgid(Some(Pid::from_raw(child))) != Ok(Pid::from_raw(child)) {
            assert!(
                Instant::now() < deadline,
                "the child never made its own group"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(alive(child));
        assert_eq!(members(sid), vec![child]);
        assert!(kill_session(sid) >= 1);
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(child) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(child), "{child} outlived the kill of its session");
        assert!(members(sid).is_empty());
    }

    #[test]
    fn a_session_with_no_processes_is_left_alone() {
        // No pid reaches i32::MAX (pid_max is at most 2^22).
        assert_eq!(kill_session(i32::MAX), 0);
    }
}
