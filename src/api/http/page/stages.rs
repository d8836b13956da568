//! A run's stages as the rows both pages show: name, verdict and figures.

use super::text::number;
use crate::record::StageResult;

/// One stage of a run, as a table row.
pub(super) struct StageRow {
    /// The stage's name.
    pub name: String,
    /// Its verdict (`pass`, `fail`, …).
    pub verdict: String,
    /// Each of its metrics as `name value unit`.
    pub figures: Vec<String>,
}

/// A row per stage, in the record's order.
pub(super) fn stage_rows(stages: &[StageResult]) -> Vec<StageRow> {
    stages
        .iter()
        .map(|stage| StageRow {
            name: stage.name.clone(),
            verdict: stage.verdict.as_str().to_string(),
            figures: stage
                .metrics
                .iter()
                .map(|m| format!("{} {} {}", m.name, number(m.value), m.unit))
                .collect(),
        })
        .collect()
}
