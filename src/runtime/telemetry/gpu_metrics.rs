//! amdgpu's binary `gpu_metrics` table (`/sys/bus/pci/devices/…/gpu_metrics`): what an
//! RDNA3 card has in place of NVML's clock-event reasons. A Navi 31 (RX 7900 XTX, SMU
//! 13.0.0) writes format 1, content 3 (`struct gpu_metrics_v1_3`, kgd_pp_interface.h),
//! whose ASIC-independent `indep_throttle_status` says what holds the clocks down.

use super::sample::ThrottleReason;

/// `gpu_metrics_v1_3`'s fields as the kernel lays the struct out (naturally aligned).
const V1_3_SIZE: usize = 120;
const OFFSET_TEMPERATURE_EDGE: usize = 4;
const OFFSET_TEMPERATURE_HOTSPOT: usize = 6;
const OFFSET_TEMPERATURE_MEM: usize = 8;
const OFFSET_AVERAGE_GFX_ACTIVITY: usize = 16;
const OFFSET_AVERAGE_SOCKET_POWER: usize = 22;
const OFFSET_CURRENT_GFXCLK: usize = 54;
const OFFSET_CURRENT_UCLK: usize = 58;
const OFFSET_PCIE_LINK_WIDTH: usize = 74;
const OFFSET_PCIE_LINK_SPEED: usize = 76;
const OFFSET_INDEP_THROTTLE_STATUS: usize = 112;

/// What tinyperf reads from one table.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuMetrics {
    /// The table's format revision (1).
    pub format_revision: u8,
    /// The table's content revision (3).
    pub content_revision: u8,
    /// The edge sensor, in °C.
    pub temperature_edge_c: Option<f64>,
    /// The hottest spot of the die, in °C.
    pub temperature_hotspot_c: Option<f64>,
    /// The memory, in °C.
    pub temperature_mem_c: Option<f64>,
    /// Average graphics engine activity, in percent.
    pub gfx_activity_percent: Option<f64>,
    /// Average socket power, in watts.
    pub socket_power_w: Option<f64>,
    /// Current graphics clock, in MHz.
    pub gfxclk_mhz: Option<f64>,
    /// Current memory clock, in MHz.
    pub uclk_mhz: Option<f64>,
    /// Lanes the PCIe link runs at.
    pub pcie_link_width: Option<u16>,
    /// GT/s (the table counts tenths).
    pub pcie_link_speed_gts: Option<f64>,
    /// The raw bits, and each set bit's name (`TEMP_HOTSPOT`, `PPT0`, …).
    pub indep_throttle_status: u64,
    /// The name of each set bit (`TEMP_HOTSPOT`, `PPT0`, …).
    pub throttle_bits: Vec<&'static str>,
}

/// Bits of `indep_throttle_status` (amdgpu_smu.h `SMU_THROTTLER_*_BIT`).
const THROTTLE_BITS: &[(u32, &str, ThrottleReason)] = &[
    (0, "PPT0", ThrottleReason::SwPowerCap),
    (1, "PPT1", ThrottleReason::SwPowerCap),
    (2, "PPT2", ThrottleReason::SwPowerCap),
    (3, "PPT3", ThrottleReason::SwPowerCap),
    (4, "SPL", ThrottleReason::SwPowerCap),
    (5, "FPPT", ThrottleReason::SwPowerCap),
    (6, "SPPT", ThrottleReason::SwPowerCap),
    (7, "SPPT_APU", ThrottleReason::SwPowerCap),
    (16, "TDC_GFX", ThrottleReason::HwSlowdown),
    (17, "TDC_SOC", ThrottleReason::HwSlowdown),
    (18, "TDC_MEM", ThrottleReason::HwSlowdown),
    (19, "TDC_VDD", ThrottleReason::HwSlowdown),
    (20, "TDC_CVIP", ThrottleReason::HwSlowdown),
    (21, "EDC_CPU", ThrottleReason::HwSlowdown),
    (22, "EDC_GFX", ThrottleReason::HwSlowdown),
    (23, "APCC", ThrottleReason::HwSlowdown),
    (32, "TEMP_GPU", ThrottleReason::HwThermal),
    (33, "TEMP_CORE", ThrottleReason::HwThermal),
    (34, "TEMP_MEM", ThrottleReason::HwThermal),
    (35, "TEMP_EDGE", ThrottleReason::HwThermal),
    (36, "TEMP_HOTSPOT", ThrottleReason::HwThermal),
    (37, "TEMP_SOC", ThrottleReason::HwThermal),
    (38, "TEMP_VR_GFX", ThrottleReason::HwThermal),
    (39, "TEMP_VR_SOC", ThrottleReason::HwThermal),
    (40, "TEMP_VR_MEM0", ThrottleReason::HwThermal),
    (41, "TEMP_VR_MEM1", ThrottleReason::HwThermal),
    (42, "TEMP_LIQUID0", ThrottleReason::HwThermal),
    (43, "TEMP_LIQUID1", ThrottleReason::HwThermal),
    (44, "VRHOT0", ThrottleReason::HwThermal),
    (45, "VRHOT1", ThrottleReason::HwThermal),
    (46, "PROCHOT_CPU", ThrottleReason::HwThermal),
    (47, "PROCHOT_GFX", ThrottleReason::HwThermal),
    (56, "PPM", ThrottleReason::HwSlowdown),
    (57, "FIT", ThrottleReason::HwSlowdown),
];

/// Why a table could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    /// Shorter than the four bytes of the header; holds the length.
    #[error("gpu_metrics is {0} bytes, shorter than its header")]
    Truncated(usize),
    /// Another format or content revision than 1.3; holds both.
    #[error("gpu_metrics format {0}.{1} is not one tinyperf reads (1.3, written by RDNA3)")]
    UnknownFormat(u8, u8),
    /// The header's size and the table's length differ.
    #[error("gpu_metrics says it is {stated} bytes but holds {actual}")]
    WrongSize {
        /// The size the header gives, in bytes.
        stated: usize,
        /// The table's length, in bytes.
        actual: usize,
    },
}

fn u16_at(data: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([data[offset], data[offset + 1]])
}

/// A u16 field, `None` where the firmware leaves it unset (all ones).
fn field(data: &[u8], offset: usize) -> Option<u16> {
    Some(u16_at(data, offset)).filter(|&v| v != u16::MAX)
}

/// The fields of one `gpu_metrics` table, or why it cannot be read.
pub fn parse(data: &[u8]) -> Result<GpuMetrics, MetricsError> {
    if data.len() < 4 {
        return Err(MetricsError::Truncated(data.len()));
    }
    let stated = u16_at(data, 0) as usize;
    let (format_revision, content_revision) = (data[2], data[3]);
    if (format_revision, content_revision) != (1, 3) {
        return Err(MetricsError::UnknownFormat(
            format_revision,
            content_revision,
        ));
    }
    if stated < V1_3_SIZE || data.len() < V1_3_SIZE {
        return Err(MetricsError::WrongSize {
            stated,
            actual: data.len(),
        });
    }
    let status = u64::from_le_bytes(
        data[OFFSET_INDEP_THROTTLE_STATUS..OFFSET_INDEP_THROTTLE_STATUS + 8]
            .try_into()
            .expect("eight bytes"),
    );
    let celsius = |offset| field(data, offset).map(f64::from);
    Ok(GpuMetrics {
        format_revision,
        content_revision,
        temperature_edge_c: celsius(OFFSET_TEMPERATURE_EDGE),
        temperature_hotspot_c: celsius(OFFSET_TEMPERATURE_HOTSPOT),
        temperature_mem_c: celsius(OFFSET_TEMPERATURE_MEM),
        gfx_activity_percent: celsius(OFFSET_AVERAGE_GFX_ACTIVITY),
        socket_power_w: celsius(OFFSET_AVERAGE_SOCKET_POWER),
        gfxclk_mhz: celsius(OFFSET_CURRENT_GFXCLK),
        uclk_mhz: celsius(OFFSET_CURRENT_UCLK),
        pcie_link_width: field(data, OFFSET_PCIE_LINK_WIDTH),
        pcie_link_speed_gts: field(data, OFFSET_PCIE_LINK_SPEED).map(|t| f64::from(t) / 10.0),
        indep_throttle_status: status,
        throttle_bits: THROTTLE_BITS
            .iter()
            .filter(|(bit, ..)| status & (1u64 << bit) != 0)
            .map(|(_, name, _)| *name)
            .collect(),
    })
}

impl GpuMetrics {
    /// The set bits as the reasons telemetry records for every vendor.
    pub fn throttle_reasons(&self) -> Vec<ThrottleReason> {
        let mut reasons = Vec::new();
        for (bit, _, reason) in THROTTLE_BITS {
            if self.indep_throttle_status & (1u64 << bit) != 0 && !reasons.contains(reason) {
                reasons.push(*reason);
            }
        }
        reasons
    }
}

#[cfg(test)]
pub(crate) fn v1_3_table(throttle: u64, hotspot_c: u16) -> Vec<u8> {
    let mut data = vec![0u8; V1_3_SIZE];
    data[0..2].copy_from_slice(&(V1_3_SIZE as u16).to_le_bytes());
    data[2] = 1;
    data[3] = 3;
    data[OFFSET_TEMPERATURE_EDGE..][..2].copy_from_slice(&61u16.to_le_bytes());
    data[OFFSET_TEMPERATURE_HOTSPOT..][..2].copy_from_slice(&hotspot_c.to_le_bytes());
    data[OFFSET_TEMPERATURE_MEM..][..2].copy_from_slice(&u16::MAX.to_le_bytes());
    data[OFFSET_PCIE_LINK_SPEED..][..2].copy_from_slice(&160u16.to_le_bytes());
    data[OFFSET_PCIE_LINK_WIDTH..][..2].copy_from_slice(&16u16.to_le_bytes());
    data[OFFSET_INDEP_THROTTLE_STATUS..][..8].copy_from_slice(&throttle.to_le_bytes());
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_temperatures_link_and_throttle_bits_of_a_v1_3_table() {
        let data = v1_3_table((1 << 36) | (1 << 0), 104);
        let metrics = parse(&data).unwrap();
        assert_eq!(metrics.temperature_edge_c, Some(61.0));
        assert_eq!(metrics.temperature_hotspot_c, Some(104.0));
        assert_eq!(metrics.temperature_mem_c, None, "all ones is unset");
        assert_eq!(metrics.pcie_link_speed_gts, Some(16.0));
        assert_eq!(metrics.pcie_link_width, Some(16));
        assert_eq!(metrics.throttle_bits, ["PPT0", "TEMP_HOTSPOT"]);
        assert_eq!(
            metrics.throttle_reasons(),
            [ThrottleReason::SwPowerCap, ThrottleReason::HwThermal]
        );
    }

    #[test]
    fn other_formats_and_short_tables_are_refused_with_why() {
        let mut data = v1_3_table(0, 50);
        data[3] = 4;
        assert_eq!(parse(&data), Err(MetricsError::UnknownFormat(1, 4)));
        assert_eq!(parse(&[1, 2]), Err(MetricsError::Truncated(2)));
        let short = &v1_3_table(0, 50)[..100];
        assert!(matches!(parse(short), Err(MetricsError::WrongSize { .. })));
    }
}
