//! Each GPU's matmul TFLOP/s against its own recent past: a card that measures 5 % or
//! more below the median of its last ten recorded runs is slowing down (a fan going, a
//! paste drying, a riser degrading) before it fails anything absolute.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::record::{Check, Verdict};

/// How many earlier figures of a GPU its median is taken over.
pub const HISTORY: usize = 10;
/// Fewer earlier figures than this make no median worth holding a GPU to.
pub const MIN_HISTORY: usize = 3;
/// A figure this far below the median is a warning.
pub const DROP_WARN: f64 = 0.05;
/// Run folders looked through for earlier figures, newest first.
const FOLDERS_LOOKED_AT: usize = 200;
/// A `run.json` larger than this is no record this stage wrote; it is passed over.
const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Earlier figures, newest first, by GPU address and precision label (`fp16`, `f32`).
pub type History = BTreeMap<(String, String), Vec<f64>>;

/// The `gpu-gemm` figures of the runs recorded beside `run_dir` (its siblings in the
/// state folder's `runs/`), newest first, at most [`HISTORY`] per GPU and precision.
/// Records that cannot be read are passed over: history is a comparison, not a record.
pub fn earlier_figures(run_dir: &Path, stage: &str) -> History {
    let mut history = History::new();
    let Some(runs) = run_dir.parent() else {
        return history;
    };
    let own = run_dir.file_name();
    let Ok(entries) = std::fs::read_dir(runs) else {
        return history;
    };
    let mut folders: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name() != own)
        .collect();
    // Run ids begin with their start time, so names sort as the runs began.
    folders.sort();
    for folder in folders.iter().rev().take(FOLDERS_LOOKED_AT) {
        let path = folder.join("run.json");
        let small = std::fs::metadata(&path).is_ok_and(|m| m.len() <= MAX_RECORD_BYTES);
        let Some(record) = small
            .then(|| std::fs::read(&path).ok())
            .flatten()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        else {
            continue;
        };
        for (key, tflops) in figures_of(&record, stage) {
            let earlier = history.entry(key).or_default();
            if earlier.len() < HISTORY {
                earlier.push(tflops);
            }
        }
    }
    history
}

/// `gpuN_LABEL_tflops` figures with their GPU's address, from one record's `stage`.
fn figures_of(record: &Value, stage: &str) -> Vec<((String, String), f64)> {
    let Some(stages) = record["stages"].as_array() else {
        return Vec::new();
    };
    stages
        .iter()
        .filter(|s| s["name"] == stage)
        .flat_map(|s| s["metrics"].as_array().cloned().unwrap_or_default())
        .filter_map(|metric| {
            let name = metric["name"].as_str()?;
            let label = name.strip_suffix("_tflops")?.split_once('_')?.1.to_string();
            let subject = metric["subject"].as_str()?.to_string();
            let value = metric["value"]
                .as_f64()
                .filter(|v| v.is_finite() && *v > 0.0)?;
            Some(((subject, label), value))
        })
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}

/// GPU `subject`'s `label` figure `tflops` against its `earlier` ones: a warning when it
/// fell [`DROP_WARN`] or more below their median, a pass otherwise; `None` with too
/// little history to judge.
pub fn judge(subject: &str, label: &str, tflops: f64, earlier: &[f64]) -> Option<Check> {
    if earlier.len() < MIN_HISTORY {
        return None;
    }
    let median = median(earlier);
    let change = tflops / median - 1.0;
    Some(Check {
        name: format!("{label} matmul against its history"),
        subject: Some(subject.to_string()),
        expected: format!(
            "within {:.0} % of its median of the last {} runs, {median:.1} TFLOP/s",
            DROP_WARN * 100.0,
            earlier.len()
        ),
        found: format!("{tflops:.1} TFLOP/s ({:+.1} %)", change * 100.0),
        verdict: Verdict::warn_if(change <= -DROP_WARN),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(dir: &Path, id: &str, fp16: f64) {
        let folder = dir.join(id);
        std::fs::create_dir_all(&folder).unwrap();
        let record = json!({
            "id": id,
            "stages": [{"name": "gpu-gemm", "metrics": [
                {"name": "gpu0_fp16_tflops", "value": fp16, "unit": "TFLOP/s", "subject": "0000:41:00.0"},
                {"name": "gpu0_fp16_load_s", "value": 3.0, "unit": "s"},
                {"name": "gpu1_f32_tflops", "value": 80.0, "unit": "TFLOP/s", "subject": "0000:42:00.0"}
            ]}]
        });
        std::fs::write(folder.join("run.json"), record.to_string()).unwrap();
    }

    #[test]
    fn the_newest_ten_figures_of_each_gpu_are_its_history() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        for i in 0..14 {
            record(
                &runs,
                &format!("20261201-0000{i:02}-aaaaaa"),
                150.0 + f64::from(i),
            );
        }
        std::fs::create_dir_all(runs.join("20261201-000099-broken")).unwrap();
        std::fs::write(runs.join("20261201-000099-broken/run.json"), "{not json").unwrap();
        let own = runs.join("20261201-000100-cccccc");
        record(&runs, "20261201-000100-cccccc", 1.0);
        let history = earlier_figures(&own, "gpu-gemm");
        let fp16 = &history[&("0000:41:00.0".to_string(), "fp16".to_string())];
        assert_eq!(fp16.len(), HISTORY);
        assert_eq!(fp16[0], 163.0, "newest first, own run left out");
        assert_eq!(
            history[&("0000:42:00.0".to_string(), "f32".to_string())].len(),
            HISTORY
        );
        assert_eq!(history.len(), 2);
    }

    #[test]
    fn a_drop_of_five_percent_below_the_median_warns_with_both_figures() {
        let earlier = [160.0, 158.0, 161.0, 159.0, 160.0];
        let check = judge("0000:41:00.0", "fp16", 151.0, &earlier).unwrap();
        assert_eq!(check.verdict, Verdict::Warn);
        assert!(check.expected.contains("160.0 TFLOP/s"), "{check:?}");
        assert!(check.found.contains("151.0 TFLOP/s (-5.6 %)"), "{check:?}");
        let check = judge("0000:41:00.0", "fp16", 153.0, &earlier).unwrap();
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
        assert!(judge("0000:41:00.0", "fp16", 10.0, &earlier[..2]).is_none());
    }
}
