//! The CPU's theoretical single-precision peak: cores × clock × FLOPs per cycle.

use std::path::Path;

use serde::Serialize;

/// What the peak estimate is made of, so a reader can check it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuPeak {
    /// The CPU's model name, from `/proc/cpuinfo`.
    pub model: String,
    /// Physical cores the process may run on.
    pub cores: usize,
    /// The clock the estimate uses, in MHz: the CPU's highest frequency (cpufreq), else
    /// the clock measured on its loaded cores.
    pub clock_mhz: f64,
    /// FP32 FLOPs per cycle per core (FMA units × lanes × 2).
    pub flops_per_cycle: f64,
    /// Where the clock came from (`cpuinfo_max_freq`, or measured under load).
    pub clock_source: String,
}

impl CpuPeak {
    /// The theoretical peak in single-precision GFLOP/s: cores × MHz × FLOPs per cycle /
    /// 1000.
    pub fn gflops(&self) -> f64 {
        self.cores as f64 * self.clock_mhz * self.flops_per_cycle / 1000.0
    }
}

/// Facts read from `/proc/cpuinfo` that decide the FLOPs per cycle.
#[derive(Debug, Default, Clone, PartialEq)]
struct CpuInfoFacts {
    model: String,
    vendor: String,
    family: u32,
    flags: Vec<String>,
    physical_cores: usize,
    logical_cpus: usize,
}

fn parse_cpuinfo(text: &str) -> CpuInfoFacts {
    // Cores and threads are counted the way the inventory counts them; the rest comes
    // from the first processor's block.
    let summary = crate::inventory::parse_cpuinfo(text);
    let mut facts = CpuInfoFacts {
        model: summary
            .as_ref()
            .and_then(|s| s.model.clone())
            .unwrap_or_default(),
        logical_cpus: summary.as_ref().map_or(0, |s| s.threads as usize),
        physical_cores: summary.as_ref().and_then(|s| s.cores).unwrap_or(0) as usize,
        ..CpuInfoFacts::default()
    };
    let first_block = text.split("\n\n").next().unwrap_or("");
    for line in first_block.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "vendor_id" => facts.vendor = value.to_string(),
            "cpu family" => facts.family = value.parse().unwrap_or(0),
            "flags" => facts.flags = value.split_whitespace().map(str::to_string).collect(),
            _ => {}
        }
    }
    facts
}

/// FP32 FLOPs per cycle per core for the widest FMA this CPU runs at full rate.
fn flops_per_cycle(facts: &CpuInfoFacts) -> f64 {
    let has = |f: &str| facts.flags.iter().any(|x| x == f);
    let amd = facts.vendor == "AuthenticAMD";
    if has("avx512f") {
        // Zen 4 executes AVX-512 on 256-bit units; Zen 5 and Intel server cores have
        // two full 512-bit FMA pipes.
        if amd && facts.family == 0x19 {
            32.0
        } else {
            64.0
        }
    } else if has("avx2") && has("fma") {
        32.0
    } else if has("avx") {
        16.0
    } else {
        8.0
    }
}

/// Where the clock was measured when cpufreq gives no maximum.
pub const MEASURED_SOURCE: &str = "measured on the loaded cores (dependent-multiply chain)";

/// Estimates the peak of the cores this process may use, reading `proc/cpuinfo` and
/// `sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq` under `root`; without that
/// maximum (a VM), the clock is `measured()` on the loaded cores. Never from `cpu MHz`,
/// the nominal or momentary clock, which a loaded core outruns: without either the
/// peak is unknown.
pub fn estimate(
    root: &Path,
    usable_cpus: usize,
    measured: impl FnOnce() -> Option<f64>,
) -> Result<CpuPeak, String> {
    let text = std::fs::read_to_string(root.join("proc/cpuinfo"))
        .map_err(|e| format!("cannot read /proc/cpuinfo: {e}"))?;
    let facts = parse_cpuinfo(&text);
    if facts.logical_cpus == 0 {
        return Err("/proc/cpuinfo lists no processors".into());
    }
    let max_khz =
        std::fs::read_to_string(root.join("sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok());
    let (clock_mhz, clock_source) = match max_khz.filter(|k| *k > 0.0) {
        Some(khz) => (khz / 1000.0, "cpuinfo_max_freq"),
        None => match measured().filter(|mhz| mhz.is_finite() && *mhz > 0.0) {
            Some(mhz) => (mhz, MEASURED_SOURCE),
            None => {
                return Err(
                    "the peak is unknown: cpufreq gives no maximum clock and this CPU's clock \
                     cannot be measured"
                        .into(),
                )
            }
        },
    };
    // SMT siblings share FMA units: count physical cores in the usable set.
    let threads_per_core = (facts.logical_cpus / facts.physical_cores.max(1)).max(1);
    let cores = usable_cpus
        .div_ceil(threads_per_core)
        .clamp(1, facts.physical_cores.max(1));
    Ok(CpuPeak {
        model: facts.model.clone(),
        cores,
        clock_mhz,
        flops_per_cycle: flops_per_cycle(&facts),
        clock_source: clock_source.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpuinfo(vendor: &str, family: u32, flags: &str, cpus: &[(u32, u32)]) -> String {
        cpus.iter()
            .enumerate()
            .map(|(i, (phys, core))| {
                format!(
                    "processor\t: {i}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel name\t: Test CPU\n\
                     cpu MHz\t\t: 2600.000\nphysical id\t: {phys}\ncore id\t\t: {core}\nflags\t\t: {flags}\n\n"
                )
            })
            .collect()
    }

    #[test]
    fn counts_physical_cores_and_reads_flags() {
        let text = cpuinfo(
            "GenuineIntel",
            6,
            "fpu avx2 fma avx512f",
            &[(0, 0), (0, 1), (0, 0), (0, 1)],
        );
        let f = parse_cpuinfo(&text);
        assert_eq!(f.logical_cpus, 4);
        assert_eq!(f.physical_cores, 2);
        assert_eq!(flops_per_cycle(&f), 64.0);
    }

    #[test]
    fn zen4_avx512_runs_at_half_width() {
        let f = parse_cpuinfo(&cpuinfo("AuthenticAMD", 25, "avx2 fma avx512f", &[(0, 0)]));
        assert_eq!(flops_per_cycle(&f), 32.0);
        let f = parse_cpuinfo(&cpuinfo("AuthenticAMD", 26, "avx2 fma avx512f", &[(0, 0)]));
        assert_eq!(flops_per_cycle(&f), 64.0);
        let f = parse_cpuinfo(&cpuinfo("AuthenticAMD", 23, "avx2 fma", &[(0, 0)]));
        assert_eq!(flops_per_cycle(&f), 32.0);
    }

    #[test]
    fn estimate_prefers_max_freq_then_the_measured_clock_never_cpu_mhz() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let cpus: Vec<_> = (0..8).map(|i| (0, i % 4)).collect();
        std::fs::write(
            dir.path().join("proc/cpuinfo"),
            cpuinfo("GenuineIntel", 6, "avx2 fma", &cpus),
        )
        .unwrap();
        // No cpufreq (a VM): the measured clock, not cpuinfo's 2600 MHz.
        let p = estimate(dir.path(), 8, || Some(3400.0)).unwrap();
        assert_eq!(
            (p.cores, p.clock_mhz, p.clock_source.as_str()),
            (4, 3400.0, MEASURED_SOURCE)
        );
        assert!((p.gflops() - 4.0 * 3400.0 * 32.0 / 1000.0).abs() < 1e-9);
        let unknown = estimate(dir.path(), 8, || None).unwrap_err();
        assert!(unknown.contains("peak is unknown"), "{unknown}");
        let freq = dir.path().join("sys/devices/system/cpu/cpu0/cpufreq");
        std::fs::create_dir_all(&freq).unwrap();
        std::fs::write(freq.join("cpuinfo_max_freq"), "3500000\n").unwrap();
        let p = estimate(dir.path(), 2, || {
            panic!("no measurement with a cpufreq maximum")
        })
        .unwrap();
        assert_eq!(
            (p.cores, p.clock_mhz, p.clock_source.as_str()),
            (1, 3500.0, "cpuinfo_max_freq")
        );
        assert!(estimate(Path::new("/nonexistent"), 1, || Some(1.0)).is_err());
    }
}
