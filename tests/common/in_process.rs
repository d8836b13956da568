//! The agent core in this process, served over HTTP on a loopback port, and a raw
//! HTTP/1.1 client for it: requests go out exactly as written (odd paths, odd headers),
//! one connection each, and answers are read whole.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tinyperf::agent::config::Config;
use tinyperf::agent::AgentHandle;
use tinyperf::api::http::{serve_priced, Limits, Prices};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{sleep, timeout, Instant};

/// How long a test waits for an answer, or for the next line of an event stream.
pub const IO_LIMIT: Duration = Duration::from_secs(30);

/// How the server is set up beyond the core: its write token (none: writes answer
/// 403), its limits and its prices, each the server's default unless given.
#[derive(Default)]
pub struct Serving {
    pub token: Option<String>,
    pub limits: Limits,
    pub prices: Prices,
}

/// A served core; its folder and the core live as long as this does.
pub struct Served {
    pub addr: SocketAddr,
    pub state_dir: PathBuf,
    pub handle: AgentHandle,
    _dir: tempfile::TempDir,
}

/// Starts the agent core with `config` on a store in a fresh folder (its `state_dir`
/// is set to that store, after `seed` has written into it) and serves HTTP on a
/// loopback port.
pub async fn serve_core(config: Config, serving: Serving, seed: impl FnOnce(&Path)) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    std::fs::create_dir_all(state_dir.join("runs")).unwrap();
    seed(&state_dir);
    let config = Config {
        state_dir: state_dir.clone(),
        ..config
    };
    let handle = super::core_in(dir.path(), config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_priced(
        handle.clone(),
        listener,
        serving.token,
        serving.limits,
        serving.prices,
    ));
    Served {
        addr,
        state_dir,
        handle,
        _dir: dir,
    }
}

/// An answer read whole, its body already de-chunked.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// Asserts a JSON error with `status` and `code`.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        assert!(
            self.header("content-type")
                .unwrap_or_default()
                .starts_with("application/json"),
            "error is not JSON: {:?}",
            self.headers
        );
        let body = self.json();
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(
            !body["error"]["message"].as_str().unwrap().is_empty(),
            "{body}"
        );
    }
}

pub fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = std::str::from_utf8(&data[..end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 2 + size + 2..];
    }
}

/// Sends `raw` on a new connection and reads the answer until the server closes.
pub async fn exchange(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(raw).await?;
    let mut buf = Vec::new();
    timeout(IO_LIMIT, stream.read_to_end(&mut buf))
        .await
        .map_err(|_| std::io::Error::other("no answer in time"))??;
    Ok(parse_reply(&buf))
}

/// A request that asks the server to close the connection after its answer.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Vec<u8> {
    let mut text = format!("{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    } else {
        text.push_str("\r\n");
    }
    text.into_bytes()
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    exchange(addr, &request("GET", path, &[], None))
        .await
        .unwrap()
}

/// POST `body` as JSON, with `token` as the bearer token when there is one.
pub async fn post_json(addr: SocketAddr, path: &str, token: Option<&str>, body: &str) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth));
    }
    exchange(addr, &request("POST", path, &headers, Some(body)))
        .await
        .unwrap()
}

/// Polls run `id` until it leaves `running`, for at most `limit`: its record.
pub async fn wait_finished(addr: SocketAddr, id: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let record = get(addr, &format!("/api/v1/runs/{id}")).await.json();
        if record["state"] != "running" {
            return record;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} still running: {record}"
        );
        sleep(Duration::from_millis(100)).await;
    }
}

/// Opens `/api/v1/events` and reads its head, which must announce an event stream.
pub async fn open_events(addr: SocketAddr) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"GET /api/v1/events HTTP/1.1\r\nhost: test\r\naccept: text/event-stream\r\n\r\n",
        )
        .await
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        timeout(IO_LIMIT, reader.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    reader
}

/// Reads one server-sent event (name and data), answering keep-alive comments with
/// `(":", comment)`.
pub async fn next_event(reader: &mut BufReader<TcpStream>) -> (String, String) {
    let mut name = String::new();
    let mut data = String::new();
    loop {
        let mut line = String::new();
        let n = timeout(IO_LIMIT, reader.read_line(&mut line))
            .await
            .expect("an event in time")
            .unwrap();
        assert!(n > 0, "event stream closed");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            if !name.is_empty() || !data.is_empty() {
                return (name, data);
            }
            continue;
        }
        // Chunk sizes of the chunked encoding are hex-only lines; skip them.
        if !line.contains(':') && line.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        if let Some(comment) = line.strip_prefix(':') {
            return (":".into(), comment.trim().into());
        }
        if let Some(v) = line.strip_prefix("event: ") {
            name = v.into();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = v.into();
        }
    }
}
