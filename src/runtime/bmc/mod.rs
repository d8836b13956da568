//! The box's BMC (baseboard management controller), read through `ipmitool` on the in-band
//! interface: its system event log ([`sel`]), its fan and power supply sensors ([`sensors`])
//! and who it is ([`identity`]).
//!
//! Every call is bounded: a BMC that hangs is killed after [`timeout`], and what it prints is
//! read up to [`MAX_OUTPUT`] bytes. A box without a BMC, or without `ipmitool`, is a finding
//! for the caller to report, never a panic.

pub mod identity;
pub mod sel;
pub mod sensors;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `ipmitool` call may take unless `$TINYPERF_BMC_TIMEOUT_S` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of its standard output (and, apart, of its standard error) that is kept.
pub const MAX_OUTPUT: usize = 4 << 20;

/// Why the BMC could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    /// Neither `$TINYPERF_IPMITOOL` nor `ipmitool` on the PATH.
    #[error("no BMC: ipmitool not found")]
    NoIpmitool,
    /// The program could not be started.
    #[error("no BMC: cannot run {program}: {source}")]
    Spawn {
        /// The program that was tried.
        program: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// The program ran past the timeout and was killed.
    #[error("no BMC answered: ipmitool {command} gave no answer within {seconds} s")]
    TimedOut {
        /// The subcommand asked (`sel elist`).
        command: String,
        /// The timeout, in seconds.
        seconds: u64,
    },
    /// The program ended with a failure; `line` is the first line of what it said.
    #[error("no BMC answered: {line}")]
    Failed {
        /// The subcommand asked (`sel elist`).
        command: String,
        /// The first line of its standard error (its exit status when it said nothing).
        line: String,
    },
}

impl BmcError {
    /// Whether the BMC was there but hung: worth a warning, where a box without one is not.
    pub fn is_timeout(&self) -> bool {
        matches!(self, BmcError::TimedOut { .. })
    }
}

/// The program that asks the BMC (see [`crate::runtime::power::ipmi::find_ipmitool`]).
pub fn locate() -> Result<PathBuf, BmcError> {
    crate::runtime::power::ipmi::find_ipmitool().ok_or(BmcError::NoIpmitool)
}

/// The timeout of one call: `$TINYPERF_BMC_TIMEOUT_S` seconds when set to a positive number,
/// else [`DEFAULT_TIMEOUT`].
pub fn timeout() -> Duration {
    std::env::var("TINYPERF_BMC_TIMEOUT_S")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 86_400.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// Runs `ipmitool args…` and returns its standard output, read up to [`MAX_OUTPUT`] bytes.
/// The program runs in a process group of its own so that a timeout kills whatever it
/// started as well; a child left holding the pipes would otherwise keep the read waiting.
pub fn run(ipmitool: &Path, args: &[&str]) -> Result<String, BmcError> {
    run_with_timeout(ipmitool, args, timeout())
}

/// [`run`] with an explicit timeout.
pub fn run_with_timeout(
    ipmitool: &Path,
    args: &[&str],
    limit: Duration,
) -> Result<String, BmcError> {
    let command = args.join(" ");
    let mut child = Command::new(ipmitool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| BmcError::Spawn {
            program: ipmitool.display().to_string(),
            source,
        })?;
    let stdout = child.stdout.take().map(bounded_reader);
    let stderr = child.stderr.take().map(bounded_reader);
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let Some(status) = status else {
        kill_group(&mut child);
        // The readers end once the group is gone and the pipes close.
        let _ = stdout.map(|h| h.join());
        let _ = stderr.map(|h| h.join());
        return Err(BmcError::TimedOut {
            command,
            seconds: limit.as_secs_f64().round() as u64,
        });
    };
    let out = stdout.and_then(|h| h.join().ok()).unwrap_or_default();
    let err = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    if !status.success() {
        let line = String::from_utf8_lossy(&err)
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("ipmitool {command} failed ({status})"));
        return Err(BmcError::Failed { command, line });
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Reads a pipe to its end on a thread, keeping the first [`MAX_OUTPUT`] bytes and
/// discarding the rest, so a chatty program never blocks on a full pipe nor fills memory.
fn bounded_reader<R: Read + Send + 'static>(mut pipe: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut pipe).take(MAX_OUTPUT as u64).read_to_end(&mut kept);
        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        kept
    })
}

fn kill_group(child: &mut std::process::Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals the process group the child leads;
        // it touches no memory of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("ipmitool");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_hung_program_and_its_children_are_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(dir.path(), "sleep 30 &\nsleep 30");
        let started = Instant::now();
        let err =
            run_with_timeout(&program, &["sel", "elist"], Duration::from_millis(300)).unwrap_err();
        assert!(err.is_timeout(), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(err.to_string().contains("sel elist"), "{err}");
    }

    #[test]
    fn a_failure_names_the_first_line_it_printed() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(
            dir.path(),
            "echo '' >&2\necho 'Could not open device at /dev/ipmi0' >&2\necho more >&2\nexit 1",
        );
        let err = run(&program, &["mc", "info"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no BMC answered: Could not open device at /dev/ipmi0"
        );
    }

    #[test]
    fn output_past_the_bound_is_dropped_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(dir.path(), "head -c 6000000 /dev/zero");
        let out = run(&program, &["sel", "elist"]).unwrap();
        assert_eq!(out.len(), MAX_OUTPUT);
    }

    #[test]
    fn a_missing_program_is_a_finding() {
        let err = run(Path::new("/nonexistent/ipmitool"), &["mc", "info"]).unwrap_err();
        assert!(err.to_string().starts_with("no BMC: cannot run"), "{err}");
    }
}
