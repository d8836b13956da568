//! CPU package power from RAPL through powercap (`/sys/class/powercap/intel-rapl:N`,
//! which AMD's RAPL uses too): the package domains' energy counters, differenced
//! between two reads, wrapping at `max_energy_range_uj`.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// One package domain's counter.
#[derive(Debug, Clone)]
struct Domain {
    energy_file: PathBuf,
    range_uj: f64,
    last: Option<(Instant, f64)>,
}

/// The CPU packages of a machine.
#[derive(Debug, Clone)]
pub struct RaplPower {
    domains: Vec<Domain>,
}

fn read_number(path: &Path) -> Option<f64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl RaplPower {
    /// The readable package domains under `root/sys/class/powercap`; `None` when there
    /// are none (no RAPL, or counters only root may read).
    pub fn discover(root: &Path) -> Option<RaplPower> {
        let dir = root.join("sys/class/powercap");
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        entries.sort();
        let domains: Vec<Domain> = entries
            .into_iter()
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                // Top-level zones only: `intel-rapl:0:0` (core, dram) sit inside a package.
                name.starts_with("intel-rapl:") && name.matches(':').count() == 1
            })
            .filter(|p| {
                std::fs::read_to_string(p.join("name"))
                    .is_ok_and(|n| n.trim().starts_with("package"))
            })
            .filter(|p| read_number(&p.join("energy_uj")).is_some())
            .map(|p| Domain {
                range_uj: read_number(&p.join("max_energy_range_uj")).unwrap_or(f64::MAX),
                energy_file: p.join("energy_uj"),
                last: None,
            })
            .collect();
        (!domains.is_empty()).then_some(RaplPower { domains })
    }

    /// How many CPU packages it reads.
    pub fn packages(&self) -> usize {
        self.domains.len()
    }

    /// The packages' power since the previous read, in watts; `None` on the first
    /// read, or when a counter cannot be read.
    pub fn read(&mut self) -> Option<f64> {
        let now = Instant::now();
        let mut total = Some(0.0);
        for domain in &mut self.domains {
            let energy = read_number(&domain.energy_file);
            let watts = match (domain.last, energy) {
                (Some((then, before)), Some(after)) => {
                    let seconds = now.duration_since(then).as_secs_f64();
                    let mut delta = after - before;
                    if delta < 0.0 {
                        delta += domain.range_uj;
                    }
                    (seconds > 0.0).then(|| delta / 1e6 / seconds)
                }
                _ => None,
            };
            domain.last = energy.map(|e| (now, e));
            total = match (total, watts) {
                (Some(t), Some(w)) => Some(t + w),
                _ => None,
            };
        }
        total
    }
}
