//! The HTTP API, the status page, Prometheus metrics and server-sent events, on hyper 1
//! (HTTP/1.1).
//!
//! Reads are open; writes need `Authorization: Bearer <token>`. Every error is JSON
//! `{"error": {"code", "message"}}`. The server protects the agent from its clients:
//! headers, bodies and time are bounded, idle connections are closed, and connections
//! and event streams are capped, so a flood costs a refused connection, not the agent.

mod auth;
mod body;
mod endpoints;
mod metrics;
mod page;
mod response;
mod router;
mod sse;

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
use response::ApiError;

/// The bounds the server keeps.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; further ones get a 503 and are closed.
    pub max_connections: usize,
    /// Open `GET /api/v1/events` streams at once; further ones get a 503.
    pub max_event_streams: usize,
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
    /// Period of the comment lines that keep an event stream alive.
    pub keep_alive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            max_event_streams: 64,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 64 * 1024,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
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
const REFUSAL_BODY: &str = "{\"error\":{\"code\":\"too_many_connections\",\
\"message\":\"the agent is serving too many clients; try again shortly\"}}\n";

/// The whole answer to a connection over the cap.
fn refusal() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 5\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{REFUSAL_BODY}",
        REFUSAL_BODY.len()
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
    if token.is_none() {
        info!("no HTTP write token: POST endpoints answer 403");
    }
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
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
    let app = Arc::new(App {
        handle,
        token,
        event_streams: Arc::new(Semaphore::new(limits.max_event_streams.max(1))),
        limits,
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
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            debug!(%peer, "too many HTTP connections; refusing one");
            if let Ok(refusal) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    let _refusal = refusal;
                    refuse(stream).await;
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            service_fn(move |request| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(answer(app, request).await) }
            }),
        );
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = connection.await {
                debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
}

/// Answers one request within the request timeout, and closes the connection after
/// an answer that leaves unread input behind.
async fn answer(
    app: Arc<App>,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<response::Body> {
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
    if matches!(
        response.status(),
        StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE
    ) {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Tells a client over the connection cap to come back later, then closes.
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(&refusal()).await?;
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
    fn refusal_declares_its_length() {
        let bytes = refusal();
        let text = std::str::from_utf8(&bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(value["error"]["code"], "too_many_connections");
    }
}
