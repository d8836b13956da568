//! How the pages write values: durations, sizes, PCIe links, figures and inventory
//! fields as short text. Escaping is the templates' job, not this module's.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// `pci_address` → `pci address`; `memory_bytes` → `memory`.
pub(super) fn label(key: &str) -> String {
    key.strip_suffix("_bytes").unwrap_or(key).replace('_', " ")
}

/// A field's value as text: sizes in bytes (`*_bytes`) in binary units, PCIe links
/// as `16.0 GT/s x16`, objects with a `state` as that state.
pub(super) fn field_text(key: &str, value: &Value) -> String {
    match value {
        Value::Number(n) if key.ends_with("_bytes") => {
            n.as_f64().map(bytes_text).unwrap_or_else(|| n.to_string())
        }
        Value::Object(map) => link_text(map)
            .or_else(|| map.get("state").and_then(Value::as_str).map(String::from))
            .unwrap_or_else(|| value_text(value)),
        _ => value_text(value),
    }
}

/// A PCIe link object (`current_speed_gts`/`current_width`, or `speed_gts`/`width`),
/// with its maximum when the link runs below it.
pub(super) fn link_text(map: &serde_json::Map<String, Value>) -> Option<String> {
    let number = |a: &str, b: &str| map.get(a).or_else(|| map.get(b)).and_then(Value::as_f64);
    let speed = number("current_speed_gts", "speed_gts")?;
    let width = number("current_width", "width")?;
    let mut text = format!("{speed:.1} GT/s x{width}");
    let max_speed = number("max_speed_gts", "capable_speed_gts").unwrap_or(speed);
    let max_width = number("max_width", "capable_width").unwrap_or(width);
    if max_speed > speed || max_width > width {
        text.push_str(&format!(" (max {max_speed:.1} GT/s x{max_width})"));
    }
    if let Some(limited_at) = map.get("limited_at").and_then(Value::as_str) {
        text.push_str(&format!(", limited at {limited_at}"));
    }
    Some(text)
}

/// `137438953472` → `128 GiB`.
pub(super) fn bytes_text(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let digits = if value.fract() == 0.0 || unit == 0 {
        0
    } else {
        1
    };
    format!("{value:.digits$} {}", UNITS[unit])
}

/// A JSON value as one line of text.
pub(super) fn value_text(value: &Value) -> String {
    match value {
        Value::Null => "—".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => n.as_f64().map(number).unwrap_or_else(|| n.to_string()),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join(", "),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{}: {}", label(k), value_text(v)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A figure with as many decimals as it needs, up to three.
pub(super) fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Seconds from `from` to `to`, never below zero.
pub(super) fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_milliseconds() as f64 / 1000.0).max(0.0)
}

/// `3 min 05 s ago`: how long before `now` `t` was.
pub(super) fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{} ago", duration_text(seconds_between(t, now)))
}

/// `4.2 s`, `3 min 05 s`, `2 h 07 min`, `3 d 4 h`.
pub(super) fn duration_text(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "—".into();
    }
    if seconds < 60.0 {
        return format!("{seconds:.1} s");
    }
    let total = seconds.round() as u64;
    let (d, h, m, s) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    if d > 0 {
        format!("{d} d {h} h")
    } else if h > 0 {
        format!("{h} h {m:02} min")
    } else {
        format!("{m} min {s:02} s")
    }
}

/// `2026-11-29 21:05:12 UTC`.
pub(super) fn utc_text(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// The text, or `—` where there is none.
pub(super) fn or_dash(text: Option<String>) -> String {
    text.unwrap_or_else(|| "—".into())
}

/// A duration as [`duration_text`] writes it, or `—` where there is none.
pub(super) fn duration_or_dash(seconds: Option<f64>) -> String {
    or_dash(seconds.map(duration_text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn links_read_as_speed_and_width() {
        let link = json!({"current_speed_gts": 16.0, "current_width": 8, "max_speed_gts": 16.0, "max_width": 16});
        assert_eq!(
            field_text("link", &link),
            "16.0 GT/s x8 (max 16.0 GT/s x16)"
        );
        let path =
            json!({"speed_gts": 32.0, "width": 16, "capable_speed_gts": 32.0, "limited_at": null});
        assert_eq!(field_text("path_link", &path), "32.0 GT/s x16");
        let narrowed = json!({"speed_gts": 16.0, "width": 8, "limited_at": "0000:41:00.0"});
        assert_eq!(
            field_text("path_link", &narrowed),
            "16.0 GT/s x8, limited at 0000:41:00.0"
        );
        let rebar = json!({"state": "off", "basis": "BAR0 is 256 MiB"});
        assert_eq!(field_text("resizable_bar", &rebar), "off");
    }

    #[test]
    fn durations_and_numbers_read_well() {
        assert_eq!(duration_text(4.24), "4.2 s");
        assert_eq!(duration_text(185.0), "3 min 05 s");
        assert_eq!(duration_text(7620.0), "2 h 07 min");
        assert_eq!(duration_text(273_600.0), "3 d 4 h");
        assert_eq!(bytes_text(137_438_953_472.0), "128 GiB");
        assert_eq!(bytes_text(25_757_220_864.0), "24.0 GiB");
        assert_eq!(bytes_text(512.0), "512 B");
        assert_eq!(label("memory_bytes"), "memory");
        assert_eq!(number(6.0), "6");
        assert_eq!(number(12.3456), "12.346");
        assert_eq!(number(0.5), "0.5");
    }
}
