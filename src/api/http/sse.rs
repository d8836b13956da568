//! `GET /api/v1/events`: the agent's events as server-sent events.
//!
//! The stream opens with a `status` event carrying the whole snapshot, then sends one
//! event per [`AgentEvent`] under its [`AgentEvent::name`], and a comment line every
//! keep-alive period so proxies and clients can tell a quiet stream from a dead one.
//! A reader that falls behind the broadcast gets a fresh `status` event and carries on.
//! A stream ends after its maximum age (the client reconnects after `retry`), so a
//! reader that stopped reading cannot hold its slot for longer than that.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, OwnedSemaphorePermit};
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};

use super::response::{with_body, Body};
use super::stream_shares::Share;
use crate::agent::events::AgentEvent;
use crate::agent::AgentHandle;

/// How long a client waits before reconnecting after the stream drops, in ms.
const RETRY_MS: u32 = 3000;

struct EventStream {
    handle: AgentHandle,
    events: broadcast::Receiver<AgentEvent>,
    keep_alive: Interval,
    opening: Option<Bytes>,
    /// When the stream ends so that the client reconnects.
    ends_at: Instant,
    /// Held for as long as the client listens: a stream of the server's, and one of
    /// the client address's share.
    _permit: (OwnedSemaphorePermit, Share),
}

/// The event-stream response. Subscribes before taking the snapshot, so no event
/// between the two is lost.
pub fn response(
    handle: AgentHandle,
    keep_alive: Duration,
    max_age: Duration,
    permit: (OwnedSemaphorePermit, Share),
) -> Response<Body> {
    let events = handle.subscribe();
    let mut opening = format!("retry: {RETRY_MS}\n\n").into_bytes();
    opening.extend_from_slice(&encode("status", &handle.status()));
    let mut keep_alive = interval_at(Instant::now() + keep_alive, keep_alive);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = EventStream {
        handle,
        events,
        keep_alive,
        opening: Some(opening.into()),
        ends_at: Instant::now() + max_age,
        _permit: permit,
    };
    let frames = stream::unfold(state, |mut state| async move {
        let chunk = state.next_chunk().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), state))
    });
    let mut response = with_body(
        StatusCode::OK,
        super::response::EVENT_STREAM,
        StreamBody::new(frames).boxed_unsync(),
    );
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    // The slot and the connection go together when the stream ends.
    response
        .headers_mut()
        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

impl EventStream {
    /// The next bytes to send, or `None` when the agent has shut its event bus.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(opening) = self.opening.take() {
            return Some(opening);
        }
        tokio::select! {
            received = self.events.recv() => match received {
                Ok(event) => Some(encode(event.name(), &event)),
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "event stream reader fell behind; resending status");
                    Some(encode("status", &self.handle.status()))
                }
                Err(RecvError::Closed) => None,
            },
            _ = self.keep_alive.tick() => Some(Bytes::from_static(b": keep-alive\n\n")),
            _ = tokio::time::sleep_until(self.ends_at) => None,
        }
    }
}

/// One event: `event: NAME` and a single `data:` line of compact JSON, which never
/// holds a raw newline.
pub fn encode<T: Serialize>(name: &str, data: &T) -> Bytes {
    let json = serde_json::to_string(data).unwrap_or_else(|e| {
        serde_json::json!({"error": format!("cannot encode event: {e}")}).to_string()
    });
    Bytes::from(format!("event: {name}\ndata: {json}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RunState, Verdict};

    #[test]
    fn events_encode_as_one_named_data_line() {
        let event = AgentEvent::RunFinished {
            run_id: "r\n1".into(),
            state: RunState::Passed,
            verdict: Some(Verdict::Pass),
        };
        let text = String::from_utf8(encode(event.name(), &event).to_vec()).unwrap();
        let lines: Vec<_> = text.split('\n').collect();
        assert_eq!(lines[0], "event: run_finished");
        assert!(lines[1].starts_with("data: {"));
        assert_eq!(&lines[2..], ["", ""]);
        let data: serde_json::Value = serde_json::from_str(&lines[1][6..]).unwrap();
        assert_eq!(data["run_id"], "r\n1");
        assert_eq!(data["state"], "passed");
    }
}
