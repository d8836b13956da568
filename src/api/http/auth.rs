//! Bearer-token check for the write endpoints, and a bound on guessing it: wrong
//! tokens are counted per client address, an address over the bound is answered 429
//! until its window ends, and the guesses are logged once per interval.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::header::AUTHORIZATION;
use hyper::{HeaderMap, StatusCode};

use super::log_limit::LineLimit;
use super::response::ApiError;

/// Wrong tokens one address may present in one window.
pub const MAX_BAD_TOKENS: u32 = 10;
/// How long an address's count of wrong tokens lasts, from its first.
pub const BAD_TOKEN_WINDOW: Duration = Duration::from_secs(60);
/// Addresses counted at once; past it, new addresses share one count, so a client
/// with many addresses meets the bound sooner, never later.
const MAX_COUNTED_ADDRESSES: usize = 4096;

/// The write token, and who has been guessing it.
pub struct TokenGuard {
    token: Option<String>,
    /// Per address: when its window began, and its wrong tokens in it.
    guesses: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    bad_tokens: AtomicU64,
    refused: AtomicU64,
    lines: LineLimit,
}

/// What the guard has counted since the agent started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenFigures {
    /// Wrong or malformed tokens presented.
    pub bad_tokens: u64,
    /// Requests answered 429 because their address was over the bound.
    pub refused: u64,
}

impl TokenGuard {
    /// `token == None` means writes are disabled on this agent.
    pub fn new(token: Option<String>) -> TokenGuard {
        TokenGuard {
            token,
            guesses: Mutex::default(),
            bad_tokens: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            lines: LineLimit::default(),
        }
    }

    pub fn figures(&self) -> TokenFigures {
        TokenFigures {
            bad_tokens: self.bad_tokens.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// Lets a write from `peer` through when it carries the token and `peer` is not
    /// over its bound of wrong tokens.
    pub fn check(&self, headers: &HeaderMap, peer: IpAddr) -> Result<(), ApiError> {
        self.check_at(headers, peer, Instant::now())
    }

    fn check_at(&self, headers: &HeaderMap, peer: IpAddr, now: Instant) -> Result<(), ApiError> {
        if let Some(wait) = self.locked_out(peer, now) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            if let Some(held) = self.lines.due("token lockout") {
                tracing::warn!(
                    %peer,
                    refused_before = held,
                    "a write refused: its address presented {MAX_BAD_TOKENS} wrong tokens                      within {} s (at most one such line per interval)",
                    BAD_TOKEN_WINDOW.as_secs()
                );
            }
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_bad_tokens",
                format!(
                    "this address presented {MAX_BAD_TOKENS} wrong tokens within {} s;                      try again in {} s",
                    BAD_TOKEN_WINDOW.as_secs(),
                    wait.as_secs().max(1)
                ),
            )
            .with_header("retry-after", wait.as_secs().max(1).to_string()));
        }
        let result = authorize(headers, self.token.as_deref());
        if result.as_ref().is_err_and(presented_a_token) {
            self.bad_tokens.fetch_add(1, Ordering::Relaxed);
            self.count_guess(peer, now);
            if let Some(held) = self.lines.due("bad token") {
                tracing::warn!(
                    %peer,
                    more_since_last_line = held,
                    "a wrong HTTP write token was presented (at most one such line per interval)"
                );
            }
        }
        result
    }

    /// How long `peer` must still wait, when it is over the bound.
    fn locked_out(&self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let guesses = self.guesses.lock().unwrap_or_else(|e| e.into_inner());
        let (started, count) = guesses.get(&counted_as(&guesses, peer))?;
        let ends = *started + BAD_TOKEN_WINDOW;
        (*count >= MAX_BAD_TOKENS && now < ends).then(|| ends - now)
    }

    fn count_guess(&self, peer: IpAddr, now: Instant) {
        let mut guesses = self.guesses.lock().unwrap_or_else(|e| e.into_inner());
        if !guesses.contains_key(&peer) && guesses.len() >= MAX_COUNTED_ADDRESSES {
            guesses.retain(|_, (started, _)| now.duration_since(*started) < BAD_TOKEN_WINDOW);
        }
        let key = counted_as(&guesses, peer);
        let entry = guesses.entry(key).or_insert((now, 0));
        if now.duration_since(entry.0) >= BAD_TOKEN_WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// The address `peer`'s guesses are counted under: its own while there is room.
fn counted_as(guesses: &HashMap<IpAddr, (Instant, u32)>, peer: IpAddr) -> IpAddr {
    if guesses.contains_key(&peer) || guesses.len() < MAX_COUNTED_ADDRESSES {
        peer
    } else {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    }
}

/// A refusal for a token that was given and wrong (or not a bearer token), as opposed
/// to none given at all or writes being disabled.
fn presented_a_token(error: &ApiError) -> bool {
    error.code == "forbidden"
        || (error.status == StatusCode::UNAUTHORIZED
            && error
                .headers
                .iter()
                .any(|(_, v)| v.contains("invalid_request")))
}

/// Lets a write through when it carries `Authorization: Bearer <token>`.
/// `token == None` means writes are disabled on this agent.
fn authorize(headers: &HeaderMap, token: Option<&str>) -> Result<(), ApiError> {
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

    #[test]
    fn an_address_over_its_bound_of_wrong_tokens_waits_out_its_window() {
        let guard = TokenGuard::new(Some("tok".into()));
        let guesser: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let start = Instant::now();
        for _ in 0..MAX_BAD_TOKENS {
            let e = guard
                .check_at(&headers(Some("Bearer nope")), guesser, start)
                .unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN);
        }
        // Even the right token waits: the address is refused, not the guess.
        let locked = guard
            .check_at(&headers(Some("Bearer tok")), guesser, start)
            .unwrap_err();
        assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(locked
            .headers
            .iter()
            .any(|(n, v)| *n == "retry-after" && v == "60"));
        assert!(guard
            .check_at(&headers(Some("Bearer tok")), other, start)
            .is_ok());
        let later = start + BAD_TOKEN_WINDOW;
        assert!(guard
            .check_at(&headers(Some("Bearer tok")), guesser, later)
            .is_ok());
        assert_eq!(
            guard.figures(),
            TokenFigures {
                bad_tokens: u64::from(MAX_BAD_TOKENS),
                refused: 1
            }
        );
    }

    #[test]
    fn a_missing_token_is_no_guess() {
        let guard = TokenGuard::new(Some("tok".into()));
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..3 * MAX_BAD_TOKENS {
            let e = guard.check(&headers(None), peer).unwrap_err();
            assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        }
        assert!(guard.check(&headers(Some("Bearer tok")), peer).is_ok());
        let malformed = guard.check(&headers(Some("Basic dG9r")), peer).unwrap_err();
        assert_eq!(malformed.status, StatusCode::UNAUTHORIZED);
        assert_eq!(guard.figures().bad_tokens, 1);
    }

    #[test]
    fn many_addresses_share_one_count_past_the_table() {
        let guard = TokenGuard::new(Some("tok".into()));
        let now = Instant::now();
        for i in 0..MAX_COUNTED_ADDRESSES as u32 + 2 * MAX_BAD_TOKENS {
            let peer = IpAddr::V6(std::net::Ipv6Addr::from(u128::from(i) + 1));
            let _ = guard.check_at(&headers(Some("Bearer nope")), peer, now);
        }
        assert!(guard.guesses.lock().unwrap().len() <= MAX_COUNTED_ADDRESSES + 1);
        let fresh = IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX));
        let e = guard
            .check_at(&headers(Some("Bearer tok")), fresh, now)
            .unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
    }
}
