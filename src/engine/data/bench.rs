//! Loader throughput: decode + random resized crop + flip on one core, and the full
//! multi-threaded loader, both over the train split of a dataset.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::augment::TrainTransform;
use super::dataset::Dataset;
use super::decode::decode_jpeg;
use super::error::DataError;
use super::loader::{Loader, LoaderConfig};
use super::rng::SampleRng;

/// What [`run`] measures and on how much.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderBenchOptions {
    /// Worker threads of the full-loader measurement.
    pub threads: usize,
    /// Output side of the crop in pixels.
    pub image_size: usize,
    /// Images per batch of the full-loader measurement.
    pub batch_size: usize,
    /// Use at most this many train images.
    pub max_images: usize,
    /// Seeds the crops and flips.
    pub seed: u64,
}

impl Default for LoaderBenchOptions {
    fn default() -> Self {
        LoaderBenchOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            image_size: 224,
            batch_size: 64,
            max_images: 2000,
            seed: 0,
        }
    }
}

/// Images per second of each stage of the data pipeline, as [`run`] measures them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoaderBenchReport {
    /// Train images measured: an even spread over the classes, at most `max_images`.
    pub images: usize,
    /// Output side of the crop in pixels.
    pub image_size: usize,
    /// Mean source image size in pixels.
    pub mean_source_pixels: f64,
    /// Single thread: read + decode of the crop's part + random resized crop + flip +
    /// mean subtraction, as the training loader does it.
    pub img_per_s_per_core: f64,
    /// Decoding whole images alone (as evaluation does), single thread.
    pub decode_img_per_s_per_core: f64,
    /// Worker threads of the full-loader measurement.
    pub threads: usize,
    /// Images per batch of the full-loader measurement.
    pub batch_size: usize,
    /// The whole loader on `threads` threads, one epoch, batches assembled.
    pub loader_img_per_s: f64,
    /// Distinct files the loader could not read (and replaced).
    pub unreadable_files: usize,
}

/// Measure the pipeline on the first `max_images` train images of the dataset at `root`.
pub fn run(root: &Path, options: &LoaderBenchOptions) -> Result<LoaderBenchReport, DataError> {
    let dataset = Dataset::open(root)?;
    let mut train = dataset.train;
    let mut step = (train.len() / options.max_images.max(1)).max(1);
    if train.len() / step > options.max_images {
        step += 1;
    }
    // Spread the subset over all classes rather than taking the first few.
    train.samples = train.samples.into_iter().step_by(step).collect();
    train.by_class = vec![Vec::new(); dataset.classes.len()];
    for (i, s) in train.samples.iter().enumerate() {
        train.by_class[s.label as usize].push(i);
    }
    let files: Vec<Vec<u8>> = train
        .samples
        .iter()
        .map(|s| std::fs::read(&s.path).map_err(|e| DataError::io(&s.path, e)))
        .collect::<Result<_, _>>()?;

    // Warm the caches and measure decoding alone.
    let mut pixels_total = 0f64;
    let start = Instant::now();
    for bytes in &files {
        if let Ok(img) = decode_jpeg(bytes) {
            pixels_total += (img.width * img.height) as f64;
        }
    }
    let decode_s = start.elapsed().as_secs_f64();

    let transform = TrainTransform::with_size(options.image_size);
    let mut out = vec![0f32; options.image_size * options.image_size * 3];
    let start = Instant::now();
    for (i, s) in train.samples.iter().enumerate() {
        let bytes = std::fs::read(&s.path).map_err(|e| DataError::io(&s.path, e))?;
        let mut rng = SampleRng::derive(options.seed, 0, 0, i as u64);
        // An undecodable file costs what it costs; the loader test covers replacing it.
        let _ = transform.decode_and_apply(&bytes, &mut rng, &mut out);
    }
    let pipeline_s = start.elapsed().as_secs_f64();

    let n = train.len();
    let loader = Loader::new(
        Arc::new(train),
        LoaderConfig {
            threads: options.threads,
            ..LoaderConfig::train(options.batch_size, options.image_size, options.seed)
        },
    )?;
    let start = Instant::now();
    let mut seen = 0;
    for batch in loader.epoch(0)? {
        seen += batch.len();
    }
    let loader_s = start.elapsed().as_secs_f64();

    Ok(LoaderBenchReport {
        images: n,
        image_size: options.image_size,
        mean_source_pixels: pixels_total / n.max(1) as f64,
        img_per_s_per_core: n as f64 / pipeline_s,
        decode_img_per_s_per_core: n as f64 / decode_s,
        threads: options.threads,
        batch_size: options.batch_size,
        loader_img_per_s: seen as f64 / loader_s,
        unreadable_files: loader.unreadable_files(),
    })
}
