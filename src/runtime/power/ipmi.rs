//! Wall power from the BMC: the DCMI power reading, through `ipmitool dcmi power
//! reading` on the in-band interface (`/dev/ipmi0`). The reading is what the power
//! supplies draw from the wall, the only figure comparable with MLPerf submissions.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The program that asks the BMC: `$TINYPERF_IPMITOOL`, else `ipmitool` on the PATH.
pub fn find_ipmitool() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TINYPERF_IPMITOOL").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("ipmitool"))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A BMC answering DCMI power readings.
#[derive(Debug, Clone)]
pub struct IpmiPower {
    ipmitool: PathBuf,
}

impl IpmiPower {
    /// The BMC behind `ipmitool`, when it gives a reading now.
    pub fn open(ipmitool: PathBuf) -> Result<IpmiPower, String> {
        let meter = IpmiPower { ipmitool };
        meter.read()?;
        Ok(meter)
    }

    /// Instantaneous wall power in watts.
    pub fn read(&self) -> Result<f64, String> {
        let out = Command::new(&self.ipmitool)
            .args(["dcmi", "power", "reading"])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.ipmitool.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "{} dcmi power reading failed ({}): {}",
                self.ipmitool.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        parse_dcmi_reading(&text)
    }
}

/// The watts of `ipmitool dcmi power reading`'s "Instantaneous power reading" line; a
/// BMC whose power reading is deactivated reports stale zeros, so it is refused.
pub fn parse_dcmi_reading(text: &str) -> Result<f64, String> {
    let mut watts = None;
    for line in text.lines() {
        let Some((label, value)) = line.split_once(':') else {
            continue;
        };
        let label = label.trim().to_ascii_lowercase();
        let value = value.trim();
        if label.starts_with("instantaneous power reading") {
            let number = value.split_whitespace().next().unwrap_or_default();
            watts = number.parse::<f64>().ok();
        }
        if label.starts_with("power reading state") && value.eq_ignore_ascii_case("deactivated") {
            return Err("the BMC's power reading is deactivated".into());
        }
    }
    watts.ok_or_else(|| format!("no instantaneous power reading in: {}", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_instantaneous_watts() {
        let out = "\n    Instantaneous power reading:                   412 Watts\n    \
                   Minimum during sampling period:                 10 Watts\n    \
                   Power reading state is:                   activated\n";
        assert_eq!(parse_dcmi_reading(out), Ok(412.0));
        let off = out.replace("activated", "deactivated");
        assert!(parse_dcmi_reading(&off)
            .unwrap_err()
            .contains("deactivated"));
        assert!(parse_dcmi_reading("garbage").is_err());
    }
}
