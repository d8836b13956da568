//! ResNet training-step throughput on the CPU backend: forward, label-smoothed
//! cross-entropy, backward and a plain SGD update on a fixed synthetic batch. Prints one
//! JSON object: img/s from the median step time, every step time, and peak RSS.
//!
//! `cargo bench --bench resnet -- --model resnet50 --batch 32 --image-size 224 --steps 5
//! --warmup 2 --threads 2` (these are the defaults for resnet50; resnet20 defaults to
//! batch 128 at 32×32). `scripts/bench-resnet.sh` runs it beside PyTorch.

use std::time::Instant;

use tinyperf::engine::init::standard_normal;
use tinyperf::engine::layers::SoftmaxCrossEntropy;
use tinyperf::engine::model::resnet::{ResNet, ResNetConfig};
use tinyperf::engine::model::Model;
use tinyperf::engine::{Backend, CpuBackend, Tensor};

struct Args {
    model: String,
    batch: usize,
    image_size: usize,
    steps: usize,
    warmup: usize,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
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

/// VmHWM: the peak resident set of this process, in bytes.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
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
    let (config, classes) = if args.model == "resnet50" {
        (ResNetConfig::resnet50(1000), 1000)
    } else {
        (ResNetConfig::resnet20(10), 10)
    };
    let b = &CpuBackend::new();
    let mut model = ResNet::new(b, &config).expect("model");
    model.init_from_seed(b, 1).expect("init");
    let shape = [args.batch, args.image_size, args.image_size, 3];
    let images = Tensor::from_host(b, &shape, &standard_normal(2, 0, shape.iter().product()))
        .expect("images");
    let labels: Vec<f32> = (0..args.batch).map(|i| (i * 7 % classes) as f32).collect();
    let labels = Tensor::from_host(b, &[args.batch], &labels).expect("labels");
    let xent = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let mut times = Vec::with_capacity(args.steps);
    let mut last_loss = 0.0;
    for step in 0..args.warmup + args.steps {
        let t0 = Instant::now();
        let logits = model.forward(b, &images, true).expect("forward");
        let out = xent.forward(b, &logits, &labels).expect("loss");
        let dlogits = xent.backward(b, &logits, &labels).expect("dlogits");
        drop(logits);
        model.backward(b, &dlogits).expect("backward");
        for p in model.parameters() {
            b.axpy(-0.01, p.param.grad, p.param.value).expect("sgd");
        }
        last_loss = out.loss.to_host(b).expect("loss")[0];
        let dt = t0.elapsed().as_secs_f64();
        if step >= args.warmup {
            times.push(dt);
        }
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let json = serde_json::json!({
        "engine": "tinyperf",
        "model": args.model,
        "batch": args.batch,
        "image_size": args.image_size,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_ms_median": median * 1e3,
        "step_ms_all": times.iter().map(|t| t * 1e3).collect::<Vec<_>>(),
        "img_per_s": args.batch as f64 / median,
        "peak_rss_bytes": peak_rss_bytes(),
        "last_loss": last_loss,
    });
    println!("{json}");
}
