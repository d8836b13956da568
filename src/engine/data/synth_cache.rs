//! The cache of generated datasets under a size budget: each distinct spec is a folder
//! of its own, so without a bound every new `synth_*` option would add one for good.
//! The least recently used folders go first; a spec too large for the budget is
//! refused before anything is written.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::synth::{SynthSpec, SPEC_FILE};

/// The cache's budget unless configured: generous for the smoke suite's sets (a few
/// MiB each at their defaults), small beside a tinybox's disks.
pub const DEFAULT_BUDGET_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// The filesystem's smallest allocation per file, which small JPEGs round up to.
const BLOCK: u64 = 4096;
const CACHE_PREFIX: &str = "synth-";

/// About how many bytes the dataset of `spec` takes on disk: an upper estimate (JPEG
/// at quality 90 of the generated pictures stays under a byte a pixel; every file takes
/// at least a block).
pub fn estimated_bytes(spec: &SynthSpec) -> u64 {
    let images = (spec.classes as u64) * (spec.per_class as u64 + spec.val_per_class as u64);
    let per_image = ((spec.size as u64).pow(2) + 1024).div_ceil(BLOCK) * BLOCK;
    images.saturating_mul(per_image) + (spec.classes as u64) * 2 * BLOCK
}

/// Why a dataset cannot be cached.
pub fn check_fits(spec: &SynthSpec, budget: u64) -> Result<(), String> {
    let needed = estimated_bytes(spec);
    if needed > budget {
        return Err(format!(
            "the generated dataset ({} classes × {} + {} images of {} px) would take about {} MiB, \
             over the dataset cache budget of {} MiB (dataset_cache_mb)",
            spec.classes,
            spec.per_class,
            spec.val_per_class,
            spec.size,
            needed.div_ceil(1 << 20),
            budget >> 20
        ));
    }
    Ok(())
}

/// Whether the dataset of `spec` is in the cache already.
pub fn is_cached(cache_dir: &Path, spec: &SynthSpec) -> bool {
    cache_dir.join(spec.folder_name()).join(SPEC_FILE).is_file()
}

/// Marks the dataset of `spec` as just used.
pub fn touch(cache_dir: &Path, spec: &SynthSpec) {
    let file = cache_dir.join(spec.folder_name()).join(SPEC_FILE);
    if let Ok(f) = fs::File::options().append(true).open(&file) {
        let _ = f.set_modified(SystemTime::now());
    }
}

struct Entry {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}

/// Removes the least recently used datasets until the cache holds at most
/// `budget - room` bytes, keeping `keep`'s folder. Returns the folders removed.
pub fn prune(cache_dir: &Path, budget: u64, room: u64, keep: &SynthSpec) -> Vec<PathBuf> {
    let keep = keep.folder_name();
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return Vec::new();
    };
    let mut cached: Vec<Entry> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            // Generation in progress writes `.synth-….tmp-PID`, which is not ours to touch.
            name.starts_with(CACHE_PREFIX) && name != keep.as_str()
        })
        .map(|e| {
            let path = e.path();
            let used = fs::metadata(path.join(SPEC_FILE))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            Entry {
                bytes: folder_bytes(&path),
                path,
                used,
            }
        })
        .collect();
    let kept_bytes = folder_bytes(&cache_dir.join(&keep));
    let mut total: u64 = cached.iter().map(|e| e.bytes).sum::<u64>() + kept_bytes;
    let limit = budget.saturating_sub(room);
    cached.sort_by_key(|e| e.used);
    let mut removed = Vec::new();
    for entry in cached {
        if total <= limit {
            break;
        }
        if fs::remove_dir_all(&entry.path).is_ok() {
            total = total.saturating_sub(entry.bytes);
            removed.push(entry.path);
        }
    }
    removed
}

/// Bytes taken by the files under `dir`, in whole blocks.
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => folder_bytes(&e.path()),
            Ok(_) => e
                .metadata()
                .map(|m| m.len().div_ceil(BLOCK) * BLOCK)
                .unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::data::synth::ensure_synth_dataset;

    fn spec(seed: u64) -> SynthSpec {
        SynthSpec {
            classes: 2,
            per_class: 2,
            val_per_class: 1,
            size: 16,
            seed,
            quality: 90,
        }
    }

    #[test]
    fn estimates_bound_what_generation_writes() {
        let dir = tempfile::tempdir().unwrap();
        let s = SynthSpec::default();
        let root = ensure_synth_dataset(dir.path(), &s).unwrap();
        let written = folder_bytes(&root);
        assert!(
            estimated_bytes(&s) >= written,
            "{} < {written}",
            estimated_bytes(&s)
        );
        let huge = SynthSpec {
            classes: 72,
            per_class: 100_000,
            val_per_class: 100_000,
            size: 2048,
            ..s
        };
        let err = check_fits(&huge, DEFAULT_BUDGET_BYTES).unwrap_err();
        assert!(err.contains("over the dataset cache budget"), "{err}");
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_one_in_use_stays() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..3 {
            ensure_synth_dataset(dir.path(), &spec(seed)).unwrap();
            // Distinct modification times, oldest first.
            let file = dir.path().join(spec(seed).folder_name()).join(SPEC_FILE);
            let f = fs::File::options().append(true).open(file).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + seed))
                .unwrap();
        }
        touch(dir.path(), &spec(0));
        let one = folder_bytes(&dir.path().join(spec(1).folder_name()));
        let removed = prune(dir.path(), one * 2, 0, &spec(2));
        assert_eq!(removed, [dir.path().join(spec(1).folder_name())]);
        assert!(is_cached(dir.path(), &spec(0)));
        assert!(is_cached(dir.path(), &spec(2)));
    }
}
