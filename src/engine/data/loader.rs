//! The multi-threaded loader: worker threads decode and transform samples into batch
//! buffers while the training loop consumes earlier batches.
//!
//! Every sample's randomness comes from (seed, epoch, position in the epoch), so the
//! batches are identical whatever the thread count or scheduling. Memory is bounded:
//! workers only fill batches within `prefetch_batches` of the one the consumer waits for.
//!
//! Padding: in training, when the batch size does not divide the split, the *first*
//! batch of each epoch starts with padding samples (copies of images from the epoch's
//! order, augmented independently) marked `valid = false`; a batch larger than the whole
//! split is allowed and simply holds more padding. In evaluation the *last* batch is
//! padded with zero images (the mean image after subtraction), also marked invalid.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::augment::{EvalTransform, TrainTransform};
use super::dataset::Split;
use super::decode::{decode_jpeg, DecodeError};
use super::error::DataError;
use super::rng::SampleRng;
use super::shuffle::epoch_order;

const AUGMENT_STREAM: u64 = 2;
/// Other images of the same class tried in place of an unreadable one before falling
/// back to the mean image.
const REPLACEMENT_TRIES: usize = 8;

/// Training (shuffled, augmented, first batch padded) or evaluation (in order, centre
/// crop, last batch padded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Shuffled and augmented, padding at the start of the first batch.
    Train,
    /// In split order with a centre crop, padding at the end of the last batch.
    Eval,
}

/// How a [`Loader`] makes its batches.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderConfig {
    /// Training or evaluation order, transform and padding.
    pub mode: Mode,
    /// Samples per batch, padding included.
    pub batch_size: usize,
    /// Output side in pixels (224 for ImageNet).
    pub image_size: usize,
    /// Worker threads.
    pub threads: usize,
    /// Batches that may be in flight (being filled or ready) at once.
    pub prefetch_batches: usize,
    /// Seeds the shuffle and the augmentation (each sample's randomness derives from it,
    /// the epoch and its position).
    pub seed: u64,
    /// Area fraction range of the training crop.
    pub crop_scale: (f64, f64),
}

impl LoaderConfig {
    /// A training loader: one worker per available core, two batches prefetched and the
    /// default crop scale.
    pub fn train(batch_size: usize, image_size: usize, seed: u64) -> Self {
        LoaderConfig {
            mode: Mode::Train,
            batch_size,
            image_size,
            threads: default_threads(),
            prefetch_batches: 2,
            seed,
            crop_scale: TrainTransform::default().scale,
        }
    }

    /// An evaluation loader with the same defaults as [`LoaderConfig::train`]; the seed is
    /// unused because nothing is random.
    pub fn eval(batch_size: usize, image_size: usize) -> Self {
        LoaderConfig {
            mode: Mode::Eval,
            ..LoaderConfig::train(batch_size, image_size, 0)
        }
    }

    fn validate(&self) -> Result<(), DataError> {
        let bad = |m: String| Err(DataError::InvalidConfig(m));
        if self.batch_size == 0 {
            return bad("batch size must be at least 1".into());
        }
        if self.image_size == 0 || self.image_size > 4096 {
            return bad(format!("image size {} is not in 1..=4096", self.image_size));
        }
        if self.threads == 0 || self.threads > 1024 {
            return bad(format!("thread count {} is not in 1..=1024", self.threads));
        }
        if self.prefetch_batches == 0 {
            return bad("prefetch must be at least 1 batch".into());
        }
        let (lo, hi) = self.crop_scale;
        if !(lo > 0.0 && lo <= hi && hi <= 1.0) {
            return bad(format!(
                "crop scale ({lo}, {hi}) is not within 0 < min <= max <= 1"
            ));
        }
        Ok(())
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One batch, NHWC.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The epoch it belongs to, as passed to [`Loader::epoch`].
    pub epoch: u32,
    /// Position of this batch within its epoch.
    pub index: usize,
    /// Side of each square image in pixels.
    pub image_size: usize,
    /// `len() × image_size × image_size × 3` values, mean subtracted.
    pub images: Vec<f32>,
    /// Class index of each sample; 0 for the blank images that pad evaluation.
    pub labels: Vec<u32>,
    /// False for padding samples, which must not count in loss averages or accuracy.
    pub valid: Vec<bool>,
    /// The index into the split's samples of each entry (padding too; `usize::MAX` for
    /// the blank images that pad evaluation).
    pub sample_ids: Vec<usize>,
    /// Samples in this batch whose image could not be read and was replaced.
    pub replaced: usize,
}

impl Batch {
    /// Samples in the batch, padding included.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Samples that are not padding.
    pub fn valid_count(&self) -> usize {
        self.valid.iter().filter(|&&v| v).count()
    }

    /// The pixels of sample `i`.
    pub fn image(&self, i: usize) -> &[f32] {
        let n = self.image_size * self.image_size * 3;
        &self.images[i * n..(i + 1) * n]
    }
}

/// Counts of unreadable images, shared by all epochs of a loader.
#[derive(Debug, Default)]
struct Unreadable {
    replacements: AtomicU64,
    files: Mutex<HashSet<PathBuf>>,
}

impl Unreadable {
    fn record(&self, path: &Path, error: &str) {
        let mut files = lock(&self.files);
        if files.insert(path.to_path_buf()) {
            tracing::warn!(path = %path.display(), %error, "unreadable image replaced");
        }
    }
}

/// Produces the batches of one split, epoch by epoch.
#[derive(Debug, Clone)]
pub struct Loader {
    split: Arc<Split>,
    config: LoaderConfig,
    unreadable: Arc<Unreadable>,
}

impl Loader {
    /// A loader over `split`. Errors when the configuration is out of range or the split
    /// holds no images.
    pub fn new(split: Arc<Split>, config: LoaderConfig) -> Result<Loader, DataError> {
        config.validate()?;
        if split.is_empty() {
            return Err(DataError::NoImages(split.dir.clone()));
        }
        Ok(Loader {
            split,
            config,
            unreadable: Arc::default(),
        })
    }

    /// How the batches are made.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The split the batches come from.
    pub fn split(&self) -> &Split {
        &self.split
    }

    /// Batches in every epoch: the split's size divided by the batch size, rounded up.
    pub fn batches_per_epoch(&self) -> usize {
        self.split.len().div_ceil(self.config.batch_size)
    }

    /// Padding samples per epoch (in the first batch for training, the last for eval).
    pub fn padding_per_epoch(&self) -> usize {
        self.batches_per_epoch() * self.config.batch_size - self.split.len()
    }

    /// Distinct files found unreadable so far.
    pub fn unreadable_files(&self) -> usize {
        lock(&self.unreadable.files).len()
    }

    /// Times an unreadable image was replaced so far (a file counts once per visit).
    pub fn replacements(&self) -> u64 {
        self.unreadable.replacements.load(Ordering::Relaxed)
    }

    /// Start producing the batches of `epoch` on the worker threads.
    pub fn epoch(&self, epoch: u32) -> Result<EpochBatches, DataError> {
        let plan = Arc::new(EpochPlan::new(self, epoch));
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            space: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(self.config.threads);
        for i in 0..self.config.threads {
            let (worker_plan, worker_shared) = (plan.clone(), shared.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("data-{i}"))
                .spawn(move || worker(&worker_plan, &worker_shared));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    stop(&shared, &mut workers);
                    return Err(DataError::Thread(e));
                }
            }
        }
        Ok(EpochBatches {
            plan,
            shared,
            workers,
        })
    }

    /// Decode and transform one sample, replacing an unreadable image. Returns whether
    /// it was replaced.
    fn load_into(&self, sample: usize, rng: &mut SampleRng, out: &mut [f32]) -> bool {
        match self.config.mode {
            Mode::Train => {
                let t = TrainTransform {
                    scale: self.config.crop_scale,
                    ..TrainTransform::with_size(self.config.image_size)
                };
                // Each attempt starts from the sample's own random state, so a
                // replacement is augmented as the original would have been.
                let start = rng.clone();
                self.load_or_replace(sample, out, |bytes, out| {
                    *rng = start.clone();
                    t.decode_and_apply(bytes, rng, out).map(|_| ())
                })
            }
            Mode::Eval => {
                let t = EvalTransform::new(self.config.image_size);
                self.load_or_replace(sample, out, |bytes, out| {
                    decode_jpeg(bytes).map(|img| t.apply(&img, out))
                })
            }
        }
    }

    /// Run `load` on the sample's file, or on up to [`REPLACEMENT_TRIES`] other images
    /// of its class when it cannot be read; the mean image (zeros) when none can.
    fn load_or_replace(
        &self,
        sample: usize,
        out: &mut [f32],
        mut load: impl FnMut(&[u8], &mut [f32]) -> Result<(), DecodeError>,
    ) -> bool {
        let mut attempt = |path: &Path, out: &mut [f32]| {
            let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
            load(&bytes, out).map_err(|e| e.to_string())
        };
        let first = &self.split.samples[sample];
        match attempt(&first.path, out) {
            Ok(()) => return false,
            Err(e) => self.unreadable.record(&first.path, &e),
        }
        self.unreadable.replacements.fetch_add(1, Ordering::Relaxed);
        let class = &self.split.by_class[first.label as usize];
        let at = class.iter().position(|&s| s == sample).unwrap_or(0);
        for k in 1..=REPLACEMENT_TRIES.min(class.len().saturating_sub(1)) {
            let other = class[(at + k) % class.len()];
            let path = &self.split.samples[other].path;
            match attempt(path, out) {
                Ok(()) => return true,
                Err(e) => self.unreadable.record(path, &e),
            }
        }
        // Zero after mean subtraction: the mean image.
        out.fill(0.0);
        true
    }
}

/// What each position of one epoch holds.
#[derive(Debug)]
struct EpochPlan {
    loader: Loader,
    epoch: u32,
    order: Vec<usize>,
    padding: usize,
    positions: usize,
}

/// A position's content: a real sample, a padding copy of one, or a blank.
enum Slot {
    Sample { id: usize, valid: bool },
    Blank,
}

impl EpochPlan {
    fn new(loader: &Loader, epoch: u32) -> Self {
        let n = loader.split.len();
        let order = match loader.config.mode {
            Mode::Train => epoch_order(n, loader.config.seed, epoch),
            Mode::Eval => (0..n).collect(),
        };
        let positions = loader.batches_per_epoch() * loader.config.batch_size;
        EpochPlan {
            loader: loader.clone(),
            epoch,
            order,
            padding: positions - n,
            positions,
        }
    }

    fn slot(&self, position: usize) -> Slot {
        let n = self.order.len();
        match self.loader.config.mode {
            Mode::Train if position < self.padding => Slot::Sample {
                id: self.order[position % n],
                valid: false,
            },
            Mode::Train => Slot::Sample {
                id: self.order[position - self.padding],
                valid: true,
            },
            Mode::Eval if position < n => Slot::Sample {
                id: self.order[position],
                valid: true,
            },
            Mode::Eval => Slot::Blank,
        }
    }

    fn batch_size(&self) -> usize {
        self.loader.config.batch_size
    }

    fn sample_len(&self) -> usize {
        let s = self.loader.config.image_size;
        s * s * 3
    }

    fn new_batch(&self, index: usize) -> Batch {
        let b = self.batch_size();
        Batch {
            epoch: self.epoch,
            index,
            image_size: self.loader.config.image_size,
            images: vec![0.0; b * self.sample_len()],
            labels: vec![0; b],
            valid: vec![false; b],
            sample_ids: vec![usize::MAX; b],
            replaced: 0,
        }
    }
}

#[derive(Default)]
struct State {
    next_position: usize,
    /// Batches already handed to the consumer.
    consumed: usize,
    filling: HashMap<usize, Filling>,
    stopped: bool,
}

struct Filling {
    batch: Arc<Mutex<Batch>>,
    done: usize,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    space: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A worker that panicked cannot leave a batch half-described: every field it
    // touches is plain data, so the poisoned value is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn worker(plan: &EpochPlan, shared: &Shared) {
    let b = plan.batch_size();
    let sample_len = plan.sample_len();
    let window = plan.loader.config.prefetch_batches;
    let mut pixels = vec![0f32; sample_len];
    loop {
        let (position, batch) = {
            let mut state = lock(&shared.state);
            loop {
                if state.stopped || state.next_position >= plan.positions {
                    return;
                }
                if state.next_position / b < state.consumed + window {
                    break;
                }
                state = shared.space.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            let position = state.next_position;
            state.next_position += 1;
            let index = position / b;
            let filling = state.filling.entry(index).or_insert_with(|| Filling {
                batch: Arc::new(Mutex::new(plan.new_batch(index))),
                done: 0,
            });
            (position, filling.batch.clone())
        };
        let (id, label, valid, replaced) = match plan.slot(position) {
            Slot::Sample { id, valid } => {
                let mut rng = SampleRng::derive(
                    plan.loader.config.seed,
                    AUGMENT_STREAM,
                    u64::from(plan.epoch),
                    position as u64,
                );
                let replaced = plan.loader.load_into(id, &mut rng, &mut pixels);
                (id, plan.loader.split.samples[id].label, valid, replaced)
            }
            Slot::Blank => {
                pixels.fill(0.0);
                (usize::MAX, 0, false, false)
            }
        };
        {
            let mut batch = lock(&batch);
            let j = position % b;
            batch.images[j * sample_len..(j + 1) * sample_len].copy_from_slice(&pixels);
            batch.labels[j] = label;
            batch.valid[j] = valid;
            batch.sample_ids[j] = id;
            batch.replaced += usize::from(replaced);
        }
        drop(batch);
        let mut state = lock(&shared.state);
        if let Some(filling) = state.filling.get_mut(&(position / b)) {
            filling.done += 1;
            if filling.done == b {
                shared.ready.notify_all();
            }
        }
    }
}

fn stop(shared: &Shared, workers: &mut Vec<JoinHandle<()>>) {
    lock(&shared.state).stopped = true;
    shared.space.notify_all();
    shared.ready.notify_all();
    for w in workers.drain(..) {
        // A worker that panicked has already reported it; the epoch is over either way.
        let _ = w.join();
    }
}

/// The batches of one epoch, in order. Dropping it stops the workers.
pub struct EpochBatches {
    plan: Arc<EpochPlan>,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl EpochBatches {
    /// Batches in the epoch, counting those already taken.
    pub fn len(&self) -> usize {
        self.plan.positions / self.plan.batch_size()
    }

    /// Whether the epoch has no batches.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Iterator for EpochBatches {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        let b = self.plan.batch_size();
        let total = self.len();
        let filled = {
            let mut state = lock(&self.shared.state);
            let index = state.consumed;
            if index >= total {
                return None;
            }
            loop {
                if state.filling.get(&index).is_some_and(|f| f.done == b) {
                    break;
                }
                if self.workers.iter().all(|w| w.is_finished()) {
                    // Every worker exited without finishing this batch: one panicked.
                    tracing::error!(batch = index, "data loader workers stopped early");
                    return None;
                }
                state = self
                    .shared
                    .ready
                    .wait_timeout(state, std::time::Duration::from_millis(200))
                    .map(|(s, _)| s)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            let filled = state.filling.remove(&index)?;
            state.consumed += 1;
            filled
        };
        self.shared.space.notify_all();
        let batch = match Arc::try_unwrap(filled.batch) {
            Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
            Err(shared_batch) => lock(&shared_batch).clone(),
        };
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.len() - lock(&self.shared.state).consumed.min(self.len());
        (left, Some(left))
    }
}

impl Drop for EpochBatches {
    fn drop(&mut self) {
        stop(&self.shared, &mut self.workers);
    }
}
