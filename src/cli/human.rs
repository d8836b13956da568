//! Readable progress for `tinyperf run` at a terminal.

use std::io::{self, Write};

use super::printable::printable;
use crate::record::Verdict;
use crate::suite::event::WorkerEvent;

/// Writes `event` as a few readable lines and flushes: stage headers, messages, each
/// metric, check and finding, and the verdicts; heartbeats, telemetry and training figures
/// print nothing. Fails only when `out` does.
pub fn write_event(out: &mut impl Write, event: &WorkerEvent) -> io::Result<()> {
    match event {
        WorkerEvent::RunStarted { suite, stages } => {
            writeln!(out, "suite {suite}: {}", stages.join(" → "))?
        }
        WorkerEvent::Hardware { hardware } => {
            let sku = hardware.get("sku").and_then(|v| v.as_str()).unwrap_or("?");
            writeln!(out, "  box: {}", printable(sku))?
        }
        WorkerEvent::StageStarted {
            stage,
            index,
            total,
        } => writeln!(out, "[{}/{total}] {stage}", index + 1)?,
        WorkerEvent::Progress {
            message: Some(m), ..
        } => writeln!(out, "  … {}", printable(m))?,
        WorkerEvent::Progress { .. }
        | WorkerEvent::Heartbeat
        | WorkerEvent::Train { .. }
        | WorkerEvent::Telemetry { .. } => {}
        WorkerEvent::StageFinished { result } => {
            for m in &result.metrics {
                writeln!(out, "  {:<24} {:>12.3} {}", m.name, m.value, m.unit)?;
            }
            for c in &result.checks {
                let subject = c
                    .subject
                    .as_deref()
                    .map(|s| format!(" [{}]", printable(s)))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "  {:<5} {}{subject}: expected {}, found {}",
                    c.verdict.as_str().to_uppercase(),
                    printable(&c.name),
                    printable(&c.expected),
                    printable(&c.found)
                )?;
            }
            for f in &result.findings {
                writeln!(out, "  note: {}", printable(f))?;
            }
            let message = result.message.as_deref().unwrap_or("");
            let mark = match result.verdict {
                Verdict::Pass => "PASS",
                Verdict::Warn => "WARN",
                Verdict::Fail => "FAIL",
                Verdict::Skip => "SKIP",
                Verdict::Error => "ERROR",
            };
            writeln!(out, "  → {mark} {}", printable(message))?
        }
        WorkerEvent::RunFinished { state, message } => writeln!(
            out,
            "run {state}{}",
            message
                .as_deref()
                .map(|m| format!(": {}", printable(m)))
                .unwrap_or_default()
        )?,
    }
    out.flush()
}
