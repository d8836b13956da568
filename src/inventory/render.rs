//! The report as `tinyperf detect` prints it for a person.

use std::fmt::Write;

use super::gpu::RebarState;
use super::pci::describe_link;
use super::units::format_bytes;
use super::{HardwareReport, SkuSource};
use crate::record::Verdict;
use crate::runtime::RuntimeStatus;

/// Rows of cells, printed with each column as wide as its widest cell.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(" ");
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, " {cell:<width$} ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn or_unknown(value: Option<String>) -> String {
    value.unwrap_or_else(|| "unknown".to_string())
}

pub fn render(report: &HardwareReport) -> String {
    let mut out = String::new();
    header(&mut out, report);
    gpus(&mut out, report);
    host(&mut out, report);
    nvme(&mut out, report);
    runtimes(&mut out, report);
    checks(&mut out, report);
    if !report.findings.is_empty() {
        out.push_str("\nFindings\n");
        for finding in &report.findings {
            let _ = writeln!(out, "  - {finding}");
        }
    }
    out
}

fn header(out: &mut String, report: &HardwareReport) {
    let how = match report.sku_source {
        SkuSource::Recognised => "recognised",
        SkuSource::Configured => "as configured",
        SkuSource::None => "no SKU matches; nothing to check against",
    };
    let title = report
        .sku_title
        .as_ref()
        .map_or_else(String::new, |t| format!(": {t}"));
    let failed = report
        .checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .count();
    let verdict = match report.verdict {
        Verdict::Pass => format!("PASS: all {} checks passed", report.checks.len()),
        Verdict::Fail => format!("FAIL: {failed} of {} checks failed", report.checks.len()),
        _ => "not judged".to_string(),
    };
    let _ = writeln!(out, "Box      {} ({how}){title}", report.sku);
    let _ = writeln!(out, "Verdict  {verdict}");
    let _ = writeln!(out, "Root     {}", report.root.display());
}

fn gpus(out: &mut String, report: &HardwareReport) {
    let _ = writeln!(out, "\nGPUs ({})", report.gpus.len());
    if report.gpus.is_empty() {
        out.push_str("  none found\n");
        return;
    }
    let mut rows = vec![["ADDRESS", "MODEL", "LINK", "VRAM", "REBAR", "DRIVER"]
        .map(String::from)
        .to_vec()];
    for gpu in &report.gpus {
        let mut link = gpu.path_link.describe();
        if let Some(at) = gpu.path_link.limited_at {
            let _ = write!(link, " (at {at})");
        }
        let rebar = match gpu.resizable_bar.state {
            RebarState::On => "on",
            RebarState::Off => "off",
            RebarState::Unknown => "?",
        };
        let driver = match (&gpu.driver, &gpu.driver_version) {
            (Some(d), Some(v)) => format!("{d} {v}"),
            (Some(d), None) => d.clone(),
            (None, _) => "none".to_string(),
        };
        rows.push(vec![
            gpu.address.to_string(),
            gpu.model.clone(),
            link,
            gpu.vram_bytes.map_or_else(|| "?".to_string(), format_bytes),
            rebar.to_string(),
            driver,
        ]);
    }
    table(out, &rows);
}

fn host(out: &mut String, report: &HardwareReport) {
    let host = &report.host;
    out.push_str("\nHost\n");
    let plural = |n: u32, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let mut topology = Vec::new();
    if let Some(n) = host.cpu_sockets {
        topology.push(plural(n, "socket"));
    }
    if let Some(n) = host.cpu_cores {
        topology.push(plural(n, "core"));
    }
    if let Some(n) = host.cpu_threads {
        topology.push(plural(n, "thread"));
    }
    let cpu = format!(
        "{}: {}",
        host.cpu_model.as_deref().unwrap_or("unknown model"),
        topology.join(", ")
    );
    let board = &host.board;
    let mut board_parts: Vec<String> = [&board.board_vendor, &board.board_name]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    if let Some(product) = &board.product_name {
        if board.board_name.as_ref() != Some(product) {
            board_parts.push(format!("({product})"));
        }
    }
    let mut board_line = if board_parts.is_empty() {
        "unknown".to_string()
    } else {
        board_parts.join(" ")
    };
    if let Some(serial) = &board.board_serial {
        let _ = write!(board_line, ", serial {serial}");
    }
    if let Some(bios) = &board.bios_version {
        let _ = write!(board_line, ", BIOS {bios}");
    }
    let rows = vec![
        vec!["Hostname".into(), or_unknown(host.hostname.clone())],
        vec!["CPU".into(), cpu],
        vec![
            "Memory".into(),
            or_unknown(host.memory_bytes.map(format_bytes)),
        ],
        vec!["Kernel".into(), or_unknown(host.kernel.clone())],
        vec!["Board".into(), board_line],
    ];
    table(out, &rows);
}

fn nvme(out: &mut String, report: &HardwareReport) {
    let _ = writeln!(out, "\nNVMe ({})", report.nvme.len());
    if report.nvme.is_empty() {
        out.push_str("  none found\n");
        return;
    }
    let rows: Vec<Vec<String>> = report
        .nvme
        .iter()
        .map(|c| {
            let link = c.link.map_or_else(
                || describe_link(None, None),
                |l| {
                    let mut text = l.describe();
                    if let Some(at) = l.limited_at {
                        let _ = write!(text, " (at {at})");
                    }
                    text
                },
            );
            vec![
                c.name.clone(),
                c.address.map_or_else(
                    || c.transport.clone().unwrap_or_else(|| "?".into()),
                    |a| a.to_string(),
                ),
                or_unknown(c.model.clone()),
                link,
            ]
        })
        .collect();
    table(out, &rows);
}

fn runtimes(out: &mut String, report: &HardwareReport) {
    out.push_str("\nRuntimes\n");
    let Some(runtime) = &report.runtime else {
        out.push_str("  not probed\n");
        return;
    };
    let describe = |status: &RuntimeStatus| {
        if !status.loaded {
            return format!(
                "not loaded: {}",
                status.finding.as_deref().unwrap_or("no reason given")
            );
        }
        let mut text = format!("{} device(s)", status.devices.len());
        if let Some(version) = &status.driver_version {
            let _ = write!(text, ", driver {version}");
        }
        if let Some(finding) = &status.finding {
            let _ = write!(text, " ({finding})");
        }
        text
    };
    let rows = vec![
        vec!["CUDA".into(), describe(&runtime.cuda)],
        vec!["HIP".into(), describe(&runtime.hip)],
        vec!["NVML".into(), describe(&runtime.nvml)],
    ];
    table(out, &rows);
}

fn checks(out: &mut String, report: &HardwareReport) {
    if report.checks.is_empty() {
        return;
    }
    out.push_str("\nChecks\n");
    let rows: Vec<Vec<String>> = report
        .checks
        .iter()
        .map(|c| {
            vec![
                if c.verdict == Verdict::Pass {
                    "pass"
                } else {
                    "FAIL"
                }
                .to_string(),
                c.name.clone(),
                c.subject.clone().unwrap_or_default(),
                format!("expected {}, found {}", c.expected, c.found),
            ]
        })
        .collect();
    table(out, &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut out = String::new();
        table(
            &mut out,
            &[
                vec!["a".into(), "long cell".into(), "x".into()],
                vec!["longer".into(), "b".into(), "y".into()],
            ],
        );
        assert_eq!(out, "  a       long cell  x\n  longer  b          y\n");
    }
}
