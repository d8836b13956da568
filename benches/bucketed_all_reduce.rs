//! Data-parallel step time on CPU replicas with the gradient all-reduce after the backward
//! and with it split into buckets during the backward, side by side in alternating
//! rounds: two replicas of ResNet-20 at 32² over the host ring, each replica's backend
//! on its own thread (the machine's cores are shared between the replicas and the
//! communication threads).
//!
//! Run with `cargo bench --bench bucketed_all_reduce` (optionally `-- ROUNDS=N`).

use tinyperf::engine::layers::SoftmaxCrossEntropy;
use tinyperf::engine::model::resnet::{ResNet, ResNetConfig};
use tinyperf::engine::optim::LarsConfig;
use tinyperf::engine::parallel::{
    measure_data_parallel_throughput, DataParallel, HostRing, Replica,
};
use tinyperf::engine::train::DeviceOptimizer;
use tinyperf::engine::CpuBackend;

const REPLICAS: usize = 2;
const GLOBAL_BATCH: usize = 64;
const IMAGE: usize = 32;

fn group(bucket_bytes: Option<usize>) -> DataParallel<CpuBackend, ResNet<CpuBackend>> {
    let replicas = (0..REPLICAS)
        .map(|_| {
            let backend = CpuBackend::new();
            let mut model = ResNet::new(&backend, &ResNetConfig::resnet20(10)).unwrap();
            model.init_from_seed(&backend, 1).unwrap();
            Replica {
                backend,
                model,
                optimizer: DeviceOptimizer::new(LarsConfig::default()),
            }
        })
        .collect();
    let loss = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let mut dp =
        DataParallel::new(replicas, Box::new(HostRing::new(REPLICAS).unwrap()), loss).unwrap();
    dp.set_gradient_buckets(bucket_bytes);
    dp
}

/// Global batch and timed steps per round.
struct Size {
    batch: usize,
    steps: usize,
}

fn median_step_ms(dp: &mut DataParallel<CpuBackend, ResNet<CpuBackend>>, size: &Size) -> f64 {
    let report = measure_data_parallel_throughput(
        dp,
        size.batch,
        IMAGE,
        1,
        size.steps,
        0.1,
        &|| false,
        &mut |_, _, _| {},
    )
    .unwrap()
    .unwrap();
    report.median_step_s() * 1e3
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without
    // it, and then one short round only checks that every configuration steps.
    let measuring = std::env::args().any(|a| a == "--bench");
    let (rounds, size) = if measuring {
        let rounds = std::env::args()
            .find_map(|a| a.strip_prefix("ROUNDS=").and_then(|n| n.parse().ok()))
            .unwrap_or(3);
        (
            rounds,
            Size {
                batch: GLOBAL_BATCH,
                steps: 5,
            },
        )
    } else {
        (
            1,
            Size {
                batch: 2 * REPLICAS,
                steps: 1,
            },
        )
    };
    // ResNet-20 holds 1.1 MB of gradients: 256 KiB buckets give several per step.
    let configs: [(&str, Option<usize>); 3] = [
        ("one all-reduce after the backward", None),
        ("256 KiB buckets during the backward", Some(256 << 10)),
        ("64 KiB buckets during the backward", Some(64 << 10)),
    ];
    let mut groups: Vec<_> = configs.iter().map(|(_, b)| group(*b)).collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for _ in 0..rounds {
        for (i, dp) in groups.iter_mut().enumerate() {
            times[i].push(median_step_ms(dp, &size));
        }
    }
    println!(
        "ResNet-20, {REPLICAS} CPU replicas, global batch {} at {IMAGE}², host ring; median step per round:",
        size.batch
    );
    for ((name, _), t) in configs.iter().zip(&times) {
        let mut sorted = t.clone();
        sorted.sort_by(f64::total_cmp);
        let rounds: Vec<String> = t.iter().map(|ms| format!("{ms:.1}")).collect();
        println!(
            "  {name:<38} median {:>7.1} ms  rounds [{}]",
            sorted[sorted.len() / 2],
            rounds.join(", ")
        );
    }
}
