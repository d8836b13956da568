//! Fields of a run record that this tinyperf does not know: a newer one wrote them, and
//! the state partition outlives a rollback to an older version. Reading skips them
//! (serde ignores unknown fields); rewriting a record (marking it interrupted, say)
//! carries them over from the file on disk, so an older agent loses nothing a newer one
//! recorded.

use serde_json::Value;

/// The fields of a run record this tinyperf writes ([`super::RunRecord`]).
pub const RECORD_FIELDS: &[&str] = &[
    "id",
    "suite",
    "state",
    "trigger",
    "options",
    "started_at",
    "finished_at",
    "hardware",
    "stages",
    "summary",
    "resumed_from",
];
/// The fields of its summary ([`super::Summary`]).
pub const SUMMARY_FIELDS: &[&str] = &[
    "verdict",
    "message",
    "stages_passed",
    "stages_failed",
    "duration_s",
    "energy_j",
    "energy_kwh",
    "findings",
];
/// The fields of a stage ([`super::StageResult`]).
pub const STAGE_FIELDS: &[&str] = &[
    "name",
    "verdict",
    "started_at",
    "finished_at",
    "metrics",
    "checks",
    "findings",
    "message",
];

/// Copies into `new` the fields of `old` this tinyperf does not know: at the top level,
/// in the summary, and in each stage (matched by name and position). Fields it knows
/// take `new`'s value, or stay absent when `new` leaves them out.
pub fn carry_over(old: &Value, new: &mut Value) {
    carry_unknown(old, new, RECORD_FIELDS);
    if let (Some(old), Some(new)) = (old.get("summary"), new.get_mut("summary")) {
        carry_unknown(old, new, SUMMARY_FIELDS);
    }
    if let (Some(before), Some(Value::Array(stages))) = (
        old.get("stages").and_then(Value::as_array),
        new.get_mut("stages"),
    ) {
        for (stage, earlier) in stages.iter_mut().zip(before) {
            if stage.get("name") == earlier.get("name") {
                carry_unknown(earlier, stage, STAGE_FIELDS);
            }
        }
    }
}

fn carry_unknown(old: &Value, new: &mut Value, known: &[&str]) {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object_mut()) else {
        return;
    };
    for (key, value) in old {
        if !known.contains(&key.as_str()) && !new.contains_key(key) {
            new.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_at_every_level_are_carried_and_known_ones_take_the_new_value() {
        let old = json!({
            "id": "r1", "state": "running", "os_version": "7",
            "summary": { "verdict": null, "energy_cost_usd": 1.5 },
            "stages": [
                { "name": "inventory", "verdict": "pass", "gpu_temps": [60] },
                { "name": "gpu-gemm", "verdict": "pass", "clock_mhz": 2520 }
            ]
        });
        let mut new = json!({
            "id": "r1", "state": "interrupted",
            "summary": { "verdict": null, "message": "the agent stopped" },
            "stages": [ { "name": "inventory", "verdict": "pass" }, { "name": "other", "verdict": "fail" } ]
        });
        carry_over(&old, &mut new);
        assert_eq!(new["state"], "interrupted");
        assert_eq!(new["os_version"], "7");
        assert_eq!(new["summary"]["energy_cost_usd"], 1.5);
        assert_eq!(new["summary"]["message"], "the agent stopped");
        assert_eq!(new["stages"][0]["gpu_temps"], json!([60]));
        assert!(
            new["stages"][1].get("clock_mhz").is_none(),
            "a different stage keeps its own fields"
        );
    }

    #[test]
    fn a_known_field_left_out_is_not_brought_back() {
        let old = json!({ "id": "r1", "resumed_from": "r0", "summary": { "message": "old" } });
        let mut new = json!({ "id": "r1", "summary": {} });
        carry_over(&old, &mut new);
        assert_eq!(new, json!({ "id": "r1", "summary": {} }));
    }

    #[test]
    fn the_known_field_lists_are_the_records_own() {
        use crate::record::{Metric, RunRecord, StageResult, Trigger, Verdict};
        let mut record = RunRecord::new(
            "r1".into(),
            "health".into(),
            Trigger::Cli,
            Default::default(),
        );
        record.resumed_from = Some("r0".into());
        record.stages.push(StageResult {
            name: "inventory".into(),
            verdict: Verdict::Pass,
            started_at: chrono::Utc::now(),
            finished_at: chrono::Utc::now(),
            metrics: vec![Metric::new("x", 1.0, "s")],
            checks: Vec::new(),
            findings: vec!["f".into()],
            message: Some("m".into()),
        });
        record.summary.verdict = Some(Verdict::Pass);
        record.summary.message = Some("m".into());
        record.summary.duration_s = Some(1.0);
        record.summary.energy_j = Some(1.0);
        record.summary.energy_kwh = Some(1.0);
        record.summary.findings = vec!["f".into()];
        let value = serde_json::to_value(&record).unwrap();
        let keys = |v: &Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let sorted = |list: &[&str]| {
            let mut k: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            k.sort();
            k
        };
        assert_eq!(keys(&value), sorted(RECORD_FIELDS));
        assert_eq!(keys(&value["summary"]), sorted(SUMMARY_FIELDS));
        assert_eq!(keys(&value["stages"][0]), sorted(STAGE_FIELDS));
    }
}
