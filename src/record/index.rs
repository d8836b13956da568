//! The store's index: a brief of every run, newest first, kept in memory so lists,
//! pages, metrics and retention never read the disk.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::brief::RunBrief;
use super::run::RunRecord;

/// Newest first: by start time, then by id.
type Order = (Reverse<DateTime<Utc>>, Reverse<String>);

fn order_of(brief: &RunBrief) -> Order {
    (Reverse(brief.started_at), Reverse(brief.id.clone()))
}

/// A record the store could not read.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedRecord {
    pub id: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct RunIndex {
    by_order: BTreeMap<Order, RunBrief>,
    order_of_id: HashMap<String, Order>,
    /// The newest finished run in full, for what `/metrics` reports of it.
    last_finished: Option<Arc<RunRecord>>,
    skipped: Vec<SkippedRecord>,
}

impl RunIndex {
    /// Adds a run, or replaces its brief.
    pub fn put(&mut self, brief: RunBrief) {
        let order = order_of(&brief);
        if let Some(old) = self.order_of_id.insert(brief.id.clone(), order.clone()) {
            self.by_order.remove(&old);
        }
        self.by_order.insert(order, brief);
    }

    /// Adds or replaces a run from its whole record, which is kept when it is the
    /// newest finished one.
    pub fn put_record(&mut self, record: &Arc<RunRecord>) {
        self.put(RunBrief::from(record.as_ref()));
        if record.state.is_final() {
            let newer = self.last_finished.as_ref().is_none_or(|last| {
                last.id == record.id
                    || (record.started_at, &record.id) >= (last.started_at, &last.id)
            });
            if newer {
                self.last_finished = Some(record.clone());
            }
        }
    }

    pub fn remove(&mut self, id: &str) {
        if let Some(order) = self.order_of_id.remove(id) {
            self.by_order.remove(&order);
        }
        if self.last_finished.as_ref().is_some_and(|r| r.id == id) {
            self.last_finished = None;
        }
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

    pub fn last_finished_record(&self) -> Option<Arc<RunRecord>> {
        self.last_finished.clone()
    }

    pub fn set_last_finished(&mut self, record: Arc<RunRecord>) {
        self.last_finished = Some(record);
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
