//! The Prometheus text format, written by hand: a family's HELP and TYPE once, then its
//! samples, with labels and values escaped as the format says.

use std::collections::HashSet;
use std::fmt::Write;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

#[derive(Default)]
pub struct Exposition {
    text: String,
    declared: HashSet<&'static str>,
}

impl Exposition {
    /// Writes HELP and TYPE the first time `name` is seen; later calls do nothing, so a
    /// family's samples can come from several places in a row.
    pub fn family(&mut self, name: &'static str, kind: Kind, help: &str) {
        if !self.declared.insert(name) {
            return;
        }
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {}", kind.as_str());
    }

    /// One sample of the gauge family `name`, with the family's HELP and TYPE written
    /// first when it is new.
    pub fn gauge(&mut self, name: &'static str, help: &str, labels: &[(&str, &str)], value: f64) {
        self.family(name, Kind::Gauge, help);
        self.sample(name, labels, value);
    }

    /// A family with its one sample.
    pub fn single(&mut self, name: &'static str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{key}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        self.text.push(' ');
        push_value(&mut self.text, value);
        self.text.push('\n');
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

pub fn bool_value(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// Label values escape backslash, double quote and line feed.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes backslash and line feed.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Values as Prometheus reads them: `NaN`, `+Inf`, `-Inf`, or a Go-parsable float.
fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: f64) -> String {
        let mut s = String::new();
        push_value(&mut s, v);
        s
    }

    #[test]
    fn labels_and_values_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(value(f64::INFINITY), "+Inf");
        assert_eq!(value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(value(12.5), "12.5");
        assert_eq!(value(3.0), "3");
    }

    #[test]
    fn a_family_is_declared_once() {
        let mut out = Exposition::default();
        out.family("x_total", Kind::Counter, "X.");
        out.sample("x_total", &[("a", "1")], 1.0);
        out.family("x_total", Kind::Counter, "X.");
        out.sample("x_total", &[("a", "2")], 2.0);
        assert_eq!(
            out.into_text(),
            "# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"1\"} 1\nx_total{a=\"2\"} 2\n"
        );
    }
}
