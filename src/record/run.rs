//! The run record: what a run did, stage by stage, as stored in `run.json` and served
//! over D-Bus and HTTP.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Where a run stands. Every state but `Running` is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// It is in progress.
    Running,
    /// It ran and every verdict passed.
    Passed,
    /// It ran and some verdict failed.
    Failed,
    /// It could not run; the summary says why.
    Error,
    /// Someone cancelled it.
    Cancelled,
    /// The agent died while it ran.
    Interrupted,
}

impl RunState {
    /// Every state, `Running` first.
    pub const ALL: [RunState; 6] = [
        RunState::Running,
        RunState::Passed,
        RunState::Failed,
        RunState::Error,
        RunState::Cancelled,
        RunState::Interrupted,
    ];

    /// The state's name in records and APIs: `passed`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Passed => "passed",
            RunState::Failed => "failed",
            RunState::Error => "error",
            RunState::Cancelled => "cancelled",
            RunState::Interrupted => "interrupted",
        }
    }

    /// Whether the run is over (every state but `Running`).
    pub fn is_final(self) -> bool {
        self != RunState::Running
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who asked for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// The agent at boot.
    Boot,
    /// A D-Bus `Start`.
    Dbus,
    /// A `POST /api/v1/runs`.
    Http,
    /// `tinyperf run` on the command line.
    Cli,
    /// The agent's own schedule: a health pass while the box is idle.
    Schedule,
    /// The agent at start, taking up a run that a reboot interrupted.
    Resume,
}

impl Trigger {
    /// The trigger's name in records and APIs: `boot`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Boot => "boot",
            Trigger::Dbus => "dbus",
            Trigger::Http => "http",
            Trigger::Cli => "cli",
            Trigger::Schedule => "schedule",
            Trigger::Resume => "resume",
        }
    }
}

/// The outcome of one check, one stage, or a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// What was measured meets the expectation.
    Pass,
    /// It meets the expectation, with something a person should know (an application's
    /// GPU fault, corrected link errors within their allowance): never a failure.
    Warn,
    /// What was measured falls short of it.
    Fail,
    /// Nothing to judge against (an unrecognised box, a stage that does not apply).
    Skip,
    /// The stage could not measure.
    Error,
}

impl Verdict {
    /// A check's verdict from whether what it measured meets the expectation: `Pass` when
    /// `ok`, `Fail` otherwise.
    pub fn pass_if(ok: bool) -> Verdict {
        if ok {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }

    /// The verdict's name in records and APIs: `pass`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
            Verdict::Skip => "skip",
            Verdict::Error => "error",
        }
    }

    /// The verdict of a whole made of parts: any error wins, then any failure, then any
    /// warning, then pass if anything passed.
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let (mut any_pass, mut any_warn, mut any_fail) = (false, false, false);
        for v in verdicts {
            match v {
                Verdict::Error => return Verdict::Error,
                Verdict::Fail => any_fail = true,
                Verdict::Warn => any_warn = true,
                Verdict::Pass => any_pass = true,
                Verdict::Skip => {}
            }
        }
        if any_fail {
            Verdict::Fail
        } else if any_warn {
            Verdict::Warn
        } else if any_pass {
            Verdict::Pass
        } else {
            Verdict::Skip
        }
    }

    /// `Warn` when `warn`, else `Pass`: a check whose finding is worth knowing but never
    /// a failure.
    pub fn warn_if(warn: bool) -> Verdict {
        if warn {
            Verdict::Warn
        } else {
            Verdict::Pass
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A measured figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// The figure's name (`img_per_s`, `gpu0_fp16_tflops`).
    pub name: String,
    /// Its value, in `unit`.
    pub value: f64,
    /// Its unit (`img/s`, `TFLOP/s`), or empty for a pure number.
    pub unit: String,
    /// The device the figure is about (a PCI address), for a per-device figure whose
    /// name carries the runtime's device index, which need not be PCI order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl Metric {
    /// A figure about no device in particular.
    pub fn new(name: impl Into<String>, value: f64, unit: impl Into<String>) -> Self {
        Metric {
            name: name.into(),
            value,
            unit: unit.into(),
            subject: None,
        }
    }

    /// The figure as one about the device at `subject`.
    pub fn about(self, subject: Option<String>) -> Self {
        Metric { subject, ..self }
    }
}

/// One expectation compared with what was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// The check's name (`gpu_count`, `pcie_width`).
    pub name: String,
    /// The device the check is about (a PCI address), when it is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// What the SKU or the stage expects, as text.
    pub expected: String,
    /// What was found, as text.
    pub found: String,
    /// Whether what was found meets the expectation.
    pub verdict: Verdict,
}

/// What one stage measured and concluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    /// The stage's name (`gemm`, `train-throughput`).
    pub name: String,
    /// What the stage concluded from its checks.
    pub verdict: Verdict,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// What it measured.
    #[serde(default)]
    pub metrics: Vec<Metric>,
    /// Its expectations, each held against what was found.
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Notes worth an operator's attention that are not checks (a missing runtime, say).
    #[serde(default)]
    pub findings: Vec<String>,
    /// Why it could not measure, or what it adds to its verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl StageResult {
    /// A stage that ran at the instant `at` and concluded `verdict` from `metrics`, with no
    /// checks, findings or message: the start of a result built by hand.
    pub fn measured(
        name: &str,
        verdict: Verdict,
        at: DateTime<Utc>,
        metrics: Vec<Metric>,
    ) -> StageResult {
        StageResult {
            name: name.to_string(),
            verdict,
            started_at: at,
            finished_at: at,
            metrics,
            checks: Vec::new(),
            findings: Vec::new(),
            message: None,
        }
    }
}

/// The run's conclusion in a few fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Summary {
    /// The run's verdict; `None` for a run cancelled or interrupted before it was judged.
    pub verdict: Option<Verdict>,
    /// Why it ended as it did, when there is more to say than its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Stages that passed.
    pub stages_passed: usize,
    /// Stages that failed or could not measure.
    pub stages_failed: usize,
    /// From start to finish, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Energy the GPUs drew over the run's stages; absent when nothing reports power.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// `energy_j` in kWh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_kwh: Option<f64>,
    /// Notes about the run as a whole that are not a stage's (a record that could not
    /// be saved when the run ended, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
}

/// A run as stored in `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id (`20261129-210512-3fa9c2`).
    pub id: String,
    /// The suite it ran (`acceptance`).
    pub suite: String,
    /// Where it stands.
    pub state: RunState,
    /// Who asked for it.
    pub trigger: Trigger,
    /// The options it was started with.
    #[serde(default)]
    pub options: Map<String, Value>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it finished; `None` while it runs.
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    /// The inventory the run saw, as JSON.
    #[serde(default)]
    pub hardware: Value,
    /// Each stage's result, in the order they ran.
    #[serde(default)]
    pub stages: Vec<StageResult>,
    /// Its conclusion.
    #[serde(default)]
    pub summary: Summary,
    /// The interrupted run this one took up, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
}

impl RunRecord {
    /// A run of `suite` starting now, in state `Running` with no stages.
    pub fn new(id: String, suite: String, trigger: Trigger, options: Map<String, Value>) -> Self {
        RunRecord {
            id,
            suite,
            state: RunState::Running,
            trigger,
            options,
            started_at: Utc::now(),
            finished_at: None,
            hardware: Value::Null,
            stages: Vec::new(),
            summary: Summary::default(),
            resumed_from: None,
        }
    }

    /// Closes the run in `state`, filling the summary from its stages.
    pub fn finish(&mut self, state: RunState, message: Option<String>) {
        let now = Utc::now();
        self.state = state;
        self.finished_at = Some(now);
        self.summary.stages_passed = self
            .stages
            .iter()
            .filter(|s| s.verdict == Verdict::Pass)
            .count();
        self.summary.stages_failed = self
            .stages
            .iter()
            .filter(|s| matches!(s.verdict, Verdict::Fail | Verdict::Error))
            .count();
        // A cancelled or interrupted run was never judged: it has no verdict, and its
        // state says why, so a dashboard never counts it as a broken box.
        self.summary.verdict = match state {
            RunState::Passed => Some(Verdict::Pass),
            RunState::Failed => Some(Verdict::Fail),
            RunState::Running => Some(Verdict::combine(self.stages.iter().map(|s| s.verdict))),
            RunState::Error => Some(Verdict::Error),
            RunState::Cancelled | RunState::Interrupted => None,
        };
        if message.is_some() {
            self.summary.message = message;
        }
        self.summary.energy_j = super::energy::run_energy_j(&self.stages);
        self.summary.energy_kwh = self.summary.energy_j.map(super::energy::joules_to_kwh);
        let elapsed = (now - self.started_at).num_milliseconds() as f64 / 1000.0;
        self.summary.duration_s = Some(elapsed.max(0.0));
    }

    /// The state a finished run earns from its stage verdicts.
    pub fn state_from_stages(&self) -> RunState {
        match Verdict::combine(self.stages.iter().map(|s| s.verdict)) {
            Verdict::Pass | Verdict::Warn | Verdict::Skip => RunState::Passed,
            Verdict::Fail => RunState::Failed,
            Verdict::Error => RunState::Failed,
        }
    }

    /// The verdict published with `RunFinished`: none for a run cancelled or
    /// interrupted before it was judged.
    pub fn verdict(&self) -> Option<Verdict> {
        match self.state {
            RunState::Cancelled | RunState::Interrupted => None,
            _ => Some(
                self.summary
                    .verdict
                    .unwrap_or_else(|| Verdict::combine(self.stages.iter().map(|s| s.verdict))),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_prefers_error_then_fail() {
        use Verdict::*;
        assert_eq!(Verdict::combine([Pass, Fail, Error]), Error);
        assert_eq!(Verdict::combine([Pass, Fail, Skip]), Fail);
        assert_eq!(Verdict::combine([Pass, Skip]), Pass);
        assert_eq!(Verdict::combine([Skip]), Skip);
        assert_eq!(Verdict::combine([]), Skip);
    }

    #[test]
    fn record_round_trips_through_json() {
        let mut r = RunRecord::new("r1".into(), "inventory".into(), Trigger::Cli, Map::new());
        r.stages.push(StageResult::measured(
            "inventory",
            Verdict::Fail,
            Utc::now(),
            vec![Metric::new("gpus", 6.0, "count")],
        ));
        let state = r.state_from_stages();
        r.finish(state, None);
        assert_eq!(r.state, RunState::Failed);
        assert_eq!(r.summary.stages_failed, 1);
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"state\":\"failed\""));
        let back: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert!(!text.contains("energy"), "{text}");
    }

    #[test]
    fn the_summary_adds_up_the_stages_energy() {
        let mut r = RunRecord::new("r2".into(), "acceptance".into(), Trigger::Cli, Map::new());
        for joules in [1.8e6, 5.4e6] {
            r.stages.push(StageResult::measured(
                "s",
                Verdict::Pass,
                Utc::now(),
                vec![Metric::new("energy_j", joules, "J")],
            ));
        }
        r.finish(RunState::Passed, None);
        assert_eq!(r.summary.energy_j, Some(7.2e6));
        assert_eq!(r.summary.energy_kwh, Some(2.0));
    }
}
