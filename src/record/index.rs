//! The store's index: a brief of every run, newest first, kept in memory so lists,
//! pages, metrics and retention never read the disk.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};

use super::brief::RunBrief;
use super::latest::LatestResults;
use super::run::RunRecord;

/// Newest first: by start time, then by id.
type Order = (Reverse<DateTime<Utc>>, Reverse<String>);

fn order_of(brief: &RunBrief) -> Order {
    (Reverse(brief.started_at), Reverse(brief.id.clone()))
}

/// A record the store could not read.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedRecord {
    /// The folder's name: the run's id.
    pub id: String,
    /// Why its record could not be read.
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct RunIndex {
    by_order: BTreeMap<Order, RunBrief>,
    order_of_id: HashMap<String, Order>,
    /// Each suite's newest finished run in full, for the checks about single GPUs
    /// `/metrics` reports: a smoke run must not hide the last health run's.
    suite_latest: BTreeMap<String, Arc<RunRecord>>,
    skipped: Vec<SkippedRecord>,
    /// The newest result of every suite and stage, made from the briefs once after they
    /// change: a scrape costs the same at 10,000 runs as at 10.
    latest: OnceLock<Arc<LatestResults>>,
}

impl RunIndex {
    /// Adds a run, or replaces its brief.
    pub fn put(&mut self, brief: RunBrief) {
        let order = order_of(&brief);
        let mut changes_results = brief.state.is_final();
        if let Some(old) = self.order_of_id.insert(brief.id.clone(), order.clone()) {
            changes_results |= self
                .by_order
                .remove(&old)
                .is_some_and(|b| b.state.is_final());
        }
        self.by_order.insert(order, brief);
        // A run in progress, which updates its brief often, is no result yet.
        if changes_results {
            self.latest.take();
        }
    }

    /// Adds or replaces a run from its whole record, which is kept when it is the
    /// newest finished one of its suite.
    pub fn put_record(&mut self, record: &Arc<RunRecord>) {
        self.put(RunBrief::from(record.as_ref()));
        if record.state.is_final() && is_newer(record, self.suite_latest.get(&record.suite)) {
            self.suite_latest
                .insert(record.suite.clone(), record.clone());
        }
    }

    pub fn remove(&mut self, id: &str) {
        if let Some(order) = self.order_of_id.remove(id) {
            if self
                .by_order
                .remove(&order)
                .is_some_and(|b| b.state.is_final())
            {
                self.latest.take();
            }
        }
        self.suite_latest.retain(|_, r| r.id != id);
    }

    /// The newest finished result of every suite and stage.
    pub fn latest_results(&self) -> Arc<LatestResults> {
        self.latest
            .get_or_init(|| Arc::new(LatestResults::collect(self.newest())))
            .clone()
    }

    pub fn get(&self, id: &str) -> Option<&RunBrief> {
        self.order_of_id
            .get(id)
            .and_then(|order| self.by_order.get(order))
    }

    pub fn len(&self) -> usize {
        self.by_order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_order.is_empty()
    }

    /// Runs newest first.
    pub fn newest(&self) -> impl Iterator<Item = &RunBrief> {
        self.by_order.values()
    }

    /// The newest run in a final state.
    pub fn last_finished_brief(&self) -> Option<&RunBrief> {
        self.newest().find(|b| b.state.is_final())
    }

    /// The newest finished run in full: the newest of the suites' newest.
    pub fn last_finished_record(&self) -> Option<Arc<RunRecord>> {
        self.suite_latest
            .values()
            .max_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)))
            .cloned()
    }

    /// The newest finished brief of each suite.
    pub fn suite_latest_briefs(&self) -> Vec<&RunBrief> {
        let mut seen = std::collections::HashSet::new();
        self.newest()
            .filter(|b| b.state.is_final() && seen.insert(b.suite.as_str()))
            .collect()
    }

    /// Each suite's newest finished run in full, by suite name.
    pub fn suite_latest_records(&self) -> Vec<Arc<RunRecord>> {
        self.suite_latest.values().cloned().collect()
    }

    pub fn set_suite_latest(&mut self, record: Arc<RunRecord>) {
        self.suite_latest.insert(record.suite.clone(), record);
    }

    pub fn skip(&mut self, skipped: SkippedRecord) {
        self.skipped.push(skipped);
    }

    pub fn skipped(&self) -> &[SkippedRecord] {
        &self.skipped
    }

    /// Ids of finished runs past the newest `keep`, oldest last.
    pub fn beyond(&self, keep: usize) -> Vec<String> {
        self.newest()
            .skip(keep)
            .filter(|b| b.state.is_final())
            .map(|b| b.id.clone())
            .collect()
    }
}

/// Whether `record` is the same run as `current` or started after it.
fn is_newer(record: &RunRecord, current: Option<&Arc<RunRecord>>) -> bool {
    current.is_none_or(|last| {
        last.id == record.id || (record.started_at, &record.id) >= (last.started_at, &last.id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RunState, Trigger};

    fn brief(id: &str, minute: i64, state: RunState) -> RunBrief {
        let mut r = RunRecord::new(id.into(), "health".into(), Trigger::Cli, Default::default());
        r.started_at = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
            + chrono::Duration::minutes(minute);
        if state.is_final() {
            r.finish(state, None);
        }
        RunBrief::from(&r)
    }

    fn newest_state(index: &RunIndex) -> Option<RunState> {
        index.latest_results().suites.first().map(|s| s.state)
    }

    #[test]
    fn latest_results_follow_finished_runs_and_ignore_runs_in_progress() {
        let mut index = RunIndex::default();
        index.put(brief("a", 1, RunState::Passed));
        assert_eq!(newest_state(&index), Some(RunState::Passed));
        let before = index.latest_results();

        index.put(brief("b", 2, RunState::Running));
        assert!(Arc::ptr_eq(&before, &index.latest_results()));

        index.put(brief("b", 2, RunState::Failed));
        assert_eq!(newest_state(&index), Some(RunState::Failed));

        index.remove("b");
        assert_eq!(newest_state(&index), Some(RunState::Passed));
        index.remove("a");
        assert_eq!(newest_state(&index), None);
    }
}
