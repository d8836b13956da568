//! Clients that repeat a failing request thousands of times, against a real agent over
//! loopback: each kind of failure leaves one log line per interval, wrong tokens are
//! bounded per address with a 429, and /metrics counts them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use common::{green_record, http_get, seed_runs, Agent, AgentDirs, Bus, TOKEN};

const FLOOD: usize = 2000;

/// A keep-alive connection from `from`, for many requests in a row.
struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(from: IpAddr, to: SocketAddr) -> Client {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let stream = runtime.block_on(async {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(from, 0)).unwrap();
            socket.connect(to).await.unwrap().into_std().unwrap()
        });
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            reader: BufReader::new(stream),
        }
    }

    /// Sends `head` (without its blank line) and `body`; the status, the headers in
    /// lower case, and the body.
    fn exchange(&mut self, head: &str, body: &str) -> (u16, String, String) {
        let request = format!(
            "{head}\r\nhost: test\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).unwrap();
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a status line, not {status_line:?}"));
        let mut headers = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            let line = line.to_ascii_lowercase();
            if let Some(v) = line.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            headers.push_str(&line);
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        (status, headers, String::from_utf8(body).unwrap())
    }
}

fn lines_with(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

#[test]
fn a_flood_of_failing_reads_leaves_a_line_per_interval_not_a_line_per_request() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let ids = seed_runs(&dirs.state_dir(), &green_record(), 1);
    let mut agent = Agent::start(&bus, &dirs);
    // The record goes bad under the running agent: every read of it fails.
    let record = dirs.state_dir().join("runs").join(&ids[0]).join("run.json");
    std::fs::write(&record, b"{\"id\": \"not json").unwrap();

    let mut client = Client::connect(IpAddr::from([127, 0, 0, 1]), agent.http);
    let get = format!("GET /api/v1/runs/{} HTTP/1.1", ids[0]);
    for _ in 0..FLOOD {
        let (status, _, body) = client.exchange(&get, "");
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("unreadable"), "{body}");
    }
    let log = agent.stop();
    let failed = lines_with(&log, "HTTP request failed");
    assert!(
        (1..=3).contains(&failed),
        "{FLOOD} failing reads logged {failed} lines:\n{log}"
    );
}

#[test]
fn wrong_tokens_are_bounded_per_address_counted_and_logged_once_per_interval() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let mut agent = Agent::start(&bus, &dirs);
    let guesser = IpAddr::from([127, 0, 0, 30]);
    // A refused write's body is left unread, so the agent closes its connection:
    // every guess comes on a connection of its own.
    let once = |from: IpAddr, head: &str, body: &str| {
        Client::connect(from, agent.http).exchange(&format!("{head}\r\nconnection: close"), body)
    };
    let post = "POST /api/v1/runs HTTP/1.1\r\nauthorization: Bearer not-the-token\r\n\
                content-type: application/json";
    let body = r#"{"suite": "inventory"}"#;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut retry_after = None;
    for _ in 0..FLOOD {
        let (status, headers, reply) = once(guesser, post, body);
        *statuses.entry(status).or_default() += 1;
        if status == 429 {
            assert!(reply.contains("too_many_bad_tokens"), "{reply}");
            retry_after = headers
                .lines()
                .find_map(|l| l.strip_prefix("retry-after:"))
                .map(|v| v.trim().parse::<u64>().unwrap());
        }
    }
    assert_eq!(statuses.get(&403), Some(&10), "{statuses:?}");
    assert_eq!(statuses.get(&429), Some(&(FLOOD - 10)), "{statuses:?}");
    assert!(
        retry_after.is_some_and(|s| (1..=60).contains(&s)),
        "{retry_after:?}"
    );
    // Even the right token waits at that address; another address is let through
    // (a cancel of no such run: past the token, to the 404).
    let cancel = format!(
        "POST /api/v1/runs/20260101-000000-ffffff/cancel HTTP/1.1\r\n\
         authorization: Bearer {TOKEN}"
    );
    assert_eq!(once(guesser, &cancel, "").0, 429);
    let (status, _, reply) = once(IpAddr::from([127, 0, 0, 31]), &cancel, "");
    assert_eq!(status, 404, "{reply}");

    let (_, metrics) = http_get(agent.http, "/metrics").unwrap();
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("\ntinyperf_http_bad_tokens_total 10\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "\ntinyperf_http_token_refusals_total {}\n",
            FLOOD - 10 + 1
        )),
        "{metrics}"
    );
    let log = agent.stop();
    let guesses = lines_with(&log, "wrong HTTP write token");
    let refusals = lines_with(&log, "a write refused: its address presented");
    assert!((1..=2).contains(&guesses), "{guesses} lines:\n{log}");
    assert!((1..=2).contains(&refusals), "{refusals} lines:\n{log}");
    assert!(
        log.contains("127.0.0.30"),
        "the guessing address is named:\n{log}"
    );
}
