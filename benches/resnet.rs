//! ResNet training-step throughput on the CPU backend: forward, label-smoothed
//! cross-entropy, backward and a plain SGD update on a fixed synthetic batch. Prints one
//! JSON object: img/s from the median step time, every step time, and peak RSS.
//!
//! `cargo bench --bench resnet -- --model resnet50 --batch 32 --image-size 224 --steps 5
//! --warmup 2 --threads 2` (these are the defaults for resnet50; resnet20 defaults to
//! batch 128 at 32×32). `scripts/bench-resnet.sh` runs it beside PyTorch.

use tinyperf::engine::model::resnet::throughput::{
    measure_training_steps, peak_rss_bytes, ThroughputConfig,
};
use tinyperf::engine::model::resnet::ResNetConfig;
use tinyperf::engine::CpuBackend;

struct Args {
    model: String,
    batch: usize,
    image_size: usize,
    steps: usize,
    warmup: usize,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without
    // it, and then one tiny step checks that the bench still works.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(Args {
            model: "resnet20".into(),
            batch: 2,
            image_size: 8,
            steps: 1,
            warmup: 0,
            threads: 1,
        });
    }
    let mut args = Args {
        model: "resnet50".into(),
        batch: 0,
        image_size: 0,
        steps: 5,
        warmup: 2,
        threads: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<String, String> {
            it.next().ok_or(format!("{name} needs a value"))
        };
        let number = |s: String| s.parse::<usize>().map_err(|e| format!("{s}: {e}"));
        match flag.as_str() {
            "--model" => args.model = value("--model")?,
            "--batch" => args.batch = number(value("--batch")?)?,
            "--image-size" => args.image_size = number(value("--image-size")?)?,
            "--steps" => args.steps = number(value("--steps")?)?,
            "--warmup" => args.warmup = number(value("--warmup")?)?,
            "--threads" => args.threads = number(value("--threads")?)?,
            // cargo bench passes --bench to every bench binary.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let (batch, size) = match args.model.as_str() {
        "resnet50" => (32, 224),
        "resnet20" => (128, 32),
        other => return Err(format!("unknown model {other} (resnet50 or resnet20)")),
    };
    if args.batch == 0 {
        args.batch = batch;
    }
    if args.image_size == 0 {
        args.image_size = size;
    }
    if args.steps == 0 || args.threads == 0 {
        return Err("steps and threads must be at least 1".into());
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench resnet: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build_global()
    {
        eprintln!("bench resnet: thread pool: {e}");
        std::process::exit(1);
    }
    let model = if args.model == "resnet50" {
        ResNetConfig::resnet50(1000)
    } else {
        ResNetConfig::resnet20(10)
    };
    let config = ThroughputConfig {
        model,
        batch: args.batch,
        image_size: args.image_size,
        steps: args.steps,
        warmup: args.warmup,
        seed: 1,
    };
    let report = match measure_training_steps(&CpuBackend::new(), &config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench resnet: {e}");
            std::process::exit(1);
        }
    };
    let json = serde_json::json!({
        "engine": "tinyperf",
        "model": args.model,
        "batch": args.batch,
        "image_size": args.image_size,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_ms_median": report.median_step_seconds * 1e3,
        "step_ms_all": report.step_seconds.iter().map(|t| t * 1e3).collect::<Vec<_>>(),
        "img_per_s": report.images_per_second,
        "peak_rss_bytes": peak_rss_bytes().unwrap_or(0),
        "last_loss": report.last_loss,
    });
    println!("{json}");
}
