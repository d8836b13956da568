//! `telemetry.csv`: one row per device per sample, written as samples arrive and
//! flushed after each, so a worker killed mid-run leaves a readable prefix.
//!
//! Columns: `time_s` (seconds since sampling began), `stage`, `device` (`gpu0`…,
//! `cpu`), `address` (PCI, sysfs spelling), `power_w`, `temp_c` (the GPU's own
//! sensor, or the CPU's), `temp_limit_c`, `junction_temp_c`, `mem_temp_c`,
//! `sm_clock_mhz`, `mem_clock_mhz`, `util_percent`, `throttling` (`none`, or reasons
//! joined by `|`). A value the source did not give is an empty cell.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::sample::{TelemetrySample, ThrottleReason};

/// The columns of `telemetry.csv`, in order.
pub const HEADER: [&str; 13] = [
    "time_s",
    "stage",
    "device",
    "address",
    "power_w",
    "temp_c",
    "temp_limit_c",
    "junction_temp_c",
    "mem_temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "util_percent",
    "throttling",
];

/// The device name of the CPU's rows.
pub const CPU_DEVICE: &str = "cpu";

/// What `throttling` says when the GPU reports nothing holding it back.
const NOT_THROTTLING: &str = "none";

/// Why `telemetry.csv` could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// Opening or appending to the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// Appends samples to one `telemetry.csv`.
pub struct CsvWriter {
    path: PathBuf,
    file: File,
}

impl CsvWriter {
    /// Opens `path` for appending, writing the header when the file is new or empty.
    pub fn create(path: &Path) -> Result<CsvWriter, CsvError> {
        let io_error = |source| CsvError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io_error)?;
        if file.metadata().map_err(io_error)?.len() == 0 {
            file.write_all(format!("{}\n", HEADER.join(",")).as_bytes())
                .and_then(|_| file.flush())
                .map_err(io_error)?;
        }
        Ok(CsvWriter {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes every row of one sample in one write, then flushes.
    pub fn append(&mut self, stage: &str, sample: &TelemetrySample) -> Result<(), CsvError> {
        let text = rows(stage, sample);
        self.file
            .write_all(text.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|source| CsvError::Io {
                path: self.path.clone(),
                source,
            })
    }
}

/// The lines of one sample: its GPUs, then the CPU when its temperature is known.
pub fn rows(stage: &str, sample: &TelemetrySample) -> String {
    let time = format!("{:.3}", sample.t_s);
    let mut out = String::new();
    for gpu in &sample.gpus {
        let temp = gpu.temp();
        let throttling = gpu.throttling.as_ref().map(|reasons| {
            if reasons.is_empty() {
                NOT_THROTTLING.to_string()
            } else {
                reasons
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join("|")
            }
        });
        let cells = [
            time.clone(),
            escape(stage),
            gpu.device(),
            escape(gpu.address.as_deref().unwrap_or("")),
            number(gpu.power_w),
            number(temp.map(|t| t.celsius)),
            number(temp.and_then(|t| t.limit_c)),
            number(gpu.temperature("junction").map(|t| t.celsius)),
            number(gpu.temperature("mem").map(|t| t.celsius)),
            number(gpu.sm_clock_mhz),
            number(gpu.mem_clock_mhz),
            number(gpu.util_percent),
            throttling.unwrap_or_default(),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    if let Some(cpu) = sample.cpu_temp_c {
        let mut cells = vec![String::new(); HEADER.len()];
        cells[0] = time;
        cells[1] = escape(stage);
        cells[2] = CPU_DEVICE.to_string();
        cells[5] = number(Some(cpu));
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

fn number(value: Option<f64>) -> String {
    match value {
        // Enough digits for a milliwatt or a millidegree; no trailing noise.
        Some(v) if v.is_finite() => {
            let text = format!("{v:.3}");
            let text = text.trim_end_matches('0').trim_end_matches('.');
            if text == "-0" {
                "0".to_string()
            } else {
                text.to_string()
            }
        }
        _ => String::new(),
    }
}

/// RFC 4180 quoting for a cell holding a comma or a quote. A line break becomes a
/// space: every row stays one line, so a cut file loses at most its last row.
pub fn escape(cell: &str) -> String {
    let cell = cell.replace(['\n', '\r'], " ");
    if cell.contains([',', '"']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell
    }
}

/// One row of `telemetry.csv`, parsed back.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvRow {
    /// Seconds since sampling began.
    pub time_s: f64,
    /// The stage the sample was taken in.
    pub stage: String,
    /// `gpu0`…, or [`CPU_DEVICE`].
    pub device: String,
    /// The GPU's PCI address.
    pub address: Option<String>,
    /// Board power draw, in watts.
    pub power_w: Option<f64>,
    /// The GPU's own temperature, in °C.
    pub temp_c: Option<f64>,
    /// Where that sensor's limit is, in °C.
    pub temp_limit_c: Option<f64>,
    /// The hottest spot of the die (hwmon `junction`), in °C.
    pub junction_temp_c: Option<f64>,
    /// The memory's temperature (hwmon `mem`), in °C.
    pub mem_temp_c: Option<f64>,
    /// Shader (SM) clock, in MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Memory clock, in MHz.
    pub mem_clock_mhz: Option<f64>,
    /// How busy the GPU was, in percent.
    pub util_percent: Option<f64>,
    /// `None` unknown, empty when not throttling.
    pub throttling: Option<Vec<ThrottleReason>>,
}

/// Why `telemetry.csv` could not be read back.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    /// The first line is not [`HEADER`]; it holds what it was.
    #[error("not a telemetry file: the header is {0:?}")]
    Header(String),
    /// A row is malformed.
    #[error("line {line}: {reason}")]
    Row {
        /// Its line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// Reads a whole `telemetry.csv`. A last line without its line break is what a killed
/// writer leaves: it is dropped, not an error. Any other bad row is.
pub fn parse(text: &str) -> Result<Vec<CsvRow>, ParseError> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    let mut lines = complete.lines();
    let header = lines.next().unwrap_or_default();
    if header != HEADER.join(",") {
        // A file cut inside its header is an empty file, not a foreign one.
        if complete.is_empty() && HEADER.join(",").starts_with(text) {
            return Ok(Vec::new());
        }
        return Err(ParseError::Header(header.to_string()));
    }
    lines
        .enumerate()
        .map(|(n, line)| {
            parse_row(line).map_err(|reason| ParseError::Row {
                line: n + 2,
                reason,
            })
        })
        .collect()
}

fn parse_row(line: &str) -> Result<CsvRow, String> {
    let cells = split(line)?;
    if cells.len() != HEADER.len() {
        return Err(format!("{} cells, expected {}", cells.len(), HEADER.len()));
    }
    let optional = |i: usize| -> Result<Option<f64>, String> {
        let cell = &cells[i];
        if cell.is_empty() {
            return Ok(None);
        }
        cell.parse::<f64>()
            .map(Some)
            .map_err(|_| format!("{}: not a number: {cell:?}", HEADER[i]))
    };
    let throttling = match cells[12].as_str() {
        "" => None,
        NOT_THROTTLING => Some(Vec::new()),
        reasons => Some(
            reasons
                .split('|')
                .map(|r| {
                    ThrottleReason::parse(r).ok_or_else(|| format!("unknown throttle reason {r:?}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    Ok(CsvRow {
        time_s: optional(0)?.ok_or("time_s is empty")?,
        stage: cells[1].clone(),
        device: cells[2].clone(),
        address: Some(cells[3].clone()).filter(|a| !a.is_empty()),
        power_w: optional(4)?,
        temp_c: optional(5)?,
        temp_limit_c: optional(6)?,
        junction_temp_c: optional(7)?,
        mem_temp_c: optional(8)?,
        sm_clock_mhz: optional(9)?,
        mem_clock_mhz: optional(10)?,
        util_percent: optional(11)?,
        throttling,
    })
}

/// Splits one line into cells, undoing RFC 4180 quoting.
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cell.push(c),
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => cells.push(std::mem::take(&mut cell)),
            (false, c) => cell.push(c),
        }
    }
    if quoted {
        return Err("unterminated quoted cell".to_string());
    }
    cells.push(cell);
    Ok(cells)
}
