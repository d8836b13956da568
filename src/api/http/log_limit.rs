//! Log lines a client can cause, written at most once per interval for each kind: a
//! flood of requests for an unreadable record leaves one line and a count, not one
//! line per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use std::time::Instant;

/// How often a line of one kind is written, at most.
pub const LINE_INTERVAL: Duration = Duration::from_secs(10);
/// Kinds remembered at once; past it the oldest intervals are forgotten, which at worst
/// lets a line through early.
const MAX_KINDS: usize = 256;

/// Whether a line may be written now, per kind.
#[derive(Default)]
pub struct LineLimit {
    /// Per kind: when its last line was written, and how many were held back since.
    kinds: Mutex<HashMap<String, (Instant, u64)>>,
}

impl LineLimit {
    /// `Some(n)` when a line of `kind` is due now, `n` being how many of its kind were
    /// held back since the last one; `None` while it is held back.
    pub fn due(&self, kind: &str) -> Option<u64> {
        self.due_at(kind, Instant::now())
    }

    fn due_at(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((last, held)) = kinds.get_mut(kind) {
            if now.duration_since(*last) < LINE_INTERVAL {
                *held += 1;
                return None;
            }
            let before = *held;
            *last = now;
            *held = 0;
            return Some(before);
        }
        if kinds.len() >= MAX_KINDS {
            kinds.retain(|_, (last, _)| now.duration_since(*last) < LINE_INTERVAL);
            if kinds.len() >= MAX_KINDS {
                kinds.clear();
            }
        }
        kinds.insert(kind.to_string(), (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_kind_per_interval_with_the_count_held_back() {
        let limit = LineLimit::default();
        let start = Instant::now();
        assert_eq!(limit.due_at("unreadable", start), Some(0));
        for _ in 0..1999 {
            assert_eq!(limit.due_at("unreadable", start), None);
        }
        assert_eq!(
            limit.due_at("other", start),
            Some(0),
            "kinds are held apart"
        );
        let later = start + LINE_INTERVAL;
        assert_eq!(limit.due_at("unreadable", later), Some(1999));
        assert_eq!(limit.due_at("unreadable", later), None);
    }

    #[test]
    fn many_kinds_never_grow_without_bound() {
        let limit = LineLimit::default();
        for i in 0..10 * MAX_KINDS {
            assert_eq!(limit.due(&format!("kind {i}")), Some(0));
        }
        assert!(limit.kinds.lock().unwrap().len() <= MAX_KINDS);
    }
}
