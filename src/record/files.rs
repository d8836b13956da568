//! How the store touches the disk: atomic writes, bounded reads, and explicit modes.
//!
//! Folders are `rwxr-s---` and files `rw-r-----`: the agent writes, group `tinyperf`
//! reads (when that group exists; the folders' set-group-id bit hands it on to the
//! files the worker writes), and others get nothing, whatever the umask. An agent that
//! runs as group `tinyperf` itself, as on the box, gives its folders `rwxr-x---`: what it
//! makes is the group's anyway, and its sandbox refuses the set-group-id bit.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The group that may read records.
pub const READER_GROUP: &str = "tinyperf";
/// Folders: owner all, the reader group read and enter, others nothing; the setgid
/// bit gives what is made inside the folder's group.
pub const DIR_MODE: u32 = 0o2750;
/// Folders of an agent whose own group is the reader group.
pub const OWN_GROUP_DIR_MODE: u32 = 0o750;
/// Files: owner read and write, the reader group read, others nothing.
pub const FILE_MODE: u32 = 0o640;

/// The owner and modes the store gives what it creates.
#[derive(Debug, Clone, Copy, Default)]
pub struct Modes {
    /// The reader group's id, when the group exists.
    pub group: Option<u32>,
}

impl Modes {
    /// Looks the reader group up once.
    pub fn lookup() -> Modes {
        let group = nix::unistd::Group::from_name(READER_GROUP)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw());
        Modes { group }
    }

    /// The mode of the store's folders.
    pub fn dir_mode(&self) -> u32 {
        match self.group {
            Some(gid) if gid == nix::unistd::getegid().as_raw() => OWN_GROUP_DIR_MODE,
            _ => DIR_MODE,
        }
    }

    /// Creates `dir` (and its parents) or gives an existing one the store's mode.
    pub fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mode = self.dir_mode();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(dir)?;
        self.apply(dir, mode)
    }

    /// Creates `dir`, which must not exist yet.
    pub fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mode = self.dir_mode();
        fs::DirBuilder::new().mode(mode).create(dir)?;
        self.apply(dir, mode)
    }

    /// Sets `path`'s group (when there is a reader group) and then its mode; the mode
    /// comes last because changing the group clears the set-group-id bit.
    pub fn apply(&self, path: &Path, mode: u32) -> io::Result<()> {
        if let Some(gid) = self.group {
            match std::os::unix::fs::chown(path, None, Some(gid)) {
                // An agent run by a user outside the group keeps its files to itself.
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
                other => other?,
            }
        }
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }

    /// Opens a new file for writing with the store's file mode.
    pub fn create_file(&self, path: &Path) -> io::Result<File> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(path)?;
        self.apply(path, FILE_MODE)?;
        Ok(file)
    }

    /// Writes `bytes` to `path` so that readers see the old file or the new one,
    /// never a mix: temp file in the same folder, fsync, rename, fsync of the folder.
    pub fn write_atomically(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("record");
        let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
        let result = (|| {
            let mut f = self.create_file(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, path)?;
            File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

/// Why a bounded read failed.
#[derive(Debug)]
pub enum BoundedReadError {
    /// The file could not be opened or read.
    Io(io::Error),
    /// The file is over the limit.
    TooLarge {
        /// Its size, in bytes.
        size: u64,
    },
}

/// Opens `path` for reading without following a link at its end, and only when it is a
/// plain file: a run folder's `mllog.txt` linked to `/etc/shadow`, or a FIFO that would
/// block the reader, is refused with an error that says so.
pub fn open_plain_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a symbolic link, which tinyperf never follows",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a plain file", path.display()),
        ));
    }
    Ok(file)
}

/// Opens `path` as [`open_plain_file`] does, refusing it also when the folder it is in
/// is a link: a run folder linked elsewhere serves nothing from there.
pub fn open_in_plain_folder(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a symbolic link, which tinyperf never follows",
                    dir.display()
                ),
            ));
        }
    }
    open_plain_file(path)
}

/// Reads `path` whole unless it is over `limit` bytes; a file that grows while it is
/// read is still cut off at the limit. A link at its end, or the folder it is in being a
/// link, is refused ([`open_in_plain_folder`]).
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    let file = open_in_plain_folder(path).map_err(BoundedReadError::Io)?;
    let size = file.metadata().map_err(BoundedReadError::Io)?.len();
    if size > limit {
        return Err(BoundedReadError::TooLarge { size });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(BoundedReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(BoundedReadError::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// Bytes free to unprivileged writers on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    Ok(stat.blocks_available() as u64 * stat.fragment_size() as u64)
}
