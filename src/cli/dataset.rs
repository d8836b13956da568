//! `tinyperf dataset`: generate the synthetic dataset, check a dataset, measure the loader.

use anyhow::Context;
use serde::Serialize;

use super::args::{DatasetBenchArgs, DatasetCheckArgs, DatasetCommand, SynthArgs};
use super::UsageError;
use crate::engine::data::bench::{self, LoaderBenchOptions};
use crate::engine::data::{decode_jpeg, write_synth_dataset, DataError, Dataset, SynthSpec};

/// `tinyperf dataset synth|check|bench`: runs the subcommand and returns its exit
/// status (0, or 1 when `check` found images that do not decode); configuration
/// mistakes are usage errors, I/O failures plain errors.
pub fn main(command: &DatasetCommand) -> anyhow::Result<i32> {
    match command {
        DatasetCommand::Synth(args) => synth(args),
        DatasetCommand::Check(args) => check(args),
        DatasetCommand::Bench(args) => bench_loader(args),
    }
}

/// Configuration mistakes exit with the usage status; I/O failures are plain errors.
fn classify(e: DataError) -> anyhow::Error {
    match e {
        DataError::Io { .. } | DataError::Encode { .. } | DataError::Thread(_) => e.into(),
        other => UsageError(other.to_string()).into(),
    }
}

fn synth(args: &SynthArgs) -> anyhow::Result<i32> {
    let spec = SynthSpec {
        classes: args.classes,
        per_class: args.per_class,
        val_per_class: args.val_per_class,
        size: args.size,
        seed: args.seed,
        quality: args.quality,
    };
    let summary = write_synth_dataset(&args.dir, &spec).map_err(classify)?;
    println!(
        "wrote {} train and {} val images ({} classes, {}x{} px, {:.1} MiB) to {}",
        summary.train_images,
        summary.val_images,
        spec.classes,
        spec.size,
        spec.size,
        summary.bytes as f64 / (1024.0 * 1024.0),
        summary.root.display()
    );
    Ok(0)
}

#[derive(Debug, Serialize)]
struct CheckReport {
    root: String,
    classes: usize,
    train_images: usize,
    val_images: usize,
    decoded: bool,
    unreadable: Vec<Unreadable>,
}

#[derive(Debug, Serialize)]
struct Unreadable {
    path: String,
    error: String,
}

fn check(args: &DatasetCheckArgs) -> anyhow::Result<i32> {
    let dataset = Dataset::open(&args.dir).map_err(classify)?;
    let mut unreadable = Vec::new();
    if !args.no_decode {
        for sample in dataset.train.samples.iter().chain(&dataset.val.samples) {
            let result = std::fs::read(&sample.path)
                .map_err(|e| e.to_string())
                .and_then(|b| decode_jpeg(&b).map_err(|e| e.to_string()));
            if let Err(error) = result {
                unreadable.push(Unreadable {
                    path: sample.path.display().to_string(),
                    error,
                });
            }
        }
    }
    let report = CheckReport {
        root: dataset.root.display().to_string(),
        classes: dataset.num_classes(),
        train_images: dataset.train.len(),
        val_images: dataset.val.len(),
        decoded: !args.no_decode,
        unreadable,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{}: {} classes, {} train and {} val images",
            report.root, report.classes, report.train_images, report.val_images
        );
        for u in &report.unreadable {
            println!("unreadable: {}: {}", u.path, u.error);
        }
        if report.decoded {
            println!("{} unreadable image(s)", report.unreadable.len());
        }
    }
    Ok(i32::from(!report.unreadable.is_empty()))
}

fn bench_loader(args: &DatasetBenchArgs) -> anyhow::Result<i32> {
    let defaults = LoaderBenchOptions::default();
    let options = LoaderBenchOptions {
        threads: args.threads.unwrap_or(defaults.threads),
        image_size: args.image_size,
        batch_size: args.batch,
        max_images: args.images,
        seed: defaults.seed,
    };
    let report = bench::run(&args.data, &options)
        .map_err(classify)
        .with_context(|| format!("loader benchmark on {}", args.data.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{} images ({:.0} px avg) to {}x{}: {:.1} img/s per core (decode alone {:.1}), \
             loader on {} threads {:.1} img/s",
            report.images,
            report.mean_source_pixels,
            report.image_size,
            report.image_size,
            report.img_per_s_per_core,
            report.decode_img_per_s_per_core,
            report.threads,
            report.loader_img_per_s
        );
    }
    Ok(0)
}
