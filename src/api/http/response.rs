//! Response bodies and the JSON error shape every endpoint shares.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde::Serialize;

use crate::agent::AgentError;

/// Every response body: a whole buffer, or a stream for server-sent events.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub const JSON: &str = "application/json";
pub const TEXT: &str = "text/plain; charset=utf-8";
pub const HTML: &str = "text/html; charset=utf-8";
pub const CSV: &str = "text/csv; charset=utf-8";
/// One JSON document per line.
pub const NDJSON: &str = "application/x-ndjson";
pub const EVENT_STREAM: &str = "text/event-stream";
pub const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// A response with `body` of `content_type`.
pub fn with_body(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

pub fn bytes(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    with_body(status, content_type, full(body))
}

/// `value` as a JSON response. Serialising plain data cannot fail; if it ever did, the
/// client gets a 500 that says so rather than a truncated document.
pub fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(mut body) => {
            body.push(b'\n');
            bytes(status, JSON, body)
        }
        Err(e) => ApiError::internal(format!("cannot encode the response: {e}")).into_response(),
    }
}

/// An error as the API reports it: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Extra headers the status code calls for (`Allow`, `WWW-Authenticate`).
    pub headers: Vec<(&'static str, String)>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: &'a str,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> ApiError {
        self.headers.push((name, value.into()));
        self
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn into_response(self) -> Response<Body> {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &self.message,
            },
        };
        // Two plain strings always serialise.
        let mut text = serde_json::to_vec(&body).unwrap_or_default();
        text.push(b'\n');
        let mut response = bytes(self.status, JSON, text);
        for (name, value) in self.headers {
            if let Ok(value) = HeaderValue::from_str(&value) {
                response.headers_mut().insert(name, value);
            }
        }
        response
    }
}

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> ApiError {
        let status = match e {
            AgentError::Busy(_) => StatusCode::CONFLICT,
            AgentError::NotFound(_) | AgentError::MissingFile(_) => StatusCode::NOT_FOUND,
            AgentError::InvalidArgs(_) => StatusCode::BAD_REQUEST,
            AgentError::TooLarge(_) => StatusCode::INTERNAL_SERVER_ERROR,
            AgentError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
            AgentError::Refused(_) => StatusCode::FORBIDDEN,
            AgentError::NotAnImage(_) | AgentError::Updating(_) => StatusCode::CONFLICT,
            AgentError::UpdateSource(_) => StatusCode::BAD_GATEWAY,
            AgentError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn errors_are_json_with_code_and_message() {
        let response = ApiError::from(AgentError::Busy("r1".into())).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[CONTENT_TYPE], JSON);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["error"]["code"], "busy");
        assert!(value["error"]["message"].as_str().unwrap().contains("r1"));
    }

    #[test]
    fn agent_errors_map_to_status_codes() {
        for (error, status) in [
            (AgentError::Busy("a".into()), StatusCode::CONFLICT),
            (AgentError::NotFound("a".into()), StatusCode::NOT_FOUND),
            (AgentError::InvalidArgs("a".into()), StatusCode::BAD_REQUEST),
            (
                AgentError::Internal("a".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ] {
            assert_eq!(ApiError::from(error).status, status);
        }
    }
}
