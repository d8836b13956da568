//! Linux hwmon: amdgpu's power, temperatures, clocks and load, and the CPU's
//! temperature from `k10temp` or `coretemp`, all read under an injectable root
//! (`root/sys`) like the inventory.
//!
//! Every value is read on its own: a file that is missing, unreadable or holds
//! something other than a number gives `None` for that value and leaves the rest of
//! the sample alone.

use std::fs;
use std::path::{Path, PathBuf};

use super::sample::{GpuSample, Temperature};

const AMD_VENDOR: u32 = 0x1002;
/// PCI base class of display controllers (VGA, 3D, other).
const DISPLAY_CLASS: u32 = 0x03;
/// More temperature channels than any GPU or CPU driver exposes.
const MAX_TEMP_CHANNELS: u32 = 16;

/// An AMD GPU with an amdgpu hwmon directory.
#[derive(Debug, Clone)]
pub struct AmdGpu {
    index: u32,
    address: String,
    device_dir: PathBuf,
    hwmon_dir: PathBuf,
}

impl AmdGpu {
    /// Its PCI address, in sysfs spelling.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Its folder under `sys/bus/pci/devices`.
    pub fn device_dir(&self) -> &Path {
        &self.device_dir
    }

    /// Its amdgpu hwmon folder.
    pub fn hwmon_dir(&self) -> &Path {
        &self.hwmon_dir
    }

    /// Whether the driver exposes a power reading at all.
    pub fn has_power(&self) -> bool {
        power_files(&self.hwmon_dir).any(|p| p.exists())
    }

    /// A sample of its power, temperatures, clocks and use, now.
    pub fn read(&self) -> GpuSample {
        let clocks = clock_channels(&self.hwmon_dir);
        GpuSample {
            index: self.index,
            address: Some(self.address.clone()),
            power_w: power_files(&self.hwmon_dir)
                .find(|p| p.exists())
                .and_then(|p| number(&p))
                .map(|microwatts| microwatts / 1e6),
            temperatures: temperatures(&self.hwmon_dir),
            sm_clock_mhz: clocks.sclk.and_then(|p| number(&p)).map(|hz| hz / 1e6),
            mem_clock_mhz: clocks.mclk.and_then(|p| number(&p)).map(|hz| hz / 1e6),
            util_percent: number(&self.device_dir.join("gpu_busy_percent")),
            throttling: self.throttling(),
        }
    }

    /// What holds the clocks down, from the `gpu_metrics` table (hwmon has no throttle
    /// status); `None` where the card has no table tinyperf reads.
    fn throttling(&self) -> Option<Vec<super::sample::ThrottleReason>> {
        let data = fs::read(self.device_dir.join("gpu_metrics")).ok()?;
        super::gpu_metrics::parse(&data)
            .ok()
            .map(|metrics| metrics.throttle_reasons())
    }
}

/// `power1_average` on most kernels; newer ones give `power1_input` instead.
fn power_files(hwmon: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    ["power1_average", "power1_input"]
        .into_iter()
        .map(|name| hwmon.join(name))
}

/// Every AMD display device under `root/sys/bus/pci/devices` with an amdgpu hwmon
/// directory, in PCI address order.
pub fn amd_gpus(root: &Path) -> Vec<AmdGpu> {
    let mut gpus = Vec::new();
    for (address, device_dir) in pci_devices(root) {
        let vendor = text(&device_dir.join("vendor")).and_then(|v| hex(&v));
        let class = text(&device_dir.join("class")).and_then(|c| hex(&c));
        if vendor != Some(AMD_VENDOR) || class.map(|c| c >> 16) != Some(DISPLAY_CLASS) {
            continue;
        }
        let Some(hwmon_dir) = amdgpu_hwmon(&device_dir) else {
            continue;
        };
        gpus.push(AmdGpu {
            index: gpus.len() as u32,
            address,
            device_dir,
            hwmon_dir,
        });
    }
    gpus
}

fn pci_devices(root: &Path) -> Vec<(String, PathBuf)> {
    let mut devices: Vec<(String, PathBuf)> = sorted_entries(&root.join("sys/bus/pci/devices"))
        .into_iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_string();
            Some((name, path))
        })
        .collect();
    devices.sort();
    devices
}

/// The device's hwmon directory named `amdgpu`, else its only one.
fn amdgpu_hwmon(device_dir: &Path) -> Option<PathBuf> {
    let dirs = sorted_entries(&device_dir.join("hwmon"));
    dirs.iter()
        .find(|d| text(&d.join("name")).as_deref() == Some("amdgpu"))
        .cloned()
        .or_else(|| (dirs.len() == 1).then(|| dirs[0].clone()))
}

/// Every `tempN_input` with its label (`tempN` when unlabelled) and its limit.
pub fn temperatures(hwmon: &Path) -> Vec<Temperature> {
    (1..=MAX_TEMP_CHANNELS)
        .filter_map(|n| {
            let celsius = number(&hwmon.join(format!("temp{n}_input")))? / 1000.0;
            let label = text(&hwmon.join(format!("temp{n}_label")))
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| format!("temp{n}"));
            let limit_c = number(&hwmon.join(format!("temp{n}_crit")))
                .or_else(|| number(&hwmon.join(format!("temp{n}_emergency"))))
                .map(|millicelsius| millicelsius / 1000.0);
            Some(Temperature {
                label,
                celsius,
                limit_c,
            })
        })
        .collect()
}

struct ClockChannels {
    sclk: Option<PathBuf>,
    mclk: Option<PathBuf>,
}

/// amdgpu labels `freq1` `sclk` and `freq2` `mclk`; an unlabelled channel keeps that
/// order.
fn clock_channels(hwmon: &Path) -> ClockChannels {
    let mut channels = ClockChannels {
        sclk: None,
        mclk: None,
    };
    for n in 1..=2 {
        let input = hwmon.join(format!("freq{n}_input"));
        let label = text(&hwmon.join(format!("freq{n}_label")));
        let is_sclk = match label.as_deref() {
            Some("sclk") => true,
            Some("mclk") => false,
            _ => n == 1,
        };
        if is_sclk {
            channels.sclk.get_or_insert(input);
        } else {
            channels.mclk.get_or_insert(input);
        }
    }
    channels
}

/// The CPU temperature inputs: `k10temp`'s `Tdie` (else `Tctl`), `coretemp`'s package
/// sensors; one per socket.
#[derive(Debug, Clone)]
pub struct CpuSensor {
    inputs: Vec<PathBuf>,
}

impl CpuSensor {
    /// The hottest socket, in °C.
    pub fn read(&self) -> Option<f64> {
        self.inputs
            .iter()
            .filter_map(|p| number(p))
            .map(|millicelsius| millicelsius / 1000.0)
            .reduce(f64::max)
    }
}

/// Finds the CPU's temperature sensors among `root/sys/class/hwmon/*`.
pub fn cpu_sensor(root: &Path) -> Option<CpuSensor> {
    let mut inputs = Vec::new();
    for chip in sorted_entries(&root.join("sys/class/hwmon")) {
        let wanted: &[&str] = match text(&chip.join("name")).as_deref() {
            Some("k10temp") => &["Tdie", "Tctl"],
            Some("coretemp") => &["Package id"],
            _ => continue,
        };
        let labelled: Vec<(String, PathBuf)> = (1..=MAX_TEMP_CHANNELS)
            .filter_map(|n| {
                let label = text(&chip.join(format!("temp{n}_label")))?;
                Some((label, chip.join(format!("temp{n}_input"))))
            })
            .collect();
        // The first wanted label that is present wins; coretemp has one per package.
        if let Some(prefix) = wanted
            .iter()
            .find(|w| labelled.iter().any(|(l, _)| l.starts_with(**w)))
        {
            inputs.extend(
                labelled
                    .into_iter()
                    .filter(|(l, _)| l.starts_with(prefix))
                    .map(|(_, p)| p),
            );
        } else if chip.join("temp1_input").exists() {
            inputs.push(chip.join("temp1_input"));
        }
    }
    (!inputs.is_empty()).then_some(CpuSensor { inputs })
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths
}

fn text(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A decimal integer file, as hwmon writes every value.
fn number(path: &Path) -> Option<f64> {
    text(path)?.parse::<i64>().ok().map(|v| v as f64)
}

fn hex(text: &str) -> Option<u32> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))?;
    u32::from_str_radix(digits, 16).ok()
}
