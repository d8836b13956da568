//! The HTTP write token, trusted only when it is kept as a secret should be: a file
//! owned by root (or by the user the agent runs as), that no one else may write or
//! read (but the agent's own group, which on the box holds only the agent's user),
//! holding at least 32 bytes. Anything else stops the agent with the fix.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The shortest token accepted: 32 bytes, as 256 random bits would need.
pub const MIN_TOKEN_BYTES: usize = 32;

/// Why the token file cannot be trusted or read; each message says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// Someone other than root or the agent's user owns the file.
    #[error(
        "the token file {path} is owned by uid {owner}, not by root: anyone who owns it can \
         change the token (fix: chown root:root {path})"
    )]
    Owner {
        /// The token file.
        path: PathBuf,
        /// The owner's uid.
        owner: u32,
    },
    /// Others than the owner may read or write the file.
    #[error(
        "the token file {path} has mode {mode:04o}, so others can {access} it (fix: chmod 600 {path})"
    )]
    Mode {
        /// The token file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// What others may do with it: `read`, `write` or `read and write`.
        access: &'static str,
    },
    /// The token is shorter than [`MIN_TOKEN_BYTES`].
    #[error(
        "the token file {path} holds {len} bytes of token, fewer than {MIN_TOKEN_BYTES} (fix: \
         od -An -tx1 -N32 /dev/urandom | tr -d ' \\n' > {path}; chmod 600 {path})"
    )]
    TooShort {
        /// The token file.
        path: PathBuf,
        /// The token's length, in bytes.
        len: usize,
    },
    /// The file could not be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The token file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// The token in `path`, `Ok(None)` when there is no such file (HTTP writes are then
/// disabled), or why the file cannot be trusted.
pub fn read_token(path: &Path) -> Result<Option<String>, TokenFileError> {
    let metadata = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TokenFileError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let me = nix::unistd::geteuid().as_raw();
    if metadata.uid() != 0 && metadata.uid() != me {
        return Err(TokenFileError::Owner {
            path: path.to_path_buf(),
            owner: metadata.uid(),
        });
    }
    let mode = metadata.permissions().mode() & 0o7777;
    // The image gives the token to root:tinyperf 0640 so that the agent, running as
    // group tinyperf, reads a file it cannot change.
    let own_group_reads = metadata.gid() == nix::unistd::getegid().as_raw();
    let forbidden = if own_group_reads { 0o037 } else { 0o077 };
    let granted = mode & forbidden;
    if granted != 0 {
        let access = match (granted & 0o044 != 0, granted & 0o022 != 0) {
            (true, true) => "read and write",
            (false, true) => "write",
            _ => "read",
        };
        return Err(TokenFileError::Mode {
            path: path.to_path_buf(),
            mode,
            access,
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let token = text.trim();
    if token.len() < MIN_TOKEN_BYTES {
        return Err(TokenFileError::TooShort {
            path: path.to_path_buf(),
            len: token.len(),
        });
    }
    Ok(Some(token.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_file(dir: &Path, text: &str, mode: u32) -> PathBuf {
        let path = dir.join("token");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_private_long_token_is_read_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let good = "a".repeat(64);
        let path = token_file(dir.path(), &format!("{good}\n"), 0o600);
        assert_eq!(read_token(&path).unwrap(), Some(good.clone()));
        // Readable by the agent's own group, as the image keeps it (root:tinyperf 0640).
        let path = token_file(dir.path(), &good, 0o640);
        assert_eq!(read_token(&path).unwrap(), Some(good.clone()));
        let path = token_file(dir.path(), &good, 0o660);
        assert!(read_token(&path)
            .unwrap_err()
            .to_string()
            .contains("chmod 600"));
        if nix::unistd::geteuid().is_root() {
            let path = token_file(dir.path(), &good, 0o640);
            std::os::unix::fs::chown(&path, None, Some(65534)).unwrap();
            assert!(read_token(&path)
                .unwrap_err()
                .to_string()
                .contains("others can read"));
        }
        let path = token_file(dir.path(), &good, 0o602);
        assert!(read_token(&path)
            .unwrap_err()
            .to_string()
            .contains("others can write"));
        let path = token_file(dir.path(), "x", 0o600);
        let err = read_token(&path).unwrap_err().to_string();
        assert!(
            err.contains("holds 1 bytes") && err.contains("/dev/urandom"),
            "{err}"
        );
        assert_eq!(read_token(&dir.path().join("none")).unwrap(), None);
    }
}
