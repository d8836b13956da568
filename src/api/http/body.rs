//! Reading request bodies: JSON only, and never more than the limit.

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, StatusCode};
use serde::de::DeserializeOwned;

use super::response::ApiError;

/// Reads the body of `request`, refusing a non-JSON content type (415) and a body
/// over `limit` bytes (413). A request without a content type is read as JSON.
pub async fn read_json_bytes(request: Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    if let Some(content_type) = request.headers().get(CONTENT_TYPE) {
        if !is_json(content_type.as_bytes()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "the body must be sent as Content-Type: application/json, not {} \
                     (with curl: -H 'Content-Type: application/json', or --json)",
                    String::from_utf8_lossy(content_type.as_bytes())
                ),
            ));
        }
    }
    read_limited(request, limit).await
}

/// Reads the body of `request`, whatever its type, refusing more than `limit` bytes.
pub async fn read_limited(request: Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(limit)),
        Err(e) => Err(ApiError::bad_request(
            "bad_body",
            format!("cannot read the request body: {e}"),
        )),
    }
}

/// Parses a body that must be a JSON object into `T`, whose serde attributes refuse
/// unknown fields. Malformed JSON is `bad_json`; a well-formed body of the wrong shape
/// is `invalid_body`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "bad_json",
            "the request body is empty; send a JSON object",
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request("bad_json", format!("the request body is not JSON: {e}"))
    })?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "invalid_body",
            "the request body must be a JSON object",
        ));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request("invalid_body", format!("invalid request body: {e}")))
}

fn is_json(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    essence.eq_ignore_ascii_case(b"application/json")
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is over the limit of {limit} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        assert!(is_json(b"application/json"));
        assert!(is_json(b"Application/JSON; charset=utf-8"));
        assert!(!is_json(b"text/plain"));
        assert!(!is_json(b"application/x-www-form-urlencoded"));
        assert!(!is_json(b"application/jsonx"));
    }

    #[test]
    fn malformed_and_misshapen_bodies_are_refused() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Thing {
            a: u32,
        }
        for body in [&b""[..], b"  ", b"{", b"{\"a\": 1,}"] {
            let err = parse_json::<Thing>(body).unwrap_err();
            assert_eq!(err.code, "bad_json", "{body:?}");
        }
        for body in [&b"[1]"[..], b"3", b"{\"a\": \"x\"}", b"{}"] {
            let err = parse_json::<Thing>(body).unwrap_err();
            assert_eq!(err.code, "invalid_body", "{body:?}");
        }
        assert_eq!(parse_json::<Thing>(b"{\"a\": 3}").unwrap().a, 3);
    }
}
