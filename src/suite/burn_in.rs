//! The `burn-in` suite: the factory line's test. The full health suite with the power
//! ramp, then the full training run (tinyperf's own `mlperf-resnet` on ImageNet, or a
//! configured external benchmark), then the stage `burn-in-limits`, which holds the
//! training run's wall time against the box's time limit and every temperature of the
//! whole run against the box's thermal limits.

use serde_json::{Map, Value};

use super::external;
use super::mlperf_resnet;
use super::options::{self, CPU_TEMP_LIMIT_C, GPU_TEMP_LIMIT_C, TIME_LIMIT_S};
use super::stage::{StageContext, StageReport};
use crate::inventory::{find_sku, BurnInLimits, DEFAULT_BURN_IN};
use crate::record::{Check, StageResult, Verdict};
use crate::runtime::telemetry::bmc_watch::BmcExtremes;
use crate::runtime::telemetry::{Peak, ThermalPeaks};

/// The suite's name.
pub const NAME: &str = "burn-in";
/// The name of the stage that judges the run against the box's limits.
pub const LIMITS_STAGE: &str = "burn-in-limits";
/// The name of the check on the BMC's fans and power supplies over the run.
pub const FANS_AND_SUPPLIES: &str = "fans-and-supplies";
/// How long each power-ramp step is held in a burn-in unless `ramp_seconds` says.
pub const DEFAULT_RAMP_SECONDS: f64 = 30.0;

/// The options that run a benchmark command as the burn-in's training: the `external`
/// suite's, given as they are.
pub const EXTERNAL_KEYS: [&str; 7] = [
    "command",
    "env",
    "cwd",
    "mllog",
    "timeout_s",
    "epochs",
    external::BENCHMARK,
];

/// `options` split into the external benchmark's (with `stage_timeout_s`, which it
/// also takes) and the burn-in's own.
pub fn split_options(options: &Map<String, Value>) -> (Map<String, Value>, Map<String, Value>) {
    let (mut external, own): (Map<String, Value>, Map<String, Value>) = options
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(key, _)| EXTERNAL_KEYS.contains(&key.as_str()));
    if !external.is_empty() {
        if let Some(timeout) = options.get(options::STAGE_TIMEOUT_S.key) {
            external.insert(options::STAGE_TIMEOUT_S.key.into(), timeout.clone());
        }
    }
    (external, own)
}

/// Whether the burn-in trains with an external benchmark rather than tinyperf's own run.
pub fn uses_external(options: &Map<String, Value>) -> bool {
    options
        .keys()
        .any(|key| EXTERNAL_KEYS.contains(&key.as_str()))
}

/// The limits a run is held to: the SKU's (the one the run judges the box as, else the
/// one its inventory recognised), with the options' overrides; the default limits and
/// no time limit for a box that is no known SKU. The text says where they came from.
pub fn limits(sku_name: Option<&str>, options: &Map<String, Value>) -> (BurnInLimits, String) {
    let spec = sku_name.and_then(find_sku);
    let mut limits = spec.map_or(DEFAULT_BURN_IN, |s| s.burn_in);
    let mut source = match spec {
        Some(spec) => format!("limits of {} from the SKU table", spec.name),
        None => "no known SKU: the default thermal limits and no time limit".to_string(),
    };
    let mut overridden = Vec::new();
    if let Some(limit) = options.get(TIME_LIMIT_S.key).and_then(Value::as_f64) {
        limits.time_limit_s = Some(limit);
        overridden.push(TIME_LIMIT_S.key);
    }
    if let Some(limit) = options.get(CPU_TEMP_LIMIT_C.key).and_then(Value::as_f64) {
        limits.cpu_temp_limit_c = limit;
        overridden.push(CPU_TEMP_LIMIT_C.key);
    }
    if let Some(limit) = options.get(GPU_TEMP_LIMIT_C.key).and_then(Value::as_f64) {
        limits.gpu_temp_limit_c = limit;
        overridden.push(GPU_TEMP_LIMIT_C.key);
    }
    if !overridden.is_empty() {
        source.push_str(&format!("; given by option: {}", overridden.join(", ")));
    }
    (limits, source)
}

/// The stage `burn-in-limits`: `earlier` are the results of the stages before it,
/// `peaks` every sensor's hottest reading over them.
pub fn judge(
    ctx: &StageContext<'_>,
    peaks: &ThermalPeaks,
    bmc: &BmcExtremes,
    earlier: &[StageResult],
) -> StageResult {
    let recognised = ctx
        .hardware
        .as_ref()
        .and_then(|h| h.get("sku"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let sku_name = ctx.sku.clone().or(recognised);
    let (limits, source) = limits(sku_name.as_deref(), ctx.options());
    let mut report = StageReport::new(LIMITS_STAGE);
    report.findings.push(source);
    let time = time_check(&mut report, &limits, earlier);
    report.checks.push(time);
    let cpu = cpu_check(&mut report, &limits, peaks.cpu.as_ref());
    report.checks.push(cpu);
    let gpus = gpu_checks(&mut report, &limits, peaks);
    report.checks.extend(gpus);
    let fans = fans_and_supplies_check(&mut report, bmc);
    report.checks.push(fans);
    report.metric("telemetry_samples", peaks.samples as f64, "count");
    report.finish(None)
}

fn check(
    name: &str,
    subject: Option<String>,
    expected: String,
    found: String,
    verdict: Verdict,
) -> Check {
    Check {
        name: name.to_string(),
        subject,
        expected,
        found,
        verdict,
    }
}

fn time_check(report: &mut StageReport, limits: &BurnInLimits, earlier: &[StageResult]) -> Check {
    let expected = match (limits.time_limit_s, limits.allowed_time_s()) {
        (Some(limit), Some(allowed)) => format!(
            "at most {allowed:.0} s ({limit:.0} s + {:.0} %)",
            limits.time_tolerance * 100.0
        ),
        _ => "a time limit for the box".to_string(),
    };
    let training = earlier
        .iter()
        .rev()
        .find(|r| r.name == mlperf_resnet::NAME || r.name == external::NAME);
    let Some(training) = training else {
        return check(
            "training-time",
            None,
            expected,
            "no training stage ran".into(),
            Verdict::Skip,
        );
    };
    if training.verdict == Verdict::Error {
        return check(
            "training-time",
            None,
            expected,
            format!(
                "the training could not run: {}",
                training.message.as_deref().unwrap_or("no reason given")
            ),
            Verdict::Error,
        );
    }
    let seconds = (training.finished_at - training.started_at)
        .to_std()
        .map_or(0.0, |d| d.as_secs_f64());
    report.metric("training_seconds", seconds, "s");
    let Some(allowed) = limits.allowed_time_s() else {
        return check(
            "training-time",
            None,
            expected,
            format!(
                "{} s; no time limit is known for this box (give {})",
                round_seconds(seconds),
                TIME_LIMIT_S.key
            ),
            Verdict::Skip,
        );
    };
    report.metric("time_limit_s", allowed, "s");
    check(
        "training-time",
        None,
        expected,
        format!(
            "{} s, the wall time of stage {}",
            round_seconds(seconds),
            training.name
        ),
        Verdict::pass_if(seconds <= allowed),
    )
}

/// Whole seconds for a run of hours, a tenth of one for a short one.
fn round_seconds(seconds: f64) -> String {
    if seconds < 100.0 {
        format!("{seconds:.1}")
    } else {
        format!("{seconds:.0}")
    }
}

fn where_seen(peak: &Peak) -> String {
    format!("in stage {} at {:.0} s", peak.stage, peak.t_s)
}

fn cpu_check(report: &mut StageReport, limits: &BurnInLimits, peak: Option<&Peak>) -> Check {
    let expected = format!(
        "at most {:.0} °C for the whole run",
        limits.cpu_temp_limit_c
    );
    let Some(peak) = peak else {
        return check(
            "cpu-temperature",
            None,
            expected,
            "no CPU temperature was read (no k10temp or coretemp sensor)".into(),
            Verdict::Skip,
        );
    };
    report.metric("cpu_temp_peak_c", peak.celsius, "°C");
    check(
        "cpu-temperature",
        None,
        expected,
        format!("peak {:.1} °C {}", peak.celsius, where_seen(peak)),
        Verdict::pass_if(peak.celsius <= limits.cpu_temp_limit_c),
    )
}

fn fans_and_supplies_check(report: &mut StageReport, bmc: &BmcExtremes) -> Check {
    let expected = "every fan turning and no power supply failing, as the BMC reads them \
                    for the whole run"
        .to_string();
    if bmc.readings == 0 {
        return check(
            FANS_AND_SUPPLIES,
            None,
            expected,
            format!(
                "not read: {}",
                bmc.unread.as_deref().unwrap_or("the BMC gave no reading")
            ),
            Verdict::Skip,
        );
    }
    for (fan, rpm) in &bmc.slowest_fans {
        report.metric(&format!("bmc_{}_min_rpm", metric_word(fan)), *rpm, "RPM");
    }
    report.metric("bmc_readings", bmc.readings as f64, "count");
    if bmc.troubles.is_empty() {
        return check(
            FANS_AND_SUPPLIES,
            None,
            expected,
            format!(
                "{} readings of {} fans and {} supplies, none in trouble",
                bmc.readings,
                bmc.slowest_fans.len(),
                bmc.supplies
            ),
            Verdict::Pass,
        );
    }
    let troubles: Vec<String> = bmc
        .troubles
        .iter()
        .map(|t| format!("{}, first in stage {} at {:.0} s", t.what, t.stage, t.t_s))
        .collect();
    check(
        FANS_AND_SUPPLIES,
        None,
        expected,
        troubles.join("; "),
        Verdict::Fail,
    )
}

/// A sensor's name as a metric name's part: `CPU FAN1` gives `cpu_fan1`.
fn metric_word(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

fn gpu_checks(report: &mut StageReport, limits: &BurnInLimits, peaks: &ThermalPeaks) -> Vec<Check> {
    let expected = format!(
        "every sensor at most {:.0} °C for the whole run",
        limits.gpu_temp_limit_c
    );
    let mut checks = Vec::new();
    for gpu in &peaks.gpus {
        let Some((label, hottest)) = gpu.hottest() else {
            checks.push(check(
                "gpu-temperature",
                Some(gpu.subject.clone()),
                expected.clone(),
                "no temperature was read".into(),
                Verdict::Skip,
            ));
            continue;
        };
        for (sensor, peak) in &gpu.sensors {
            report.device_metric(
                &format!("{}_{sensor}_temp_peak_c", gpu.device),
                peak.celsius,
                "°C",
                Some(&gpu.subject),
            );
        }
        let over: Vec<String> = gpu
            .sensors
            .iter()
            .filter(|(_, peak)| peak.celsius > limits.gpu_temp_limit_c)
            .map(|(sensor, peak)| format!("{sensor} {:.1} °C", peak.celsius))
            .collect();
        let found = if over.is_empty() {
            format!(
                "peak {:.1} °C ({label}) {}",
                hottest.celsius,
                where_seen(hottest)
            )
        } else {
            format!(
                "GPU {} peaked at {:.1} °C ({label}) {}; over the limit: {}",
                gpu.subject,
                hottest.celsius,
                where_seen(hottest),
                over.join(", ")
            )
        };
        checks.push(check(
            "gpu-temperature",
            Some(gpu.subject.clone()),
            expected.clone(),
            found,
            Verdict::pass_if(over.is_empty()),
        ));
    }
    if checks.is_empty() {
        checks.push(check(
            "gpu-temperature",
            None,
            expected,
            "no GPU reported a temperature".into(),
            Verdict::Skip,
        ));
    }
    checks
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicBool;

    use chrono::{Duration, Utc};
    use serde_json::json;

    use super::*;
    use crate::runtime::telemetry::GpuPeaks;
    use crate::suite::plan::{preflight, RunPlan, StageKind, Workspace};

    fn peak(celsius: f64) -> Peak {
        Peak {
            celsius,
            stage: "mlperf-resnet".into(),
            t_s: 600.0,
        }
    }

    fn peaks(cpu: f64, junctions: &[f64]) -> ThermalPeaks {
        ThermalPeaks {
            cpu: Some(peak(cpu)),
            gpus: junctions
                .iter()
                .enumerate()
                .map(|(i, j)| GpuPeaks {
                    subject: format!("0000:{:02x}:00.0", 0x41 + i),
                    device: format!("gpu{i}"),
                    sensors: BTreeMap::from([
                        ("edge".to_string(), peak(j - 12.0)),
                        ("junction".to_string(), peak(*j)),
                    ]),
                })
                .collect(),
            samples: 10,
        }
    }

    fn training(seconds: i64) -> StageResult {
        let started = Utc::now();
        StageResult {
            finished_at: started + Duration::seconds(seconds),
            ..StageResult::measured(external::NAME, Verdict::Pass, started, Vec::new())
        }
    }

    fn judged(
        options: serde_json::Value,
        sku: &str,
        peaks: &ThermalPeaks,
        earlier: &[StageResult],
    ) -> StageResult {
        judged_with_bmc(options, sku, peaks, &BmcExtremes::default(), earlier)
    }

    fn judged_with_bmc(
        options: serde_json::Value,
        sku: &str,
        peaks: &ThermalPeaks,
        bmc: &BmcExtremes,
        earlier: &[StageResult],
    ) -> StageResult {
        let serde_json::Value::Object(options) = options else {
            unreachable!("an object")
        };
        let plan: RunPlan = preflight(NAME, options, Workspace::for_run(None, None)).unwrap();
        let cancel = AtomicBool::new(false);
        let mut emit = |_| {};
        let ctx = StageContext {
            root: "/".into(),
            sku: None,
            plan: &plan,
            run_dir: None,
            hardware: Some(json!({ "sku": sku })),
            cancel: &cancel,
            emit: &mut emit,
            progress_span: (0.0, 1.0),
            progress_reached: 0.0,
            stage_name: LIMITS_STAGE,
        };
        judge(&ctx, peaks, bmc, earlier)
    }

    fn external_options() -> serde_json::Value {
        json!({"command": ["true"]})
    }

    fn named<'a>(result: &'a StageResult, name: &str) -> Vec<&'a Check> {
        result.checks.iter().filter(|c| c.name == name).collect()
    }

    #[test]
    fn a_gpu_past_its_limit_fails_naming_the_gpu_and_its_peak() {
        let result = judged(
            external_options(),
            "tinybox-red",
            &peaks(70.0, &[80.0, 96.4, 85.0]),
            &[training(9_000)],
        );
        assert_eq!(result.verdict, Verdict::Fail, "{result:?}");
        let gpus = named(&result, "gpu-temperature");
        assert_eq!(gpus.len(), 3);
        let failed: Vec<_> = gpus.iter().filter(|c| c.verdict == Verdict::Fail).collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].subject.as_deref(), Some("0000:42:00.0"));
        assert!(failed[0].found.contains("96.4 °C (junction)"), "{failed:?}");
        assert!(failed[0].expected.contains("95 °C"), "{failed:?}");
        assert_eq!(named(&result, "training-time")[0].verdict, Verdict::Pass);
    }

    #[test]
    fn a_cool_box_over_its_time_limit_fails_the_time_check_with_both_figures() {
        let result = judged(
            external_options(),
            "tinybox-green",
            &peaks(70.0, &[80.0]),
            &[training(12_500)],
        );
        let time = named(&result, "training-time")[0];
        assert_eq!(time.verdict, Verdict::Fail, "{time:?}");
        assert!(
            time.expected.contains("12075 s (11500 s + 5 %)"),
            "{time:?}"
        );
        assert!(time.found.starts_with("12500 s"), "{time:?}");
        assert_eq!(named(&result, "cpu-temperature")[0].verdict, Verdict::Pass);
        // Within the tolerance passes.
        let result = judged(
            external_options(),
            "tinybox-green",
            &peaks(70.0, &[80.0]),
            &[training(12_000)],
        );
        assert_eq!(result.verdict, Verdict::Pass, "{result:?}");
    }

    #[test]
    fn options_override_the_skus_limits_and_an_unknown_box_has_no_time_limit() {
        let result = judged(
            json!({"command": ["true"], "time_limit_s": 100, "cpu_temp_limit_c": 60}),
            "tinybox-red",
            &peaks(70.0, &[80.0]),
            &[training(200)],
        );
        assert_eq!(named(&result, "training-time")[0].verdict, Verdict::Fail);
        assert_eq!(named(&result, "cpu-temperature")[0].verdict, Verdict::Fail);
        assert!(result.findings[0].contains("time_limit_s, cpu_temp_limit_c"));
        let result = judged(
            external_options(),
            "unrecognised",
            &ThermalPeaks::default(),
            &[training(200)],
        );
        assert_eq!(named(&result, "training-time")[0].verdict, Verdict::Skip);
        assert_eq!(named(&result, "cpu-temperature")[0].verdict, Verdict::Skip);
        assert_eq!(named(&result, "gpu-temperature")[0].verdict, Verdict::Skip);
        assert_eq!(result.verdict, Verdict::Skip);
    }

    #[test]
    fn a_fan_that_stopped_during_the_run_fails_naming_it_and_when() {
        let mut bmc = BmcExtremes {
            readings: 40,
            supplies: 2,
            ..BmcExtremes::default()
        };
        bmc.slowest_fans.insert("FRNT FAN2".into(), 0.0);
        bmc.troubles
            .push(crate::runtime::telemetry::bmc_watch::BmcTrouble {
                what: "fan FRNT FAN2 at 0 RPM (cr)".into(),
                stage: "mlperf-resnet".into(),
                t_s: 5400.0,
            });
        let result = judged_with_bmc(
            external_options(),
            "tinybox-red",
            &peaks(70.0, &[80.0]),
            &bmc,
            &[training(9_000)],
        );
        let fans = named(&result, FANS_AND_SUPPLIES)[0];
        assert_eq!(fans.verdict, Verdict::Fail);
        assert!(
            fans.found
                .contains("first in stage mlperf-resnet at 5400 s"),
            "{fans:?}"
        );
        assert!(result
            .metrics
            .iter()
            .any(|m| m.name == "bmc_frnt_fan2_min_rpm" && m.value == 0.0));
        bmc.troubles.clear();
        let result = judged_with_bmc(
            external_options(),
            "tinybox-red",
            &peaks(70.0, &[80.0]),
            &bmc,
            &[training(9_000)],
        );
        assert_eq!(named(&result, FANS_AND_SUPPLIES)[0].verdict, Verdict::Pass);
        // No BMC: a skip saying why, never a failure of the box.
        let result = judged(
            external_options(),
            "tinybox-red",
            &peaks(70.0, &[80.0]),
            &[training(9_000)],
        );
        assert_eq!(named(&result, FANS_AND_SUPPLIES)[0].verdict, Verdict::Skip);
    }

    #[test]
    fn a_training_that_could_not_run_is_an_error_not_a_time() {
        let mut failed = training(10);
        failed.verdict = Verdict::Error;
        failed.message = Some("ImageNet is not at /x".into());
        let result = judged(
            external_options(),
            "tinybox-red",
            &peaks(50.0, &[50.0]),
            &[failed],
        );
        let time = named(&result, "training-time")[0];
        assert_eq!(time.verdict, Verdict::Error);
        assert!(time.found.contains("/x"));
    }

    #[test]
    fn without_imagenet_the_plan_is_refused_naming_the_path_it_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let mut workspace = Workspace::for_run(None, None);
        workspace.imagenet = Some(dir.path().join("imagenet"));
        let err = preflight(NAME, Map::new(), workspace.clone()).unwrap_err();
        assert!(
            err.0
                .contains(&dir.path().join("imagenet").display().to_string()),
            "{err}"
        );
        std::fs::create_dir_all(dir.path().join("imagenet/train")).unwrap();
        std::fs::create_dir_all(dir.path().join("imagenet/val")).unwrap();
        let plan = preflight(NAME, Map::new(), workspace).unwrap();
        let mut expected = crate::suite::plan::suite_stages("health").unwrap();
        expected.extend([StageKind::MlperfResnet, StageKind::BurnInLimits]);
        assert_eq!(plan.stages, expected);
        assert_eq!(plan.stages.last().unwrap().name(), LIMITS_STAGE);
        assert!(plan.recipe.is_some());
    }

    #[test]
    fn an_external_benchmark_replaces_the_training_and_takes_no_recipe_keys() {
        let serde_json::Value::Object(options) = external_options() else {
            unreachable!()
        };
        let plan = preflight(NAME, options.clone(), Workspace::for_run(None, None)).unwrap();
        assert_eq!(plan.stages[9].name(), "external");
        assert!(plan.external.is_some() && plan.recipe.is_none());
        let mut with_recipe = options;
        with_recipe.insert("base_lr".into(), json!(2.0));
        let err = preflight(NAME, with_recipe, Workspace::for_run(None, None)).unwrap_err();
        assert!(err.0.contains("base_lr"), "{err}");
    }

    #[test]
    fn external_options_are_split_from_the_burn_ins_own() {
        let serde_json::Value::Object(options) = json!({
            "command": ["x"], "ramp_seconds": 5, "stage_timeout_s": 100, "benchmark": "b"
        }) else {
            unreachable!()
        };
        let (external, own) = split_options(&options);
        assert_eq!(
            external.keys().collect::<Vec<_>>(),
            ["benchmark", "command", "stage_timeout_s"]
        );
        assert_eq!(
            own.keys().collect::<Vec<_>>(),
            ["ramp_seconds", "stage_timeout_s"]
        );
        assert!(uses_external(&options));
    }
}
