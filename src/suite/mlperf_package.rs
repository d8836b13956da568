//! The last stage of `mlperf-resnet` with `runs=5`: the five runs' submission package,
//! written into the run folder as `submission/ORG/` (ORG: the `submitter` option,
//! tinycorp when absent), and its score.

use serde_json::{json, Value};

use super::stage::{StageContext, StageReport};
use crate::mlperf::package::{package, PackageRequest};
use crate::record::{Check, StageResult, Verdict};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "mlperf-package";
/// Where in the run folder the package goes.
pub const FOLDER: &str = "submission";

/// Runs the stage: packages the run folder's five `result_N` runs into `submission/ORG/`
/// and scores the package; fails when no package can be written or it earns no olympic time
/// to train. Skips an unrecorded run.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let Some(run_dir) = ctx.run_dir.clone() else {
        return report.finish_as(
            Verdict::Skip,
            Some("the run is not recorded, so its runs cannot be packaged".into()),
        );
    };
    let hardware = ctx.hardware.clone().unwrap_or(Value::Null);
    let platform = crate::mlperf::system_desc::submission_platform(&hardware);
    let out_dir = run_dir.join(FOLDER);
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        return report.finish_as(
            Verdict::Error,
            Some(format!("cannot create {}: {e}", out_dir.display())),
        );
    }
    let request = PackageRequest {
        org: super::options::submitter(ctx.options()).to_string(),
        system: platform.clone(),
        division: None,
        out_dir,
        runs: vec![run_dir.clone()],
        record: Some(json!({
            "id": run_dir.file_name().map(|n| n.to_string_lossy().to_string()),
            "suite": super::mlperf_resnet::NAME,
            "options": ctx.options(),
            "hardware": hardware,
        })),
    };
    let written = match package(&request) {
        Ok(written) => written,
        Err(e) => {
            return report.finish_as(Verdict::Fail, Some(format!("no package: {e}")));
        }
    };
    report
        .findings
        .push(format!("submission package: {}", written.root.display()));
    report.findings.extend(written.notes.iter().cloned());
    let score = crate::mlperf::score_paths(std::slice::from_ref(&written.root))
        .ok()
        .and_then(|systems| systems.into_iter().next());
    let found = match score.as_ref().and_then(|s| s.time_to_train_min) {
        Some(minutes) => {
            report.metric("time_to_train_min", minutes, "min");
            format!("{minutes:.3} min")
        }
        None => "no score".to_string(),
    };
    if let Some(j) = score.as_ref().and_then(|s| s.energy_j) {
        report.metric("energy_j", j, "J");
    }
    for note in score.iter().flat_map(|s| s.notes.iter()) {
        report.findings.push(note.clone());
    }
    report.checks.push(Check {
        name: "olympic time to train of the five runs".into(),
        subject: None,
        expected: "at most one run not converged".into(),
        found: found.clone(),
        verdict: Verdict::pass_if(found != "no score"),
    });
    report.finish(Some(format!(
        "{} division package of {platform}: {found}",
        written.division
    )))
}
