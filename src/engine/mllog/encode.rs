//! Encoding of one `:::MLLOG` line, byte for byte as the Python `mlperf_logging.mllog`
//! library writes it: `json.dumps` of an ordered object with `", "` and `": "` separators,
//! non-ASCII escaped, and floats written as Python's `repr` writes them.

use std::fmt::Write as _;

/// The prefix every MLLOG line starts with.
pub const LINE_PREFIX: &str = ":::MLLOG ";

/// The kind of event, as the `event_type` field spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The start of a span: `*_start` keys.
    IntervalStart,
    /// The end of a span: `*_stop` keys.
    IntervalEnd,
    /// A single value: hyperparameters, accuracies, statistics.
    PointInTime,
}

impl EventType {
    /// The name the `event_type` field carries, e.g. `INTERVAL_START`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::IntervalStart => "INTERVAL_START",
            EventType::IntervalEnd => "INTERVAL_END",
            EventType::PointInTime => "POINT_IN_TIME",
        }
    }
}

/// A JSON value whose object keys keep their order and whose floats may be NaN or
/// infinite (Python writes those as `NaN` and `Infinity`).
#[derive(Debug, Clone, PartialEq)]
pub enum LogValue {
    /// JSON `null`.
    Null,
    /// JSON `true` or `false`.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float, written as Python's `repr` writes it.
    Float(f64),
    /// A string, non-ASCII escaped.
    Str(String),
    /// An object, its fields in this order.
    Object(Vec<(String, LogValue)>),
}

impl From<bool> for LogValue {
    fn from(v: bool) -> Self {
        LogValue::Bool(v)
    }
}
impl From<i64> for LogValue {
    fn from(v: i64) -> Self {
        LogValue::Int(v)
    }
}
impl From<u64> for LogValue {
    fn from(v: u64) -> Self {
        LogValue::UInt(v)
    }
}
impl From<u32> for LogValue {
    fn from(v: u32) -> Self {
        LogValue::UInt(u64::from(v))
    }
}
impl From<f64> for LogValue {
    fn from(v: f64) -> Self {
        LogValue::Float(v)
    }
}
impl From<&str> for LogValue {
    fn from(v: &str) -> Self {
        LogValue::Str(v.to_string())
    }
}
impl From<String> for LogValue {
    fn from(v: String) -> Self {
        LogValue::Str(v)
    }
}

/// One event, ready to be encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The `namespace` field; empty in every line tinyperf writes.
    pub namespace: String,
    /// When the event happened, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Start, end or point in time.
    pub event_type: EventType,
    /// The MLLOG key, as [`keys`](super::keys) spells it.
    pub key: String,
    /// The key's value.
    pub value: LogValue,
    /// `file` and `lineno` first, then the key's own metadata, in order.
    pub metadata: Vec<(String, LogValue)>,
}

/// The line for `event`, without the trailing newline.
pub fn encode_line(event: &Event) -> String {
    let mut out = String::with_capacity(256);
    out.push_str(LINE_PREFIX);
    out.push_str("{\"namespace\": ");
    write_str(&mut out, &event.namespace);
    let _ = write!(out, ", \"time_ms\": {}", event.time_ms);
    out.push_str(", \"event_type\": ");
    write_str(&mut out, event.event_type.as_str());
    out.push_str(", \"key\": ");
    write_str(&mut out, &event.key);
    out.push_str(", \"value\": ");
    write_value(&mut out, &event.value);
    out.push_str(", \"metadata\": ");
    write_object(&mut out, &event.metadata);
    out.push('}');
    out
}

fn write_value(out: &mut String, value: &LogValue) {
    match value {
        LogValue::Null => out.push_str("null"),
        LogValue::Bool(true) => out.push_str("true"),
        LogValue::Bool(false) => out.push_str("false"),
        LogValue::Int(v) => {
            let _ = write!(out, "{v}");
        }
        LogValue::UInt(v) => {
            let _ = write!(out, "{v}");
        }
        LogValue::Float(v) => out.push_str(&python_float_repr(*v)),
        LogValue::Str(s) => write_str(out, s),
        LogValue::Object(fields) => write_object(out, fields),
    }
}

fn write_object(out: &mut String, fields: &[(String, LogValue)]) {
    out.push('{');
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str(out, key);
        out.push_str(": ");
        write_value(out, value);
    }
    out.push('}');
}

/// A JSON string as Python's `json.dumps` writes it with `ensure_ascii=True`.
fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// A float as Python's `repr` writes it: the shortest digits that read back exactly,
/// positional for decimal exponents from -4 to 15 (with `.0` when integral), otherwise
/// scientific with a signed exponent of at least two digits (`1e-05`, `1.5e+16`).
pub fn python_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits as Python's repr.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exponent) {
        let point = exponent + 1;
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat(point.unsigned_abs() as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_python_repr() {
        let cases = [
            (7.2, "7.2"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.0002, "0.0002"),
            (2.0, "2.0"),
            (0.9, "0.9"),
            (0.7595, "0.7595"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456.789, "123456.789"),
            (1.5e-7, "1.5e-07"),
            (-3.25, "-3.25"),
            (1.0 / 3.0, "0.3333333333333333"),
            (6.02e23, "6.02e+23"),
            (0.0, "0.0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (v, want) in cases {
            assert_eq!(python_float_repr(v), want, "repr of {v:?}");
        }
    }

    #[test]
    fn strings_escape_as_json_dumps_does() {
        let mut out = String::new();
        write_str(&mut out, "a\"b\\c\nd\u{7f}é😀");
        assert_eq!(out, r#""a\"b\\c\nd\u007f\u00e9\ud83d\ude00""#);
    }

    #[test]
    fn line_matches_the_python_library_field_order_and_separators() {
        let event = Event {
            namespace: String::new(),
            time_ms: 1715318457308,
            event_type: EventType::IntervalStart,
            key: "epoch_start".into(),
            value: LogValue::UInt(1),
            metadata: vec![
                ("file".into(), "src/train.rs".into()),
                ("lineno".into(), LogValue::UInt(46)),
                ("epoch_num".into(), LogValue::UInt(1)),
            ],
        };
        assert_eq!(
            encode_line(&event),
            r#":::MLLOG {"namespace": "", "time_ms": 1715318457308, "event_type": "INTERVAL_START", "key": "epoch_start", "value": 1, "metadata": {"file": "src/train.rs", "lineno": 46, "epoch_num": 1}}"#
        );
    }
}
