//! Bearer-token check for the write endpoints.

use hyper::header::AUTHORIZATION;
use hyper::{HeaderMap, StatusCode};

use super::response::ApiError;

/// Lets a write through when it carries `Authorization: Bearer <token>`.
/// `token == None` means writes are disabled on this agent.
pub fn authorize(headers: &HeaderMap, token: Option<&str>) -> Result<(), ApiError> {
    let Some(token) = token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "writes_disabled",
            "no write token is configured on this agent (token_file in tinyperf.toml), \
             so writes over HTTP are disabled",
        ));
    };
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this endpoint needs an Authorization: Bearer <token> header",
        )
        .with_header("www-authenticate", "Bearer realm=\"tinyperf\""));
    };
    let presented = value
        .as_bytes()
        .strip_prefix(b"Bearer ")
        .or_else(|| value.as_bytes().strip_prefix(b"bearer "));
    let Some(presented) = presented else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the Authorization header must be Bearer <token>",
        )
        .with_header(
            "www-authenticate",
            "Bearer realm=\"tinyperf\", error=\"invalid_request\"",
        ));
    };
    if constant_time_eq(presented, token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the bearer token is not valid for this agent",
        ))
    }
}

/// Compares two byte strings in time that depends only on the length of `presented`,
/// so a client cannot learn the token a byte at a time.
fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(presented.len() != expected.len());
    for (i, &byte) in presented.iter().enumerate() {
        let other = expected.get(i).copied().unwrap_or(0);
        diff |= byte ^ other;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"secret2", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn statuses_for_missing_wrong_and_right_tokens() {
        let t = Some("tok");
        let missing = authorize(&headers(None), t).unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        assert!(missing
            .headers
            .iter()
            .any(|(n, _)| *n == "www-authenticate"));
        let basic = authorize(&headers(Some("Basic dG9r")), t).unwrap_err();
        assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
        let wrong = authorize(&headers(Some("Bearer nope")), t).unwrap_err();
        assert_eq!(wrong.status, StatusCode::FORBIDDEN);
        assert!(authorize(&headers(Some("Bearer tok")), t).is_ok());
        let disabled = authorize(&headers(Some("Bearer tok")), None).unwrap_err();
        assert_eq!(disabled.status, StatusCode::FORBIDDEN);
        assert!(disabled.message.contains("no write token"));
    }
}
