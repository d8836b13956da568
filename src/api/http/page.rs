//! `GET /`: the status page, rendered on the server so it reads without JavaScript.
//! A small inline script follows the event stream to keep progress and state live.
//!
//! The hardware view is read defensively: every key may be missing or of another
//! type, and the page shows what is there. Everything that comes from data is
//! HTML-escaped.

use std::fmt::Write;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::agent::handle::{AgentState, StatusSnapshot};
use crate::record::RunBrief;
use crate::record::RunRecord;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// Most columns in a device table; further keys stay in the JSON.
const MAX_COLUMNS: usize = 9;
/// Columns of the GPU table, in this order, when the inventory has them.
const GPU_COLUMNS: &[&str] = &[
    "index",
    "address",
    "pci_address",
    "model",
    "name",
    "driver",
    "driver_version",
    "vram_bytes",
    "memory_bytes",
    "link",
    "path_link",
    "resizable_bar",
    "numa_node",
];
/// Columns of the NVMe table, likewise.
const NVME_COLUMNS: &[&str] = &["name", "model", "address", "transport", "link"];

/// What the page shows.
pub struct PageData<'a> {
    pub status: &'a StatusSnapshot,
    pub hardware: &'a Value,
    /// Recent runs, newest first.
    pub runs: &'a [RunBrief],
    /// The record of the run in progress, for its stages so far.
    pub current: Option<&'a RunRecord>,
    pub now: DateTime<Utc>,
}

pub fn render(d: &PageData<'_>) -> String {
    let status = d.status;
    let mut html = String::with_capacity(16 * 1024);
    let current_run = status.current_run.as_deref().unwrap_or("");
    let _ = write!(
        html,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>tinyperf · {sku}</title>\n\
         <noscript><meta http-equiv=\"refresh\" content=\"30\"></noscript>\n\
         <style>\n{STYLE}</style>\n</head>\n<body>\n<header>\n\
         <h1>tinyperf</h1>\n<span class=\"meta\">{sku}</span>\n\
         <span id=\"state\" class=\"badge {state}\">{state}</span>\n\
         <span class=\"meta\">version {version} · up {uptime}</span>\n\
         <span id=\"live\" class=\"meta\"></span>\n</header>\n\
         <main data-run=\"{run}\">\n",
        sku = esc(&status.sku),
        state = status.state.as_str(),
        version = esc(&status.version),
        uptime = duration_text(seconds_between(status.agent_started_at, d.now)),
        run = esc(current_run),
    );
    current_section(&mut html, d);
    box_section(&mut html, d.hardware, &status.sku);
    checks_section(&mut html, d.hardware);
    history_section(&mut html, d.runs);
    let _ = write!(
        html,
        "</main>\n<footer>\n\
         <a href=\"/api/v1/status\">status JSON</a>\
         <a href=\"/api/v1/hardware\">hardware JSON</a>\
         <a href=\"/api/v1/runs\">runs JSON</a>\
         <a href=\"/metrics\">metrics</a>\
         <a href=\"/api/v1/openapi.json\">API description</a>\n\
         </footer>\n<script>\n{SCRIPT}</script>\n</body>\n</html>\n"
    );
    html
}

fn current_section(html: &mut String, d: &PageData<'_>) {
    let status = d.status;
    html.push_str("<section id=\"current\">\n<h2>Current run</h2>\n");
    let (AgentState::Running, Some(run_id)) = (status.state, status.current_run.as_deref()) else {
        html.push_str("<p class=\"muted\">Idle: no run in progress.</p>\n");
        if let Some(last) = &status.last_run {
            let _ = writeln!(
                html,
                "<p>Last run: {link} · {suite} · <span class=\"badge {state}\">{state}</span> \
                 · finished {finished}, after {duration}.</p>",
                link = run_link(&last.id),
                suite = esc(&last.suite),
                state = last.state.as_str(),
                finished = last
                    .finished_at
                    .map(|t| ago(t, d.now))
                    .unwrap_or_else(|| "—".into()),
                duration = last
                    .duration_s
                    .map(duration_text)
                    .unwrap_or_else(|| "—".into()),
            );
            if let Some(message) = &last.message {
                let _ = writeln!(html, "<p class=\"muted\">{}</p>", esc(message));
            }
        }
        html.push_str("</section>\n");
        return;
    };
    let pct = (status.progress.clamp(0.0, 1.0) * 100.0).round();
    let _ = write!(
        html,
        "<dl class=\"facts\">\n<dt>Run</dt><dd>{link}</dd>\n<dt>Suite</dt><dd>{suite}</dd>\n\
         <dt>Stage</dt><dd id=\"stage\">{stage}</dd>\n</dl>\n\
         <div class=\"progress\" role=\"progressbar\" aria-valuemin=\"0\" aria-valuemax=\"100\" \
         aria-valuenow=\"{pct}\"><div id=\"progress-bar\" style=\"width: {pct}%\"></div></div>\n\
         <p><span id=\"progress-text\">{pct} %</span> \
         <span id=\"progress-message\" class=\"muted\"></span></p>\n",
        link = run_link(run_id),
        suite = esc(status.current_suite.as_deref().unwrap_or("—")),
        stage = esc(status.current_stage.as_deref().unwrap_or("starting")),
    );
    if let Some(record) = d.current.filter(|r| !r.stages.is_empty()) {
        html.push_str(
            "<table>\n<thead><tr><th>Stage</th><th>Verdict</th><th>Figures</th></tr></thead>\n<tbody>\n",
        );
        for stage in &record.stages {
            let figures: Vec<String> = stage
                .metrics
                .iter()
                .map(|m| format!("{} {} {}", esc(&m.name), number(m.value), esc(&m.unit)))
                .collect();
            let _ = writeln!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&stage.name),
                verdict_badge(Some(stage.verdict.as_str())),
                figures.join("<br>")
            );
        }
        html.push_str("</tbody>\n</table>\n");
    }
    html.push_str("</section>\n");
}

fn box_section(html: &mut String, hardware: &Value, sku: &str) {
    html.push_str("<section id=\"box\">\n<h2>This box</h2>\n<dl class=\"facts\">\n");
    let _ = write!(html, "<dt>SKU</dt><dd>{}", esc(sku));
    if let Some(title) = hardware.get("sku_title").and_then(Value::as_str) {
        let _ = write!(html, " <span class=\"muted\">({})</span>", esc(title));
    }
    html.push_str("</dd>\n");
    if let Some(verdict) = hardware.get("verdict").and_then(Value::as_str) {
        let _ = writeln!(
            html,
            "<dt>Verdict</dt><dd>{}</dd>",
            verdict_badge(Some(verdict))
        );
    }
    let gpus = hardware.get("gpus").and_then(Value::as_array);
    let _ = writeln!(
        html,
        "<dt>GPUs</dt><dd>{}</dd>",
        gpus.map(|g| g.len().to_string())
            .unwrap_or_else(|| "unknown".into())
    );
    if let Some(host) = hardware.get("host").and_then(Value::as_object) {
        for (key, value) in host {
            let _ = writeln!(
                html,
                "<dt>{}</dt><dd>{}</dd>",
                esc(&label(key)),
                esc(&field_text(key, value))
            );
        }
    }
    html.push_str("</dl>\n");
    if let Some(gpus) = gpus.filter(|g| !g.is_empty()) {
        device_table(html, "GPUs", gpus, GPU_COLUMNS);
    }
    if let Some(drives) = hardware
        .get("nvme")
        .and_then(Value::as_array)
        .filter(|d| !d.is_empty())
    {
        device_table(html, "NVMe drives", drives, NVME_COLUMNS);
    }
    let findings: Vec<&str> = hardware
        .get("findings")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !findings.is_empty() {
        html.push_str("<h3>Findings</h3>\n<ul class=\"findings\">\n");
        for finding in findings {
            let _ = writeln!(html, "<li>{}</li>", esc(finding));
        }
        html.push_str("</ul>\n");
    }
    html.push_str("</section>\n");
}

/// A table of devices: the `preferred` columns the items have, or else every key
/// they have.
fn device_table(html: &mut String, title: &str, items: &[Value], preferred: &[&str]) {
    let has = |key: &str| items.iter().any(|item| item.get(key).is_some());
    let mut columns: Vec<String> = preferred
        .iter()
        .filter(|key| has(key))
        .map(|key| key.to_string())
        .collect();
    if columns.is_empty() {
        for item in items {
            for key in item.as_object().into_iter().flat_map(|o| o.keys()) {
                if !columns.contains(key) {
                    columns.push(key.clone());
                }
            }
        }
    }
    columns.truncate(MAX_COLUMNS);
    let _ = write!(html, "<h3>{}</h3>\n<table>\n<thead><tr>", esc(title));
    for column in &columns {
        let _ = write!(html, "<th>{}</th>", esc(&label(column)));
    }
    html.push_str("</tr></thead>\n<tbody>\n");
    for item in items {
        html.push_str("<tr>");
        if item.is_object() {
            for column in &columns {
                let text = item
                    .get(column)
                    .map(|v| field_text(column, v))
                    .unwrap_or_default();
                let _ = write!(html, "<td>{}</td>", esc(&text));
            }
        } else {
            let _ = write!(
                html,
                "<td colspan=\"{}\">{}</td>",
                columns.len().max(1),
                esc(&value_text(item))
            );
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody>\n</table>\n");
}

fn checks_section(html: &mut String, hardware: &Value) {
    html.push_str("<section id=\"checks\">\n<h2>SKU checks</h2>\n");
    let checks = hardware.get("checks").and_then(Value::as_array);
    let Some(checks) = checks.filter(|c| !c.is_empty()) else {
        html.push_str(
            "<p class=\"muted\">No checks: the box was not recognised as a known SKU, \
             or the inventory has not judged it.</p>\n</section>\n",
        );
        return;
    };
    let field = |check: &Value, key: &str| {
        check
            .get(key)
            .map(value_text)
            .unwrap_or_else(|| "—".to_string())
    };
    let passed = checks
        .iter()
        .filter(|c| c.get("verdict").and_then(Value::as_str) == Some("pass"))
        .count();
    let _ = writeln!(
        html,
        "<p>{passed} of {} checks pass.</p>\n<table>\n<thead><tr><th>Check</th><th>Subject</th>\
         <th>Expected</th><th>Found</th><th>Verdict</th></tr></thead>\n<tbody>",
        checks.len()
    );
    for check in checks {
        let subject = check
            .get("subject")
            .filter(|s| !s.is_null())
            .map(value_text)
            .unwrap_or_default();
        let _ = writeln!(
            html,
            "<tr{}><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if check.get("verdict").and_then(Value::as_str) == Some("fail") {
                " class=\"failed\""
            } else {
                ""
            },
            esc(&field(check, "name")),
            esc(&subject),
            esc(&field(check, "expected")),
            esc(&field(check, "found")),
            verdict_badge(check.get("verdict").and_then(Value::as_str)),
        );
    }
    html.push_str("</tbody>\n</table>\n</section>\n");
}

fn history_section(html: &mut String, runs: &[RunBrief]) {
    html.push_str("<section id=\"history\">\n<h2>History</h2>\n");
    if runs.is_empty() {
        html.push_str("<p class=\"muted\">No runs yet.</p>\n</section>\n");
        return;
    }
    html.push_str(
        "<table>\n<thead><tr><th>Run</th><th>Suite</th><th>State</th><th>Verdict</th>\
         <th>Trigger</th><th>Started</th><th>Duration</th></tr></thead>\n<tbody>\n",
    );
    for run in runs {
        let _ = writeln!(
            html,
            "<tr><td>{link}</td><td>{suite}</td><td><span class=\"badge {state}\">{state}</span></td>\
             <td>{verdict}</td><td>{trigger}</td><td class=\"num\">{started}</td>\
             <td class=\"num\">{duration}</td></tr>",
            link = run_link(&run.id),
            suite = esc(&run.suite),
            state = run.state.as_str(),
            verdict = verdict_badge(run.verdict.map(|v| v.as_str())),
            trigger = run.trigger.as_str(),
            started = run.started_at.format("%Y-%m-%d %H:%M:%S UTC"),
            duration = run
                .duration_s
                .map(duration_text)
                .unwrap_or_else(|| "—".into()),
        );
    }
    html.push_str("</tbody>\n</table>\n</section>\n");
}

fn run_link(id: &str) -> String {
    let id = esc(id);
    format!("<a class=\"mono\" href=\"/api/v1/runs/{id}\">{id}</a>")
}

fn verdict_badge(verdict: Option<&str>) -> String {
    match verdict {
        Some(v) => {
            let v = esc(v);
            format!("<span class=\"badge {v}\">{v}</span>")
        }
        None => "—".into(),
    }
}

/// `pci_address` → `pci address`; `memory_bytes` → `memory`.
fn label(key: &str) -> String {
    key.strip_suffix("_bytes").unwrap_or(key).replace('_', " ")
}

/// A field's value as text: sizes in bytes (`*_bytes`) in binary units, PCIe links
/// as `16.0 GT/s x16`, objects with a `state` as that state.
fn field_text(key: &str, value: &Value) -> String {
    match value {
        Value::Number(n) if key.ends_with("_bytes") => {
            n.as_f64().map(bytes_text).unwrap_or_else(|| n.to_string())
        }
        Value::Object(map) => link_text(map)
            .or_else(|| map.get("state").and_then(Value::as_str).map(String::from))
            .unwrap_or_else(|| value_text(value)),
        _ => value_text(value),
    }
}

/// A PCIe link object (`current_speed_gts`/`current_width`, or `speed_gts`/`width`),
/// with its maximum when the link runs below it.
fn link_text(map: &serde_json::Map<String, Value>) -> Option<String> {
    let number = |a: &str, b: &str| map.get(a).or_else(|| map.get(b)).and_then(Value::as_f64);
    let speed = number("current_speed_gts", "speed_gts")?;
    let width = number("current_width", "width")?;
    let mut text = format!("{speed:.1} GT/s x{width}");
    let max_speed = number("max_speed_gts", "capable_speed_gts").unwrap_or(speed);
    let max_width = number("max_width", "capable_width").unwrap_or(width);
    if max_speed > speed || max_width > width {
        text.push_str(&format!(" (max {max_speed:.1} GT/s x{max_width})"));
    }
    if let Some(limited_at) = map.get("limited_at").and_then(Value::as_str) {
        text.push_str(&format!(", limited at {limited_at}"));
    }
    Some(text)
}

/// `137438953472` → `128 GiB`.
fn bytes_text(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let digits = if value.fract() == 0.0 || unit == 0 {
        0
    } else {
        1
    };
    format!("{value:.digits$} {}", UNITS[unit])
}

/// A JSON value as one line of text.
fn value_text(value: &Value) -> String {
    match value {
        Value::Null => "—".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => n.as_f64().map(number).unwrap_or_else(|| n.to_string()),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join(", "),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{}: {}", label(k), value_text(v)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A figure with as many decimals as it needs, up to three.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_milliseconds() as f64 / 1000.0).max(0.0)
}

fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{} ago", duration_text(seconds_between(t, now)))
}

/// `4.2 s`, `3 min 05 s`, `2 h 07 min`, `3 d 4 h`.
fn duration_text(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "—".into();
    }
    if seconds < 60.0 {
        return format!("{seconds:.1} s");
    }
    let total = seconds.round() as u64;
    let (d, h, m, s) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    if d > 0 {
        format!("{d} d {h} h")
    } else if h > 0 {
        format!("{h} h {m:02} min")
    } else {
        format!("{m} min {s:02} s")
    }
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RunState, Trigger, Verdict};
    use serde_json::json;

    fn status(state: AgentState) -> StatusSnapshot {
        StatusSnapshot {
            state,
            current_run: (state == AgentState::Running).then(|| "20261129-210512-3fa9c2".into()),
            current_suite: Some("acceptance".into()),
            current_stage: Some("gemm".into()),
            progress: 0.4,
            last_run: None,
            unsaved_runs: Vec::new(),
            sku: "tinybox-green".into(),
            version: "0.1.0".into(),
            agent_started_at: Utc::now() - chrono::Duration::seconds(3725),
        }
    }

    fn brief(id: &str, message: &str) -> RunBrief {
        RunBrief {
            id: id.into(),
            suite: "inventory<b>".into(),
            state: RunState::Failed,
            verdict: Some(Verdict::Fail),
            trigger: Trigger::Http,
            started_at: Utc::now(),
            finished_at: Some(Utc::now()),
            duration_s: Some(75.0),
            message: Some(message.into()),
            stages: Vec::new(),
            figures: Vec::new(),
            findings: Vec::new(),
        }
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
                {"name": "weird"}
            ],
            "findings": ["no <NVML>"]
        });
        let runs = vec![brief("r1", "x")];
        let st = status(AgentState::Idle);
        let html = render(&PageData {
            status: &st,
            hardware: &hardware,
            runs: &runs,
            current: None,
            now: Utc::now(),
        });
        assert!(html.contains("box&lt;1&gt;"));
        assert!(html.contains("EPYC &amp; co"));
        assert!(html.contains("<dt>memory</dt><dd>128 GiB</dd>"));
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(!html.contains("<img"));
        assert!(html.contains("odd entry"));
        assert!(html.contains("speed: 16 GT/s, width: 16"));
        assert!(html.contains("1 of 3 checks pass."));
        assert!(html.contains("<td>x16</td>"));
        assert!(html.contains("no &lt;NVML&gt;"));
        assert!(html.contains("href=\"/api/v1/runs/r1\""));
        assert!(html.contains("inventory&lt;b&gt;"));
        assert!(html.contains("1 min 15 s"));
        assert!(html.contains("up 1 h 02 min"));
        assert!(html.contains("Idle: no run in progress."));
    }

    #[test]
    fn degrades_when_hardware_keys_are_missing_or_odd() {
        for hardware in [
            json!(null),
            json!({}),
            json!({"gpus": 3, "checks": "none", "host": []}),
        ] {
            let st = status(AgentState::Running);
            let html = render(&PageData {
                status: &st,
                hardware: &hardware,
                runs: &[],
                current: None,
                now: Utc::now(),
            });
            assert!(html.contains("<dt>GPUs</dt><dd>unknown</dd>"));
            assert!(html.contains("No checks"));
            assert!(html.contains("No runs yet."));
            assert!(html.contains("id=\"progress-bar\" style=\"width: 40%\""));
            assert!(html.contains("data-run=\"20261129-210512-3fa9c2\""));
            assert!(html.ends_with("</html>\n"));
        }
    }

    /// The page over what the real inventory finds in a fixture tree of a tinybox red.
    #[test]
    fn renders_the_inventory_of_a_fixture_box() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/red-link-x8-behind-switch");
        let report = crate::inventory::take(&root, None, false);
        let hardware = serde_json::to_value(&report).unwrap();
        let st = status(AgentState::Idle);
        let html = render(&PageData {
            status: &st,
            hardware: &hardware,
            runs: &[],
            current: None,
            now: Utc::now(),
        });
        let gpu_table = html
            .split("<h3>GPUs</h3>")
            .nth(1)
            .and_then(|rest| rest.split("</table>").next())
            .expect("a GPU table");
        assert_eq!(gpu_table.matches("<tr>").count(), 7, "{gpu_table}");
        assert_eq!(gpu_table.matches("<td>Radeon RX 7900 XTX</td>").count(), 6);
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

    #[test]
    fn links_read_as_speed_and_width() {
        let link = json!({"current_speed_gts": 16.0, "current_width": 8, "max_speed_gts": 16.0, "max_width": 16});
        assert_eq!(
            field_text("link", &link),
            "16.0 GT/s x8 (max 16.0 GT/s x16)"
        );
        let path =
            json!({"speed_gts": 32.0, "width": 16, "capable_speed_gts": 32.0, "limited_at": null});
        assert_eq!(field_text("path_link", &path), "32.0 GT/s x16");
        let narrowed = json!({"speed_gts": 16.0, "width": 8, "limited_at": "0000:41:00.0"});
        assert_eq!(
            field_text("path_link", &narrowed),
            "16.0 GT/s x8, limited at 0000:41:00.0"
        );
        let rebar = json!({"state": "off", "basis": "BAR0 is 256 MiB"});
        assert_eq!(field_text("resizable_bar", &rebar), "off");
    }

    #[test]
    fn durations_and_numbers_read_well() {
        assert_eq!(duration_text(4.24), "4.2 s");
        assert_eq!(duration_text(185.0), "3 min 05 s");
        assert_eq!(duration_text(7620.0), "2 h 07 min");
        assert_eq!(duration_text(273_600.0), "3 d 4 h");
        assert_eq!(bytes_text(137_438_953_472.0), "128 GiB");
        assert_eq!(bytes_text(25_757_220_864.0), "24.0 GiB");
        assert_eq!(bytes_text(512.0), "512 B");
        assert_eq!(label("memory_bytes"), "memory");
        assert_eq!(number(6.0), "6");
        assert_eq!(number(12.3456), "12.346");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }
}
