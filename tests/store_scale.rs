//! A long history: the agent with 1,000 stored runs of a tinybox green's size answers
//! lists, the page, metrics and `ListRuns` from memory, at the cost of a short history,
//! and stays small. (`make bench` measures the same against the previous build.)

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{green_record, http_get, rss_bytes, seed_runs, Agent, AgentDirs, Bus};
use tinyperf::api::dbus::Agent1Proxy;
use zbus::proxy::CacheProperties;

const RUNS: usize = 1000;
/// Far above what the agent needs (about 30 MB here), far below what reading every
/// record on every request took (gigabytes).
const RSS_BOUND: u64 = 256 * 1024 * 1024;
/// A debug build on a shared machine; reading the store per request took seconds.
const SLOW_ANSWER: Duration = Duration::from_millis(500);

fn agent_with_history(bus: &Bus) -> (AgentDirs, Agent, Vec<String>) {
    let dirs = AgentDirs::new("retention = 2000");
    let ids = seed_runs(&dirs.state_dir(), &green_record(), RUNS);
    let agent = Agent::start(bus, &dirs);
    (dirs, agent, ids)
}

#[test]
fn a_thousand_runs_are_listed_paged_and_scraped_from_memory() {
    let bus = Bus::start();
    let (_dirs, agent, ids) = agent_with_history(&bus);
    let addr = agent.http;

    let (status, body) = http_get(addr, "/api/v1/runs?limit=1").unwrap();
    assert_eq!(status, 200);
    let page: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(page["runs"][0]["id"], ids[RUNS - 1].as_str());
    assert_eq!(page["runs"].as_array().unwrap().len(), 1);

    let slowest = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let clients: Vec<_> = (0..50)
        .map(|i| {
            let slowest = slowest.clone();
            std::thread::spawn(move || {
                let paths = ["/", "/api/v1/runs", "/metrics", "/api/v1/status"];
                for round in 0..8 {
                    let path = paths[(i + round) % paths.len()];
                    let started = Instant::now();
                    let (status, body) = http_get(addr, path).unwrap();
                    let took = started.elapsed();
                    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
                    let mut slowest = slowest.lock().unwrap();
                    *slowest = (*slowest).max(took);
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    let rss = rss_bytes(agent.child.id());
    assert!(rss < RSS_BOUND, "agent RSS {} MiB", rss >> 20);
    let slowest = *slowest.lock().unwrap();
    assert!(
        slowest < SLOW_ANSWER * 4,
        "slowest answer under 50 clients took {slowest:?}"
    );

    let (_, metrics) = http_get(addr, "/metrics").unwrap();
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains(&format!("tinyperf_store_runs {RUNS}")),
        "{metrics}"
    );
    // The newest result of the suite, from the briefs, and no run id as a label.
    let newest_finished = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:05Z").unwrap()
        + chrono::Duration::minutes(RUNS as i64 - 1);
    assert!(
        metrics.contains(&format!(
            "tinyperf_suite_result_timestamp_seconds{{suite=\"inventory\"}} {}\n",
            newest_finished.timestamp()
        )),
        "{metrics}"
    );
    assert!(!metrics.contains(&ids[RUNS - 1]), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_runs_answers_briefs_under_a_cap_and_healthz_stays_fast() {
    let bus = Bus::start();
    let (_dirs, agent, ids) = agent_with_history(&bus);
    let conn = zbus::connection::Builder::address(bus.address.as_str())
        .build()
        .await
        .unwrap();
    let proxy = Agent1Proxy::builder(&conn)
        .cache_properties(CacheProperties::No)
        .build()
        .await
        .unwrap();
    let json = proxy.list_runs(0).await.unwrap();
    assert!(
        json.len() < 1024 * 1024,
        "ListRuns(0) is {} bytes",
        json.len()
    );
    let briefs: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(briefs.len(), 100);
    assert_eq!(briefs[0]["id"], ids[RUNS - 1].as_str());
    assert!(briefs[0].get("hardware").is_none(), "a brief, not a record");

    // Callers hammering ListRuns(0) leave /healthz answering at once.
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for _ in 0..4 {
        let proxy = proxy.clone();
        let stop = stop.clone();
        flood.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                proxy.list_runs(0).await.unwrap();
            }
        }));
    }
    let addr = agent.http;
    let slowest = tokio::task::spawn_blocking(move || {
        let mut slowest = Duration::ZERO;
        for _ in 0..40 {
            let started = Instant::now();
            assert_eq!(http_get(addr, "/healthz").unwrap().0, 200);
            slowest = slowest.max(started.elapsed());
            std::thread::sleep(Duration::from_millis(25));
        }
        slowest
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    assert!(
        slowest < SLOW_ANSWER,
        "/healthz took {slowest:?} under a ListRuns flood"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_record_is_listed_but_refused_whole_without_growing_the_agent() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let mut template = green_record();
    template["hardware"]["padding"] = "x".repeat(50 * 1024 * 1024).into();
    let ids = seed_runs(&dirs.state_dir(), &template, 1);
    drop(template);
    let agent = Agent::start(&bus, &dirs);
    let addr = agent.http;
    let id = ids[0].clone();
    let (status, body) =
        tokio::task::spawn_blocking(move || http_get(addr, &format!("/api/v1/runs/{id}")).unwrap())
            .await
            .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "too_large", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over the limit"),
        "{body}"
    );
    let (_, runs) = tokio::task::spawn_blocking(move || http_get(addr, "/api/v1/runs").unwrap())
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&runs).contains(&ids[0]));
    let rss = rss_bytes(agent.child.id());
    assert!(rss < 128 * 1024 * 1024, "agent RSS {} MiB", rss >> 20);
}

#[test]
fn a_record_under_another_runs_name_is_skipped() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let ids = seed_runs(&dirs.state_dir(), &green_record(), 2);
    let runs = dirs.state_dir().join("runs");
    std::fs::copy(
        runs.join(&ids[0]).join("run.json"),
        runs.join(&ids[1]).join("run.json"),
    )
    .unwrap();
    let agent = Agent::start(&bus, &dirs);
    let (_, body) = http_get(agent.http, "/api/v1/runs").unwrap();
    let page: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let listed: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[0].as_str()]);
    let (status, _) = http_get(agent.http, &format!("/api/v1/runs/{}", ids[1])).unwrap();
    assert_eq!(status, 500);
    let (_, metrics) = http_get(agent.http, "/metrics").unwrap();
    assert!(String::from_utf8_lossy(&metrics).contains("tinyperf_store_records_skipped 1"));
}

/// Reads one HTTP response's head off `stream`, leaving the body unread.
async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "the head ends");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_a_large_mllog_cost_the_agent_a_piece_each_not_the_file() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const CLIENTS: usize = 40;
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let ids = seed_runs(&dirs.state_dir(), &green_record(), 1);
    let line = ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1700000000000, \"event_type\": \"POINT_IN_TIME\", \"key\": \"train_samples\", \"value\": 1281167, \"metadata\": {}}\n";
    let mut mllog = line.repeat(60 * 1024 * 1024 / line.len());
    mllog.push_str("the last line\n");
    let mllog_path = dirs
        .state_dir()
        .join("runs")
        .join(&ids[0])
        .join("mllog.txt");
    std::fs::write(&mllog_path, &mllog).unwrap();
    let agent = Agent::start(&bus, &dirs);
    let rss_idle = rss_bytes(agent.child.id());
    let request = format!(
        "GET /api/v1/runs/{}/mllog HTTP/1.1\r\nhost: test\r\n\r\n",
        ids[0]
    );

    let mut held = Vec::new();
    for _ in 0..CLIENTS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(agent.http).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let head = read_head(&mut stream).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("content-length: {}", mllog.len())),
            "{head}"
        );
        held.push(stream);
    }
    // Time for the agent to read ahead as far as it ever would.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_held = rss_bytes(agent.child.id());

    // One client that does read gets the file whole, byte for byte, meanwhile.
    let mut reader = tokio::net::TcpStream::connect(agent.http).await.unwrap();
    reader
        .write_all(
            request
                .replace("\r\n\r\n", "\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    read_head(&mut reader).await;
    let mut body = Vec::new();
    reader.read_to_end(&mut body).await.unwrap();
    assert_eq!(body.len(), mllog.len());
    assert!(
        body == mllog.as_bytes(),
        "the served file differs from the stored one"
    );

    eprintln!(
        "agent RSS: {} MiB idle, {} MiB with {CLIENTS} clients holding a {} MiB MLLOG unread",
        rss_idle >> 20,
        rss_held >> 20,
        mllog.len() >> 20
    );
    // Read whole, the file cost its size per client (2.4 GB here); in pieces, a
    // piece per client.
    assert!(
        rss_held < rss_idle + 48 * 1024 * 1024,
        "agent RSS {} MiB idle, {} MiB with {CLIENTS} clients not reading",
        rss_idle >> 20,
        rss_held >> 20
    );
    drop(held);
}
