//! `tinyperf health --kernel-log FILE`: a kernel log saved on another box (or pasted into
//! a bug report) judged as the `kernel-messages` check judges this box's own.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use serde_json::json;

use crate::inventory::kernel_log::{self, KernelEvent, KernelEventKind};
use crate::inventory::PciAddress;
use crate::record::Verdict;
use crate::suite::health::kernel_stage;

use super::printable::printable;

/// The largest log read; a larger one is refused rather than read into memory.
pub const MAX_LOG_BYTES: u64 = 256 << 20;

/// Judges the log at `path` (`-`: standard input), prints the checks (as JSON with
/// `json`), and returns the exit status: 1 when a check failed, else 0.
pub fn main(path: &Path, json: bool) -> anyhow::Result<i32> {
    let text = read_bounded(path)?;
    let records = kernel_log::parse_pasted(&text);
    // A log from another box: its GPUs are the devices its GPU drivers' messages name.
    let mut gpus: Vec<PciAddress> = Vec::new();
    let unattached = kernel_log::gpu_events(&records, &[]);
    for event in &unattached {
        if let (Some(address), false) = (
            event.address,
            matches!(event.kind, KernelEventKind::Aer { .. }),
        ) {
            let function_0 = PciAddress {
                function: 0,
                ..address
            };
            if !gpus.contains(&function_0) {
                gpus.push(function_0);
            }
        }
    }
    gpus.sort();
    let events = kernel_log::gpu_events(&records, &gpus);
    let checks = kernel_stage::checks(&events, &gpus);
    let verdict = Verdict::combine(checks.iter().map(|c| c.verdict));
    let verdict = if checks.is_empty() {
        Verdict::Pass
    } else {
        verdict
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "verdict": verdict,
                "records": records.len(),
                "checks": checks,
                "events": events,
            }))?
        );
    } else {
        print!("{}", table(&checks, &events, records.len()));
        println!("{}", verdict.as_str().to_uppercase());
    }
    Ok(i32::from(verdict == Verdict::Fail))
}

fn read_bounded(path: &Path) -> anyhow::Result<String> {
    let mut data = Vec::new();
    let limit = MAX_LOG_BYTES + 1;
    if path == Path::new("-") {
        std::io::stdin().lock().take(limit).read_to_end(&mut data)
    } else {
        std::fs::File::open(path)
            .with_context(|| format!("cannot open {}", path.display()))?
            .take(limit)
            .read_to_end(&mut data)
    }
    .with_context(|| format!("cannot read {}", path.display()))?;
    if data.len() as u64 > MAX_LOG_BYTES {
        bail!(
            "{} is larger than {} MiB, the most a kernel log is read to: cut it to the boot that matters",
            path.display(),
            MAX_LOG_BYTES >> 20
        );
    }
    Ok(String::from_utf8_lossy(&data).into_owned())
}

fn table(checks: &[crate::record::Check], events: &[KernelEvent], records: usize) -> String {
    let mut out = format!(
        "{records} kernel message(s) read, {} about a GPU, link or slot\n",
        events.len()
    );
    for check in checks {
        out.push_str(&format!(
            "{:<5} {:<14} {}\n",
            check.verdict.as_str().to_uppercase(),
            check.subject.as_deref().unwrap_or("-"),
            printable(&check.found)
        ));
    }
    out
}
