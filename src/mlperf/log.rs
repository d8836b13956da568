//! Reading MLLOG text the way `mlperf_logging`'s parser (ruleset 4.0.0) reads it, so
//! that a log scores here as it scores there: any line holding `:::MLLOG ` counts, from
//! its last such token on (a prefix such as `[1,0]<stdout>:` or a second line written
//! into the middle of the first is cut away), the rest of the line must be one JSON
//! object with `time_ms`, `key`, `value` and `metadata`, in any order, and every other
//! line is noise. The file is read as latin-1, as the Python parser reads it.

use std::path::Path;

use serde_json::Value;

/// The token every MLLOG line carries.
pub const TOKEN: &str = ":::MLLOG ";

/// The latest `time_ms` a line may hold: the year 5138, far past any run; beyond it (1e308,
/// infinity) a time is a corrupt or hostile line, not a time.
pub const MAX_TIME_MS: f64 = 1e14;
/// The largest MLLOG or power log read; a larger file is refused, naming the bound.
pub const MAX_LOG_BYTES: u64 = 256 << 20;

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// 1-based line number in the file.
    pub line: usize,
    /// `time_ms`: milliseconds since the epoch, as the line gives it.
    pub time_ms: f64,
    /// `key`: what the line logs (`run_start`, `eval_accuracy`).
    pub key: String,
    /// `value`: the logged value, `null` when there is none.
    pub value: Value,
    /// `metadata`: the line's object of context (`epoch_num`, `file`, …).
    pub metadata: Value,
}

impl Entry {
    /// A metadata field, when the metadata is an object holding it.
    pub fn meta(&self, field: &str) -> Option<&Value> {
        self.metadata.as_object().and_then(|m| m.get(field))
    }

    /// Whether the metadata holds `field`.
    pub fn has_meta(&self, field: &str) -> bool {
        self.meta(field).is_some()
    }
}

/// A line that holds the token but cannot be read; the official checker fails the
/// whole log for one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based line number in the file.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// A whole log: its entries in file order and the lines that could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MlLogText {
    /// Every line read, in file order.
    pub entries: Vec<Entry>,
    /// Every line that holds the token but could not be read.
    pub bad_lines: Vec<BadLine>,
}

impl MlLogText {
    /// Reads every line of `text` that holds the token; text around the token is ignored.
    pub fn parse(text: &str) -> MlLogText {
        let mut log = MlLogText::default();
        // Python iterates a file by '\n', so a lone '\r' stays inside a line.
        for (index, raw) in text.split('\n').enumerate() {
            let Some(at) = raw.rfind(TOKEN) else { continue };
            let body = raw[at + TOKEN.len()..].trim();
            match parse_body(body) {
                Ok((time_ms, key, value, metadata)) => log.entries.push(Entry {
                    line: index + 1,
                    time_ms,
                    key,
                    value,
                    metadata,
                }),
                Err(reason) => log.bad_lines.push(BadLine {
                    line: index + 1,
                    reason,
                }),
            }
        }
        log
    }

    /// Reads `path` as latin-1: every byte is one character, so no file is unreadable
    /// for its encoding.
    pub fn read(path: &Path) -> std::io::Result<MlLogText> {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::fs::File::open(path)?
            .take(MAX_LOG_BYTES + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_LOG_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "larger than {} MiB, the most an MLLOG or power log is read to (a ResNet run's is a few MiB)",
                    MAX_LOG_BYTES >> 20
                ),
            ));
        }
        Ok(MlLogText::parse(&latin1(&bytes)))
    }

    /// Entries with `key`, in file order.
    pub fn with_key<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.entries.iter().filter(move |e| e.key == key)
    }

    /// The first entry with `key`.
    pub fn first(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }
}

fn latin1(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        // Pure ASCII reads the same either way, and is the common case.
        Ok(text) if text.is_ascii() => text.to_string(),
        _ => bytes.iter().map(|&b| char::from(b)).collect(),
    }
}

fn parse_body(body: &str) -> Result<(f64, String, Value, Value), String> {
    let json: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        // Python's json reads NaN and Infinity; serde_json does not.
        Err(first) => serde_json::from_str(&replace_non_finite(body))
            .map_err(|_| format!("not JSON ({first})"))?,
    };
    let Value::Object(mut fields) = json else {
        return Err("not a JSON object".into());
    };
    let time_ms = match fields.get("time_ms") {
        Some(Value::Number(n)) => n.as_f64().ok_or("time_ms is not a number")?,
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("time_ms {s:?} is not a number"))?,
        Some(other) => return Err(format!("time_ms {other} is not a number")),
        None => return Err("no time_ms".into()),
    };
    if !time_ms.is_finite() || !(0.0..=MAX_TIME_MS).contains(&time_ms) {
        return Err(format!(
            "time_ms {time_ms} is no time: milliseconds since 1970 lie between 0 and {MAX_TIME_MS:e}"
        ));
    }
    let key = match fields.remove("key") {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => return Err("no key".into()),
    };
    let value = fields.remove("value").ok_or("no value")?;
    let metadata = fields.remove("metadata").ok_or("no metadata")?;
    Ok((time_ms, key, value, metadata))
}

/// `NaN`, `Infinity` and `-Infinity` outside strings become `null`.
fn replace_non_finite(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = body;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        let word = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|w| rest.starts_with(w));
        match word {
            Some(w) => {
                out.push_str("null");
                rest = &rest[w.len()..];
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_noise_and_key_order_do_not_matter() {
        let text = "starting up\n\
            [1,0]<stdout>::::MLLOG {\"key\": \"run_start\", \"value\": null, \"metadata\": {}, \"time_ms\": 5}\n\
            :::MLLOG {\"namespace\": \"\", \"time_ms\": \"7\", \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 3, \"metadata\": {\"file\": \"a.py\", \"lineno\": 1}}\r\n";
        let log = MlLogText::parse(text);
        assert!(log.bad_lines.is_empty(), "{:?}", log.bad_lines);
        assert_eq!(log.entries.len(), 2);
        assert_eq!(log.entries[0].key, "run_start");
        assert_eq!(log.entries[0].line, 2);
        assert_eq!(log.entries[1].time_ms, 7.0);
        assert_eq!(log.entries[1].meta("lineno"), Some(&Value::from(1)));
    }

    #[test]
    fn truncated_and_interleaved_lines() {
        let text = ":::MLLOG {\"time_ms\": 1, \"key\": \"a\", \"value\": 1, \"meta\n\
            :::MLLOG {\"time_ms\": 1, \"key\"::::MLLOG {\"time_ms\": 2, \"key\": \"b\", \"value\": NaN, \"metadata\": {}}\n\
            :::MLLOG {\"time_ms\": 3, \"key\": \"c\", \"value\": 1}\n";
        let log = MlLogText::parse(text);
        // The interleaved line is read from its last token, as the Python parser reads it.
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.entries[0].key, "b");
        assert_eq!(log.entries[0].value, Value::Null);
        assert_eq!(log.bad_lines.len(), 2);
        assert_eq!(log.bad_lines[0].line, 1);
        assert!(log.bad_lines[1].reason.contains("metadata"));
    }

    #[test]
    fn non_finite_words_inside_strings_stay() {
        assert_eq!(
            replace_non_finite(r#"{"a": "NaN \"Infinity\"", "b": -Infinity}"#),
            r#"{"a": "NaN \"Infinity\"", "b": null}"#
        );
    }
}
