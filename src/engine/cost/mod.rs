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

/// One kernel group's share of a step: the rows of `tinyperf gpu floors`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoryCost {
    /// The group.
    pub category: Category,
    /// The group's name as the report prints it ([`Category::label`]).
    pub label: &'static str,
    /// Floating-point operations of the group's kernels in today's sequence, for the whole
    /// batch.
    pub flops: u64,
    /// Kernels today's sequence launches in this group.
    pub today_kernels: usize,
    /// Device-memory bytes (read plus written) today's kernels of this group move.
    pub today_bytes: u64,
    /// Device-memory bytes (read plus written) the fused floor's kernels of this group
    /// move.
    pub floor_bytes: u64,
}

/// A step's floors on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceFloor {
    /// The GPU and its spec-sheet peaks.
    pub gpu: GpuPeak,
    /// The floor's bytes at full memory bandwidth.
    pub memory_s: f64,
    /// The step's FLOPs at the tensor-core peak.
    pub compute_s: f64,
    /// Every kernel of the fused schedule at its own roofline (the larger of its memory
    /// and compute time), one after another: no step can be faster.
    pub roofline_s: f64,
    /// Images per second at the roofline time: the batch over `roofline_s`, which no
    /// implementation can beat on this GPU.
    pub img_per_s_ceiling: f64,
    /// Today's bytes at full bandwidth: what the unfused sequence costs even with perfect kernels.
    pub today_memory_s: f64,
}

/// What one training step costs, overall, per kernel group and as time floors on each GPU
/// in [`GPUS`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCosts {
    /// Images in the step.
    pub batch: usize,
    /// The side of the square input images, in pixels.
    pub image_size: usize,
    /// How activations are stored; it sets their bytes and which FLOP peak applies.
    pub precision: Precision,
    /// Learned parameters of the network ([`NetworkShape::parameter_count`]).
    pub parameters: u64,
    /// Forward multiply-accumulates per image ([`NetworkShape::forward_macs`]).
    pub forward_macs_per_image: u64,
    /// Forward, data gradient and weight gradient of every conv and the classifier, and
    /// the elementwise work, for the whole batch.
    pub flops: u64,
    /// Device-memory bytes (read plus written) today's kernel sequence moves in the step.
    pub today_bytes: u64,
    /// The fewest device-memory bytes a fused implementation of the step must move.
    pub floor_bytes: u64,
    /// The same totals split by kernel group, one entry per [`Category::ALL`], in that
    /// order.
    pub categories: Vec<CategoryCost>,
    /// The step's floors on each GPU of [`GPUS`], in that order.
    pub devices: Vec<DeviceFloor>,
    /// Today's kernels one by one ([`schedule::today`]); not serialized.
    #[serde(skip)]
    pub today: Vec<Kernel>,
    /// The fused floor's kernels one by one ([`schedule::floor`]); not serialized.
    #[serde(skip)]
    pub floor: Vec<Kernel>,
}

/// ResNet-50 v1.5 (1000 classes), as the MLPerf benchmark trains it.
pub fn resnet50_step(batch: usize, image_size: usize, precision: Precision) -> StepCosts {
    let net = NetworkShape::new(&ResNetConfig::resnet50(1000), image_size);
    step_costs(&net, batch, precision)
}

/// The costs of one training step of `net` over `batch` images with activations stored in
/// `precision`: both kernel schedules, their totals by group and the floors on every GPU
/// in [`GPUS`].
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
