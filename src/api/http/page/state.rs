//! What the pages keep between requests so that none of them reads the disk for
//! what it read before: each GPU's verdict in the newest health run, and the rendered
//! pages of finished runs, which never change.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::compare::Prices;
use super::history::HistoryParts;
use crate::record::{RunRecord, Verdict};

/// Finished runs' pages kept rendered.
const RUN_PAGES_KEPT: usize = 32;

/// Each GPU's worst verdict in one health run, by PCI address.
pub type HealthVerdicts = HashMap<String, Verdict>;

/// The pages' memory between requests.
pub struct PageState {
    /// What the box and its power cost, for the comparisons.
    pub prices: Prices,
    health: Mutex<Option<(String, Arc<HealthVerdicts>)>>,
    /// The status page's parts made from the stored runs, and the key they were made
    /// under (which changes whenever a run is added, changes or is removed).
    history: Mutex<Option<(String, Arc<HistoryParts>)>>,
    /// (run id, newest run id when rendered, page): a page is stale once a newer run
    /// changes the box's figures beside it.
    run_pages: Mutex<VecDeque<(String, String, Bytes)>>,
    /// Run pages are drawn one at a time: each reads its run's files whole, so many
    /// clients asking at once for pages not yet kept cost one drawing's memory.
    pub drawing: tokio::sync::Semaphore,
}

impl PageState {
    /// Nothing kept yet.
    pub fn new(prices: Prices) -> PageState {
        PageState {
            prices,
            health: Mutex::new(None),
            history: Mutex::new(None),
            run_pages: Mutex::new(VecDeque::new()),
            drawing: tokio::sync::Semaphore::new(1),
        }
    }

    /// The verdicts of health run `id`, when they are the ones kept.
    pub fn health(&self, id: &str) -> Option<Arc<HealthVerdicts>> {
        let kept = self.health.lock().unwrap_or_else(|e| e.into_inner());
        kept.as_ref()
            .filter(|(kept_id, _)| kept_id == id)
            .map(|(_, verdicts)| verdicts.clone())
    }

    /// The verdicts kept, whichever run they are of.
    pub fn newest_health(&self) -> Arc<HealthVerdicts> {
        let kept = self.health.lock().unwrap_or_else(|e| e.into_inner());
        kept.as_ref().map(|(_, v)| v.clone()).unwrap_or_default()
    }

    /// No health run is stored (any more): no verdicts.
    pub fn forget_health(&self) -> Arc<HealthVerdicts> {
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Arc::default()
    }

    /// Keeps the verdicts of health run `record` in place of any kept, and returns them.
    pub fn keep_health(&self, record: &RunRecord) -> Arc<HealthVerdicts> {
        let verdicts = Arc::new(health_verdicts(record));
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((record.id.clone(), verdicts.clone()));
        verdicts
    }

    /// The history parts made under `key`, or made now by `make` and kept.
    pub fn history(&self, key: &str, make: impl FnOnce() -> HistoryParts) -> Arc<HistoryParts> {
        let mut kept = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((kept_key, parts)) = kept.as_ref() {
            if kept_key == key {
                return parts.clone();
            }
        }
        let parts = Arc::new(make());
        *kept = Some((key.to_string(), parts.clone()));
        parts
    }

    /// Run `id`'s page, when kept and rendered while `newest` was the newest run.
    pub fn run_page(&self, id: &str, newest: &str) -> Option<Bytes> {
        let pages = self.run_pages.lock().unwrap_or_else(|e| e.into_inner());
        pages
            .iter()
            .find(|(run, at, _)| run == id && at == newest)
            .map(|(_, _, page)| page.clone())
    }

    /// Keeps run `id`'s page, rendered while `newest` was the newest run; the oldest
    /// kept page goes when there are too many.
    pub fn keep_run_page(&self, id: &str, newest: &str, page: Bytes) {
        let mut pages = self.run_pages.lock().unwrap_or_else(|e| e.into_inner());
        pages.retain(|(run, _, _)| run != id);
        if pages.len() >= RUN_PAGES_KEPT {
            pages.pop_front();
        }
        pages.push_back((id.to_string(), newest.to_string(), page));
    }
}

/// Each GPU's verdict in a health run: `fail` when any check found it broken (even
/// if another could not run), else `error` when one could not run, else `pass`.
fn health_verdicts(record: &RunRecord) -> HealthVerdicts {
    let mut by_gpu: HashMap<String, Vec<Verdict>> = HashMap::new();
    for check in record.stages.iter().flat_map(|s| &s.checks) {
        if let Some(subject) = &check.subject {
            by_gpu
                .entry(subject.clone())
                .or_default()
                .push(check.verdict);
        }
    }
    by_gpu
        .into_iter()
        .map(|(gpu, verdicts)| {
            let verdict = if verdicts.contains(&Verdict::Fail) {
                Verdict::Fail
            } else {
                Verdict::combine(verdicts)
            };
            (gpu, verdict)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Check, StageResult, Trigger};
    use chrono::Utc;

    fn check(subject: &str, verdict: Verdict) -> Check {
        Check {
            name: "c".into(),
            subject: Some(subject.into()),
            expected: String::new(),
            found: String::new(),
            verdict,
        }
    }

    #[test]
    fn a_gpu_takes_its_worst_verdict_and_pages_are_kept_per_newest_run() {
        let mut record = RunRecord::new(
            "h1".into(),
            "health".into(),
            Trigger::Cli,
            Default::default(),
        );
        record.stages.push(StageResult {
            checks: vec![
                check("0000:03:00.0", Verdict::Pass),
                check("0000:04:00.0", Verdict::Fail),
                check("0000:03:00.0", Verdict::Pass),
                check("0000:04:00.0", Verdict::Error),
            ],
            ..StageResult::measured("gpu-memory", Verdict::Fail, Utc::now(), Vec::new())
        });
        let state = PageState::new(Prices::default());
        assert!(state.health("h1").is_none());
        let verdicts = state.keep_health(&record);
        assert_eq!(verdicts["0000:03:00.0"], Verdict::Pass);
        assert_eq!(verdicts["0000:04:00.0"], Verdict::Fail);
        assert!(state.health("h1").is_some() && state.health("h2").is_none());

        state.keep_run_page("r1", "r9", Bytes::from_static(b"page"));
        assert_eq!(state.run_page("r1", "r9").as_deref(), Some(&b"page"[..]));
        assert!(state.run_page("r1", "r10").is_none());
        for i in 0..RUN_PAGES_KEPT {
            state.keep_run_page(&format!("x{i}"), "r9", Bytes::new());
        }
        assert!(state.run_page("r1", "r9").is_none());
    }
}
