//! Text from outside (a record's options, a folder's or file's name, a kernel message, a
//! result's platform) as a terminal is shown it: control characters (newlines, escape
//! sequences, carriage returns) written as escapes, so that no value can move the cursor,
//! recolour the terminal or print a line of its own.

use std::borrow::Cow;

/// `text` with every control character escaped (`\n`, `\u{1b}`); unchanged when it has
/// none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_newlines_cannot_reach_the_terminal() {
        assert_eq!(printable("plain ünïcode"), "plain ünïcode");
        assert_eq!(
            printable("a\nsystem (closed): 1.000 min\u{1b}[2J\r"),
            "a\\nsystem (closed): 1.000 min\\u{1b}[2J\\r"
        );
        assert!(!printable("\u{9b}31m\u{7f}").chars().any(char::is_control));
    }
}
