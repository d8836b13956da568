//! `GET /`: the status page, rendered on the server from the `templates/` folder so it
//! reads without JavaScript: state, progress, GPU tiles, figures of the recent values
//! as SVG, the box, its checks, comparisons and the history. `page.js` then draws
//! the live charts (uPlot) from `/api/v1/live` and the event stream.
//!
//! The hardware view is read defensively: every key may be missing or of another
//! type, and the page shows what is there. The templates escape every value.

use std::collections::HashMap;

use askama::Template;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::compare::Comparison;
use super::hardware::{self, Checks, DeviceTable};
use super::history::HistoryParts;
use super::image::{self, ImagePart};
use super::live::{self, GpuTile, RecentTelemetry};
use super::stages::{stage_rows, StageRow};
use super::svg::SvgFigure;
use super::text::{ago, duration_or_dash, duration_text, or_dash, seconds_between};
use crate::agent::birth::BoxSummary;
use crate::agent::live::LiveRun;
use crate::agent::{AgentState, StatusSnapshot};
use crate::record::{RunRecord, Verdict};
use crate::update::ImageStatus;

/// What the page shows.
pub struct PageData<'a> {
    /// The agent's state, current run and last run.
    pub status: &'a StatusSnapshot,
    /// The inventory, as JSON.
    pub hardware: &'a Value,
    /// What the page shows of the stored runs.
    pub history: &'a HistoryParts,
    /// The record of the run in progress, for its stages so far.
    pub current: Option<&'a RunRecord>,
    /// The live figures of the run in progress (or of the last run).
    pub live: &'a LiveRun,
    /// Each GPU's verdict in the newest health run, by PCI address.
    pub health: &'a HashMap<String, Verdict>,
    /// Whether the build embeds the chart library.
    pub charts: bool,
    /// The time the page is rendered at, for how long ago things were.
    pub now: DateTime<Utc>,
    /// The box's birth record and what changed since; `None` before it was compared.
    pub box_record: Option<&'a BoxSummary>,
    /// The OS image: its line in the header (`OS 20261205.1130 · slot A · verified`,
    /// or why this is not a tinybox OS image), and on an image its rejections, update
    /// and trial; `None` leaves it all out.
    pub image: Option<&'a ImageStatus>,
}

#[derive(Template)]
#[template(path = "home.html")]
struct HomePage<'a> {
    sku: String,
    sku_title: Option<String>,
    state: &'static str,
    version: String,
    uptime: String,
    current_run: String,
    charts: bool,
    running: Option<Running>,
    last_run: Option<LastRun>,
    tiles: Vec<GpuTile>,
    live_figures: Vec<SvgFigure>,
    recent_train: Vec<Vec<String>>,
    recent_telemetry: RecentTelemetry,
    hardware_verdict: Option<String>,
    gpu_count: String,
    host: Vec<(String, String)>,
    tables: Vec<DeviceTable>,
    findings: Vec<String>,
    checks: Option<Checks>,
    parts: &'a HistoryParts,
    comparison: &'a Comparison,
    box_record: Option<BoxRecordPart>,
    os_line: Option<String>,
    os_part: Option<ImagePart>,
}

/// The page's "Box record" section.
struct BoxRecordPart {
    serial: String,
    /// When the record was written, and how long ago; `None` before there is one.
    recorded: Option<String>,
    changes: Vec<String>,
}

fn box_record_part(summary: &BoxSummary, now: DateTime<Utc>) -> BoxRecordPart {
    BoxRecordPart {
        serial: or_dash(summary.serial.clone()),
        recorded: summary
            .recorded_at
            .map(|t| format!("{} ({})", t.format("%Y-%m-%d %H:%M UTC"), ago(t, now))),
        changes: summary.changes.clone(),
    }
}

struct Running {
    id: String,
    suite: String,
    stage: String,
    percent: String,
    epoch: Option<String>,
    elapsed: Option<String>,
    eta: Option<String>,
    message: Option<String>,
    stages: Vec<StageRow>,
}

struct LastRun {
    id: String,
    suite: String,
    state: &'static str,
    finished: String,
    duration: String,
    message: Option<String>,
}

/// The page as HTML; a template that fails to render gives a page that says so.
pub fn render(d: &PageData<'_>) -> String {
    let status = d.status;
    let gpus: Vec<Value> = d
        .hardware
        .get("gpus")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let page = HomePage {
        sku: status.sku.clone(),
        sku_title: d
            .hardware
            .get("sku_title")
            .and_then(Value::as_str)
            .map(String::from),
        state: status.state.as_str(),
        version: status.version.clone(),
        uptime: duration_text(seconds_between(status.agent_started_at, d.now)),
        current_run: status.current_run.clone().unwrap_or_default(),
        charts: d.charts,
        running: running(d),
        last_run: last_run(d),
        tiles: live::tiles(&gpus, d.live, d.health),
        live_figures: live::live_figures(d.live),
        recent_train: live::recent_train(d.live),
        recent_telemetry: live::recent_telemetry(d.live),
        hardware_verdict: d
            .hardware
            .get("verdict")
            .and_then(Value::as_str)
            .map(String::from),
        gpu_count: hardware::gpu_count(d.hardware),
        host: hardware::host(d.hardware),
        tables: hardware::device_tables(d.hardware),
        findings: hardware::findings(d.hardware),
        checks: hardware::checks(d.hardware),
        parts: d.history,
        comparison: &d.history.comparison,
        box_record: d.box_record.map(|b| box_record_part(b, d.now)),
        os_line: d.image.map(ImageStatus::headline),
        os_part: d
            .image
            .and_then(|image| image.os.as_ref())
            .map(image::part)
            .filter(|p| !p.is_empty()),
    };
    page.render().unwrap_or_else(|e| {
        format!("<!doctype html><title>tinyperf</title><p>the page could not be rendered: {e}</p>")
    })
}

/// The run in progress: its stage, progress, epoch and time left.
fn running(d: &PageData<'_>) -> Option<Running> {
    let status = d.status;
    let (AgentState::Running, Some(id)) = (status.state, status.current_run.as_deref()) else {
        return None;
    };
    let live_train = d
        .live
        .train
        .back()
        .filter(|_| d.live.run_id.as_deref() == Some(id));
    let (epoch, elapsed, eta) = match live_train {
        Some(p) => {
            let eta = (p.global_step > 0 && p.planned_steps > p.global_step).then(|| {
                let rate = p.global_step as f64 / p.elapsed_s.max(1e-9);
                duration_text((p.planned_steps - p.global_step) as f64 / rate)
            });
            (
                Some(match p.planned_epochs {
                    0 => p.epoch.to_string(),
                    planned => format!("{} of {planned}", p.epoch),
                }),
                Some(duration_text(p.elapsed_s)),
                eta,
            )
        }
        None => (None, None, None),
    };
    Some(Running {
        id: id.to_string(),
        suite: status.current_suite.clone().unwrap_or_else(|| "—".into()),
        stage: status
            .current_stage
            .clone()
            .unwrap_or_else(|| "starting".into()),
        percent: format!("{:.0}", (status.progress.clamp(0.0, 1.0) * 100.0).round()),
        epoch,
        elapsed,
        eta,
        message: status.message.clone(),
        stages: d.current.map(|r| stage_rows(&r.stages)).unwrap_or_default(),
    })
}

/// The last run, while none is in progress.
fn last_run(d: &PageData<'_>) -> Option<LastRun> {
    if d.status.state == AgentState::Running {
        return None;
    }
    let last = d.status.last_run.as_ref()?;
    Some(LastRun {
        id: last.id.clone(),
        suite: last.suite.clone(),
        state: last.state.as_str(),
        finished: or_dash(last.finished_at.map(|t| ago(t, d.now))),
        duration: duration_or_dash(last.duration_s),
        message: last.message.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::live::TimedSample;
    use crate::api::http::page::compare::Prices;
    use crate::api::http::page::history::history_parts;
    use crate::api::http::page::testing;
    use crate::record::{Figure, RunBrief};
    use crate::runtime::telemetry::{GpuSample, TelemetrySample, Temperature};
    use crate::suite::event::TrainPoint;
    use crate::suite::event::TrainPointKind;
    use serde_json::json;

    const RUN: &str = "20261129-210512-3fa9c2";
    const HOSTILE: &str = "<script>alert(\"x\")</script>'\"";

    fn status(state: AgentState) -> StatusSnapshot {
        StatusSnapshot {
            state,
            current_run: (state == AgentState::Running).then(|| RUN.into()),
            current_suite: Some("acceptance".into()),
            current_stage: Some("gemm".into()),
            progress: 0.4,
            message: None,
            last_run: None,
            unsaved_runs: Vec::new(),
            sku: "tinybox-green".into(),
            version: "0.1.0".into(),
            agent_started_at: Utc::now() - chrono::Duration::seconds(3725),
        }
    }

    fn brief(id: &str, message: &str) -> RunBrief {
        RunBrief {
            suite: "inventory<b>".into(),
            message: Some(message.into()),
            ..testing::brief(id)
        }
    }

    fn page(
        status: &StatusSnapshot,
        hardware: &Value,
        runs: &[RunBrief],
        live: &LiveRun,
    ) -> String {
        render(&PageData {
            status,
            hardware,
            history: &history_parts(&status.sku, runs, runs, &Prices::default()),
            current: None,
            live,
            health: &HashMap::new(),
            charts: true,
            now: Utc::now(),
            box_record: None,
            image: None,
        })
    }

    /// Every `<script` in the page is one of the agent's own script tags.
    fn only_own_scripts(html: &str) {
        for (at, _) in html.match_indices("<script") {
            let tag = &html[at..html[at..].find('>').map(|e| at + e).unwrap_or(html.len())];
            assert!(
                tag.starts_with("<script src=\"/static/"),
                "foreign script: {tag}"
            );
        }
        assert!(
            !html.contains(" style=\""),
            "an inline style would be refused by the policy"
        );
    }

    #[test]
    fn the_header_names_the_os_image_and_its_slot() {
        let st = status(AgentState::Idle);
        let with = |image: Option<&ImageStatus>| {
            render(&PageData {
                status: &st,
                hardware: &json!({}),
                history: &history_parts(&st.sku, &[], &[], &Prices::default()),
                current: None,
                live: &LiveRun::default(),
                health: &HashMap::new(),
                charts: false,
                now: Utc::now(),
                box_record: None,
                image,
            })
        };
        let root = tempfile::tempdir().unwrap();
        crate::update::fixture::image(
            root.path(),
            crate::update::fixture::ImageLayout {
                a: crate::update::fixture::SlotContent::Version("20261205.1130"),
                b: crate::update::fixture::SlotContent::Empty,
                booted: 'a',
                verity: true,
            },
        );
        let mut image = crate::update::status::read(root.path(), Default::default());
        let html = with(Some(&image));
        assert!(
            html.contains("<span id=\"os\">OS 20261205.1130 · slot A · verified</span>"),
            "{html}"
        );
        // Nothing to say beyond the header: no section.
        assert!(!html.contains("id=\"os-image\""), "{html}");
        let html = with(Some(&ImageStatus::not_an_image("<no os-release>")));
        assert!(
            html.contains("not a tinybox OS image (&#60;no os-release&#62;)"),
            "{html}"
        );
        assert!(!with(None).contains("id=\"os\""));

        let os = image.os.as_mut().unwrap();
        os.on_trial = true;
        os.rejections = vec![crate::update::status::Rejection {
            version: "20261207.0900".into(),
            at: Some(
                chrono::DateTime::parse_from_rfc3339("2026-12-07T09:12:00Z")
                    .unwrap()
                    .with_timezone(&Utc),
            ),
            reason: format!("20261207.0900 rejected: training img/s {HOSTILE}"),
            previous_version: Some("20261206.0900".into()),
            failed_checks: Vec::new(),
        }];
        let mut update = crate::update::progress::UpdateProgress::idle();
        update.state = "downloading".into();
        update.version = "20261208.0900".into();
        update.done_bytes = 1 << 30;
        update.total_bytes = 4 << 30;
        os.update = Some(update);
        let html = with(Some(&image));
        assert!(
            html.contains(
                "<p id=\"os-rejection\" class=\"banner fail\" role=\"alert\">20261207.0900 rejected \
                 2026-12-07 09:12 UTC: training img/s &#60;script&#62;"
            ),
            "{html}"
        );
        assert!(
            html.contains("— the box went back to 20261206.0900</p>"),
            "{html}"
        );
        let mut two = image.clone();
        let older = two.os.as_ref().unwrap().rejections[0].clone();
        two.os.as_mut().unwrap().rejections.push(older);
        assert!(with(Some(&two)).contains(
            "(1 earlier rejected version: <a href=\"/api/v1/image\">/api/v1/image</a> lists them)"
        ));
        assert!(!html.contains("alert(\"x\")"));
        assert!(html.contains("<div id=\"os-update\" data-state=\"downloading\">"));
        assert!(html.contains("Downloading OS 20261208.0900: 1 GiB of 4 GiB (25 %)."));
        assert!(html.contains(
            "<progress id=\"os-update-bar\" max=\"4294967296\" value=\"1073741824\"></progress>"
        ));
        assert!(html.contains("<span id=\"os-trial\" class=\"badge warn\">on trial</span>"));
        assert!(html.contains("OS 20261205.1130 is on trial"));
        only_own_scripts(&html);
    }

    #[test]
    fn the_box_record_section_shows_the_changes_escaped() {
        let st = status(AgentState::Idle);
        let summary = BoxSummary {
            serial: Some("M80<i>".into()),
            recorded_at: Some(Utc::now() - chrono::Duration::days(3)),
            changes: vec!["GPU 0000:41:00.0 serial <script>1</script> → 456".into()],
        };
        let html = render(&PageData {
            status: &st,
            hardware: &json!({}),
            history: &history_parts(&st.sku, &[], &[], &Prices::default()),
            current: None,
            live: &LiveRun::default(),
            health: &HashMap::new(),
            charts: true,
            now: Utc::now(),
            box_record: Some(&summary),
            image: None,
        });
        assert!(html.contains("<section id=\"box-record\">"), "{html}");
        assert!(
            html.contains("M80&#60;i&#62;") || html.contains("M80&lt;i&gt;"),
            "{html}"
        );
        assert!(
            html.contains("serial &#60;script&#62;1") || html.contains("serial &lt;script&gt;1")
        );
        assert!(html.contains("3 d"), "{html}");
        only_own_scripts(&html);
        let none = page(&st, &json!({}), &[], &LiveRun::default());
        assert!(none.contains("has not been compared with its record yet"));
    }

    #[test]
    fn renders_box_checks_gpus_and_history_escaped() {
        let hardware = json!({
            "host": {"hostname": "box<1>", "cpu_model": "EPYC & co", "memory_bytes": 137438953472u64},
            "gpus": [
                {"index": 0, "name": "RTX 4090", "pci_address": "0000:41:00.0", "link": {"speed": "16 GT/s", "width": 16}},
                {"index": 1, "name": "<img src=x onerror=alert(1)>"},
                "odd entry"
            ],
            "checks": [
                {"name": "gpu_count", "subject": null, "expected": "6", "found": "2", "verdict": "fail"},
                {"name": "pcie_width", "subject": "0000:41:00.0", "expected": "x16", "found": "x16", "verdict": "pass"},
                {"name": "weird", "found": HOSTILE}
            ],
            "findings": [HOSTILE]
        });
        let mut st = status(AgentState::Idle);
        let mut last = brief("r1", HOSTILE);
        last.suite = "smoke".into();
        st.last_run = Some(last);
        let runs = vec![brief("r1", "x")];
        let html = page(&st, &hardware, &runs, &LiveRun::default());
        assert!(html.contains("box&#60;1&#62;"));
        assert!(html.contains("EPYC &#38; co"));
        assert!(html.contains("<dt>memory</dt><dd>128 GiB</dd>"));
        assert!(html.contains("&#60;img src=x onerror=alert(1)&#62;"));
        assert!(!html.contains("<img"));
        assert!(html.contains("odd entry"));
        assert!(html.contains("speed: 16 GT/s, width: 16"));
        assert!(html.contains("1 of 3 checks pass."));
        assert!(html.contains("href=\"/runs/r1\""));
        assert!(html.contains("inventory&#60;b&#62;"));
        assert!(html.contains("1 min 15 s"));
        assert!(html.contains("up 1 h 02 min"));
        assert!(html.contains("Idle: no run in progress."));
        assert!(html.contains("&#60;script&#62;alert(&#34;x&#34;)"));
        assert!(!html.contains("alert(\"x\")"), "quotes in data are escaped");
        only_own_scripts(&html);
    }

    #[test]
    fn degrades_when_hardware_keys_are_missing_or_odd() {
        for hardware in [
            json!(null),
            json!({}),
            json!({"gpus": 3, "checks": "none", "host": []}),
        ] {
            let st = status(AgentState::Running);
            let html = page(&st, &hardware, &[], &LiveRun::default());
            assert!(html.contains("<dt>GPUs</dt><dd>unknown</dd>"));
            assert!(html.contains("No checks"));
            assert!(html.contains("No runs yet."));
            assert!(html.contains("<progress id=\"progress-bar\" max=\"100\" value=\"40\">"));
            assert!(html.contains(&format!("data-run=\"{RUN}\"")));
            assert!(html.contains("The inventory found no GPU."));
            assert!(html.trim_end().ends_with("</html>"));
        }
    }

    /// The page over what the real inventory finds in a fixture tree of a tinybox red.
    #[test]
    fn renders_the_inventory_of_a_fixture_box() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/red-link-x8-behind-switch");
        let report = crate::inventory::take(&root, None, false);
        let hardware = serde_json::to_value(&report).unwrap();
        let html = page(
            &status(AgentState::Idle),
            &hardware,
            &[],
            &LiveRun::default(),
        );
        let gpu_table = html
            .split("<h3>GPUs</h3>")
            .nth(1)
            .and_then(|rest| rest.split("</table>").next())
            .expect("a GPU table");
        assert_eq!(gpu_table.matches("<tr>").count(), 7, "{gpu_table}");
        assert_eq!(gpu_table.matches("<td>Radeon RX 7900 XTX</td>").count(), 6);
        assert_eq!(html.matches("<div class=\"tile\"").count(), 6);
        assert!(html.contains("<td>24.0 GiB</td>"));
        assert!(html.contains("16.0 GT/s x16"));
        assert!(html.contains("<th>path link</th>"));
        assert!(html.contains("x8, limited at"));
        assert!(html.contains("<tr class=\"failed\"><td>gpu_link</td>"));
        assert!(html.contains("<h3>NVMe drives</h3>"));
        assert!(html.contains("<span class=\"badge fail\">fail</span>"));
        let checks = hardware["checks"].as_array().unwrap();
        let passed = checks.iter().filter(|c| c["verdict"] == "pass").count();
        assert!(passed < checks.len());
        assert!(html.contains(&format!("{passed} of {} checks pass.", checks.len())));
    }

    fn train_point(step: u64, kind: TrainPointKind) -> TrainPoint {
        TrainPoint {
            stage: "smoke".into(),
            kind,
            epoch: 2,
            planned_epochs: 10,
            global_step: step,
            planned_steps: 100,
            loss: Some(2.0 / (step as f64 + 1.0)),
            accuracy: Some(0.5),
            images_per_s: 1000.0 + step as f64,
            lr: Some(0.1),
            eval_accuracy: (kind == TrainPointKind::Epoch).then_some(0.6),
            elapsed_s: step as f64,
        }
    }

    #[test]
    fn a_run_in_progress_shows_its_epoch_time_left_tiles_and_figures() {
        let mut live = LiveRun::default();
        live.begin(RUN);
        for step in 1..=20 {
            let kind = if step % 10 == 0 {
                TrainPointKind::Epoch
            } else {
                TrainPointKind::Step
            };
            live.add_train(train_point(step, kind));
            live.add_sample(TimedSample {
                at: Utc::now(),
                sample: TelemetrySample {
                    t_s: step as f64,
                    gpus: vec![GpuSample {
                        index: 0,
                        address: Some("0000:41:00.0".into()),
                        power_w: Some(300.0 + step as f64),
                        temperatures: vec![Temperature {
                            label: "edge".into(),
                            celsius: 61.0,
                            limit_c: Some(100.0),
                        }],
                        sm_clock_mhz: Some(2500.0),
                        util_percent: Some(99.0),
                        ..GpuSample::default()
                    }],
                    cpu_temp_c: None,
                },
            });
        }
        let hardware = json!({"gpus": [{"index": 0, "model": "GeForce RTX 4090", "pci_address": "0000:41:00.0",
            "link": {"current_speed_gts": 16.0, "current_width": 16}}]});
        let mut health = HashMap::new();
        health.insert("0000:41:00.0".to_string(), Verdict::Pass);
        let st = status(AgentState::Running);
        let html = render(&PageData {
            status: &st,
            hardware: &hardware,
            history: &history_parts(&st.sku, &[], &[], &Prices::default()),
            current: None,
            live: &live,
            health: &health,
            charts: false,
            now: Utc::now(),
            box_record: None,
            image: None,
        });
        assert!(html.contains("<dd id=\"epoch\">2 of 10</dd>"), "{html}");
        // 20 steps in 20 s, 80 to go.
        assert!(html.contains("<dd id=\"eta\">≈ 1 min 20 s</dd>"));
        assert!(html.contains("<dd class=\"tile-power\">320 W</dd>"));
        assert!(html.contains("<dd class=\"tile-temp\">61 °C</dd>"));
        assert!(html.contains("<span class=\"badge pass\">pass</span>"));
        assert!(html.contains("16.0 GT/s x16"));
        for title in ["throughput", "loss", "top-1", "power", "temperature"] {
            assert!(html.contains(&format!("<figcaption>{title}")), "{title}");
        }
        assert_eq!(html.matches("<polyline").count(), 6);
        assert!(html.contains("id=\"recent-train\""));
        assert!(html.contains("320 W · 61 °C · 2500 MHz · 99 %"));
        assert!(html.contains("not implemented in this build"));
        assert!(!html.contains("uplot.min.js"));
    }

    #[test]
    fn comparisons_put_this_box_beside_mlperf_and_price_it() {
        let mut run = brief("a1", "");
        run.suite = "acceptance".into();
        run.figures = vec![Figure {
            stage: "train-throughput".into(),
            name: "img_per_s".into(),
            value: 5000.0,
            unit: "img/s".into(),
            subject: None,
        }];
        let mut older = run.clone();
        older.id = "a0".into();
        older.figures[0].value = 4800.0;
        let runs = vec![run, older];
        let html = page(
            &status(AgentState::Idle),
            &json!({}),
            &runs,
            &LiveRun::default(),
        );
        assert!(html.contains("<td>this box (tinybox-green)</td>"));
        assert!(html.contains("<td class=\"num\">5000</td><td class=\"num\">200.0</td>"));
        assert!(html.contains("122.08") && html.contains("167.15") && html.contains("13.43"));
        assert!(html.contains("5.67 MJ (1.57 kWh) · $0.24"));
        assert!(html.contains("<figcaption>training throughput (img/s)"));
    }
}
