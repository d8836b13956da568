//! The status page, the run pages and their files over a real socket on loopback: the
//! agent core runs in this process on a real store on disk. Checks what a browser
//! relies on (the content security policy, every script and style sheet served by the
//! agent, values escaped), the page weight, and how fast both pages answer 50 clients
//! with 1,000 runs stored.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::in_process::{exchange, request, serve_core, Reply, Served, Serving};
use tinyperf::agent::config::Config;
use tinyperf::api::http::Prices;
use tinyperf::record::{Check, Metric, RunRecord, RunState, StageResult, Trigger, Verdict};
use tinyperf::runtime::telemetry::csv::HEADER;

const RUN: &str = "20270101-000000-abcdef";
const HEALTH_RUN: &str = "20270101-000100-abcdef";
const HOSTILE: &str = "<script>alert(\"owned\")</script>'";

async fn start(seed: impl FnOnce(&Path), prices: Prices) -> Served {
    let serving = Serving {
        prices,
        ..Serving::default()
    };
    serve_core(Config::default(), serving, seed).await
}

fn stage(name: &str, metrics: Vec<Metric>, checks: Vec<Check>) -> StageResult {
    StageResult {
        name: name.into(),
        verdict: Verdict::Pass,
        started_at: chrono::Utc::now(),
        finished_at: chrono::Utc::now(),
        metrics,
        checks,
        findings: vec![format!("a finding with {HOSTILE}")],
        message: None,
    }
}

fn check(name: &str, subject: &str, verdict: Verdict) -> Check {
    Check {
        name: name.into(),
        subject: Some(subject.into()),
        expected: "agree".into(),
        found: HOSTILE.into(),
        verdict,
    }
}

fn write_record(state_dir: &Path, record: &RunRecord) -> PathBuf {
    let dir = state_dir.join("runs").join(&record.id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), serde_json::to_vec(record).unwrap()).unwrap();
    dir
}

/// A smoke run with two GPUs' telemetry and an MLLOG with evaluations, and a health
/// run that failed one GPU.
fn seed(state_dir: &Path) {
    let mut run = RunRecord::new(
        RUN.into(),
        "smoke".into(),
        Trigger::Http,
        Default::default(),
    );
    run.started_at = chrono::DateTime::parse_from_rfc3339("2027-01-01T00:00:00Z")
        .unwrap()
        .into();
    run.stages.push(stage(
        "smoke",
        vec![
            Metric::new("img_per_s", 812.5, "img/s"),
            Metric::new("energy_j", 3600.0, "J"),
            Metric::new("img_per_j", 2.25, "img/J"),
        ],
        vec![],
    ));
    run.finish(RunState::Passed, Some(HOSTILE.into()));
    let dir = write_record(state_dir, &run);
    let mut csv = format!("{}\n", HEADER.join(","));
    for t in 0..30 {
        for (gpu, address) in [(0, "0000:03:00.0"), (1, "0000:04:00.0")] {
            csv.push_str(&format!(
                "{t}.000,smoke,gpu{gpu},{address},{},{},100,,,{},,{},none\n",
                200 + 10 * t + gpu,
                40 + t,
                1500 + 10 * t,
                50 + t
            ));
        }
        csv.push_str(&format!("{t}.000,smoke,cpu,,,45,,,,,,,\n"));
    }
    std::fs::write(dir.join("telemetry.csv"), csv).unwrap();
    let mut mllog = String::new();
    for (epoch, accuracy) in [(1, 0.31), (2, 0.55), (3, 0.78)] {
        mllog.push_str(&format!(
            ":::MLLOG {{\"namespace\": \"\", \"time_ms\": {epoch}000, \"event_type\": \"POINT_IN_TIME\", \
             \"key\": \"eval_accuracy\", \"value\": {accuracy}, \"metadata\": {{\"epoch_num\": {epoch}}}}}\n"
        ));
    }
    std::fs::write(dir.join("mllog.txt"), mllog).unwrap();

    let mut health = RunRecord::new(
        HEALTH_RUN.into(),
        "health".into(),
        Trigger::Cli,
        Default::default(),
    );
    health.stages.push(stage(
        "gpu-memory",
        vec![],
        vec![
            check("memory", "0000:03:00.0", Verdict::Pass),
            check("memory", "0000:04:00.0", Verdict::Fail),
        ],
    ));
    health.finish(RunState::Failed, None);
    write_record(state_dir, &health);
}

/// GET `path` with `headers` added, checking that the page came whole.
async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let reply = exchange(addr, &request("GET", path, headers, None))
        .await
        .expect("an answer in time");
    assert!(
        !reply
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked")),
        "pages are sent whole"
    );
    reply
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    get_with(addr, path, &[]).await
}

/// The `src` of every script and the `href` of every style sheet of a page.
fn assets(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (marker, attr) in [
        ("<script src=\"", ""),
        ("<link rel=\"stylesheet\" href=\"", ""),
    ] {
        let _ = attr;
        for part in html.split(marker).skip(1) {
            found.push(part.split('"').next().unwrap().to_string());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_loads_only_the_agents_own_files_and_escapes_every_value() {
    let server = start(seed, Prices::default()).await;
    let page = get(server.addr, "/").await;
    assert_eq!(page.status, 200);
    let policy = page.header("content-security-policy").expect("a policy");
    assert!(
        policy.contains("script-src 'self'") && policy.contains("style-src 'self'"),
        "{policy}"
    );
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let html = page.text();
    assert!(!html.contains("<script>") && !html.contains("alert(\"owned\")"));
    assert!(html.contains("&#60;script&#62;alert(&#34;owned&#34;)&#60;/script&#62;&#39;"));
    assert!(html.contains(&format!("href=\"/runs/{RUN}\"")));
    // The newest health run failed GPU 0000:04:00.0: no tile here (no GPU in this
    // machine's inventory), but the comparison and history are drawn from the briefs.
    assert!(html.contains("this box ("));

    let mut total = page.body.len();
    let mut total_gzip = page.body.len();
    let files = assets(&html);
    assert!(
        files.iter().any(|f| f.starts_with("/static/page.js")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|f| f.starts_with("/static/page.css")),
        "{files:?}"
    );
    for file in &files {
        let plain = get(server.addr, file).await;
        assert_eq!(plain.status, 200, "{file}: {}", plain.text());
        assert_eq!(plain.header("x-content-type-options"), Some("nosniff"));
        let kind = plain.header("content-type").unwrap();
        if file.contains(".js") {
            assert!(kind.starts_with("text/javascript"), "{file}: {kind}");
        } else {
            assert!(kind.starts_with("text/css"), "{file}: {kind}");
        }
        total += plain.body.len();
        let gzip = get_with(server.addr, file, &[("accept-encoding", "gzip, br")]).await;
        total_gzip += gzip.body.len();
    }
    println!(
        "page weight: / {} B; with its {} scripts and style sheets {total} B, {total_gzip} B when the client takes gzip",
        page.body.len(),
        files.len()
    );
    assert!(total < 200_000, "{total} B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uplot_is_served_with_its_licence_and_gzipped_to_clients_that_take_it() {
    let server = start(|_| {}, Prices::default()).await;
    let plain = get(server.addr, "/static/uplot.min.js").await;
    if plain.status == 404 {
        assert!(plain.text().contains("not implemented in this build"));
        assert!(
            std::env::var("TINYPERF_REQUIRE_UPLOT").as_deref() != Ok("1"),
            "uPlot is required but this build has none"
        );
        eprintln!("SKIPPED: this build has no uPlot (no network at build time)");
        return;
    }
    assert_eq!(plain.status, 200);
    assert!(plain.text().contains("uPlot"));
    let gzipped = get_with(
        server.addr,
        "/static/uplot.min.js",
        &[("accept-encoding", "gzip")],
    )
    .await;
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    assert!(gzipped.body.len() < plain.body.len() / 2);
    let mut gunzip = std::process::Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    gunzip
        .stdin
        .take()
        .unwrap()
        .write_all(&gzipped.body)
        .unwrap();
    assert_eq!(gunzip.wait_with_output().unwrap().stdout, plain.body);
    let licence = get(server.addr, "/static/uplot.LICENSE").await.text();
    assert!(licence.contains("MIT"), "{licence}");
    assert_eq!(get(server.addr, "/static/uplot.min.css").await.status, 200);
    assert_eq!(get(server.addr, "/static/nothing.js").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_shows_its_stages_checks_energy_and_figures_from_its_files() {
    let server = start(
        seed,
        Prices {
            box_usd: Some(20_000.0),
            electricity_usd_per_kwh: 0.2,
        },
    )
    .await;
    let page = get(server.addr, &format!("/runs/{RUN}")).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(!page
        .header("content-security-policy")
        .unwrap()
        .contains("unsafe-inline"));
    let html = page.text();
    assert!(!html.contains("alert(\"owned\")"));
    assert!(html.contains("&#60;script&#62;alert(&#34;owned&#34;)"));
    for link in ["", "/mllog", "/telemetry"] {
        assert!(
            html.contains(&format!("href=\"/api/v1/runs/{RUN}{link}\"")),
            "{link}"
        );
    }
    assert!(html.contains("<dt>smoke img_per_j</dt><dd>2.25 img/J</dd>"));
    for title in [
        "evaluation top-1",
        "power (W)",
        "temperature (°C)",
        "SM clock (MHz)",
        "utilisation (%)",
    ] {
        assert!(html.contains(&format!("<figcaption>{title}")), "{title}");
    }
    // Two GPUs per telemetry figure, one series of evaluations; the CPU is left out.
    assert_eq!(html.matches("<polyline").count(), 4 * 2 + 1);
    let series = html
        .split("data-series=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the series for the charts");
    let series = series
        .replace("&#34;", "\"")
        .replace("&#38;", "&")
        .replace("&#39;", "'");
    let charts: serde_json::Value = serde_json::from_str(&series).unwrap();
    assert_eq!(charts[0]["title"], "evaluation top-1");
    assert_eq!(charts[0]["ys"][0][2], 0.78);
    assert_eq!(charts[1]["title"], "power");
    assert_eq!(charts[1]["labels"], serde_json::json!(["gpu0", "gpu1"]));
    assert_eq!(charts[1]["x"].as_array().unwrap().len(), 30);
    assert_eq!(charts[1]["ys"][1][29], 200.0 + 290.0 + 1.0);
    assert!(html.contains("122.08"), "the MLPerf results are beside it");

    let health = get(server.addr, &format!("/runs/{HEALTH_RUN}"))
        .await
        .text();
    assert!(health.contains("<td class=\"mono\">0000:04:00.0</td>"));
    assert!(health.contains("This run stored no telemetry and no training figures."));

    let missing = get(server.addr, "/runs/20990101-000000-000000").await;
    assert_eq!(missing.status, 404);
    assert!(missing
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    assert_eq!(get(server.addr, "/runs/..%2f..").await.status, 400);
    // A finished run's page is kept: the second answer is the same page.
    let again = get(server.addr, &format!("/runs/{RUN}")).await;
    assert_eq!(again.body, page.body);
}

/// The image below `root` after a rollback: slot A runs the version the box went back
/// to, slot B holds the version it rejected; the state folder holds the boot checks'
/// history and an update to a third version half downloaded in this boot.
fn rolled_back_image(root: &Path, state_dir: &Path) {
    use tinyperf::update::fixture::{self, ImageLayout, SlotContent};
    use tinyperf::update::gate::{Assessment, GateCheck};
    fixture::image(
        root,
        ImageLayout {
            a: SlotContent::Version("20261206.0900"),
            b: SlotContent::Version("20261207.0900"),
            booted: 'a',
            verity: true,
        },
    );
    fixture::write(root, "proc/sys/kernel/random/boot_id", "boot-3\n");
    std::fs::create_dir_all(root.join("proc/4242")).unwrap();
    let at = |text: &str| {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&chrono::Utc)
    };
    let assessment =
        |version: &str, when: &str, boot: &str, rejected: bool, reason: &str| Assessment {
            version: version.into(),
            at: at(when),
            boot_id: boot.into(),
            result: if rejected { "fail" } else { "pass" }.into(),
            on_trial: rejected,
            rejected,
            previous_version: rejected.then(|| "20261206.0900".into()),
            run_id: None,
            checks: if rejected {
                vec![GateCheck {
                    name: "training img/s".into(),
                    expected: "≥ 0.95 × 5,220".into(),
                    found: "4,410".into(),
                    result: "fail".into(),
                    ratio: Some(0.84),
                    previous_value: Some(5220.0),
                }]
            } else {
                Vec::new()
            },
            figures: Vec::new(),
            reason: reason.into(),
        };
    for a in [
        assessment("20261206.0900", "2026-12-06T09:10:00Z", "boot-1", false, "20261206.0900 passed"),
        assessment(
            "20261207.0900",
            "2026-12-07T09:12:31Z",
            "boot-2",
            true,
            &format!(
                "20261207.0900 rejected: training img/s 4,410 vs 5,220 on 20261206.0900, 0.84 < 0.95 {HOSTILE}"
            ),
        ),
        assessment("20261206.0900", "2026-12-07T09:20:00Z", "boot-3", false, "20261206.0900 passed"),
    ] {
        tinyperf::update::boot_check::record(state_dir, &a).unwrap();
    }
    let mut update = tinyperf::update::progress::UpdateProgress::idle();
    update.state = "downloading".into();
    update.version = "20261208.0900".into();
    update.done_bytes = 3 << 29;
    update.total_bytes = 3 << 30;
    update.boot_id = "boot-3".into();
    update.pid = 4242;
    tinyperf::update::progress::write(state_dir, &update).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rollback_the_status_page_names_the_rejected_version_and_why() {
    let root = tempfile::tempdir().unwrap();
    let image_root = root.path().to_path_buf();
    let server = serve_core(
        Config {
            image_root: image_root.clone(),
            ..Config::default()
        },
        Serving::default(),
        |state| rolled_back_image(&image_root, state),
    )
    .await;
    let html = get(server.addr, "/").await.text();
    assert!(
        html.contains("<span id=\"os\">OS 20261206.0900 · slot A · verified</span>"),
        "{html}"
    );
    let banner = html
        .split("<p id=\"os-rejection\" class=\"banner fail\" role=\"alert\">")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or_else(|| panic!("no rejection banner in\n{html}"));
    assert_eq!(
        banner,
        "20261207.0900 rejected 2026-12-07 09:12 UTC: training img/s 4,410 vs 5,220 on \
         20261206.0900, 0.84 &#60; 0.95 &#60;script&#62;alert(&#34;owned&#34;)&#60;/script&#62;&#39; \
         — the box went back to 20261206.0900"
    );
    assert!(!html.contains("alert(\"owned\")"));
    assert!(
        html.contains("<div id=\"os-update\" data-state=\"downloading\">"),
        "{html}"
    );
    assert!(html.contains("Downloading OS 20261208.0900: 1.5 GiB of 3 GiB (50 %)."));
    assert!(html.contains(
        "<progress id=\"os-update-bar\" max=\"3221225472\" value=\"1610612736\"></progress>"
    ));
    // Blessed: no trial to tell of.
    assert!(!html.contains("id=\"os-trial\""));

    // The same state, as /metrics says it.
    let metrics = get(server.addr, "/metrics").await.text();
    for line in [
        "tinyperf_image_info{version=\"20261206.0900\",slot=\"a\"} 1",
        "tinyperf_image_boot_assessments_total{result=\"pass\"} 2",
        "tinyperf_image_boot_assessments_total{result=\"fail\"} 0",
        "tinyperf_image_boot_assessments_total{result=\"rejected\"} 1",
        "tinyperf_image_rollbacks_total 1",
        "tinyperf_image_last_rejection_timestamp_seconds{version=\"20261207.0900\"} 1796634751",
        "tinyperf_image_update_state{state=\"downloading\"} 1",
        "tinyperf_image_update_state{state=\"idle\"} 0",
        "tinyperf_image_update_downloaded_bytes 1610612736",
        "tinyperf_image_update_size_bytes 3221225472",
        "tinyperf_image_on_trial 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
}

/// Latencies of `count` GETs of `path` by `clients` clients at once, sorted.
async fn latencies(addr: SocketAddr, path: &str, clients: usize, count: usize) -> Vec<Duration> {
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let path = path.to_string();
        tasks.push(tokio::spawn(async move {
            let mut own = Vec::new();
            for _ in 0..count / clients {
                let started = Instant::now();
                let reply = get(addr, &path).await;
                assert_eq!(reply.status, 200);
                own.push(started.elapsed());
            }
            own
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_pages_answer_fifty_clients_with_a_thousand_runs_stored() {
    let template = common::green_record();
    let server = start(
        |state| {
            common::seed_runs(state, &template, 1000);
            seed(state);
        },
        Prices::default(),
    )
    .await;
    // The first answer of each reads what it keeps (the health run, the run's files).
    assert_eq!(get(server.addr, "/").await.status, 200);
    assert_eq!(get(server.addr, &format!("/runs/{RUN}")).await.status, 200);
    // /healthz is the baseline: what any answer costs here (connection, hyper, a debug
    // build, a machine shared with other work).
    for path in [
        "/healthz".to_string(),
        "/".to_string(),
        format!("/runs/{RUN}"),
    ] {
        let times = latencies(server.addr, &path, 50, 500).await;
        let p50 = times[times.len() / 2];
        let p99 = times[times.len() * 99 / 100];
        println!(
            "{path}: 50 clients, {} requests, p50 {p50:?}, p99 {p99:?}",
            times.len()
        );
        // A debug build on a shared machine: a loose bound that still catches a page
        // reading the disk or rendering every run per request.
        assert!(p99 < Duration::from_secs(2), "{path}: p99 {p99:?}");
    }
}
