//! The BMC's part of the `kernel-messages` stage: the events its system event log gained
//! since the last run (`bmc-events`) and its fans and power supplies (`bmc-sensors`).

use std::path::Path;

use crate::record::{Check, Verdict};
use crate::runtime::bmc::{self, sel, sensors, BmcError};
use crate::suite::plan::state_dir_of;

/// The name of the check on the BMC's event log.
pub const BMC_EVENTS: &str = "bmc-events";
/// The name of the check on the BMC's fans and power supplies.
pub const BMC_SENSORS: &str = "bmc-sensors";
const BMC_EVENTS_EXPECTED: &str =
    "no serious BMC event since the last run (a failed power supply, a stopped fan, a critical temperature or voltage, an uncorrectable memory error)";
const BMC_SENSORS_EXPECTED: &str = "every fan turning, no power supply failure asserted";

/// What the BMC earned: its checks, notes for the stage, and how many events were new.
#[derive(Debug, Default)]
pub struct BmcJudgement {
    /// `bmc-events` and, when the BMC answered, `bmc-sensors`.
    pub checks: Vec<Check>,
    /// Notes that are not checks (the mark not saved, the log cleared).
    pub findings: Vec<String>,
    /// How many events were judged, when the log was read.
    pub new_events: Option<usize>,
}

/// Reads the BMC through the `ipmitool` found (see [`bmc::locate`]) and judges its event
/// log since the mark kept in the state folder of `run_dir` (the whole log when there is no
/// mark, the log was cleared, or the run is not recorded), then moves the mark; a run that
/// is not recorded moves nothing.
pub fn bmc_checks(run_dir: Option<&Path>) -> BmcJudgement {
    let ipmitool = match bmc::locate() {
        Ok(path) => path,
        Err(why) => return bmc_unreachable(&why),
    };
    let events = match sel::read(&ipmitool) {
        Ok(events) => events,
        Err(why) => return bmc_unreachable(&why),
    };
    let mark_path = run_dir
        .and_then(state_dir_of)
        .map(|state| state.join(sel::MARK_FILE));
    let mark = mark_path.as_deref().and_then(sel::load_mark);
    let (new, cleared) = sel::new_since(&events, mark.as_ref());
    let mut judgement = BmcJudgement {
        new_events: Some(new.len()),
        ..BmcJudgement::default()
    };
    if cleared {
        judgement
            .findings
            .push("the BMC's event log was cleared since the last run: all of it judged".into());
    }
    judgement
        .checks
        .push(sel_check(new, mark.is_some() && !cleared));
    if let (Some(path), Some(next)) = (&mark_path, sel::SelMark::of(&events)) {
        if let Err(why) = sel::save_mark(path, &next) {
            judgement.findings.push(format!(
                "the BMC's event log mark not saved to {}: {why}",
                path.display()
            ));
        }
    }
    match sensors::read(&ipmitool) {
        Ok(report) => judgement.checks.push(sensor_check(&report)),
        Err(why) => judgement.checks.push(Check {
            name: BMC_SENSORS.into(),
            subject: None,
            expected: BMC_SENSORS_EXPECTED.into(),
            found: why.to_string(),
            verdict: if why.is_timeout() {
                Verdict::Warn
            } else {
                Verdict::Skip
            },
        }),
    }
    judgement
}

/// A box whose BMC cannot be asked: `bmc-events` skips saying why, or warns when the BMC
/// is there but hung.
fn bmc_unreachable(why: &BmcError) -> BmcJudgement {
    let verdict = if why.is_timeout() {
        Verdict::Warn
    } else {
        Verdict::Skip
    };
    BmcJudgement {
        checks: vec![Check {
            name: BMC_EVENTS.into(),
            subject: None,
            expected: BMC_EVENTS_EXPECTED.into(),
            found: why.to_string(),
            verdict,
        }],
        findings: vec![why.to_string()],
        new_events: None,
    }
}

/// The `bmc-events` check of `events` (the new ones): fails naming each serious event,
/// warns naming each warning, passes with a count. `since_mark` says whether they are the
/// events since the last run or the whole log.
pub fn sel_check(events: &[sel::SelEvent], since_mark: bool) -> Check {
    let scope = if since_mark {
        "since the last run"
    } else {
        "in the BMC's event log"
    };
    let of = |severity: sel::Severity| -> Vec<&sel::SelEvent> {
        events.iter().filter(|e| e.severity == severity).collect()
    };
    let serious = of(sel::Severity::Serious);
    let warnings = of(sel::Severity::Warning);
    let list = |events: &[&sel::SelEvent]| -> String {
        const SHOWN: usize = 10;
        let mut words: Vec<String> = events.iter().take(SHOWN).map(|e| e.describe()).collect();
        if events.len() > SHOWN {
            words.push(format!("and {} more", events.len() - SHOWN));
        }
        words.join("; ")
    };
    let (verdict, found) = if !serious.is_empty() {
        let mut found = format!(
            "{} serious event(s) {scope}: {}",
            serious.len(),
            list(&serious)
        );
        if !warnings.is_empty() {
            found.push_str(&format!(
                "; {} warning(s): {}",
                warnings.len(),
                list(&warnings)
            ));
        }
        (Verdict::Fail, found)
    } else if !warnings.is_empty() {
        (
            Verdict::Warn,
            format!("{} warning(s) {scope}: {}", warnings.len(), list(&warnings)),
        )
    } else {
        (
            Verdict::Pass,
            format!("{} event(s) {scope}, none serious", events.len()),
        )
    };
    Check {
        name: BMC_EVENTS.into(),
        subject: None,
        expected: BMC_EVENTS_EXPECTED.into(),
        found,
        verdict,
    }
}

/// The `bmc-sensors` check: fails for a fan at 0 RPM or in a critical state and for a
/// power supply with a failure asserted.
pub fn sensor_check(report: &sensors::SensorReport) -> Check {
    let findings = sensors::findings(&report.fans, &report.supplies);
    let turning = report
        .fans
        .iter()
        .filter(|f| f.rpm.is_some_and(|r| r > 0.0))
        .count();
    let found = if findings.is_empty() {
        format!(
            "{turning} fan(s) turning, {} power supply sensor(s) without a failure",
            report.supplies.len()
        )
    } else {
        findings.join("; ")
    };
    Check {
        name: BMC_SENSORS.into(),
        subject: None,
        expected: BMC_SENSORS_EXPECTED.into(),
        found,
        verdict: Verdict::pass_if(findings.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serious_event_fails_naming_it_and_warnings_warn() {
        let events = sel::parse_elist(
            "   1 | 11/27/2024 | 10:15:02 | Power Supply PSU1 Status | Failure detected () | Asserted\n   2 | 11/27/2024 | 10:16:00 | Memory #0x53 | Correctable ECC | Asserted\n",
        );
        let check = sel_check(&events, true);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(
            check
                .found
                .contains("Power Supply PSU1 Status: Failure detected ()"),
            "{}",
            check.found
        );
        assert!(
            check.found.contains("11/27/2024 10:15:02 (record 1)"),
            "{}",
            check.found
        );
        assert!(
            check.found.contains("since the last run"),
            "{}",
            check.found
        );
        let check = sel_check(&events[1..], false);
        assert_eq!(check.verdict, Verdict::Warn);
        let check = sel_check(&[], true);
        assert_eq!(check.verdict, Verdict::Pass);
        assert_eq!(check.found, "0 event(s) since the last run, none serious");
    }
}
