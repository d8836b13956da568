//! The newest finished result of every suite and of every stage of every suite, from the
//! briefs in the index: what a fleet compares box against box, so a short run of one
//! suite never hides the last result of another.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::brief::{Figure, RunBrief};
use super::run::{RunState, Verdict};

/// The newest finished run of one suite.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteResult {
    /// The suite.
    pub suite: String,
    /// How its newest finished run ended.
    pub state: RunState,
    /// That run's verdict; `None` when it was never judged.
    pub verdict: Option<Verdict>,
    /// When that run ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// How long it took, in seconds.
    pub duration_s: Option<f64>,
}

/// One stage as the newest finished run of its suite that had it ended it.
#[derive(Debug, Clone, PartialEq)]
pub struct StageOutcome {
    /// The suite of the run that gave this stage.
    pub suite: String,
    /// The stage's name.
    pub stage: String,
    /// What it concluded.
    pub verdict: Verdict,
    /// When the run that gave this stage ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// The stage's headline figures.
    pub figures: Vec<Figure>,
}

/// The last result of each suite and of each stage: what `/metrics` publishes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatestResults {
    /// One per suite.
    pub suites: Vec<SuiteResult>,
    /// One per suite and stage.
    pub stages: Vec<StageOutcome>,
}

impl LatestResults {
    /// `newest_first` is the store's briefs, newest first; runs still going are passed over.
    pub fn collect<'a>(newest_first: impl Iterator<Item = &'a RunBrief>) -> LatestResults {
        let mut latest = LatestResults::default();
        let mut seen_suites: HashSet<&str> = HashSet::new();
        let mut seen_stages: HashSet<(&str, &str)> = HashSet::new();
        for brief in newest_first.filter(|b| b.state.is_final()) {
            if seen_suites.insert(&brief.suite) {
                latest.suites.push(SuiteResult {
                    suite: brief.suite.clone(),
                    state: brief.state,
                    verdict: brief.verdict,
                    finished_at: brief.finished_at,
                    duration_s: brief.duration_s,
                });
            }
            for stage in &brief.stages {
                if !seen_stages.insert((&brief.suite, &stage.name)) {
                    continue;
                }
                latest.stages.push(StageOutcome {
                    suite: brief.suite.clone(),
                    stage: stage.name.clone(),
                    verdict: stage.verdict,
                    finished_at: brief.finished_at,
                    figures: brief
                        .figures
                        .iter()
                        .filter(|f| f.stage == stage.name)
                        .cloned()
                        .collect(),
                });
            }
        }
        latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Metric, RunRecord, StageResult, Trigger};

    fn finished(id: &str, suite: &str, stage: &str, img_per_s: f64, minute: i64) -> RunBrief {
        let mut r = RunRecord::new(id.into(), suite.into(), Trigger::Cli, Default::default());
        r.started_at = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
            + chrono::Duration::minutes(minute);
        r.stages.push(StageResult::measured(
            stage,
            Verdict::Pass,
            r.started_at,
            vec![Metric::new("img_per_s", img_per_s, "img/s")],
        ));
        r.finish(RunState::Passed, None);
        RunBrief::from(&r)
    }

    #[test]
    fn each_suite_and_stage_keeps_its_newest_finished_result() {
        let newest_first = [
            finished("c", "smoke", "train", 10.0, 3),
            finished("b", "acceptance", "train", 6300.0, 2),
            finished("a", "acceptance", "train", 5000.0, 1),
        ];
        let mut running = finished("d", "acceptance", "train", 1.0, 4);
        running.state = RunState::Running;
        let all = std::iter::once(&running).chain(newest_first.iter());
        let latest = LatestResults::collect(all);
        let suites: Vec<_> = latest.suites.iter().map(|s| s.suite.as_str()).collect();
        assert_eq!(suites, ["smoke", "acceptance"]);
        let acceptance = latest
            .stages
            .iter()
            .find(|s| s.suite == "acceptance")
            .unwrap();
        assert_eq!(acceptance.figures[0].value, 6300.0);
        assert_eq!(latest.stages.len(), 2);
    }
}
