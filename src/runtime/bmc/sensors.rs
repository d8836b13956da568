//! Fans and power supplies as the BMC's sensor records show them: `ipmitool sdr type Fan`
//! and `ipmitool sdr type "Power Supply"` (the `sdr elist` layout, `FAN1 | 41h | ok | 29.1 |
//! 1300 RPM`), or `sdr list` (`FAN1 | 1300 RPM | ok`). A fan at 0 RPM or in a critical or
//! non-recoverable state, and a supply whose failure is asserted, are findings.

use std::path::Path;

use serde::Serialize;

use super::BmcError;

/// One sensor record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SdrRecord {
    /// The sensor's name (`CPU_FAN1`, `PSU1 Status`).
    pub name: String,
    /// Its status as ipmitool abbreviates it: `ok`, `ns` (no reading), `nc`/`lnc`/`unc`
    /// (non-critical), `cr`/`lcr`/`ucr` (critical), `nr`/`lnr`/`unr` (non-recoverable).
    pub status: String,
    /// The reading or the asserted states, as printed (`1300 RPM`, `Presence detected`).
    pub reading: String,
}

impl SdrRecord {
    /// The fan speed, when the reading is one.
    pub fn rpm(&self) -> Option<f64> {
        let number = self.reading.strip_suffix("RPM")?.trim();
        number.parse::<f64>().ok().filter(|v| v.is_finite())
    }

    fn critical(&self) -> bool {
        matches!(
            self.status.as_str(),
            "cr" | "lcr" | "ucr" | "nr" | "lnr" | "unr"
        )
    }
}

/// Every record of `sdr elist`, `sdr type …` or `sdr list` output; lines without a name and
/// a status are skipped (ipmitool's own notes).
pub fn parse_sdr(text: &str) -> Vec<SdrRecord> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('|').map(str::trim).collect();
            let (name, status, reading) = match fields.as_slice() {
                // sdr elist / sdr type: name | number | status | entity | reading
                [name, _, status, _, reading, ..] => (*name, *status, *reading),
                // sdr list: name | reading | status
                [name, reading, status] => (*name, *status, *reading),
                _ => return None,
            };
            if name.is_empty() || status.is_empty() {
                return None;
            }
            Some(SdrRecord {
                name: name.to_string(),
                status: status.to_ascii_lowercase(),
                reading: reading.to_string(),
            })
        })
        .collect()
}

/// A fan's reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FanReading {
    /// The fan's sensor name.
    pub name: String,
    /// Its speed; `None` when the BMC has no reading (an empty header, often).
    pub rpm: Option<f64>,
    /// The sensor's status.
    pub status: String,
}

/// A power supply's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PsuState {
    /// The supply's sensor name.
    pub name: String,
    /// The states it asserts, as printed.
    pub states: String,
    /// The sensor's status.
    pub status: String,
    /// A failure, a predictive failure or a lost input is asserted, or the status is
    /// critical.
    pub failed: bool,
}

/// The fans among `records`: those whose reading is in RPM, or that have no reading.
pub fn fans(records: &[SdrRecord]) -> Vec<FanReading> {
    records
        .iter()
        .filter(|r| r.rpm().is_some() || r.status == "ns")
        .map(|r| FanReading {
            name: r.name.clone(),
            rpm: r.rpm(),
            status: r.status.clone(),
        })
        .collect()
}

/// The power supplies among `records` (`sdr type "Power Supply"` output).
pub fn power_supplies(records: &[SdrRecord]) -> Vec<PsuState> {
    records
        .iter()
        .filter(|r| r.status != "ns")
        .map(|r| {
            let states = r.reading.to_ascii_lowercase();
            let failed = r.critical()
                || [
                    "failure detected",
                    "predictive failure",
                    "ac lost",
                    "input lost",
                    "out-of-range",
                ]
                .iter()
                .any(|w| states.contains(w));
            PsuState {
                name: r.name.clone(),
                states: r.reading.clone(),
                status: r.status.clone(),
                failed,
            }
        })
        .collect()
}

/// What is wrong with the fans and supplies, in words; empty when nothing is.
pub fn findings(fans: &[FanReading], supplies: &[PsuState]) -> Vec<String> {
    let mut out = Vec::new();
    for fan in fans {
        let critical = matches!(
            fan.status.as_str(),
            "cr" | "lcr" | "ucr" | "nr" | "lnr" | "unr"
        );
        match fan.rpm {
            Some(0.0) => out.push(format!("fan {} at 0 RPM ({})", fan.name, fan.status)),
            Some(rpm) if critical => {
                out.push(format!("fan {} at {rpm} RPM ({})", fan.name, fan.status))
            }
            _ => {}
        }
    }
    for psu in supplies.iter().filter(|p| p.failed) {
        out.push(format!(
            "power supply {}: {} ({})",
            psu.name, psu.states, psu.status
        ));
    }
    out
}

/// Fans and supplies as the BMC reports them now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SensorReport {
    /// Every fan.
    pub fans: Vec<FanReading>,
    /// Every power supply.
    pub supplies: Vec<PsuState>,
}

/// Runs `ipmitool sdr type Fan` and `ipmitool sdr type "Power Supply"`.
pub fn read(ipmitool: &Path) -> Result<SensorReport, BmcError> {
    let fan_text = super::run(ipmitool, &["sdr", "type", "Fan"])?;
    let psu_text = super::run(ipmitool, &["sdr", "type", "Power Supply"])?;
    Ok(SensorReport {
        fans: fans(&parse_sdr(&fan_text)),
        supplies: power_supplies(&parse_sdr(&psu_text)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_layouts() {
        let elist = "CPU_FAN1         | 0Fh | ok  |  7.0 | 1300 RPM\nREAR_FAN2        | 15h | ns  |  7.0 | No Reading\n";
        let list = "Fan3B            | 0 RPM             | cr\n";
        let records = parse_sdr(&format!("{elist}{list}"));
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].rpm(), Some(1300.0));
        assert_eq!(records[1].status, "ns");
        assert_eq!(records[2].name, "Fan3B");
        assert_eq!(records[2].status, "cr");
        assert_eq!(records[2].rpm(), Some(0.0));
    }

    #[test]
    fn a_stopped_or_critical_fan_and_a_failed_supply_are_findings() {
        let records = parse_sdr(
            "FAN1 | 41h | ok | 29.1 | 1300 RPM\nFAN2 | 42h | lnc | 29.2 | 0 RPM\nFAN3 | 43h | lcr | 29.3 | 200 RPM\nFAN4 | 44h | ns | 29.4 | No Reading\n",
        );
        let supplies = power_supplies(&parse_sdr(
            "PSU1 Status | C8h | ok | 10.1 | Presence detected\nPSU2 Status | C9h | ok | 10.2 | Presence detected, Failure detected\n",
        ));
        let found = findings(&fans(&records), &supplies);
        assert_eq!(
            found,
            [
                "fan FAN2 at 0 RPM (lnc)",
                "fan FAN3 at 200 RPM (lcr)",
                "power supply PSU2 Status: Presence detected, Failure detected (ok)",
            ]
        );
    }

    #[test]
    fn healthy_sensors_have_no_findings_and_odd_lines_are_skipped() {
        let records = parse_sdr("garbage\n|\n| | |\nFAN1 | 1000 RPM | ok\nFAN1 | x RPM | ok\n");
        assert_eq!(records.len(), 2);
        assert!(findings(&fans(&records), &[]).is_empty());
    }
}
