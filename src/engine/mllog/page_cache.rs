//! Dropping the kernel's page cache before a run, as the training rules require
//! ("flush the cache or restart the system"), so the dataset is read from storage.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

/// The kernel's control file: writing `3` drops the page cache, dentries and inodes.
pub const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// What happened to the page cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheFlush {
    /// Dirty pages were synced and the caches dropped.
    Dropped,
    /// Not running as root: only root may drop the caches.
    NotRoot,
    /// Root, but the kernel refused (a container with a read-only `/proc/sys`, say).
    Failed(String),
}

impl CacheFlush {
    /// The value `cache_clear` logs.
    pub fn flushed(&self) -> bool {
        matches!(self, CacheFlush::Dropped)
    }

    /// What happened, in words for a person, with why when the cache was kept.
    pub fn describe(&self) -> String {
        match self {
            CacheFlush::Dropped => "page cache dropped".into(),
            CacheFlush::NotRoot => "page cache kept: dropping it needs root".into(),
            CacheFlush::Failed(why) => format!("page cache kept: {why}"),
        }
    }
}

/// Syncs and drops the page cache when running as root.
pub fn drop_page_cache() -> CacheFlush {
    drop_page_cache_via(Path::new(DROP_CACHES), nix::unistd::geteuid().is_root())
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
