//! What a training step must cost: FLOPs, the fewest bytes it must move through device
//! memory, the bytes today's kernel sequence moves, and the time floors those put on a
//! step on each GPU tinyperf targets. Counted by walking the network's layer shapes.

pub mod devices;
pub mod network;
pub mod schedule;

use serde::Serialize;

pub use devices::{GpuPeak, GPUS};
pub use network::NetworkShape;
pub use schedule::{Category, Kernel};

use crate::engine::model::resnet::ResNetConfig;
use crate::engine::Precision;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoryCost {
    pub category: Category,
    pub label: &'static str,
    pub flops: u64,
    /// Kernels today's sequence launches in this group.
    pub today_kernels: usize,
    pub today_bytes: u64,
    pub floor_bytes: u64,
}

/// A step's floors on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceFloor {
    pub gpu: GpuPeak,
    /// The floor's bytes at full memory bandwidth.
    pub memory_s: f64,
    /// The step's FLOPs at the tensor-core peak.
    pub compute_s: f64,
    /// Every kernel of the fused schedule at its own roofline (the larger of its memory
    /// and compute time), one after another: no step can be faster.
    pub roofline_s: f64,
    pub img_per_s_ceiling: f64,
    /// Today's bytes at full bandwidth: what the unfused sequence costs even with perfect kernels.
    pub today_memory_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCosts {
    pub batch: usize,
    pub image_size: usize,
    pub precision: Precision,
    pub parameters: u64,
    pub forward_macs_per_image: u64,
    /// Forward, data gradient and weight gradient of every conv and the classifier, and
    /// the elementwise work, for the whole batch.
    pub flops: u64,
    pub today_bytes: u64,
    pub floor_bytes: u64,
    pub categories: Vec<CategoryCost>,
    pub devices: Vec<DeviceFloor>,
    #[serde(skip)]
    pub today: Vec<Kernel>,
    #[serde(skip)]
    pub floor: Vec<Kernel>,
}

/// ResNet-50 v1.5 (1000 classes), as the MLPerf benchmark trains it.
pub fn resnet50_step(batch: usize, image_size: usize, precision: Precision) -> StepCosts {
    let net = NetworkShape::new(&ResNetConfig::resnet50(1000), image_size);
    step_costs(&net, batch, precision)
}

pub fn step_costs(net: &NetworkShape, batch: usize, precision: Precision) -> StepCosts {
    let today = schedule::today(net, batch, precision);
    let floor = schedule::floor(net, batch, precision);
    let sum = |ks: &[Kernel], f: fn(&Kernel) -> u64| ks.iter().map(f).sum::<u64>();
    let categories = Category::ALL
        .iter()
        .map(|&category| {
            let of = |ks: &[Kernel]| {
                ks.iter()
                    .filter(|k| k.category == category)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            let (t, f) = (of(&today), of(&floor));
            CategoryCost {
                category,
                label: category.label(),
                flops: sum(&t, |k| k.flops),
                today_kernels: t.len(),
                today_bytes: sum(&t, Kernel::bytes),
                floor_bytes: sum(&f, Kernel::bytes),
            }
        })
        .collect();
    let flops = sum(&today, |k| k.flops);
    let today_bytes = sum(&today, Kernel::bytes);
    let floor_bytes = sum(&floor, Kernel::bytes);
    let devices = GPUS
        .iter()
        .map(|gpu| {
            let peak = gpu.flops_per_s(precision);
            let roofline_s: f64 = floor
                .iter()
                .map(|k| (k.bytes() as f64 / gpu.memory_bytes_per_s).max(k.flops as f64 / peak))
                .sum();
            DeviceFloor {
                gpu: gpu.clone(),
                memory_s: floor_bytes as f64 / gpu.memory_bytes_per_s,
                compute_s: flops as f64 / peak,
                roofline_s,
                img_per_s_ceiling: batch as f64 / roofline_s,
                today_memory_s: today_bytes as f64 / gpu.memory_bytes_per_s,
            }
        })
        .collect();
    StepCosts {
        batch,
        image_size: net.image_side,
        precision,
        parameters: net.parameter_count(),
        forward_macs_per_image: net.forward_macs(),
        flops,
        today_bytes,
        floor_bytes,
        categories,
        devices,
        today,
        floor,
    }
}

#[cfg(test)]
mod tests;
