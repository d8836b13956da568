//! The agent's `/metrics` and the fleet's Prometheus files, checked by Prometheus's own
//! tools (Debian's prometheus 2.42, unpacked by scripts/prometheus-tools.sh): promtool's
//! lint on a real agent's output, idle and with a run in progress; the scrape config and
//! rules; the rules' unit tests; the Grafana dashboard's queries; and a real Prometheus
//! scraping four real agents on 127.0.0.2–5 that alerts on the slow one.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::Utc;
use common::{http_get, wait_for, Agent, AgentDirs, Bus, TOKEN};
use serde_json::Value;
use tinyperf::record::{Metric, RunRecord, RunState, StageResult, Trigger, Verdict};

/// Where `prometheus` and `promtool` are: $TINYPERF_PROMETHEUS_DIR/usr/bin, else what
/// scripts/prometheus-tools.sh unpacked under target/.
fn prometheus_bin(name: &str) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("TINYPERF_PROMETHEUS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/prometheus-tools"));
    let path = dir.join("usr/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `make test-deps` (scripts/prometheus-tools.sh)",
        path.display()
    );
    path
}

fn fleet(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fleet")
        .join(path)
}

/// Runs promtool; returns its exit status and everything it printed.
fn promtool(args: &[&str], stdin: Option<&str>) -> (i32, String) {
    let mut child = Command::new(prometheus_bin("promtool"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Writes a finished acceptance run whose training stage measured `img_per_s`, and a
/// finished health run with one check per GPU.
fn seed_results(state_dir: &Path, id: &str, img_per_s: f64) {
    let mut acceptance = RunRecord::new(
        format!("{id}-a"),
        "acceptance".into(),
        Trigger::Boot,
        Default::default(),
    );
    acceptance.started_at = Utc::now() - chrono::Duration::minutes(10);
    acceptance.stages.push(StageResult {
        name: "train-throughput".into(),
        verdict: Verdict::Pass,
        started_at: acceptance.started_at,
        finished_at: Utc::now(),
        metrics: vec![
            Metric::new("img_per_s", img_per_s, "img/s"),
            Metric::new("estimated_time_to_train_min", 120.0, "min"),
            Metric::new("energy_kwh", 0.25, "kWh"),
        ],
        checks: vec![],
        findings: vec![],
        message: None,
    });
    acceptance.finish(RunState::Passed, None);
    let mut health = RunRecord::new(
        format!("{id}-h"),
        "health".into(),
        Trigger::Http,
        Default::default(),
    );
    health.stages.push(StageResult {
        name: "gpu-corruption".into(),
        verdict: Verdict::Pass,
        started_at: health.started_at,
        finished_at: health.started_at,
        metrics: vec![],
        checks: vec![tinyperf::record::Check {
            name: "silent corruption".into(),
            subject: Some("0000:03:00.0".into()),
            expected: "identical".into(),
            found: "identical".into(),
            verdict: Verdict::Pass,
        }],
        findings: vec![],
        message: None,
    });
    health.finish(RunState::Passed, None);
    for record in [acceptance, health] {
        let dir = state_dir.join("runs").join(&record.id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run.json"), serde_json::to_vec(&record).unwrap()).unwrap();
    }
}

fn metrics_text(addr: SocketAddr) -> String {
    let (status, body) = http_get(addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// An OS image below `root` that went back from a rejected version: its boot checks'
/// history in `state_dir`.
fn seed_rolled_back_image(root: &Path, state_dir: &Path) {
    use tinyperf::update::fixture::{self, ImageLayout, SlotContent};
    fixture::image(
        root,
        ImageLayout {
            a: SlotContent::Version("20261206.0900"),
            b: SlotContent::Version("20261207.0900"),
            booted: 'a',
            verity: true,
        },
    );
    for (version, rejected) in [("20261206.0900", false), ("20261207.0900", true)] {
        let assessment = tinyperf::update::gate::Assessment {
            version: version.into(),
            at: Utc::now(),
            boot_id: format!("boot-{version}"),
            result: if rejected { "fail" } else { "pass" }.into(),
            on_trial: rejected,
            rejected,
            previous_version: None,
            run_id: None,
            checks: Vec::new(),
            figures: Vec::new(),
            reason: format!(
                "{version} {}",
                if rejected {
                    "rejected: training img/s"
                } else {
                    "passed"
                }
            ),
        };
        tinyperf::update::boot_check::record(state_dir, &assessment).unwrap();
    }
}

/// A real agent over the tinybox red fixture tree (six amdgpu hwmon GPUs) with stored
/// results, on an OS image that went back from a rejected version: its `/metrics`
/// idle, and while an external benchmark that sleeps is running (so the live GPU gauges
/// are there).
fn agent_metrics_idle_and_running() -> (String, String) {
    let bus = Bus::start();
    let image = tempfile::tempdir().unwrap();
    let dirs = AgentDirs::new(&format!(
        "image_root = \"{}\"\n[benchmarks.sleep]\ncommand = [\"sleep\", \"60\"]\n",
        image.path().display()
    ));
    seed_results(&dirs.state_dir(), "20260101-000000-aaaaaa", 6300.0);
    seed_rolled_back_image(image.path(), &dirs.state_dir());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinybox-red");
    let agent = Agent::start_with_args(&bus, &dirs, &["--root", root.to_str().unwrap()]);
    let idle = metrics_text(agent.http);
    let body = r#"{"suite": "external", "options": {"benchmark": "sleep"}}"#;
    let (status, started) = post(agent.http, "/api/v1/runs", body);
    assert_eq!(status, 202, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    let running = wait_for(Duration::from_secs(60), "live GPU gauges", || {
        let text = metrics_text(agent.http);
        text.contains("\ntinyperf_gpu_power_watts{").then_some(text)
    });
    let (status, answer) = post(agent.http, &format!("/api/v1/runs/{id}/cancel"), "");
    assert!(status < 300, "{status} {answer}");
    wait_for(Duration::from_secs(30), "the run to end", || {
        metrics_text(agent.http)
            .contains("tinyperf_agent_running 0")
            .then_some(())
    });
    (idle, running)
}

/// Names of the samples in an exposition.
fn sample_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

#[test]
fn promtool_finds_nothing_to_lint_in_a_real_agents_metrics() {
    let (idle, running) = agent_metrics_idle_and_running();
    for text in [&idle, &running] {
        let (rc, out) = promtool(&["check", "metrics"], Some(text));
        assert_eq!(rc, 0, "promtool check metrics: {out}\n{text}");
        assert_eq!(out.trim(), "", "promtool printed lint lines:\n{out}");
        // promtool does not know these units; Prometheus practice wants base units.
        for name in sample_names(text) {
            for unit in ["percent", "milli", "kwh", "_mhz", "gbps", "tflops", "_min"] {
                assert!(!name.contains(unit), "{name} is not in base units");
            }
        }
    }
    for family in [
        "tinyperf_train_images_per_second",
        "tinyperf_suite_result_timestamp_seconds",
        "tinyperf_stage_result_timestamp_seconds",
        "tinyperf_gpu_check_outcome",
        "tinyperf_box_info",
        "process_cpu_seconds_total",
        "tinyperf_image_info",
        "tinyperf_image_boot_assessments_total",
        "tinyperf_image_rollbacks_total",
        "tinyperf_image_last_rejection_timestamp_seconds",
        "tinyperf_image_update_available",
        "tinyperf_image_update_state",
    ] {
        assert!(
            sample_names(&idle).contains(family),
            "no {family} in\n{idle}"
        );
    }
    for family in [
        "tinyperf_gpu_power_watts",
        "tinyperf_gpu_temperature_celsius",
        "tinyperf_gpu_utilization_ratio",
        "tinyperf_telemetry_sample_timestamp_seconds",
    ] {
        assert!(
            sample_names(&running).contains(family),
            "no {family} in\n{running}"
        );
    }
    assert_eq!(
        running
            .lines()
            .filter(|l| l.starts_with("tinyperf_gpu_power_watts{"))
            .count(),
        6,
        "{running}"
    );
    assert!(!sample_names(&idle).contains("tinyperf_gpu_power_watts"));
}

#[test]
fn fleet_scrape_config_targets_and_rules_are_valid() {
    // The example target list stands in for a site's list, so promtool reads it as the
    // file_sd file it would be.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("targets")).unwrap();
    std::fs::create_dir_all(dir.path().join("rules")).unwrap();
    std::fs::copy(
        fleet("prometheus/prometheus.yml"),
        dir.path().join("prometheus.yml"),
    )
    .unwrap();
    std::fs::copy(
        fleet("prometheus/targets.example.yml"),
        dir.path().join("targets/example.yml"),
    )
    .unwrap();
    std::fs::copy(
        fleet("prometheus/rules/tinyperf.yml"),
        dir.path().join("rules/tinyperf.yml"),
    )
    .unwrap();
    let config = dir.path().join("prometheus.yml");
    let (rc, out) = promtool(&["check", "config", config.to_str().unwrap()], None);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("is valid prometheus config"), "{out}");
    assert!(!out.contains("WARNING"), "{out}");
    let rules = fleet("prometheus/rules/tinyperf.yml");
    let (rc, out) = promtool(&["check", "rules", rules.to_str().unwrap()], None);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn fleet_rule_unit_tests_pass() {
    let dir = fleet("prometheus/tests");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path().display().to_string())
        .filter(|p| p.ends_with(".yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let (rc, out) = promtool(&args, None);
    assert_eq!(rc, 0, "promtool test rules:\n{out}");
    assert!(!out.contains("FAILED"), "{out}");
}

/// Every PromQL query of a Grafana dashboard: its panels' targets and its variables'.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            // label_values(metric, label) is Grafana's, not PromQL: its metric is checked.
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(metric, _)| metric.to_string());
            queries.push(inner.unwrap_or_else(|| query.to_string()));
        }
    }
    queries
}

/// Grafana's variables as Prometheus would see them once substituted.
fn substitute_variables(expr: &str) -> String {
    let mut out = expr
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h");
    while let Some(start) = out.find('$') {
        let rest = &out[start + 1..];
        let len = if rest.starts_with('{') {
            rest.find('}').unwrap() + 1
        } else {
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        };
        out.replace_range(start..start + 1 + len, ".*");
    }
    out
}

const PROMQL_WORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "quantile",
    "topk",
    "bottomk",
    "stddev",
    "stdvar",
    "count_values",
    "group",
    "inf",
    "nan",
];

/// The metric names a PromQL expression reads: identifiers that are not functions,
/// keywords, label names in matchers or grouping lists, durations or strings.
fn metric_names(expr: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut last_word = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' || c == '[' {
            let close = if c == '{' { '}' } else { ']' };
            while i < chars.len() && chars[i] != close {
                if chars[i] == '"' {
                    i += 1;
                    while chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                i += 1;
            }
            i += 1;
        } else if c == '('
            && [
                "by",
                "without",
                "on",
                "ignoring",
                "group_left",
                "group_right",
            ]
            .contains(&last_word.as_str())
        {
            while chars[i] != ')' {
                i += 1;
            }
            i += 1;
            last_word.clear();
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j] == ' ' {
                j += 1;
            }
            let is_call = j < chars.len() && chars[j] == '(';
            let after_number = start > 0 && chars[start - 1].is_ascii_digit();
            if !is_call && !after_number && !PROMQL_WORDS.contains(&word.to_lowercase().as_str()) {
                names.insert(word.clone());
            }
            last_word = word;
        } else {
            if !c.is_whitespace() {
                last_word.clear();
            }
            i += 1;
        }
    }
    names
}

#[test]
fn promql_names_are_read_from_an_expression() {
    let names = metric_names(
        "sum by (sku) (rate(a_total{job=~\"x|y\"}[5m])) / on (sku) group_left () b:c > 0.9 * max(d offset 1h) and e{l='}'}",
    );
    let names: Vec<_> = names.into_iter().collect();
    assert_eq!(names, ["a_total", "b:c", "d", "e"]);
    assert_eq!(
        substitute_variables("x{i=~\"$instance\",g=~\"${gpu}\"}[$__rate_interval]"),
        "x{i=~\".*\",g=~\".*\"}[5m]"
    );
}

#[test]
fn dashboard_queries_parse_and_read_only_what_the_agent_and_rules_give() {
    let path = fleet("grafana/dashboards/fleet.json");
    let dashboard: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(dashboard["schemaVersion"].is_u64());
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            panel["type"].is_string() && panel["gridPos"].is_object(),
            "{panel}"
        );
    }
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 5, "{queries:?}");

    // Each query, wrapped as a recording rule, must parse.
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, query) in queries.iter().enumerate() {
        let expr = serde_json::to_string(&substitute_variables(query)).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard:expr_{i}\n        expr: {expr}\n"
        ));
    }
    let file = dir.path().join("dashboard.yml");
    std::fs::write(&file, &rules).unwrap();
    let (rc, out) = promtool(&["check", "rules", file.to_str().unwrap()], None);
    assert_eq!(rc, 0, "{out}\n{rules}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{out}"
    );

    // And read only metrics a real agent exposes (idle or during a run), the fleet's
    // recording rules' and Prometheus's own `up`.
    let (idle, running) = agent_metrics_idle_and_running();
    let mut known = sample_names(&idle);
    known.extend(sample_names(&running));
    known.insert("up".into());
    let rule_file = std::fs::read_to_string(fleet("prometheus/rules/tinyperf.yml")).unwrap();
    for line in rule_file.lines() {
        if let Some(name) = line.trim().strip_prefix("- record: ") {
            known.insert(name.trim().to_string());
        }
    }
    for query in &queries {
        for name in metric_names(&substitute_variables(query)) {
            assert!(
                known.contains(&name),
                "the dashboard reads {name}, which nothing exposes: {query}"
            );
        }
    }
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn prometheus_scraping_four_agents_alerts_on_exactly_the_slow_box() {
    // Loopback aliases: all of 127.0.0.0/8 is the loopback interface on Linux. Each
    // agent owns the agent's bus name, so each has a bus of its own.
    let speeds = [6300.0, 6350.0, 6250.0, 5000.0];
    let mut agents = Vec::new();
    let mut dirs = Vec::new();
    let mut buses = Vec::new();
    for (i, speed) in speeds.iter().enumerate() {
        let d = AgentDirs::new("");
        seed_results(&d.state_dir(), &format!("20260101-00000{i}-aaaaaa"), *speed);
        let listen = format!("127.0.0.{}:0", i + 2);
        let bus = Bus::start();
        agents.push(Agent::start_with_args(&bus, &d, &["--listen", &listen]));
        dirs.push(d);
        buses.push(bus);
    }
    let addresses: Vec<String> = agents.iter().map(|a| a.http.to_string()).collect();
    for (i, address) in addresses.iter().enumerate() {
        assert!(
            address.starts_with(&format!("127.0.0.{}:", i + 2)),
            "{address}"
        );
    }
    let slow = addresses[3].clone();

    let dir = tempfile::tempdir().unwrap();
    let targets: Vec<String> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!("- targets: [\"{a}\"]\n  labels: {{sku: tinybox-green, box: box{i}}}\n")
        })
        .collect();
    std::fs::write(dir.path().join("targets.yml"), targets.concat()).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: [\"{}\"]\n\
         scrape_configs:\n  - job_name: tinyperf\n    file_sd_configs:\n      - files: [\"{}\"]\n",
        fleet("prometheus/rules/tinyperf.yml").display(),
        dir.path().join("targets.yml").display()
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let web = format!("127.0.0.1:{port}");
    let _prometheus = Killed(
        Command::new(prometheus_bin("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    let web: SocketAddr = web.parse().unwrap();
    let api = |path: &str| -> Option<Value> {
        let (status, body) = http_get(web, path).ok()?;
        (status == 200).then(|| serde_json::from_slice(&body).unwrap())
    };
    let first_value = |query: &str| -> Option<f64> {
        let answer = api(&format!("/api/v1/query?query={query}"))?;
        answer["data"]["result"].get(0)?["value"][1]
            .as_str()?
            .parse()
            .ok()
    };
    // The median is only the fleet's once every box has been scraped and the rules have
    // evaluated over all four.
    let median = wait_for(
        Duration::from_secs(60),
        "the SKU median over four boxes",
        || {
            let boxes = first_value("sku:tinyperf_train_images_per_second:boxes")?;
            if boxes != 4.0 {
                return None;
            }
            // Read after the count, so from the same evaluation or a later one.
            first_value("sku:tinyperf_train_images_per_second:median").map(|m| m.to_string())
        },
    );
    assert_eq!(median.parse::<f64>().unwrap(), 6275.0);
    let alerts = wait_for(Duration::from_secs(60), "the slow box's alert", || {
        let answer = api("/api/v1/alerts")?;
        let alerts = answer["data"]["alerts"].as_array()?.clone();
        (!alerts.is_empty()).then_some(alerts)
    });
    // Give every rule a few more evaluations to have fired if it would.
    std::thread::sleep(Duration::from_secs(3));
    let alerts =
        api("/api/v1/alerts").map_or(alerts, |a| a["data"]["alerts"].as_array().unwrap().clone());
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert_eq!(
        alerts[0]["labels"]["alertname"],
        "TinyperfTrainingBelowFleet"
    );
    assert_eq!(alerts[0]["labels"]["instance"], slow.as_str());
    assert_eq!(alerts[0]["labels"]["box"], "box3");
    drop(agents);
}
