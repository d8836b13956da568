//! Energy of a run from its MLPerf power logs (`power/result_N/node_K.txt` and
//! `sw_K.txt`), as the result summarizer computes it: per node, the readings after
//! `power_measurement_start` (time-sorted) each weigh the time since the one before,
//! up to `power_measurement_stop` (else the last reading), scaled to the run's time to
//! train and by `conversion_eff`; per switch, `interconnect_power_est` over the time to
//! train.

use std::path::Path;

use super::log::MlLogText;

/// Joules of one node log over a run of `time_to_train_ms`.
pub fn node_energy_j(log: &MlLogText, time_to_train_ms: f64) -> Result<f64, String> {
    let mut entries: Vec<_> = log.entries.iter().collect();
    // A stable sort, as Python's: equal times keep their file order.
    entries.sort_by(|a, b| a.time_ms.total_cmp(&b.time_ms));
    let (mut start, mut stop) = (None, None);
    let (mut previous, mut last) = (0.0, 0.0f64);
    let mut watt_ms = 0.0;
    let mut efficiency = 1.0;
    for entry in entries {
        match entry.key.as_str() {
            "power_measurement_start" => {
                start = Some(entry.time_ms);
                previous = entry.time_ms;
            }
            "power_reading" if start.is_some() && stop.is_none() => {
                let watts = entry
                    .value
                    .as_f64()
                    .ok_or_else(|| format!("line {}: a power_reading without watts", entry.line))?;
                // The summarizer would subtract it; no meter reads below zero.
                if watts < 0.0 {
                    return Err(format!(
                        "line {}: a negative power_reading ({watts} W)",
                        entry.line
                    ));
                }
                watt_ms += watts * (entry.time_ms - previous);
                previous = entry.time_ms;
                last = last.max(entry.time_ms);
            }
            "power_measurement_stop" => stop = Some(entry.time_ms),
            "conversion_eff" => {
                efficiency = entry.value.as_f64().ok_or_else(|| {
                    format!("line {}: conversion_eff is not a number", entry.line)
                })?;
            }
            _ => {}
        }
    }
    let start = start.ok_or("no power_measurement_start")?;
    let stop = stop.unwrap_or(last);
    if stop <= start {
        return Err(
            "the measurement has no length (power_measurement_stop at or before its start)".into(),
        );
    }
    Ok(efficiency * watt_ms * time_to_train_ms / (stop - start) / 1000.0)
}

/// Joules of one switch log over a run of `time_to_train_ms`.
pub fn switch_energy_j(log: &MlLogText, time_to_train_ms: f64) -> f64 {
    let mut efficiency = 1.0;
    let mut watts = 0.0;
    for entry in &log.entries {
        if entry.key == "conversion_eff" {
            efficiency = entry.value.as_f64().unwrap_or(1.0);
        }
        if entry.key == "interconnect_power_est" {
            watts = entry.value.as_f64().unwrap_or(0.0);
            break;
        }
    }
    efficiency * watts * time_to_train_ms / 1000.0
}

/// The energy of run `result_name` under `benchmark_dir/power/`.
pub fn run_energy_j(
    benchmark_dir: &Path,
    result_name: &str,
    time_to_train_ms: f64,
) -> Result<f64, String> {
    let dir = benchmark_dir.join("power").join(result_name);
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    let mut total = 0.0;
    let mut nodes = 0;
    for name in &names {
        let path = dir.join(name);
        let read = || MlLogText::read(&path).map_err(|e| format!("{}: {e}", path.display()));
        if name.starts_with("node_") {
            nodes += 1;
            total += node_energy_j(&read()?, time_to_train_ms)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        } else if name.starts_with("sw_") {
            total += switch_energy_j(&read()?, time_to_train_ms);
        }
    }
    if nodes == 0 {
        return Err(format!("no node_*.txt power log in {}", dir.display()));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(t: u64, key: &str, value: &str) -> String {
        format!(":::MLLOG {{\"namespace\": \"\", \"time_ms\": {t}, \"event_type\": \"POINT_IN_TIME\", \"key\": \"{key}\", \"value\": {value}, \"metadata\": {{}}}}\n")
    }

    #[test]
    fn readings_weigh_the_time_since_the_last_one() {
        let mut text = line(1000, "power_measurement_start", "null");
        text += &line(2000, "power_reading", "100");
        text += &line(4000, "power_reading", "200");
        text += &line(5000, "power_measurement_stop", "null");
        text += &line(6000, "power_reading", "9999");
        let log = MlLogText::parse(&text);
        // 100 W × 1 s + 200 W × 2 s over a 4 s window, scaled to a 2 s run.
        let joules = node_energy_j(&log, 2000.0).unwrap();
        assert!((joules - 500.0 * 2.0 / 4.0).abs() < 1e-9, "{joules}");
    }

    #[test]
    fn a_log_without_start_or_length_is_an_error() {
        let log = MlLogText::parse(&line(2000, "power_reading", "100"));
        assert!(node_energy_j(&log, 1.0)
            .unwrap_err()
            .contains("power_measurement_start"));
        let log = MlLogText::parse(&line(2000, "power_measurement_start", "null"));
        assert!(node_energy_j(&log, 1.0).unwrap_err().contains("no length"));
    }
}
