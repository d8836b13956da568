//! Compiled kernels kept on disk, so a box compiles its kernels once per device
//! architecture and compiler, not at every run.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a compiled module depends on: change any part and the cache misses.
#[derive(Debug, Clone, Copy)]
pub struct CacheKey<'a> {
    /// `cuda` or `hip`.
    pub runtime: &'a str,
    /// The architecture compiled for (`sm_89`, `gfx1100`).
    pub arch: &'a str,
    /// The compiler's version, so that a new toolkit compiles afresh.
    pub compiler_version: &'a str,
    /// The compiler options, in order.
    pub options: &'a [String],
    /// The whole kernel source as compiled.
    pub source: &'a str,
}

impl CacheKey<'_> {
    /// FNV-1a over every part, with separators so parts cannot run into each other.
    pub fn digest(&self) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes.iter().chain(std::iter::once(&0xff)) {
                hash ^= b as u64;
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        eat(self.runtime.as_bytes());
        eat(self.arch.as_bytes());
        eat(self.compiler_version.as_bytes());
        for option in self.options {
            eat(option.as_bytes());
        }
        eat(self.source.as_bytes());
        hash
    }

    /// The module's file name: runtime, architecture (safe for a file name) and digest.
    pub fn file_name(&self) -> String {
        let arch: String = self
            .arch
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("{}-{arch}-{:016x}.bin", self.runtime, self.digest())
    }
}

/// A folder of compiled modules; `None` when no folder could be chosen, in which case
/// every run compiles afresh.
#[derive(Debug, Clone)]
pub struct KernelCache {
    dir: Option<PathBuf>,
}

impl KernelCache {
    /// A cache kept in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        KernelCache {
            dir: Some(dir.into()),
        }
    }

    /// No cache: every run compiles its kernels.
    pub fn disabled() -> Self {
        KernelCache { dir: None }
    }

    /// `TINYPERF_KERNEL_CACHE`, else systemd's `CACHE_DIRECTORY`, else the user's cache
    /// folder.
    pub fn from_environment() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(dir) = var("TINYPERF_KERNEL_CACHE") {
            return Self::at(dir);
        }
        if let Some(dir) = var("CACHE_DIRECTORY") {
            // systemd may pass several folders separated by colons; the first is ours.
            let first = dir
                .to_string_lossy()
                .split(':')
                .next()
                .unwrap_or("")
                .to_owned();
            return Self::at(Path::new(&first).join("kernels"));
        }
        if let Some(dir) = var("XDG_CACHE_HOME") {
            return Self::at(Path::new(&dir).join("tinyperf/kernels"));
        }
        if let Some(home) = var("HOME") {
            return Self::at(Path::new(&home).join(".cache/tinyperf/kernels"));
        }
        Self::disabled()
    }

    /// The folder modules are kept in; `None` when caching is off.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The cached module, if one is there and not empty.
    pub fn load(&self, key: &CacheKey<'_>) -> Option<Vec<u8>> {
        let path = self.dir.as_ref()?.join(key.file_name());
        fs::read(path).ok().filter(|bytes| !bytes.is_empty())
    }

    /// Stores a module atomically (a reader sees the old file or the whole new one). A
    /// failure to write only costs a later recompile, so it is logged, not returned.
    pub fn store(&self, key: &CacheKey<'_>, module: &[u8]) {
        let Some(dir) = &self.dir else { return };
        let path = dir.join(key.file_name());
        let result = (|| -> std::io::Result<()> {
            fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(".{}.{}.tmp", key.file_name(), std::process::id()));
            let mut file = fs::File::create(&tmp)?;
            file.write_all(module)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        if let Err(error) = result {
            tracing::warn!(path = %path.display(), %error, "could not cache compiled kernels");
        }
    }

    /// Drops a cached module the runtime refused to load.
    pub fn evict(&self, key: &CacheKey<'_>) {
        if let Some(dir) = &self.dir {
            let _ = fs::remove_file(dir.join(key.file_name()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key<'a>(arch: &'a str, source: &'a str, options: &'a [String]) -> CacheKey<'a> {
        CacheKey {
            runtime: "cuda",
            arch,
            compiler_version: "12.8",
            options,
            source,
        }
    }

    #[test]
    fn every_part_of_the_key_changes_the_digest() {
        let opts = vec!["-O3".to_string()];
        let base = key("sm_90", "src", &opts).digest();
        assert_ne!(base, key("sm_89", "src", &opts).digest());
        assert_ne!(base, key("sm_90", "src2", &opts).digest());
        assert_ne!(base, key("sm_90", "src", &[]).digest());
        let mut other = key("sm_90", "src", &opts);
        other.compiler_version = "13.0";
        assert_ne!(base, other.digest());
        other = key("sm_90", "src", &opts);
        other.runtime = "hip";
        assert_ne!(base, other.digest());
        // Separators: moving a byte between parts is a different key.
        assert_ne!(key("sm_9", "0src", &opts).digest(), base);
        assert_eq!(base, key("sm_90", "src", &opts).digest());
    }

    #[test]
    fn stores_loads_and_evicts_modules_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path().join("nested/kernels"));
        let opts = vec![];
        let k = key("gfx1100", "source", &opts);
        assert_eq!(cache.load(&k), None);
        cache.store(&k, b"module bytes");
        assert_eq!(cache.load(&k).as_deref(), Some(&b"module bytes"[..]));
        assert!(k.file_name().starts_with("cuda-gfx1100-"));
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(cache.dir().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
        cache.evict(&k);
        assert_eq!(cache.load(&k), None);
    }

    #[test]
    fn an_empty_file_is_a_miss_and_an_unwritable_folder_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::at(dir.path());
        let opts = vec![];
        let k = key("sm_90", "s", &opts);
        fs::write(dir.path().join(k.file_name()), b"").unwrap();
        assert_eq!(cache.load(&k), None);
        let blocked = dir.path().join("file");
        fs::write(&blocked, b"x").unwrap();
        let cache = KernelCache::at(blocked.join("sub"));
        cache.store(&k, b"m");
        assert_eq!(cache.load(&k), None);
        assert_eq!(KernelCache::disabled().load(&k), None);
    }
}
