//! Power of the whole machine for MLPerf energy, from the best source present: the
//! BMC's wall power (IPMI DCMI), else the sum of what the GPUs (NVML, amdgpu hwmon)
//! and the CPU packages (RAPL) report, which leaves out memory, drives, fans and the
//! power supplies' losses and so is labelled as not wall power.

pub mod ipmi;
pub mod rapl;

use std::path::Path;

use crate::runtime::telemetry::Sampler;

/// What a meter measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerKind {
    /// At the wall, through the BMC: comparable with submissions.
    Wall,
    /// The sum of components that report their own power.
    Components,
}

enum Source {
    Wall(ipmi::IpmiPower),
    Components {
        // Boxed: NVML's handle is large, a BMC's is a path.
        gpus: Option<Box<Sampler>>,
        rapl: Option<rapl::RaplPower>,
    },
}

/// The machine's best power source.
pub struct PowerMeter {
    source: Source,
    label: String,
    /// What was found on the way (a BMC without ipmitool, a BMC that did not answer).
    pub findings: Vec<String>,
}

impl PowerMeter {
    /// The best source under `root` (`root/sys`, `root/dev`); `Err` says why there is
    /// none, with what was found on the way.
    pub fn discover(root: &Path) -> Result<PowerMeter, String> {
        PowerMeter::discover_from(root, true)
    }

    /// The same without NVML: only what the tree under `root` holds (for trees on disk).
    pub fn discover_sysfs(root: &Path) -> Result<PowerMeter, String> {
        PowerMeter::discover_from(root, false)
    }

    fn discover_from(root: &Path, nvml: bool) -> Result<PowerMeter, String> {
        let mut findings = Vec::new();
        match ipmi::find_ipmitool() {
            Some(tool) => match ipmi::IpmiPower::open(tool.clone()) {
                Ok(bmc) => {
                    return Ok(PowerMeter {
                        source: Source::Wall(bmc),
                        label: format!(
                            "wall power from the BMC (IPMI DCMI power reading, {})",
                            tool.display()
                        ),
                        findings,
                    })
                }
                Err(e) => findings.push(format!("no wall power from the BMC: {e}")),
            },
            None if root.join("dev/ipmi0").exists() => findings.push(
                "a BMC is at /dev/ipmi0 but ipmitool is not installed, so there is no wall \
                 power (Debian: apt-get install ipmitool)"
                    .into(),
            ),
            None => {}
        }
        let mut gpus = if nvml {
            Sampler::discover(root)
        } else {
            Sampler::discover_sysfs(root)
        };
        let gpu_count = if gpus.has_power_source() {
            let sample = gpus.sample(0.0);
            sample.gpus.iter().filter(|g| g.power_w.is_some()).count()
        } else {
            0
        };
        let mut rapl = rapl::RaplPower::discover(root);
        if let Some(r) = rapl.as_mut() {
            // The first read only primes the counters.
            r.read();
        }
        let mut parts = Vec::new();
        if gpu_count > 0 {
            parts.push(format!("GPU power (NVML, amdgpu hwmon; {gpu_count} GPUs)"));
        }
        if let Some(r) = &rapl {
            parts.push(format!(
                "CPU package power (RAPL, {} package(s))",
                r.packages()
            ));
        }
        if parts.is_empty() {
            findings.push(
                "no power source: no BMC answering DCMI, no GPU reporting power, no readable \
                 RAPL counter"
                    .into(),
            );
            return Err(findings.join("; "));
        }
        Ok(PowerMeter {
            label: format!(
                "{}: not wall power (memory, drives, fans and power-supply losses are left out), \
                 so not comparable with MLPerf submissions",
                parts.join(" + ")
            ),
            source: Source::Components {
                gpus: (gpu_count > 0).then(|| Box::new(gpus)),
                rapl,
            },
            findings,
        })
    }

    /// Whether it measures at the wall or adds up components.
    pub fn kind(&self) -> PowerKind {
        match self.source {
            Source::Wall(_) => PowerKind::Wall,
            Source::Components { .. } => PowerKind::Components,
        }
    }

    /// What the readings are, in words.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Watts now; `None` when the source gave nothing this time.
    pub fn read(&mut self) -> Option<f64> {
        match &mut self.source {
            Source::Wall(bmc) => bmc.read().ok(),
            Source::Components { gpus, rapl } => {
                let gpu = gpus.as_mut().and_then(|s| {
                    let sample = s.sample(0.0);
                    let watts: Vec<f64> = sample.gpus.iter().filter_map(|g| g.power_w).collect();
                    (!watts.is_empty()).then(|| watts.iter().sum::<f64>())
                });
                let cpu = rapl.as_mut().and_then(rapl::RaplPower::read);
                match (gpu, cpu) {
                    (None, None) => None,
                    (g, c) => Some(g.unwrap_or(0.0) + c.unwrap_or(0.0)),
                }
            }
        }
    }
}
