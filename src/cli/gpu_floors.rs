//! `tinyperf gpu floors`: what one ResNet-50 training step must cost, counted from the
//! model's layers, beside what today's kernel sequence moves, and the time floors on the
//! GPUs tinyperf targets.

use super::args::GpuFloorsArgs;
use super::UsageError;
use crate::engine::cost::resnet50_step;
use crate::engine::Precision;

const GB: f64 = 1e9;

pub fn floors(args: &GpuFloorsArgs) -> anyhow::Result<i32> {
    let precision: Precision = args
        .precision
        .parse()
        .map_err(|e| UsageError(format!("--precision: {e}")))?;
    if args.batch == 0 || !(32..=1024).contains(&args.size) {
        return Err(UsageError("--batch must be positive and --size in 32..=1024".into()).into());
    }
    let c = resnet50_step(args.batch, args.size, precision);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
        return Ok(0);
    }
    println!(
        "ResNet-50 v1.5 training step: batch {}, {}², activations in {}",
        c.batch,
        c.image_size,
        precision.name()
    );
    println!(
        "parameters {:.3} M; forward {:.3} GMACs per image; step {:.1} TFLOP",
        c.parameters as f64 / 1e6,
        c.forward_macs_per_image as f64 / 1e9,
        c.flops as f64 / 1e12
    );
    println!(
        "device-memory bytes per step: floor {:.1} GB, today's kernels {:.1} GB ({:.2}x)\n",
        c.floor_bytes as f64 / GB,
        c.today_bytes as f64 / GB,
        c.today_bytes as f64 / c.floor_bytes as f64
    );
    println!(
        "{:<16} {:>8} {:>10} {:>10} {:>10}",
        "group", "kernels", "TFLOP", "today GB", "floor GB"
    );
    for k in &c.categories {
        println!(
            "{:<16} {:>8} {:>10.3} {:>10.2} {:>10.2}",
            k.label,
            k.today_kernels,
            k.flops as f64 / 1e12,
            k.today_bytes as f64 / GB,
            k.floor_bytes as f64 / GB
        );
    }
    println!(
        "\n{:<12} {:>10} {:>10} {:>12} {:>12} {:>14}",
        "GPU", "bytes ms", "FLOP ms", "roofline ms", "img/s ceil", "today bytes ms"
    );
    for d in &c.devices {
        println!(
            "{:<12} {:>10.1} {:>10.1} {:>12.1} {:>12.0} {:>14.1}",
            d.gpu.name,
            d.memory_s * 1e3,
            d.compute_s * 1e3,
            d.roofline_s * 1e3,
            d.img_per_s_ceiling,
            d.today_memory_s * 1e3
        );
    }
    Ok(0)
}
