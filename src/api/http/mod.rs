//! The HTTP API, the status page, Prometheus metrics and server-sent events, on hyper 1
//! (HTTP/1.1).
//!
//! Reads are open; writes need `Authorization: Bearer <token>`. Every error is JSON
//! `{"error": {"code", "message"}}`. The server protects the agent from its clients:
//! headers, bodies and time are bounded; a connection idle between requests, or whose
//! client stops taking what it is sent, is closed; connections are capped in all and
//! per client address, and event streams in number and age; so a flood costs a refused
//! connection, not the agent, and `/healthz` answers even a refused client.

mod admission;
mod auth;
mod body;
mod conn;
mod endpoints;
mod file_body;
mod log_limit;
mod metrics;
mod page;
mod response;
mod router;
mod sse;
mod stream_shares;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{HeaderValue, CONNECTION};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::agent::AgentHandle;
use endpoints::App;
pub use page::Prices;
use response::ApiError;

/// What the server reads from a request before it acts on it, for checks of hostile
/// input without a server (the fuzz targets in fuzz/): the endpoint a path names, the
/// `limit` of a query, and the run a start's body asks for.
pub mod reading {
    pub use super::body::parse_json;
    pub use super::endpoints::{run_limit, StartRequest};

    /// Whether `path` names an endpoint (a run's id in it checked); else the message
    /// the client is answered with.
    pub fn endpoint(path: &str) -> Result<(), String> {
        super::router::Endpoint::from_path(path)
            .map(|_| ())
            .map_err(|e| e.message)
    }
}

/// The client address a request came from, in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub std::net::IpAddr);

/// The bounds the server keeps.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; further ones get a 503 and are closed.
    pub max_connections: usize,
    /// Connections served at once from one client address.
    pub max_connections_per_peer: usize,
    /// Open `GET /api/v1/events` streams at once; further ones get a 503.
    pub max_event_streams: usize,
    /// Open event streams at once from one client address, well below
    /// `max_event_streams`: one client cannot take every stream.
    pub max_event_streams_per_peer: usize,
    /// Request line plus headers, in bytes; more gets 431.
    pub max_header_bytes: usize,
    /// Number of request headers; more gets 431 (hyper refuses over 100 by itself).
    pub max_headers: usize,
    /// Request body, in bytes; more gets 413.
    pub max_body_bytes: usize,
    /// Time to send a request's headers, and how long an idle keep-alive connection
    /// stays open.
    pub header_read_timeout: Duration,
    /// Time to read the body and answer; more gets 408.
    pub request_timeout: Duration,
    /// How long a connection may sit with no request after its last answer (or after
    /// connecting) before it is closed.
    pub idle_timeout: Duration,
    /// How long a client may leave what it was sent untaken (a full socket, unsent
    /// bytes that never drain) before its connection is closed.
    pub send_timeout: Duration,
    /// How long one event stream lasts; the client reconnects (the page does by
    /// itself) and gets a fresh status, so a reader that stopped cannot keep a slot.
    pub max_event_stream_age: Duration,
    /// Period of the comment lines that keep an event stream alive.
    pub keep_alive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            max_connections_per_peer: 64,
            max_event_streams: 128,
            max_event_streams_per_peer: 16,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 64 * 1024,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(10),
            max_event_stream_age: Duration::from_secs(600),
            keep_alive: Duration::from_secs(15),
        }
    }
}

/// How far above the configured head size hyper itself cuts a request off.
const HARD_LIMIT_FACTOR: usize = 4;
/// hyper refuses a read buffer smaller than this.
const MIN_READ_BUFFER: usize = 8192;
/// Refusals of over-limit connections in flight at once; beyond it they are dropped.
const MAX_PENDING_REFUSALS: usize = 64;
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a refused client has to send its request line, so `/healthz` can still
/// be answered.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_millis(500);
const REFUSAL_BODY: &str = "{\"error\":{\"code\":\"too_many_connections\",\
\"message\":\"the agent is serving too many clients; try again shortly\"}}\n";
const REFUSAL_PEER_BODY: &str = "{\"error\":{\"code\":\"too_many_connections\",\
\"message\":\"this address has too many connections open; close some and try again\"}}\n";
const HEALTHY_BODY: &str = "{\"status\":\"ok\"}\n";
/// How often each connection's guard looks at its activity, at most.
const MAX_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// The whole answer to a connection refused for `why`: `/healthz` still answers.
fn refusal(why: admission::Refusal, request_line: &[u8]) -> Vec<u8> {
    let health = request_line.starts_with(b"GET /healthz ")
        || request_line.starts_with(b"GET /healthz?")
        || request_line.starts_with(b"HEAD /healthz ");
    let (status, body) = if health {
        ("200 OK", HEALTHY_BODY)
    } else if why == admission::Refusal::PeerConnections {
        ("503 Service Unavailable", REFUSAL_PEER_BODY)
    } else {
        ("503 Service Unavailable", REFUSAL_BODY)
    };
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncache-control: no-store\r\n\
         retry-after: 5\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves the API on `listener` forever with the default limits. `token == None`
/// disables writes.
pub async fn serve(handle: AgentHandle, listener: TcpListener, token: Option<String>) {
    serve_with(handle, listener, token, Limits::default()).await
}

/// Serves the API on `listener` forever within `limits`.
pub async fn serve_with(
    handle: AgentHandle,
    listener: TcpListener,
    token: Option<String>,
    limits: Limits,
) {
    serve_priced(handle, listener, token, limits, Prices::default()).await
}

/// Serves the API within `limits`, the pages' price-performance at `prices`.
pub async fn serve_priced(
    handle: AgentHandle,
    listener: TcpListener,
    token: Option<String>,
    limits: Limits,
    prices: Prices,
) {
    if token.is_none() {
        info!("no HTTP write token: POST endpoints answer 403");
    }
    let admission = Arc::new(admission::Admission::new(
        limits.max_connections,
        limits.max_connections_per_peer,
    ));
    let refusals = Arc::new(Semaphore::new(MAX_PENDING_REFUSALS));
    // hyper's own bound is a backstop well above ours: within it, the request reaches
    // the service and an oversized head gets a JSON 431 like every other error.
    let hard_header_bytes = limits.max_header_bytes.saturating_mul(HARD_LIMIT_FACTOR);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(hard_header_bytes)
        .max_buf_size((hard_header_bytes.max(limits.max_body_bytes) + 1024).max(MIN_READ_BUFFER))
        .keep_alive(true);
    let bounds = conn::Bounds {
        idle: limits.idle_timeout,
        send: limits.send_timeout,
    };
    let check_period = (limits.idle_timeout.min(limits.send_timeout) / 4)
        .clamp(Duration::from_millis(20), MAX_CHECK_PERIOD);
    let app = Arc::new(App {
        handle,
        tokens: auth::TokenGuard::new(token),
        error_lines: log_limit::LineLimit::default(),
        event_streams: Arc::new(Semaphore::new(limits.max_event_streams.max(1))),
        stream_shares: stream_shares::StreamShares::new(limits.max_event_streams_per_peer),
        admission: admission.clone(),
        limits,
        pages: page::PageState::new(prices),
    });

    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, most likely: back off rather than spin.
                warn!(error = %e, "cannot accept an HTTP connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let admitted = match admission.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(why) => {
                debug!(%peer, ?why, "refusing an HTTP connection");
                if let Ok(refusal) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        let _refusal = refusal;
                        refuse(stream, why).await;
                    });
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (stream, activity) = conn::Watched::new(stream);
        let app = app.clone();
        let service_activity = activity.clone();
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(Peer(peer.ip()));
                let app = app.clone();
                let activity = service_activity.clone();
                async move { Ok::<_, Infallible>(answer(app, &activity, request).await) }
            }),
        );
        tokio::spawn(async move {
            let _admitted = admitted;
            tokio::pin!(connection);
            let mut check = tokio::time::interval(check_period);
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    result = &mut connection => {
                        if let Err(e) = result {
                            debug!(%peer, error = %e, "HTTP connection ended with an error");
                        }
                        break;
                    }
                    _ = check.tick() => {
                        if let Some(stalled) = activity.check(bounds) {
                            // Dropping the connection closes the socket.
                            debug!(%peer, reason = stalled.as_str(), "closing a stalled HTTP connection");
                            break;
                        }
                    }
                }
            }
        });
    }
}

/// Answers one request within the request timeout, and closes the connection after
/// an answer that leaves unread input behind.
async fn answer(
    app: Arc<App>,
    activity: &Arc<conn::Activity>,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<response::Body> {
    let _in_flight = activity.begin_request();
    let timeout = app.limits.request_timeout;
    let mut response = match tokio::time::timeout(timeout, app.respond(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request was not complete within {} s",
                timeout.as_secs_f64()
            ),
        )
        .into_response(),
    };
    if response.headers().get(hyper::header::CONTENT_TYPE)
        == Some(&HeaderValue::from_static(response::EVENT_STREAM))
    {
        activity.set_streaming();
    }
    if matches!(
        response.status(),
        StatusCode::REQUEST_TIMEOUT
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
    ) {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Tells a refused client to come back later (or that the agent is healthy, when
/// that is all it asked), then closes.
async fn refuse(mut stream: TcpStream, why: admission::Refusal) {
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        let mut head = [0u8; 64];
        let mut read = 0;
        let _ = tokio::time::timeout(REFUSAL_READ_TIMEOUT, async {
            while read < head.len() && !head[..read].contains(&b'\n') {
                match stream.read(&mut head[read..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
        })
        .await;
        stream.write_all(&refusal(why, &head[..read])).await?;
        stream.shutdown().await?;
        // Read what the client sent so closing does not reset the connection before it
        // has read the answer.
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_declares_its_length_and_still_answers_healthz() {
        let healthy = refusal(
            admission::Refusal::AllConnections,
            b"GET /healthz HTTP/1.1\r\n",
        );
        assert!(healthy.starts_with(b"HTTP/1.1 200 OK\r\n"));
        let bytes = refusal(admission::Refusal::AllConnections, b"GET / HTTP/1.1\r\n");
        let text = std::str::from_utf8(&bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(value["error"]["code"], "too_many_connections");
    }
}
