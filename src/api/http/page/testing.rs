//! What the pages' tests build their runs from.

use chrono::Utc;

use crate::record::{RunBrief, RunState, Trigger, Verdict};

/// A failed `inventory` run started over HTTP just now, 75 s long, with no figures.
pub(super) fn brief(id: &str) -> RunBrief {
    RunBrief {
        id: id.into(),
        suite: "inventory".into(),
        state: RunState::Failed,
        verdict: Some(Verdict::Fail),
        trigger: Trigger::Http,
        started_at: Utc::now(),
        finished_at: Some(Utc::now()),
        duration_s: Some(75.0),
        message: None,
        stages: Vec::new(),
        figures: Vec::new(),
        findings: Vec::new(),
    }
}
