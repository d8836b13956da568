//! The health result: a run of the health suite as its checks per GPU, in a versioned
//! JSON shape (`docs/health-result.schema.json`) that scripts and fleets can rely on.

use serde::Serialize;

use crate::record::{RunRecord, Verdict};

/// The version of this shape; a change that removes or renames a field bumps it.
pub const SCHEMA: &str = "tinyperf-health-result/1";
/// Written into the run's folder beside `run.json`.
pub const FILE_NAME: &str = "health.json";

/// A health run's result, GPU by GPU, as `health.json` in the run's folder holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthResult {
    /// The shape's version, [`SCHEMA`].
    pub schema: &'static str,
    /// The run the result comes from.
    pub run_id: String,
    /// When the run started, RFC 3339.
    pub started_at: String,
    /// When the run finished, RFC 3339; `None` while it is still going.
    pub finished_at: Option<String>,
    /// 0 every check passed (some perhaps with a warning), 1 a GPU failed one, 3 a check
    /// could not run.
    pub exit_status: i32,
    /// One entry per GPU that a check named, sorted by PCI address.
    pub gpus: Vec<GpuHealth>,
    /// Checks about no one GPU, and stages that did not run, with why.
    pub box_checks: Vec<CheckOutcome>,
}

/// One GPU's checks and the worst of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuHealth {
    /// PCI address in sysfs spelling.
    pub address: String,
    /// The worst of its checks: fail, then error, then warn, then pass.
    pub outcome: &'static str,
    /// Each check that named this GPU, in the order the stages ran.
    pub checks: Vec<CheckOutcome>,
}

/// One check's outcome, as the stage recorded it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckOutcome {
    /// The stage that made the check (`gpu-corruption`, `link-health`, …).
    pub stage: String,
    /// What the check judges, in words; a stage's name when the stage recorded no checks.
    pub check: String,
    /// pass, warn, fail, skip or error.
    pub outcome: &'static str,
    /// What passing takes, in words (empty for a stage with no checks).
    pub expected: String,
    /// What the check found, in words (a stage's message when it recorded no checks).
    pub found: String,
}

/// The exit status the health suite's verdicts earn.
pub fn exit_status(record: &RunRecord) -> i32 {
    let verdicts = || {
        record
            .stages
            .iter()
            .flat_map(|s| std::iter::once(s.verdict).chain(s.checks.iter().map(|c| c.verdict)))
    };
    if verdicts().any(|v| v == Verdict::Fail) {
        1
    } else if verdicts().any(|v| v == Verdict::Error)
        || record.state != crate::record::RunState::Passed
    {
        3
    } else {
        0
    }
}

/// The health result of `record`: each check that names a GPU (other than the inventory's)
/// under that GPU, the rest and the stages with no checks as box checks.
pub fn from_record(record: &RunRecord) -> HealthResult {
    let mut gpus: Vec<GpuHealth> = Vec::new();
    let mut box_checks = Vec::new();
    for stage in &record.stages {
        if stage.checks.is_empty() {
            box_checks.push(CheckOutcome {
                stage: stage.name.clone(),
                check: stage.name.clone(),
                outcome: stage.verdict.as_str(),
                expected: String::new(),
                found: stage.message.clone().unwrap_or_default(),
            });
        }
        for check in &stage.checks {
            let outcome = CheckOutcome {
                stage: stage.name.clone(),
                check: check.name.clone(),
                outcome: check.verdict.as_str(),
                expected: check.expected.clone(),
                found: check.found.clone(),
            };
            match &check.subject {
                Some(address) if stage.name != crate::suite::inventory_stage::NAME => {
                    match gpus.iter_mut().find(|g| &g.address == address) {
                        Some(gpu) => gpu.checks.push(outcome),
                        None => gpus.push(GpuHealth {
                            address: address.clone(),
                            outcome: "pass",
                            checks: vec![outcome],
                        }),
                    }
                }
                _ => box_checks.push(outcome),
            }
        }
    }
    for gpu in &mut gpus {
        let has = |o: &str| gpu.checks.iter().any(|c| c.outcome == o);
        gpu.outcome = if has("fail") {
            "fail"
        } else if has("error") {
            "error"
        } else if has("warn") {
            "warn"
        } else {
            "pass"
        };
    }
    gpus.sort_by(|a, b| a.address.cmp(&b.address));
    HealthResult {
        schema: SCHEMA,
        run_id: record.id.clone(),
        started_at: record.started_at.to_rfc3339(),
        finished_at: record.finished_at.map(|t| t.to_rfc3339()),
        exit_status: exit_status(record),
        gpus,
        box_checks,
    }
}

/// A line per GPU: its address, its outcome, and each check's.
pub fn table(result: &HealthResult) -> String {
    let mut out = String::new();
    for gpu in &result.gpus {
        let checks: Vec<String> = gpu
            .checks
            .iter()
            .map(|c| format!("{} {}", c.check, c.outcome))
            .collect();
        out.push_str(&format!(
            "{}  {:<5}  {}\n",
            gpu.address,
            gpu.outcome.to_uppercase(),
            checks.join(", ")
        ));
    }
    out
}
