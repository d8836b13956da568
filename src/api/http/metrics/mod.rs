//! `/metrics`: the agent's figures in the Prometheus text format.
//!
//! Names follow Prometheus practice: base units in the name (seconds, bytes, watts,
//! joules, celsius, hertz, ratios 0 to 1), `_total` for counters, one family per
//! measured quantity, and a `gpu` (index) and `pci_address` label rather than a GPU in
//! the name. Results come from the store's in-memory briefs, the newest finished one of
//! every suite and every stage, each with when it was made; no run id is a label. The
//! box's SKU belongs on the scrape target (file_sd); `tinyperf_box_info` carries it too,
//! for joins.

mod exposition;
mod image;
mod inventory;
pub mod process;
mod results;
mod telemetry;

use std::sync::Arc;

use chrono::Utc;
use serde_json::Value;

use crate::agent::live::TimedSample;
use crate::agent::{AgentState, Counters, StatusSnapshot};
use crate::record::{LatestResults, RunRecord, RunState};

use exposition::{bool_value, Exposition, Kind};

/// What one scrape reports.
pub struct Snapshot<'a> {
    pub status: &'a StatusSnapshot,
    pub counters: &'a Counters,
    pub hardware: &'a Value,
    pub hostname: &'a str,
    /// The newest finished result of every suite and stage.
    pub latest: &'a LatestResults,
    /// Each suite's newest finished run in full, for its checks about single GPUs.
    pub suite_runs: &'a [Arc<RunRecord>],
    /// The newest telemetry sample of the run in progress.
    pub live_sample: Option<&'a TimedSample>,
    pub process: Option<&'a process::ProcessFigures>,
    /// Runs in the store's index.
    pub runs_stored: usize,
    /// Wrong write tokens seen and the writes refused for them.
    pub tokens: super::auth::TokenFigures,
    /// The OS image the agent runs on; `None` when not read.
    pub image: Option<&'a crate::update::ImageStatus>,
}

pub fn render(s: &Snapshot<'_>) -> String {
    let mut out = Exposition::default();
    agent(&mut out, s);
    inventory::render(&mut out, s.hardware);
    results::render(&mut out, s.latest, s.hardware);
    for run in s.suite_runs {
        results::gpu_checks(&mut out, run, s.hardware);
    }
    if let Some(sample) = s.live_sample {
        telemetry::render(&mut out, sample);
    }
    if let Some(figures) = s.process {
        process::render(&mut out, figures);
    }
    tokens(&mut out, &s.tokens);
    if let Some(os) = s.image.and_then(|image| image.os.as_ref()) {
        image::render(&mut out, os);
    }
    out.into_text()
}

fn tokens(out: &mut Exposition, figures: &super::auth::TokenFigures) {
    out.single(
        "tinyperf_http_bad_tokens_total",
        Kind::Counter,
        "Writes over HTTP that presented a wrong or malformed bearer token.",
        figures.bad_tokens as f64,
    );
    out.single(
        "tinyperf_http_token_refusals_total",
        Kind::Counter,
        "Writes over HTTP answered 429 because their address presented too many wrong tokens.",
        figures.refused as f64,
    );
}

fn agent(out: &mut Exposition, s: &Snapshot<'_>) {
    let status = s.status;
    out.gauge(
        "tinyperf_box_info",
        "Always 1; the labels name the SKU the box was judged as, the agent version and the host name.",
        &[
            ("sku", &status.sku),
            ("version", &status.version),
            ("hostname", s.hostname),
        ],
        1.0,
    );
    out.single(
        "tinyperf_agent_running",
        Kind::Gauge,
        "1 while a run is in progress, else 0.",
        bool_value(status.state == AgentState::Running),
    );
    out.single(
        "tinyperf_agent_progress_ratio",
        Kind::Gauge,
        "Progress of the run in progress, 0 to 1; 0 when idle.",
        status.progress,
    );
    let uptime = (Utc::now() - status.agent_started_at).num_milliseconds() as f64 / 1000.0;
    out.single(
        "tinyperf_agent_uptime_seconds",
        Kind::Gauge,
        "Seconds since the agent started.",
        uptime.max(0.0),
    );
    out.single(
        "tinyperf_agent_runs_started_total",
        Kind::Counter,
        "Runs started since the agent started.",
        s.counters.runs_started as f64,
    );
    out.family(
        "tinyperf_agent_runs_finished_total",
        Kind::Counter,
        "Runs finished since the agent started, by final state.",
    );
    for state in RunState::ALL.iter().filter(|s| s.is_final()) {
        let count = s
            .counters
            .runs_finished
            .get(state.as_str())
            .copied()
            .unwrap_or(0);
        out.sample(
            "tinyperf_agent_runs_finished_total",
            &[("state", state.as_str())],
            count as f64,
        );
    }
    out.single(
        "tinyperf_store_records_skipped",
        Kind::Gauge,
        "Run records in the store that could not be read when the agent started.",
        s.counters.store_records_skipped as f64,
    );
    out.single(
        "tinyperf_store_runs",
        Kind::Gauge,
        "Runs kept in the store.",
        s.runs_stored as f64,
    );
    out.single(
        "tinyperf_store_unsaved_runs",
        Kind::Gauge,
        "Run records the disk has not taken yet (kept in memory and retried).",
        status.unsaved_runs.len() as f64,
    );
}

/// The host name the kernel has, for `tinyperf_box_info`; empty when unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::StatusSnapshot;
    use crate::record::{Check, Metric, RunBrief, StageResult, Trigger, Verdict};
    use crate::runtime::telemetry::{GpuSample, TelemetrySample, Temperature, ThrottleReason};

    fn status() -> StatusSnapshot {
        StatusSnapshot {
            state: AgentState::Running,
            current_run: Some("r".into()),
            current_suite: Some("inventory".into()),
            current_stage: None,
            progress: 0.25,
            message: None,
            last_run: None,
            unsaved_runs: Vec::new(),
            sku: "tinybox-\"green\"".into(),
            version: "0.1.0".into(),
            agent_started_at: Utc::now(),
        }
    }

    fn run(
        id: &str,
        suite: &str,
        stage: &str,
        metrics: Vec<Metric>,
        checks: Vec<Check>,
    ) -> RunRecord {
        let mut run = RunRecord::new(id.into(), suite.into(), Trigger::Http, Default::default());
        run.stages.push(StageResult {
            checks,
            ..StageResult::measured(stage, Verdict::Pass, Utc::now(), metrics)
        });
        run.finish(RunState::Passed, None);
        run
    }

    #[test]
    fn the_image_info_is_there_only_on_an_image() {
        let root = tempfile::tempdir().unwrap();
        crate::update::fixture::image(
            root.path(),
            crate::update::fixture::ImageLayout {
                a: crate::update::fixture::SlotContent::Empty,
                b: crate::update::fixture::SlotContent::Version("20261205.1130"),
                booted: 'b',
                verity: true,
            },
        );
        let image = crate::update::status::read(root.path(), Default::default());
        let hardware = serde_json::json!({});
        let (status, counters, latest) = (status(), Counters::default(), LatestResults::default());
        let render_with = |image: Option<&crate::update::ImageStatus>| {
            render(&Snapshot {
                status: &status,
                counters: &counters,
                hardware: &hardware,
                hostname: "tb",
                latest: &latest,
                suite_runs: &[],
                live_sample: None,
                process: None,
                runs_stored: 0,
                tokens: Default::default(),
                image,
            })
        };
        let text = render_with(Some(&image));
        assert!(
            text.contains("# TYPE tinyperf_image_info gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("\ntinyperf_image_info{version=\"20261205.1130\",slot=\"b\"} 1\n"),
            "{text}"
        );
        // A box with no history yet still gives every result and state, at 0.
        for line in [
            "tinyperf_image_boot_assessments_total{result=\"pass\"} 0",
            "tinyperf_image_boot_assessments_total{result=\"fail\"} 0",
            "tinyperf_image_boot_assessments_total{result=\"rejected\"} 0",
            "tinyperf_image_rollbacks_total 0",
            "tinyperf_image_on_trial 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("tinyperf_image_last_rejection_timestamp_seconds"));
        let debian = crate::update::ImageStatus::not_an_image("no os-release");
        let text = render_with(Some(&debian));
        assert!(!text.contains("tinyperf_image_"), "{text}");

        let mut image = image;
        let os = image.os.as_mut().unwrap();
        os.on_trial = true;
        os.rollbacks_total = 2;
        os.boot_assessments_total = [("pass".to_string(), 5), ("rejected".to_string(), 2)].into();
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-07T09:12:00Z")
            .unwrap()
            .with_timezone(&Utc);
        os.rejections = vec![crate::update::status::Rejection {
            version: "20261207.0900\"x".into(),
            at: Some(at),
            reason: "20261207.0900 rejected: training img/s 4,410 vs 5,220".into(),
            previous_version: Some("20261206.0900".into()),
            failed_checks: Vec::new(),
        }];
        let mut update = crate::update::progress::UpdateProgress::idle();
        update.state = "downloading".into();
        update.version = "20261208.0900".into();
        update.available = "20261208.0900".into();
        update.done_bytes = 512 << 20;
        update.total_bytes = 2 << 30;
        os.update = Some(update);
        let text = render_with(Some(&image));
        for line in [
            "tinyperf_image_on_trial 1",
            "tinyperf_image_boot_assessments_total{result=\"pass\"} 5",
            "tinyperf_image_boot_assessments_total{result=\"fail\"} 0",
            "tinyperf_image_boot_assessments_total{result=\"rejected\"} 2",
            "tinyperf_image_rollbacks_total 2",
            "tinyperf_image_last_rejection_timestamp_seconds{version=\"20261207.0900\\\"x\"} 1796634720",
            "tinyperf_image_update_available{version=\"20261208.0900\"} 1",
            "tinyperf_image_update_state{state=\"idle\"} 0",
            "tinyperf_image_update_state{state=\"downloading\"} 1",
            "tinyperf_image_update_state{state=\"written\"} 0",
            "tinyperf_image_update_downloaded_bytes 536870912",
            "tinyperf_image_update_size_bytes 2147483648",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        for (family, kind) in [
            ("tinyperf_image_boot_assessments_total", "counter"),
            ("tinyperf_image_rollbacks_total", "counter"),
            ("tinyperf_image_update_available", "gauge"),
            ("tinyperf_image_update_state", "gauge"),
        ] {
            assert_eq!(
                text.matches(&format!("# TYPE {family} {kind}\n")).count(),
                1,
                "{text}"
            );
        }
        assert_eq!(text.matches("tinyperf_image_update_state{").count(), 5);
        image
            .os
            .as_mut()
            .unwrap()
            .update
            .as_mut()
            .unwrap()
            .available = String::new();
        assert!(render_with(Some(&image))
            .contains("\ntinyperf_image_update_available{version=\"\"} 0\n"));
    }

    #[test]
    fn renders_box_results_checks_telemetry_and_process_families() {
        let acceptance = run(
            "r1",
            "acceptance",
            "gpu-gemm",
            vec![
                // The runtime's device 0 is the inventory's GPU 1.
                Metric::new("gpu0_fp16_tflops", 165.5, "TFLOP/s")
                    .about(Some("0000:41:00.0".into())),
                // As a record from before figures carried their GPU's address.
                Metric::new("gpu1_f32_tflops", 80.0, "TFLOP/s"),
                Metric::new("energy_kwh", 0.5, "kWh"),
            ],
            vec![Check {
                name: "silent corruption".into(),
                subject: Some("0000:41:00.0".into()),
                expected: "identical".into(),
                found: "differs".into(),
                verdict: Verdict::Fail,
            }],
        );
        let smoke = run(
            "r2",
            "smoke",
            "train",
            vec![Metric::new("img_per_s", 812.0, "img/s")],
            vec![],
        );
        let briefs = [RunBrief::from(&smoke), RunBrief::from(&acceptance)];
        let latest = LatestResults::collect(briefs.iter());
        let mut counters = Counters {
            runs_started: 3,
            ..Counters::default()
        };
        counters.runs_finished.insert("failed".into(), 2);
        let hardware = serde_json::json!({
            "gpus": [
                {"address": "0000:01:00.0", "link": {"current_width": 8, "max_width": 16, "current_speed_gts": 16.0, "max_speed_gts": 16.0}},
                {"address": "0000:41:00.0"},
            ],
            "checks": [
                {"name": "gpu_count", "verdict": "pass"},
                {"name": "gpu_link", "subject": "0000:01:00.0", "verdict": "fail"},
                {"name": "memory", "verdict": "pass"},
            ],
        });
        let sample = TimedSample {
            at: Utc::now(),
            sample: TelemetrySample {
                t_s: 1.0,
                gpus: vec![GpuSample {
                    index: 0,
                    address: Some("0000:01:00.0".into()),
                    power_w: Some(350.0),
                    temperatures: vec![Temperature {
                        label: "edge".into(),
                        celsius: 71.0,
                        limit_c: Some(100.0),
                    }],
                    sm_clock_mhz: Some(2520.0),
                    mem_clock_mhz: None,
                    util_percent: Some(97.0),
                    throttling: Some(vec![ThrottleReason::SwPowerCap]),
                }],
                cpu_temp_c: None,
            },
        };
        let figures = process::read();
        let text = render(&Snapshot {
            status: &status(),
            counters: &counters,
            hardware: &hardware,
            hostname: "tb-g-0001",
            latest: &latest,
            suite_runs: &[Arc::new(smoke.clone())],
            live_sample: Some(&sample),
            process: figures.as_ref(),
            runs_stored: 4,
            tokens: crate::api::http::auth::TokenFigures {
                bad_tokens: 12,
                refused: 3,
            },
            image: None,
        });
        // Smoke finished after acceptance; acceptance's checks about single GPUs stay.
        let suite_runs = [Arc::new(acceptance), Arc::new(smoke)];
        let with_checks = render(&Snapshot {
            suite_runs: &suite_runs,
            ..Snapshot {
                status: &status(),
                counters: &counters,
                hardware: &hardware,
                hostname: "tb-g-0001",
                latest: &latest,
                suite_runs: &[],
                live_sample: None,
                process: None,
                runs_stored: 4,
                tokens: Default::default(),
                image: None,
            }
        });
        for line in [
            "tinyperf_box_info{sku=\"tinybox-\\\"green\\\"\",version=\"0.1.0\",hostname=\"tb-g-0001\"} 1",
            "tinyperf_agent_running 1",
            "tinyperf_http_bad_tokens_total 12",
            "tinyperf_http_token_refusals_total 3",
            "tinyperf_agent_progress_ratio 0.25",
            "tinyperf_agent_runs_started_total 3",
            "tinyperf_agent_runs_finished_total{state=\"failed\"} 2",
            "tinyperf_agent_runs_finished_total{state=\"passed\"} 0",
            "tinyperf_inventory_gpus 2",
            "tinyperf_inventory_checks{verdict=\"pass\"} 2",
            "tinyperf_inventory_check_outcome{check=\"gpu_link\",gpu=\"0\",pci_address=\"0000:01:00.0\",subject=\"\",outcome=\"fail\"} 1",
            "tinyperf_gpu_pcie_link_width{gpu=\"0\",pci_address=\"0000:01:00.0\"} 8",
            "tinyperf_gpu_pcie_link_speed_transfers_per_second{gpu=\"0\",pci_address=\"0000:01:00.0\"} 16000000000",
            // Both suites keep their results although smoke finished last.
            "tinyperf_suite_state{suite=\"acceptance\",state=\"passed\"} 1",
            "tinyperf_suite_state{suite=\"smoke\",state=\"failed\"} 0",
            "tinyperf_stage_verdict{suite=\"acceptance\",stage=\"gpu-gemm\",verdict=\"pass\"} 1",
            "tinyperf_train_images_per_second{suite=\"smoke\",stage=\"train\"} 812",
            "tinyperf_stage_energy_joules{suite=\"acceptance\",stage=\"gpu-gemm\"} 1800000",
            "tinyperf_gpu_gemm_flop_per_second{suite=\"acceptance\",stage=\"gpu-gemm\",gpu=\"1\",pci_address=\"0000:41:00.0\",precision=\"fp16\"} 165500000000000",
            "tinyperf_gpu_gemm_flop_per_second{suite=\"acceptance\",stage=\"gpu-gemm\",gpu=\"1\",pci_address=\"\",precision=\"f32\"} 80000000000000",
            "tinyperf_gpu_power_watts{gpu=\"0\",pci_address=\"0000:01:00.0\"} 350",
            "tinyperf_gpu_temperature_celsius{gpu=\"0\",pci_address=\"0000:01:00.0\",sensor=\"edge\"} 71",
            "tinyperf_gpu_temperature_limit_celsius{gpu=\"0\",pci_address=\"0000:01:00.0\",sensor=\"edge\"} 100",
            "tinyperf_gpu_sm_clock_hertz{gpu=\"0\",pci_address=\"0000:01:00.0\"} 2520000000",
            "tinyperf_gpu_utilization_ratio{gpu=\"0\",pci_address=\"0000:01:00.0\"} 0.97",
            "tinyperf_gpu_throttled{gpu=\"0\",pci_address=\"0000:01:00.0\"} 1",
            "tinyperf_gpu_throttle_reason{gpu=\"0\",pci_address=\"0000:01:00.0\",reason=\"sw_power_cap\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        for prefix in [
            "tinyperf_suite_result_timestamp_seconds{suite=\"acceptance\"} ",
            "tinyperf_stage_result_timestamp_seconds{suite=\"smoke\",stage=\"train\"} ",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_start_time_seconds ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(prefix)),
                "missing {prefix:?} in\n{text}"
            );
        }
        assert!(with_checks.contains(
            "tinyperf_gpu_check_outcome{suite=\"acceptance\",stage=\"gpu-gemm\",check=\"silent corruption\",gpu=\"1\",pci_address=\"0000:41:00.0\",outcome=\"fail\"} 1\n"
        ));
        assert!(!with_checks.contains("tinyperf_gpu_power_watts"));
        assert!(!text.contains("run_id"));
        assert!(!text.contains("runs_finished_total{state=\"running\"}"));
        assert!(text.contains("# TYPE tinyperf_agent_runs_started_total counter\n"));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
    }
}
