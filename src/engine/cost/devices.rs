//! Spec-sheet peaks of the GPUs tinyperf trains on, and the time floors they put on a step.
//!
//! Sources (dense figures, no sparsity):
//! - H200 SXM: 4.8 TB/s HBM3e, 989 TFLOPS FP16/BF16 tensor (NVIDIA H200 Tensor Core GPU
//!   datasheet, which lists 1,979 "with sparsity").
//! - GeForce RTX 4090: 1,008 GB/s GDDR6X, 165.2 TFLOPS FP16 tensor with FP32 accumulate
//!   (NVIDIA Ada Lovelace architecture whitepaper, appendix table; 330.3 is the FP16
//!   accumulate or sparse figure).
//! - Radeon RX 7900 XTX: 960 GB/s GDDR6, 122.8 TFLOPS FP16 (AMD's product specifications:
//!   96 CUs × 2.5 GHz × 512 FP16 FLOPs per CU per clock through WMMA).
//!
//! The f32 step on tensor cores (TF32) is given the same peak halved; tinyperf's f32 path
//! on the 7900 XTX has no matrix cores and gets the vector f32 peak.

use serde::Serialize;

use crate::engine::Precision;

/// The spec-sheet peaks of one GPU model (dense, no sparsity).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuPeak {
    /// The model's name as reports print it (`RTX 4090`).
    pub name: &'static str,
    /// Peak device-memory bandwidth, in bytes per second.
    pub memory_bytes_per_s: f64,
    /// Peak FP16/BF16 tensor throughput with f32 accumulate, in FLOP per second.
    pub fp16_flops_per_s: f64,
    /// TF32 tensor cores where the part has them, else vector f32.
    pub f32_flops_per_s: f64,
}

impl GpuPeak {
    /// The FLOP-per-second peak a step in `precision` runs against: the FP16 peak for
    /// 16-bit activations, else the f32 one.
    pub fn flops_per_s(&self, precision: Precision) -> f64 {
        if precision.is_reduced() {
            self.fp16_flops_per_s
        } else {
            self.f32_flops_per_s
        }
    }
}

/// NVIDIA H200 SXM.
pub const H200: GpuPeak = GpuPeak {
    name: "H200 SXM",
    memory_bytes_per_s: 4.8e12,
    fp16_flops_per_s: 989e12,
    f32_flops_per_s: 494e12,
};

/// NVIDIA GeForce RTX 4090, the tinybox green's GPU.
pub const RTX_4090: GpuPeak = GpuPeak {
    name: "RTX 4090",
    memory_bytes_per_s: 1.008e12,
    fp16_flops_per_s: 165.2e12,
    f32_flops_per_s: 82.6e12,
};

/// AMD Radeon RX 7900 XTX, the tinybox red's GPU.
pub const RX_7900_XTX: GpuPeak = GpuPeak {
    name: "RX 7900 XTX",
    memory_bytes_per_s: 0.96e12,
    fp16_flops_per_s: 122.8e12,
    f32_flops_per_s: 61.4e12,
};

/// Every GPU the floors are reported for, in report order.
pub const GPUS: [GpuPeak; 3] = [H200, RTX_4090, RX_7900_XTX];
