//! The `inventory` stage: hardware inventory, SKU recognition, expectation checks and
//! the runtime probe.

use super::event::WorkerEvent;
use super::stage::{StageContext, StageReport};
use crate::record::StageResult;

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "inventory";

/// Runs the stage: takes the inventory under the run's root, sends it as a `hardware` event
/// for the run record and later stages, and judges it against the SKU (skips an
/// unrecognised box, which has nothing to check against).
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    ctx.progress(
        0.0,
        Some("scanning PCI devices, CPU, memory and NVMe".into()),
    );
    let report = crate::inventory::take(&ctx.root, ctx.sku.as_deref(), true);
    match serde_json::to_value(&report) {
        Ok(hardware) => (ctx.emit)(WorkerEvent::Hardware { hardware }),
        Err(e) => tracing::warn!(error = %e, "cannot serialise the inventory"),
    }
    let mut stage = StageReport::new(NAME);
    stage.metrics = report.metrics();
    stage.checks = report.checks();
    stage.findings = report.findings();
    let failed = stage
        .checks
        .iter()
        .filter(|c| c.verdict != crate::record::Verdict::Pass)
        .count();
    let message = match (report.sku_name(), failed) {
        ("unrecognised", _) => "unrecognised box: nothing to check against".to_string(),
        (sku, 0) => format!("{sku}: every expectation met"),
        (sku, n) => format!("{sku}: {n} expectation(s) not met"),
    };
    ctx.progress(1.0, None);
    stage.finish(Some(message))
}
