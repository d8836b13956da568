//! Client text quoted back in a message: debug-quoted, so control characters stay
//! visible, and cut short, so a client cannot make the agent repeat a megabyte.

/// The most characters of client text any message repeats.
pub const ECHO_LIMIT: usize = 80;

/// `text` quoted, at most [`ECHO_LIMIT`] characters of it, saying how long it was
/// when it was cut.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(ECHO_LIMIT) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// A value's JSON text, cut like [`quoted`] text.
pub fn value(value: &serde_json::Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(ECHO_LIMIT) {
        None => text,
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_and_short_text_is_quoted() {
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(1 << 20);
        let q = quoted(&long);
        assert!(q.len() < 120, "{q}");
        assert!(q.ends_with(&format!("… ({} bytes)", 1 << 20)), "{q}");
        assert!(value(&serde_json::Value::String(long)).len() < 120);
    }
}
