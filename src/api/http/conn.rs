//! What a connection has been doing, so that none can hold its slot for nothing: the
//! socket is wrapped to note every byte that moves and every write the client leaves
//! blocked, and a guard closes the connection when it sits idle between requests, or
//! when its client stops taking what it is sent.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

const NEVER: u64 = u64::MAX;

/// Why the guard closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stalled {
    /// No request for the idle bound after the last answer (or after connecting).
    Idle,
    /// The client has not taken what it was sent within the send bound.
    NotReading,
}

impl Stalled {
    pub fn as_str(self) -> &'static str {
        match self {
            Stalled::Idle => "idle",
            Stalled::NotReading => "client not reading",
        }
    }
}

/// The bounds the guard holds a connection to.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub idle: Duration,
    pub send: Duration,
}

/// One connection's activity, shared by its socket, its requests and its guard.
pub struct Activity {
    opened: Instant,
    fd: RawFd,
    /// Milliseconds since `opened` of the last byte read or written.
    last_io: AtomicU64,
    /// Milliseconds since `opened` when a write first found the socket full, or NEVER.
    blocked_since: AtomicU64,
    /// Requests being answered now.
    in_flight: AtomicUsize,
    /// The connection carries an event stream, which is never idle by design.
    streaming: AtomicBool,
    /// Bytes the kernel still held unsent at the last check, and since when.
    queued: AtomicU64,
    queued_since: AtomicU64,
}

impl Activity {
    pub fn new(fd: RawFd) -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            fd,
            last_io: AtomicU64::new(0),
            blocked_since: AtomicU64::new(NEVER),
            in_flight: AtomicUsize::new(0),
            streaming: AtomicBool::new(false),
            queued: AtomicU64::new(0),
            queued_since: AtomicU64::new(NEVER),
        })
    }

    fn now_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn touched(&self) {
        self.last_io.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Marks a request as being answered until the returned guard is dropped.
    pub fn begin_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    pub fn set_streaming(&self) {
        self.streaming.store(true, Ordering::Relaxed);
    }

    /// Whether the connection has stalled past `bounds`, checked now.
    pub fn check(&self, bounds: Bounds) -> Option<Stalled> {
        let now = self.now_ms();
        let send_ms = bounds.send.as_millis() as u64;
        let blocked = self.blocked_since.load(Ordering::Relaxed);
        if blocked != NEVER && now.saturating_sub(blocked) > send_ms {
            return Some(Stalled::NotReading);
        }
        if self.unsent_bytes_stuck(now, send_ms) {
            return Some(Stalled::NotReading);
        }
        let idle = now.saturating_sub(self.last_io.load(Ordering::Relaxed));
        let busy =
            self.in_flight.load(Ordering::Relaxed) > 0 || self.streaming.load(Ordering::Relaxed);
        if !busy && blocked == NEVER && idle > bounds.idle.as_millis() as u64 {
            return Some(Stalled::Idle);
        }
        None
    }

    /// True when the kernel has held unsent bytes for longer than the send bound
    /// without the queue ever emptying: the client's window stays shut because it
    /// does not read. This catches an event stream whose writes still fit in the
    /// socket's buffer, where no write ever blocks.
    fn unsent_bytes_stuck(&self, now: u64, send_ms: u64) -> bool {
        let queued = unsent_bytes(self.fd).unwrap_or(0);
        let previous = self.queued.swap(queued, Ordering::Relaxed);
        if queued == 0 || queued < previous {
            // Drained, or draining: the client reads.
            self.queued_since
                .store(if queued == 0 { NEVER } else { now }, Ordering::Relaxed);
            return false;
        }
        let since = self.queued_since.load(Ordering::Relaxed);
        if since == NEVER {
            self.queued_since.store(now, Ordering::Relaxed);
            return false;
        }
        now.saturating_sub(since) > send_ms
    }
}

/// Held while a request is answered.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touched();
    }
}

/// Bytes written to the socket that its peer has not acknowledged yet.
fn unsent_bytes(fd: RawFd) -> Option<u64> {
    let mut queued: nix::libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int through the pointer, which is valid and ours;
    // the descriptor belongs to a socket this connection owns for as long as it runs.
    let rc = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCOUTQ, &mut queued) };
    (rc == 0).then_some(queued.max(0) as u64)
}

/// hyper answers a request it cannot parse (a malformed head: 400; a head over its
/// bound: 431) itself, with an empty body and `connection: close`. Every answer the
/// agent makes has a content type; such a bare answer is hyper's, and gets the JSON
/// error body instead.
fn json_for_hyper_error(written: &[u8]) -> Option<Vec<u8>> {
    if !written.starts_with(b"HTTP/1.1 4") || !written.ends_with(b"\r\n\r\n") {
        return None;
    }
    let head = std::str::from_utf8(written).ok()?.to_ascii_lowercase();
    if !head.contains("\r\ncontent-length: 0\r\n")
        || !head.contains("\r\nconnection: close\r\n")
        || head.contains("\r\ncontent-type:")
    {
        return None;
    }
    let status_line = std::str::from_utf8(written).ok()?.lines().next()?;
    let status: u16 = status_line.get(9..12)?.parse().ok()?;
    let (code, message) = match status {
        431 => (
            "headers_too_large",
            "the request head is far over the agent's limit",
        ),
        414 => (
            "uri_too_long",
            "the request's path is over the agent's limit",
        ),
        _ => ("bad_request", "the request is not valid HTTP/1.1"),
    };
    let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string() + "\n";
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\ncache-control: no-store\r\n\
             connection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// A socket that reports its traffic to an [`Activity`], and gives hyper's own error
/// answers the JSON body every other answer has.
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
    /// A replacement for an answer hyper wrote, and how much of it is sent.
    replacing: Option<(Vec<u8>, usize)>,
}

impl<S: AsRawFd> Watched<S> {
    pub fn new(inner: S) -> (Watched<S>, Arc<Activity>) {
        let activity = Activity::new(inner.as_raw_fd());
        (
            Watched {
                inner,
                activity: activity.clone(),
                replacing: None,
            },
            activity,
        )
    }
}

impl<S> Watched<S> {
    fn on_write<T>(&self, poll: &Poll<io::Result<T>>, progressed: bool) {
        match poll {
            Poll::Ready(Ok(_)) if progressed => {
                self.activity.blocked_since.store(NEVER, Ordering::Relaxed);
                self.activity.touched();
            }
            Poll::Pending => {
                let now = self.activity.now_ms();
                let _ = self.activity.blocked_since.compare_exchange(
                    NEVER,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            _ => {}
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touched();
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> Watched<S> {
    /// Sends the replacement under way; `Ready(Ok(()))` once it is all out.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, sent)) = self.replacing.as_mut() {
            if *sent == bytes.len() {
                self.replacing = None;
                break;
            }
            let poll = Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]);
            let progressed = matches!(poll, Poll::Ready(Ok(n)) if n > 0);
            self.on_write(&poll, progressed);
            match poll {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    if let Some((_, sent)) = self.replacing.as_mut() {
                        *sent += n;
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.replacing.is_none() {
            if let Some(json) = json_for_hyper_error(buf) {
                self.replacing = Some((json, 0));
            }
        }
        if self.replacing.is_some() {
            // hyper retries with the same bytes until told they are written.
            return self.poll_replacement(cx).map_ok(|()| buf.len());
        }
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        let progressed = matches!(poll, Poll::Ready(Ok(n)) if n > 0);
        self.on_write(&poll, progressed);
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if self.replacing.is_none() && bufs.first().is_some_and(|b| b.starts_with(b"HTTP/1.1 4")) {
            let whole: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            if let Some(json) = json_for_hyper_error(&whole) {
                self.replacing = Some((json, 0));
            }
        }
        if self.replacing.is_some() {
            return self.poll_replacement(cx).map_ok(|()| total);
        }
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        let progressed = matches!(poll, Poll::Ready(Ok(n)) if n > 0);
        self.on_write(&poll, progressed);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.on_write(&poll, false);
        poll
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bare_error_answers_are_replaced() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                     content-length: 0\r\ndate: Tue, 01 Dec 2026 09:35:59 GMT\r\n\r\n";
        let json = String::from_utf8(json_for_hyper_error(bare).unwrap()).unwrap();
        let (head, body) = json.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(value["error"]["code"], "headers_too_large");
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                     connection: close\r\ncontent-length: 0\r\n\r\n";
        assert!(json_for_hyper_error(ours).is_none());
        assert!(json_for_hyper_error(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
