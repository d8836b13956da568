//! The `kernel-messages` stage of `health`: every GPU's Xids, falls off the bus, ring
//! timeouts and resets in the kernel's log since boot, a check per GPU.

use crate::inventory::kernel_log;
use crate::inventory::PciAddress;
use crate::record::{Check, StageResult, Verdict};
use crate::suite::stage::{StageContext, StageReport};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "kernel-messages";

/// Runs the stage: reads the kernel's log since boot and fails each GPU on the PCI bus with
/// a serious message (a lost or broken GPU's Xid, a ring timeout, a reset); milder messages
/// become findings. Skips with no GPU, errors when the log cannot be read.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let gpus: Vec<PciAddress> = crate::inventory::gpu_link_states(&ctx.root)
        .iter()
        .map(|s| s.gpu)
        .collect();
    if gpus.is_empty() {
        return report.finish_as(Verdict::Skip, Some("no GPU on the PCI bus".into()));
    }
    let records = match kernel_log::read_records(&ctx.root) {
        Ok(records) => records,
        Err(why) => {
            return report.finish_as(
                Verdict::Error,
                Some(format!("cannot read the kernel's log: {why}")),
            )
        }
    };
    let events = kernel_log::gpu_events(&records, &gpus);
    for gpu in &gpus {
        let mine: Vec<&kernel_log::KernelEvent> = events
            .iter()
            .filter(|e| kernel_log::same_device(*gpu, e.address))
            .collect();
        let serious: Vec<String> = mine
            .iter()
            .filter(|e| e.serious)
            .map(|e| e.describe())
            .collect();
        for event in mine.iter().filter(|e| !e.serious) {
            report.findings.push(event.describe());
        }
        report.checks.push(Check {
            name: "kernel messages".into(),
            subject: Some(gpu.to_string()),
            expected: "no Xid of a lost or broken GPU, no ring timeout or reset".into(),
            found: if serious.is_empty() {
                format!("{} message(s), none serious", mine.len())
            } else {
                serious.join("; ")
            },
            verdict: Verdict::pass_if(serious.is_empty()),
        });
    }
    for event in events.iter().filter(|e| !e.known_gpu) {
        report.findings.push(event.describe());
    }
    report.metric("kernel_records", records.len() as f64, "count");
    report.finish(None)
}
