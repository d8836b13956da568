//! The checks made of what the GPU drivers report without any load: a power limit set
//! below the GPU's default (a warning: the GPU works, slower), and the memory's error
//! counts (uncorrected errors or pages waiting to be retired fail, corrected errors and
//! retired pages warn, ECC off is said as such: its errors are not counted).

use std::path::Path;

use crate::record::{Check, Verdict};
use crate::runtime::device_reports::{self, MemoryErrors};

/// A "power limit" check per GPU whose driver reports its limit.
pub fn power_limit_checks(root: &Path) -> Vec<Check> {
    device_reports::power_limits(root)
        .into_iter()
        .map(|(address, limit)| Check {
            name: "power limit".into(),
            subject: Some(address),
            expected: format!("its default of {:.0} W", limit.default_w),
            found: if limit.is_capped() {
                format!(
                    "capped at {:.0} W, {:.0} % of its default: it runs slower than it can",
                    limit.cap_w,
                    100.0 * limit.cap_w / limit.default_w
                )
            } else {
                format!("{:.0} W", limit.cap_w)
            },
            verdict: Verdict::warn_if(limit.is_capped()),
        })
        .collect()
}

/// A "memory errors" check per GPU whose driver reports them.
pub fn memory_error_checks(root: &Path) -> Vec<Check> {
    device_reports::memory_errors(root)
        .into_iter()
        .map(|(address, errors)| {
            let (found, verdict) = judge_memory_errors(&errors);
            Check {
                name: "memory errors".into(),
                subject: Some(address),
                expected: "no uncorrected error and no page waiting to be retired; none corrected"
                    .into(),
                found,
                verdict,
            }
        })
        .collect()
}

fn judge_memory_errors(errors: &MemoryErrors) -> (String, Verdict) {
    if errors.ecc_enabled == Some(false) {
        return (
            format!(
                "ECC is off ({}): memory errors are not counted",
                errors.source
            ),
            Verdict::Skip,
        );
    }
    let mut said = Vec::new();
    let mut count = |label: &str, value: Option<u64>| match value {
        Some(n) => said.push(format!("{n} {label}")),
        None => said.push(format!("{label} not reported")),
    };
    count("uncorrected", errors.uncorrected);
    count("corrected", errors.corrected);
    count("retired page(s)", errors.retired_pages);
    if errors.pending_retirement == Some(true) {
        said.push("pages waiting for a reset to be retired".into());
    }
    let fail = errors.uncorrected.unwrap_or(0) > 0 || errors.pending_retirement == Some(true);
    let warn = errors.corrected.unwrap_or(0) > 0 || errors.retired_pages.unwrap_or(0) > 0;
    let verdict = if fail {
        Verdict::Fail
    } else {
        Verdict::warn_if(warn)
    };
    (format!("{} ({})", said.join(", "), errors.source), verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(ecc: Option<bool>, ue: u64, ce: u64, pending: bool) -> MemoryErrors {
        MemoryErrors {
            ecc_enabled: ecc,
            corrected: Some(ce),
            uncorrected: Some(ue),
            retired_pages: Some(0),
            pending_retirement: Some(pending),
            source: "nvml",
        }
    }

    #[test]
    fn uncorrected_fails_corrected_warns_ecc_off_is_said_as_such() {
        assert_eq!(
            judge_memory_errors(&errors(Some(true), 1, 0, false)).1,
            Verdict::Fail
        );
        assert_eq!(
            judge_memory_errors(&errors(Some(true), 0, 0, true)).1,
            Verdict::Fail
        );
        assert_eq!(
            judge_memory_errors(&errors(Some(true), 0, 7, false)).1,
            Verdict::Warn
        );
        assert_eq!(
            judge_memory_errors(&errors(Some(true), 0, 0, false)).1,
            Verdict::Pass
        );
        let (found, verdict) = judge_memory_errors(&errors(Some(false), 0, 0, false));
        assert_eq!(verdict, Verdict::Skip);
        assert!(found.contains("ECC is off"), "{found}");
    }
}
