//! A file sent as it is read, a piece at a time: a run's MLLOG or telemetry of any size
//! costs the agent one piece per connection, not the whole file, however many clients
//! ask for it and however slowly they read.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CONTENT_LENGTH};
use hyper::{Response, StatusCode};
use tokio::io::AsyncReadExt;

use super::response::{with_body, Body};

/// The most read ahead for one connection; the next piece is read only when the
/// client has taken this one.
pub const PIECE_BYTES: usize = 64 * 1024;

/// `file` of `len` bytes (its length when opened) as the body of a 200 with
/// `content_type`. The length is sent up front, so a file that shrinks or fails while it
/// is sent ends the connection short of it: the client sees a cut transfer, never a
/// file that looks whole.
pub fn response(file: std::fs::File, len: u64, content_type: &'static str) -> Response<Body> {
    let reader = tokio::fs::File::from_std(file);
    let pieces = stream::unfold((reader, len), |(mut reader, left)| async move {
        if left == 0 {
            return None;
        }
        let want = left.min(PIECE_BYTES as u64) as usize;
        let mut piece = vec![0; want];
        match reader.read(&mut piece).await {
            Ok(0) => {
                tracing::warn!(
                    left,
                    "a served file ended before its length; connection cut"
                );
                None
            }
            Ok(n) => {
                piece.truncate(n);
                let frame = Frame::data(Bytes::from(piece));
                Some((Ok::<_, Infallible>(frame), (reader, left - n as u64)))
            }
            Err(e) => {
                tracing::warn!(error = %e, left, "a served file could not be read; connection cut");
                None
            }
        }
    });
    let mut response = with_body(
        StatusCode::OK,
        content_type,
        StreamBody::new(pieces).boxed_unsync(),
    );
    response
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    response
}
