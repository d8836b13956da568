//! The `kernel-messages` stage of `health`: every message of the kernel's log since boot
//! about a GPU, its link or its slot (Xids, falls off the bus, failed initialisation or
//! firmware loads, ring timeouts and resets, SMU and MES hangs, PCIe AER errors), judged
//! by class: a check per GPU, and one per other device or unidentified GPU that a message
//! is about. The same judgement serves `tinyperf health --kernel-log` for a log from
//! another box. The BMC's event log is judged here too (`bmc-events`, only the events new
//! since the last recorded run), with its fans and power supplies (`bmc-sensors`).

use std::collections::BTreeMap;

use super::bmc_checks::bmc_checks;
use crate::inventory::kernel_log::{self, KernelEvent, MessageClass};
use crate::inventory::previous_boot::{self, BootEnd, PreviousBoot};
use crate::inventory::PciAddress;
use crate::record::{Check, StageResult, Verdict};
use crate::suite::stage::{StageContext, StageReport};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "kernel-messages";
/// What each check asks of the log.
pub const EXPECTED: &str =
    "no serious message (a lost or broken GPU, a ring timeout or reset, a failed init, an uncorrectable PCIe error)";

/// Runs the stage: reads the kernel's log since boot and judges it, failing each GPU with a
/// serious message and warning for one with application faults or corrected errors.
/// Skips with no GPU, errors when the log cannot be read.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let gpus: Vec<PciAddress> = crate::inventory::gpu_link_states(&ctx.root)
        .iter()
        .map(|s| s.gpu)
        .collect();
    let bmc = bmc_checks(ctx.run_dir.as_deref());
    report.findings.extend(bmc.findings);
    if let Some(count) = bmc.new_events {
        report.metric("bmc_new_events", count as f64, "count");
    }
    if gpus.is_empty() {
        // The BMC is the box's, not a GPU's: judged without one, but a box with neither
        // skips as before.
        if bmc.checks.iter().all(|c| c.verdict == Verdict::Skip) {
            return report.finish_as(Verdict::Skip, Some("no GPU on the PCI bus".into()));
        }
        report.checks.extend(bmc.checks);
        return report.finish(Some(
            "no GPU on the PCI bus; only the BMC was judged".into(),
        ));
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
    report.checks.extend(checks(&events, &gpus));
    let previous = previous_boot::read(&ctx.root, &gpus);
    report.findings.extend(
        previous
            .unreadable
            .iter()
            .map(|why| format!("the previous boot's journal not read: {why}")),
    );
    report.checks.extend(previous_boot_check(&previous));
    report.checks.extend(bmc.checks);
    for class in [
        MessageClass::Serious,
        MessageClass::Application,
        MessageClass::Correctable,
    ] {
        let count = events.iter().filter(|e| e.class == class).count();
        report.metric(
            &format!("kernel_{}_messages", class.as_str()),
            count as f64,
            "count",
        );
    }
    report.metric("kernel_records", records.len() as f64, "count");
    report.finish(None)
}

/// The checks `events` earn: one per GPU of `gpus` (pass when no message is about it), and
/// one per other device or unidentified GPU a message is about. A serious message fails
/// its check; application faults and corrected errors only warn.
pub fn checks(events: &[KernelEvent], gpus: &[PciAddress]) -> Vec<Check> {
    let mut checks: Vec<Check> = gpus
        .iter()
        .map(|gpu| {
            let mine: Vec<&KernelEvent> = events.iter().filter(|e| e.concerns(*gpu)).collect();
            check(Some(gpu.to_string()), &mine)
        })
        .collect();
    let mut others: BTreeMap<String, Vec<&KernelEvent>> = BTreeMap::new();
    for event in events
        .iter()
        .filter(|e| !gpus.iter().any(|g| e.concerns(*g)))
    {
        others.entry(event.subject()).or_default().push(event);
    }
    for events in others.values() {
        checks.push(check(None, events));
    }
    checks
}

/// The previous boot's check, when it has something to say: fails when it logged a
/// serious message (the fault that ended it, most likely), warns when it ended without
/// shutting down and nothing says why; named for the GPU the message was about.
pub fn previous_boot_check(previous: &PreviousBoot) -> Option<Check> {
    let found = previous.describe()?;
    let serious = previous.events.iter().any(|e| e.serious);
    let subject = previous
        .likely_cause()
        .filter(|e| e.serious && e.known_gpu)
        .map(KernelEvent::subject);
    let verdict = if serious {
        Verdict::Fail
    } else {
        Verdict::warn_if(previous.ended == BootEnd::Unexpected)
    };
    Some(Check {
        name: "previous boot".into(),
        subject,
        expected: "ended by a shutdown, with no serious kernel message".into(),
        found,
        verdict,
    })
}

fn check(subject: Option<String>, events: &[&KernelEvent]) -> Check {
    let serious = events.iter().any(|e| e.class == MessageClass::Serious);
    let worth_knowing = events.iter().any(|e| {
        matches!(
            e.class,
            MessageClass::Application | MessageClass::Correctable
        )
    });
    let verdict = if serious {
        Verdict::Fail
    } else {
        Verdict::warn_if(worth_knowing)
    };
    let found = if events.is_empty() {
        "no message about it".to_string()
    } else {
        summary(events)
    };
    Check {
        name: "kernel messages".into(),
        subject,
        expected: EXPECTED.into(),
        found,
        verdict,
    }
}

/// Each distinct finding once, worst first, with how many times it was logged.
fn summary(events: &[&KernelEvent]) -> String {
    let mut sorted: Vec<&&KernelEvent> = events.iter().collect();
    sorted.sort_by_key(|e| e.class);
    // (what makes two messages the same finding, its words, how many times).
    let mut findings: Vec<(String, String, usize)> = Vec::new();
    for event in sorted {
        let key = format!("{:?}{:?}{:?}", event.kind, event.class, event.address);
        match findings.iter_mut().find(|(k, ..)| *k == key) {
            Some((_, _, count)) => *count += 1,
            None => {
                let words = format!("{} ({})", event.describe(), event.class.as_str());
                findings.push((key, words, 1));
            }
        }
    }
    findings
        .into_iter()
        .map(|(_, words, count)| match count {
            1 => words,
            n => format!("{words} [×{n}]"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}
