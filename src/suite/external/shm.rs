//! Shared memory a benchmark left behind. Python benchmarks keep their data batches in
//! POSIX shared memory (`/dev/shm/NAME`) and semaphores (`/dev/shm/sem.NAME`); a run
//! stopped before it cleans up leaves them there, several GB of RAM until the next
//! start. What a run's processes made is told apart by name, owner and time: an entry
//! that was not there when the run started, belongs to the run's user, was changed
//! after the start, and no live process holds open or mapped.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where POSIX shared memory and named semaphores live.
pub const SHM_DIR: &str = "/dev/shm";

/// The entries of the shared-memory folder when a run started.
#[derive(Debug)]
pub struct ShmSweep {
    dir: PathBuf,
    before: HashSet<OsString>,
    started: SystemTime,
    uid: u32,
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
            // The file system stamps times from a coarse clock that may lag this one.
            started: SystemTime::now() - std::time::Duration::from_secs(1),
            uid: nix::unistd::geteuid().as_raw(),
        }
    }

    /// Removes what the run left: new regular files of this user, changed since the
    /// start, that no process holds.
    pub fn sweep(&self) -> Vec<Leftover> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let candidates: Vec<(PathBuf, u64)> = entries
            .filter_map(Result::ok)
            .filter(|e| !self.before.contains(&e.file_name()))
            .filter_map(|e| {
                let meta = std::fs::symlink_metadata(e.path()).ok()?;
                let changed = meta.modified().ok()?;
                (meta.file_type().is_file() && meta.uid() == self.uid && changed >= self.started)
                    .then(|| (e.path(), meta.len()))
            })
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        let held = held_paths();
        candidates
            .into_iter()
            .filter(|(path, _)| !held.contains(path))
            .map(|(path, bytes)| {
                let error = std::fs::remove_file(&path).err().map(|e| e.to_string());
                Leftover { path, bytes, error }
            })
            .collect()
    }
}

/// Every path a live process has open or mapped, from `/proc`.
fn held_paths() -> HashSet<PathBuf> {
    let mut held = HashSet::new();
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return held;
    };
    for process in processes.filter_map(Result::ok) {
        let dir = process.path();
        if !process
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        if let Ok(fds) = std::fs::read_dir(dir.join("fd")) {
            held.extend(
                fds.filter_map(Result::ok)
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok()),
            );
        }
        if let Ok(maps) = std::fs::read_to_string(dir.join("maps")) {
            held.extend(
                maps.lines()
                    .filter_map(|l| l.split_whitespace().nth(5))
                    .filter(|p| p.starts_with('/'))
                    .map(PathBuf::from),
            );
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn only_what_appeared_since_the_start_and_nobody_holds_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("old-segment"), b"kept").unwrap();
        let sweep = ShmSweep::start(dir.path());
        fs::write(dir.path().join("resnet_batch"), vec![0u8; 4096]).unwrap();
        fs::write(dir.path().join("sem.mp-abc"), b"x").unwrap();
        let held = dir.path().join("held");
        fs::write(&held, b"open").unwrap();
        let _open = fs::File::open(&held).unwrap();
        fs::create_dir(dir.path().join("a-folder")).unwrap();
        let mut removed = sweep.sweep();
        removed.sort_by(|a, b| a.path.cmp(&b.path));
        let names: Vec<String> = removed
            .iter()
            .map(|l| l.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["resnet_batch", "sem.mp-abc"]);
        assert_eq!(removed[0].bytes, 4096);
        assert!(removed.iter().all(|l| l.error.is_none()));
        assert!(dir.path().join("old-segment").exists());
        assert!(held.exists());
        assert!(dir.path().join("a-folder").exists());
    }
}
