//! Flushing the kernel's page cache before a run, as the training rules require
//! ("flush the cache or restart the system"), so the dataset is read from storage. Root
//! drops the whole cache; the agent's unprivileged worker evicts the dataset's files
//! from it one by one, which is what the rule is about.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
use rayon::prelude::*;

/// The kernel's control file: writing `3` drops the page cache, dentries and inodes.
pub const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// What happened to the page cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheFlush {
    /// Dirty pages were synced and the caches dropped.
    Dropped,
    /// Not root: every one of these files was evicted from the page cache.
    Evicted {
        /// How many files.
        files: usize,
    },
    /// Not running as root: only root may drop the caches.
    NotRoot,
    /// Root, but the kernel refused (a container with a read-only `/proc/sys`, say).
    Failed(String),
}

impl CacheFlush {
    /// The value `cache_clear` logs.
    pub fn flushed(&self) -> bool {
        matches!(self, CacheFlush::Dropped | CacheFlush::Evicted { .. })
    }

    /// What happened, in words for a person, with why when the cache was kept.
    pub fn describe(&self) -> String {
        match self {
            CacheFlush::Dropped => "page cache dropped".into(),
            CacheFlush::Evicted { files } => {
                format!("the dataset's {files} files evicted from the page cache")
            }
            CacheFlush::NotRoot => "page cache kept: dropping it needs root".into(),
            CacheFlush::Failed(why) => format!("page cache kept: {why}"),
        }
    }
}

/// Syncs and drops the page cache when running as root.
pub fn drop_page_cache() -> CacheFlush {
    drop_page_cache_via(Path::new(DROP_CACHES), nix::unistd::geteuid().is_root())
}

/// Flushes a run's dataset out of the page cache: as root the whole cache is dropped,
/// otherwise each of `files` is evicted.
pub fn flush_page_cache<'a>(files: impl IntoIterator<Item = &'a Path>) -> CacheFlush {
    if nix::unistd::geteuid().is_root() {
        return drop_page_cache();
    }
    evict_from_page_cache(files.into_iter().collect())
}

/// Evicts each file's pages from the page cache (`posix_fadvise(DONTNEED)`, which any
/// user who may read a file may ask); a file that cannot be opened or evicted makes
/// the flush a failure that names it.
pub fn evict_from_page_cache(files: Vec<&Path>) -> CacheFlush {
    let failures: Vec<String> = files
        .par_iter()
        .filter_map(|path| {
            File::open(path)
                .and_then(|file| {
                    posix_fadvise(&file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED)
                        .map_err(std::io::Error::from)
                })
                .err()
                .map(|err| format!("{}: {err}", path.display()))
        })
        .collect();
    match failures.first() {
        None => {
            tracing::info!(
                files = files.len(),
                "evicted the dataset from the page cache"
            );
            CacheFlush::Evicted { files: files.len() }
        }
        Some(first) => {
            tracing::warn!(failed = failures.len(), first = %first, "could not evict the dataset from the page cache");
            CacheFlush::Failed(format!(
                "{} of {} files not evicted from the page cache, the first {first}",
                failures.len(),
                files.len()
            ))
        }
    }
}

/// Syncs, then writes `3` to `control` when `may_write`.
pub fn drop_page_cache_via(control: &Path, may_write: bool) -> CacheFlush {
    if !may_write {
        return CacheFlush::NotRoot;
    }
    // Dirty pages cannot be dropped; writing them out first lets the drop take all.
    nix::unistd::sync();
    let written = OpenOptions::new()
        .write(true)
        .open(control)
        .and_then(|mut file| file.write_all(b"3\n"));
    match written {
        Ok(()) => {
            tracing::info!("dropped the page cache");
            CacheFlush::Dropped
        }
        Err(err) => {
            tracing::warn!(
                "could not drop the page cache: {}: {err}",
                control.display()
            );
            CacheFlush::Failed(format!("writing {}: {err}", control.display()))
        }
    }
}
