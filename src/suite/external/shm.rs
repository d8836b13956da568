//! Shared memory a benchmark left behind. Python benchmarks keep their data batches in
//! POSIX shared memory (`/dev/shm/NAME`) and semaphores (`/dev/shm/sem.NAME`); a run
//! stopped before it cleans up leaves them there, several GB of RAM until the next
//! start. What the run made is told apart by who held it: while the run goes, the
//! entries its process group holds open or mapped are noted (those that were not there
//! when it started); at the end, those still there that no live process holds are
//! removed. Another program's segment is never touched, whoever owns it.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where POSIX shared memory and named semaphores live.
pub const SHM_DIR: &str = "/dev/shm";

/// What the run's processes held in the shared-memory folder.
#[derive(Debug)]
pub struct ShmSweep {
    dir: PathBuf,
    before: HashSet<OsString>,
    seen: HashSet<PathBuf>,
}

/// One entry removed, or one that could not be.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    /// The entry's path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Why it could not be removed; `None` when it was.
    pub error: Option<String>,
}

impl ShmSweep {
    /// Notes what `dir` holds now, before the run's command starts.
    pub fn start(dir: &Path) -> ShmSweep {
        let before = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name())
                    .collect()
            })
            .unwrap_or_default();
        ShmSweep {
            dir: dir.to_path_buf(),
            before,
            seen: HashSet::new(),
        }
    }

    /// Notes the new entries the processes of group `pgid` hold now.
    pub fn observe(&mut self, pgid: i32) {
        for process in processes() {
            if group_of(&process) != Some(pgid) {
                continue;
            }
            for path in held_by(&process) {
                let new = path.parent() == Some(self.dir.as_path())
                    && path
                        .file_name()
                        .is_some_and(|name| !self.before.contains(name));
                if new {
                    self.seen.insert(path);
                }
            }
        }
    }

    /// Removes the entries the run held that are still there and no process holds.
    pub fn sweep(&self) -> Vec<Leftover> {
        let left: Vec<(PathBuf, u64)> = self
            .seen
            .iter()
            .filter_map(|path| {
                let meta = std::fs::symlink_metadata(path).ok()?;
                meta.file_type()
                    .is_file()
                    .then(|| (path.clone(), meta.len()))
            })
            .collect();
        if left.is_empty() {
            return Vec::new();
        }
        let held: HashSet<PathBuf> = processes().iter().flat_map(|p| held_by(p)).collect();
        let mut removed: Vec<Leftover> = left
            .into_iter()
            .filter(|(path, _)| !held.contains(path))
            .map(|(path, bytes)| {
                let error = std::fs::remove_file(&path).err().map(|e| e.to_string());
                Leftover { path, bytes, error }
            })
            .collect();
        removed.sort_by(|a, b| a.path.cmp(&b.path));
        removed
    }
}

/// Every live process's `/proc` folder.
fn processes() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect()
}

/// The process group of a process, from its `stat` (the fifth field; the name before
/// it is in parentheses and may hold spaces).
fn group_of(process: &Path) -> Option<i32> {
    let stat = std::fs::read_to_string(process.join("stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// The files a process has open or mapped.
fn held_by(process: &Path) -> Vec<PathBuf> {
    let mut held = Vec::new();
    if let Ok(fds) = std::fs::read_dir(process.join("fd")) {
        held.extend(
            fds.filter_map(Result::ok)
                .filter_map(|fd| std::fs::read_link(fd.path()).ok()),
        );
    }
    if let Ok(maps) = std::fs::read_to_string(process.join("maps")) {
        held.extend(
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .filter(|p| p.starts_with('/'))
                .map(PathBuf::from),
        );
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn only_what_the_group_held_and_nobody_holds_now_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let held_before = dir.path().join("held-before");
        fs::write(&held_before, b"kept").unwrap();
        let mut sweep = ShmSweep::start(dir.path());
        // Made during the run but by another program, never held by the group.
        fs::write(dir.path().join("someone-else"), b"kept").unwrap();
        let ready = dir.path().join("ready");
        let script = format!(
            "exec 3>{d}/resnet_batch 4>{d}/sem.mp-abc 5>>{d}/held-before; head -c 4096 /dev/zero >&3; \
             : > {d}/ready; sleep 30",
            d = dir.path().display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !ready.exists() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        sweep.observe(child.id() as i32);
        // Held still: nothing goes.
        assert!(sweep.sweep().is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let mut removed = Vec::new();
        while Instant::now() < until {
            removed = sweep.sweep();
            if removed.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let names: Vec<String> = removed
            .iter()
            .map(|l| l.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["resnet_batch", "sem.mp-abc"]);
        assert_eq!(removed[0].bytes, 4096);
        assert!(removed.iter().all(|l| l.error.is_none()));
        assert!(held_before.exists());
        assert!(dir.path().join("someone-else").exists());
    }
}
