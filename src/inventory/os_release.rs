//! `os-release(5)` text: its `KEY=value` assignments, read by the box's birth record
//! and by the OS image's status.

use std::collections::BTreeMap;

/// The assignments in os-release text: `KEY=value`, the value bare or in double quotes
/// (where `\` takes the next character as it is) or in single quotes (taken as they
/// are); comments, blank lines and lines that are not assignments are skipped.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        fields.insert(key.to_string(), unquote(value.trim()));
    }
    fields
}

fn unquote(value: &str) -> String {
    let quoted = |q: char| value.len() >= 2 && value.starts_with(q) && value.ends_with(q);
    if quoted('\'') {
        return value[1..value.len() - 1].to_string();
    }
    let inner = if quoted('"') {
        &value[1..value.len() - 1]
    } else {
        value
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_are_read_bare_and_quoted() {
        let fields = parse(
            "# comment\nNAME=\"tinybox OS\"\nIMAGE_ID=tinybox\nIMAGE_VERSION='20261205.1130'\n\
             PRETTY_NAME=\"say \\\"hi\\\"\"\nnot an assignment\n=x\nBAD KEY=1\n",
        );
        assert_eq!(fields["NAME"], "tinybox OS");
        assert_eq!(fields["IMAGE_ID"], "tinybox");
        assert_eq!(fields["IMAGE_VERSION"], "20261205.1130");
        assert_eq!(fields["PRETTY_NAME"], "say \"hi\"");
        assert_eq!(fields.len(), 4);
    }
}
