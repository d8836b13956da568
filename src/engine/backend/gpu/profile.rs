//! Timing every kernel and GEMM of a step, for finding where its time goes.

use super::GpuBackend;
use crate::engine::Result;

/// Device time per kernel and GEMM, gathered by synchronising around every launch: slow,
/// and only for finding where a step's time goes.
#[derive(Debug, Default)]
pub struct Profile {
    entries: std::sync::Mutex<std::collections::HashMap<String, (u64, f64)>>,
}

impl Profile {
    fn add(&self, name: &str, seconds: f64) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = entries.entry(name.to_string()).or_default();
        entry.0 += 1;
        entry.1 += seconds;
    }

    /// (name, calls, seconds), most time first.
    pub fn report(&self) -> Vec<(String, u64, f64)> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut rows: Vec<_> = entries
            .iter()
            .map(|(name, &(calls, secs))| (name.clone(), calls, secs))
            .collect();
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        rows
    }

    /// Forgets every timing so far, so the next report covers only what runs after.
    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

impl GpuBackend {
    pub(super) fn timed<T>(&self, name: &str, work: impl FnOnce() -> Result<T>) -> Result<T> {
        let Some(profile) = &self.profile else {
            return work();
        };
        self.synchronize()?;
        let started = std::time::Instant::now();
        let out = work()?;
        self.synchronize()?;
        profile.add(name, started.elapsed().as_secs_f64());
        Ok(out)
    }
}
