//! A control group (cgroup v2) per run, below the agent's own: every process a worker
//! starts stays in it, however it detaches (a new session, a double fork), so the run
//! is ended by killing the group as a whole (`cgroup.kill`). Groups left by an agent
//! that was killed itself are found by name at the next start and killed then.
//!
//! Where the agent may not make groups (a read-only or foreign hierarchy, cgroup v1
//! only, no permission), it falls back to [`super::session`] and says so at start.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The prefix of a run's group name; what follows is the run id.
const GROUP_PREFIX: &str = "tinyperf-run-";

/// How long a kill waits for the group to empty before it gives up on removing it.
const EMPTY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the agent cannot keep runs in groups of their own, or end one.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// cgroup v1 only, or no cgroup filesystem at all.
    #[error("no cgroup v2 hierarchy is mounted")]
    NoUnifiedHierarchy,
    /// A file of procfs that says where the process is.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The process is in no group of the unified hierarchy.
    #[error("{0} has no cgroup v2 entry")]
    NoOwnGroup(String),
    /// The agent's own group is read-only to it, or missing.
    #[error("the agent's cgroup {path} is not writable ({source}); on the box the unit delegates it (Delegate=yes)")]
    NotWritable {
        /// The group's folder.
        path: PathBuf,
        /// Why.
        source: nix::Error,
    },
    /// The run's group could not be made.
    #[error("cannot make the run's cgroup {path}: {source}")]
    Create {
        /// The group's folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The kill could not be asked for.
    #[error("cannot kill the processes of cgroup {path}: {source}")]
    Kill {
        /// The group's folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Processes were killed but the group did not empty in time.
    #[error("cgroup {path} still holds processes {timeout:?} after they were killed")]
    StillPopulated {
        /// The group's folder.
        path: PathBuf,
        /// How long the kill waited.
        timeout: Duration,
    },
}

/// The agent's own cgroup, under which each run gets a group of its own.
#[derive(Debug, Clone)]
pub struct RunCgroups {
    parent: PathBuf,
}

impl RunCgroups {
    /// The agent's own group in the unified hierarchy, if it may make groups below it.
    pub fn of_this_process() -> Result<RunCgroups, CgroupError> {
        let mountinfo = read("/proc/self/mountinfo")?;
        let own = read("/proc/self/cgroup")?;
        let own =
            own_group(&own).ok_or_else(|| CgroupError::NoOwnGroup("/proc/self/cgroup".into()))?;
        let parent = group_dir(&mountinfo, own).ok_or(CgroupError::NoUnifiedHierarchy)?;
        RunCgroups::at(parent)
    }

    /// Groups below `parent`, a folder of a cgroup v2 hierarchy.
    pub fn at(parent: PathBuf) -> Result<RunCgroups, CgroupError> {
        nix::unistd::access(&parent, nix::unistd::AccessFlags::W_OK).map_err(|source| {
            CgroupError::NotWritable {
                path: parent.clone(),
                source,
            }
        })?;
        Ok(RunCgroups { parent })
    }

    /// The folder the run groups are made in.
    pub fn parent(&self) -> &Path {
        &self.parent
    }

    /// Makes the group of run `run_id` (empty; a group of that name left over is killed
    /// and made again).
    pub fn create(&self, run_id: &str) -> Result<RunCgroup, CgroupError> {
        let dir = self.parent.join(format!("{GROUP_PREFIX}{run_id}"));
        if dir.exists() {
            RunCgroup::existing(dir.clone()).kill()?;
        }
        let create = |source| CgroupError::Create {
            path: dir.clone(),
            source,
        };
        fs::create_dir(&dir).map_err(create)?;
        let procs = OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .map_err(create)?;
        Ok(RunCgroup {
            dir,
            procs: Some(procs),
        })
    }

    /// The groups of earlier runs still present, as (run id, group): left by an agent
    /// that ended without ending its run.
    pub fn leftovers(&self) -> Vec<(String, RunCgroup)> {
        let Ok(entries) = fs::read_dir(&self.parent) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let run_id = name.strip_prefix(GROUP_PREFIX)?.to_string();
                Some((run_id, RunCgroup::existing(entry.path())))
            })
            .collect()
    }
}

/// One run's group.
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    /// Its `cgroup.procs`, open for the worker to enter the group between fork and exec,
    /// where no path may be opened.
    procs: Option<File>,
}

impl RunCgroup {
    fn existing(dir: PathBuf) -> RunCgroup {
        RunCgroup { dir, procs: None }
    }

    /// The descriptor a child writes "0" to, to move itself into the group.
    pub fn procs_fd(&self) -> Option<RawFd> {
        self.procs.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The live processes in the group.
    fn members(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kills every process in the group, waits until it is empty and removes it;
    /// returns how many processes were in it.
    pub fn kill(self) -> Result<usize, CgroupError> {
        let members = self.members().len();
        let kill_error = |source| CgroupError::Kill {
            path: self.dir.clone(),
            source,
        };
        if members > 0 {
            match OpenOptions::new()
                .write(true)
                .open(self.dir.join("cgroup.kill"))
            {
                Ok(mut file) => file.write_all(b"1").map_err(kill_error)?,
                // Before Linux 5.14: each member in turn, until none is left.
                Err(e) if e.kind() == ErrorKind::NotFound => self.kill_each(),
                Err(e) => return Err(kill_error(e)),
            }
        }
        let deadline = Instant::now() + EMPTY_TIMEOUT;
        loop {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(members),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(members),
                // EBUSY: processes still exiting.
                Err(_) if Instant::now() < deadline => {
                    self.kill_each();
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(_) => {
                    return Err(CgroupError::StillPopulated {
                        path: self.dir.clone(),
                        timeout: EMPTY_TIMEOUT,
                    })
                }
            }
        }
    }

    fn kill_each(&self) {
        for pid in self.members() {
            // ESRCH: it ended between the read and now.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

fn read(path: &str) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.into(),
        source,
    })
}

/// The process's group in the unified hierarchy, from `/proc/PID/cgroup` ("0::/path").
fn own_group(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::trim_end)
        .filter(|path| path.starts_with('/'))
}

/// The folder of `group` in the cgroup v2 mount whose root is the longest prefix of it,
/// from `/proc/PID/mountinfo` (a hybrid host mounts it at /sys/fs/cgroup/unified, a
/// sandbox may bind a subtree on its own).
fn group_dir(mountinfo: &str, group: &str) -> Option<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            if fs.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            let mut fields = mount.split_whitespace();
            let root = fields.nth(3)?;
            let point = fields.next()?;
            let rest = if root == "/" {
                group
            } else {
                let rest = group.strip_prefix(root)?;
                if !(rest.is_empty() || rest.starts_with('/')) {
                    return None;
                }
                rest
            };
            Some((
                root.len(),
                Path::new(point).join(rest.trim_start_matches('/')),
            ))
        })
        .max_by_key(|(root_len, _)| *root_len)
        .map(|(_, dir)| dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
";

    const SANDBOXED: &str = "\
40 30 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
41 40 0:27 /system.slice/tinyperf.service /sys/fs/cgroup/system.slice/tinyperf.service rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn the_unified_entry_of_proc_cgroup_is_the_own_group() {
        let text =
            "12:pids:/user.slice\n1:name=systemd:/user.slice\n0::/system.slice/tinyperf.service\n";
        assert_eq!(own_group(text), Some("/system.slice/tinyperf.service"));
        assert_eq!(own_group("4:memory:/x\n1:cpu:/\n"), None);
    }

    #[test]
    fn the_group_is_found_in_a_hybrid_hierarchy() {
        assert_eq!(
            group_dir(HYBRID, "/user.slice/session-2.scope"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/user.slice/session-2.scope"
            ))
        );
        assert_eq!(
            group_dir(HYBRID, "/"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let v1_only = HYBRID.replace("cgroup2 cgroup2", "tmpfs tmpfs");
        assert_eq!(group_dir(&v1_only, "/"), None);
    }

    #[test]
    fn the_deepest_mount_of_a_sandbox_wins() {
        assert_eq!(
            group_dir(SANDBOXED, "/system.slice/tinyperf.service"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/system.slice/tinyperf.service"
            ))
        );
        // A group beside the bound subtree is reached through the outer mount only.
        assert_eq!(
            group_dir(SANDBOXED, "/system.slice/tinyperf.service-extra"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/system.slice/tinyperf.service-extra"
            ))
        );
    }

    #[test]
    fn a_missing_folder_is_refused_with_its_path() {
        let err = RunCgroups::at(PathBuf::from("/sys/fs/cgroup/no-such-group")).unwrap_err();
        assert!(
            err.to_string().contains("/sys/fs/cgroup/no-such-group"),
            "{err}"
        );
    }
}
