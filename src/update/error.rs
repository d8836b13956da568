//! What can stop an OS update, each with the words an operator needs.

use std::path::PathBuf;

/// Why an update was refused or failed. Every refusal happens before the other slot
/// is written, except `Sysupdate`, after which systemd-sysupdate has left the slot's
/// partitions named `_empty`.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// No update source is set.
    #[error(
        "no update source: set update_url in {0} (an http(s):// URL or a folder), or pass --source"
    )]
    NoSource(String),
    /// The source's text is neither a URL nor an absolute folder.
    #[error("update source {0:?} is neither an http(s):// URL nor an absolute folder")]
    BadSource(String),
    /// A file of the source cannot be fetched or read.
    #[error("cannot fetch {what}: {why}")]
    Fetch {
        /// The file, as a URL or path.
        what: String,
        /// What went wrong.
        why: String,
    },
    /// The source has no `SHA256SUMS.gpg`.
    #[error("the update source is unsigned: {0} is missing; an unsigned update is refused")]
    Unsigned(String),
    /// The keyring that vouches for updates is missing.
    #[error("no keyring to check updates with: {0} is missing")]
    NoKeyring(PathBuf),
    /// `SHA256SUMS` does not verify against its signature and the keyring.
    #[error("SHA256SUMS of {source_name} is not signed by a key in {keyring}: {why}")]
    BadSignature {
        /// The source.
        source_name: String,
        /// The keyring used.
        keyring: PathBuf,
        /// What gpgv said.
        why: String,
    },
    /// `SHA256SUMS` does not parse.
    #[error("SHA256SUMS of {source_name} is malformed: {why}")]
    BadList {
        /// The source.
        source_name: String,
        /// The first bad line, and why.
        why: String,
    },
    /// A file's checksum is not the one `SHA256SUMS` lists.
    #[error("{file} does not match SHA256SUMS: sha256 {found}, listed {expected}")]
    Checksum {
        /// The file.
        file: String,
        /// What SHA256SUMS lists.
        expected: String,
        /// What the file hashes to.
        found: String,
    },
    /// The version asked for is not offered whole.
    #[error("version {version} is not offered whole by {source_name}: {why}")]
    NotOffered {
        /// The version asked for.
        version: String,
        /// The source.
        source_name: String,
        /// What is missing, or what is offered instead.
        why: String,
    },
    /// Nothing newer than the running version is offered.
    #[error("nothing to update to: {0}")]
    UpToDate(String),
    /// The version asked for was rejected by this box's boot check.
    #[error("version {version} was rejected by this box's boot check ({reason}); it is not installed again")]
    Rejected {
        /// The version.
        version: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The disk has no room for the update.
    #[error("not enough space: {0}")]
    NoSpace(String),
    /// A run is going, or another update.
    #[error("{0}")]
    Busy(String),
    /// This machine is not a tinybox OS image, or its layout cannot take an update.
    #[error("{0}")]
    NotAnImage(String),
    /// systemd-sysupdate failed.
    #[error("systemd-sysupdate failed: {0}")]
    Sysupdate(String),
    /// A file of the box cannot be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}
