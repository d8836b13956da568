//! What the GPU stages share: opening every GPU of the backend a run asked for, the
//! published peaks they are judged against, and the inventory's view of their links.

use serde_json::{Map, Value};

use super::options::{self, BACKEND};
use crate::engine::backend::gpu::driver::GpuDriver;
use crate::engine::backend::gpu::GpuBackend;
use crate::engine::backend::select::{self, BackendKind, GpuRuntime};
use crate::engine::Precision;

/// The GPUs a run uses, or why it runs on the CPU.
pub enum GpuChoice {
    /// The run uses the CPU: it asked for it, or no GPU runtime has a device.
    Cpu {
        /// Why, in words a finding can carry.
        reason: String,
    },
    /// Every device of one GPU runtime, opened.
    Gpus {
        /// The runtime the devices were opened with (CUDA or HIP).
        runtime: GpuRuntime,
        /// One backend per device, in the runtime's device order.
        backends: Vec<GpuBackend>,
    },
}

impl GpuChoice {
    /// The same choice with every GPU backend storing activations in `precision`.
    pub fn with_precision(self, precision: Precision) -> GpuChoice {
        match self {
            GpuChoice::Gpus { runtime, backends } => GpuChoice::Gpus {
                runtime,
                backends: backends
                    .into_iter()
                    .map(|b| b.with_precision(precision))
                    .collect(),
            },
            cpu => cpu,
        }
    }
}

/// The `backend` option (`auto` when absent).
pub fn backend_kind(options: &Map<String, Value>) -> BackendKind {
    options::text(options, BACKEND)
        .and_then(|name| name.parse().ok())
        .unwrap_or_default()
}

/// Why no GPU runtime could be used, runtime by runtime.
pub fn no_gpu_reason() -> String {
    let why = |r: GpuRuntime| match r.device_count() {
        Ok(n) => format!("{n} device(s)"),
        Err(e) => e.to_string(),
    };
    format!(
        "no GPU runtime with a device (CUDA: {}; HIP: {})",
        why(GpuRuntime::Cuda),
        why(GpuRuntime::Hip)
    )
}

/// Opens every device of the runtime the `backend` option resolves to.
pub fn open(options: &Map<String, Value>) -> Result<GpuChoice, String> {
    let kind = backend_kind(options);
    match select::resolve(kind) {
        Ok(None) if kind == BackendKind::Cpu => Ok(GpuChoice::Cpu {
            reason: "the run asked for the CPU backend".into(),
        }),
        Ok(None) => Ok(GpuChoice::Cpu {
            reason: no_gpu_reason(),
        }),
        Ok(Some((runtime, _))) => select::open_all(runtime)
            .map(|backends| GpuChoice::Gpus { runtime, backends })
            .map_err(|e| format!("cannot open the {} devices: {e}", runtime.name())),
        Err(e) => Err(format!("backend {kind}: {e}")),
    }
}

/// The GPUs a GPU stage runs on, or the verdict it ends with instead: skip, saying why,
/// when the run is on the CPU; error when the GPUs cannot be opened.
pub fn open_for_stage(
    options: &Map<String, Value>,
) -> Result<Vec<GpuBackend>, (crate::record::Verdict, String)> {
    match open(options) {
        Ok(GpuChoice::Gpus { backends, .. }) => Ok(backends),
        Ok(GpuChoice::Cpu { reason }) => Err((crate::record::Verdict::Skip, reason)),
        Err(e) => Err((crate::record::Verdict::Error, e)),
    }
}

/// The GPUs a stage runs on, or the stage closed as it must be without them: skipped
/// on a machine without a GPU runtime, in error when opening one failed. A `?` for
/// stages, which end with their report rather than an error.
macro_rules! open_gpus_or_finish {
    ($ctx:expr, $report:expr) => {
        match $crate::suite::gpu_devices::open_for_stage($ctx.options()) {
            Ok(backends) => backends,
            Err((verdict, why)) => return $report.finish_as(verdict, Some(why)),
        }
    };
}
pub(crate) use open_gpus_or_finish;

/// Each backend's driver, for the checks that drive every GPU at once.
pub fn drivers_of(backends: &[GpuBackend]) -> Vec<&dyn GpuDriver> {
    backends.iter().map(|b| b.driver().as_ref()).collect()
}

/// Published dense matmul peaks of a GPU model, TFLOP/s, with f32 accumulation: fp16
/// tensor/matrix cores, and the f32 path tinyperf's GEMMs take on it (TF32 tensor cores
/// on NVIDIA, plain f32 on AMD).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPeak {
    /// A substring of the name the runtime reports.
    pub name: &'static str,
    /// Dense fp16 matmul peak with f32 accumulation on the tensor/matrix cores, TFLOP/s.
    pub fp16_tflops: f64,
    /// Dense f32 matmul peak on the path tinyperf's GEMMs take (TF32 on NVIDIA, plain f32
    /// on AMD), TFLOP/s.
    pub f32_tflops: f64,
}

/// The published peaks of the GPU models tinyperf knows, matched by name substring.
pub const MODEL_PEAKS: &[ModelPeak] = &[
    ModelPeak {
        name: "RTX 4090",
        fp16_tflops: 165.2,
        f32_tflops: 82.6,
    },
    ModelPeak {
        name: "RTX 5090",
        fp16_tflops: 209.5,
        f32_tflops: 104.8,
    },
    ModelPeak {
        name: "7900 XTX",
        fp16_tflops: 122.8,
        f32_tflops: 61.4,
    },
    ModelPeak {
        name: "H200",
        fp16_tflops: 989.4,
        f32_tflops: 494.7,
    },
    ModelPeak {
        name: "H100",
        fp16_tflops: 989.4,
        f32_tflops: 494.7,
    },
];

/// The published peaks of the GPU model whose runtime name is `device_name`, `None` for a
/// model not in [`MODEL_PEAKS`].
pub fn model_peak(device_name: &str) -> Option<&'static ModelPeak> {
    MODEL_PEAKS.iter().find(|p| device_name.contains(p.name))
}

/// The slowest link on a GPU's path to the root port, from the run's inventory:
/// (GT/s, lanes).
pub fn path_link(hardware: Option<&Value>, pci_address: &str) -> Option<(f64, u32)> {
    let gpu = hardware?
        .get("gpus")?
        .as_array()?
        .iter()
        .find(|g| g.get("address").and_then(Value::as_str) == Some(pci_address))?;
    let link = gpu.get("path_link")?;
    let speed = link.get("speed_gts")?.as_f64()?;
    let width = link.get("width")?.as_u64()? as u32;
    Some((speed, width))
}

/// Share of a PCIe link's raw rate that bulk copies reach (TLP headers, flow control):
/// 26 GB/s of a 16 GT/s ×16 link's 31.5.
pub const PCIE_EFFICIENCY: f64 = 0.83;

/// Usable one-way bandwidth of a PCIe link, GB/s.
pub fn usable_link_gbps(speed_gts: f64, width: u32) -> f64 {
    // 8b/10b up to 5 GT/s, 128b/130b from 8 GT/s.
    let encoding = if speed_gts <= 5.0 { 0.8 } else { 128.0 / 130.0 };
    speed_gts * width as f64 * encoding / 8.0 * PCIE_EFFICIENCY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_are_found_by_the_names_runtimes_report() {
        assert_eq!(
            model_peak("NVIDIA GeForce RTX 4090").unwrap().fp16_tflops,
            165.2
        );
        assert_eq!(
            model_peak("AMD Radeon RX 7900 XTX").unwrap().f32_tflops,
            61.4
        );
        assert_eq!(model_peak("NVIDIA H200").unwrap().fp16_tflops, 989.4);
        assert!(model_peak("Tesla K80").is_none());
    }

    #[test]
    fn usable_bandwidth_matches_the_factory_figure_for_gen4_x16() {
        let gen4 = usable_link_gbps(16.0, 16);
        assert!((gen4 - 26.1).abs() < 0.2, "{gen4}");
        let gen5 = usable_link_gbps(32.0, 16);
        assert!((gen5 - 2.0 * gen4).abs() < 1e-9);
        let gen2 = usable_link_gbps(5.0, 16);
        assert!((gen2 - 5.0 * 16.0 * 0.8 / 8.0 * PCIE_EFFICIENCY).abs() < 1e-9);
    }

    #[test]
    fn links_come_from_the_inventory_by_address() {
        let hw = serde_json::json!({"gpus": [
            {"address": "0000:c3:00.0", "path_link": {"speed_gts": 16.0, "width": 16}},
            {"address": "0000:83:00.0", "path_link": {"speed_gts": 8.0, "width": 8}}
        ]});
        assert_eq!(path_link(Some(&hw), "0000:83:00.0"), Some((8.0, 8)));
        assert_eq!(path_link(Some(&hw), "0000:00:01.0"), None);
        assert_eq!(path_link(None, "0000:83:00.0"), None);
    }

    #[test]
    fn the_backend_option_defaults_to_auto() {
        let mut options = Map::new();
        assert_eq!(backend_kind(&options), BackendKind::Auto);
        options.insert("backend".into(), "cpu".into());
        assert_eq!(backend_kind(&options), BackendKind::Cpu);
        match open(&options).unwrap() {
            GpuChoice::Cpu { reason } => assert!(reason.contains("CPU backend")),
            GpuChoice::Gpus { .. } => panic!("cpu asked for"),
        }
    }
}
