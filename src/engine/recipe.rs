//! The training recipe: every hyperparameter of a ResNet training run, with the MLPerf
//! v4.0 tinybox values as defaults, a small-batch preset for the smoke suite, and
//! per-run overrides from the run's options.
//!
//! Epochs are numbered from 1, as MLLOG's `epoch_num` is: the first epoch of a run is
//! epoch 1. Steps are numbered from 0 and count the steps already taken.

use serde_json::{Map, Value};

use super::mllog::RunConfig;
use super::optim::LarsConfig;
use super::precision::Precision;
use super::schedule::{PolynomialDecayWithWarmup, ScheduleError};
use super::train::loss_scale::{LossScaling, DEFAULT_GROWTH_INTERVAL, MAX_LOSS_SCALE};

/// The weight decay is `WEIGHT_DECAY_UNIT · 2^N`; MLPerf rules fix the form, N is free.
pub const WEIGHT_DECAY_UNIT: f64 = 1e-4;

/// What kind of value a run option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A finite number, whole or not.
    Number,
    /// A whole number (given as a JSON number with no fraction).
    Integer,
    /// Text; one of the choices when there are any.
    Text(&'static [&'static str]),
    /// `true` or `false` (1 or 0 are taken too).
    Flag,
}

/// A run option [`Recipe::with_options`] reads: its key, its kind and what it sets.
#[derive(Debug, Clone, Copy)]
pub struct RecipeOption {
    /// The key in the run's options, as in `batch_size`.
    pub key: &'static str,
    /// The kind of value the key takes; the option schema names its JSON type after it.
    pub kind: ValueKind,
    /// One line on what the option sets, for the option schema and range errors.
    pub help: &'static str,
}

/// The run options [`Recipe::with_options`] reads.
pub const OPTION_KEYS: &[RecipeOption] = &[
    RecipeOption {
        key: "batch_size",
        kind: ValueKind::Integer,
        help: "global training batch size; without base_lr the LR scales linearly with it",
    },
    RecipeOption {
        key: "eval_batch_size",
        kind: ValueKind::Integer,
        help: "evaluation batch size",
    },
    RecipeOption {
        key: "base_lr",
        kind: ValueKind::Number,
        help: "peak learning rate, reached at the end of warmup",
    },
    RecipeOption {
        key: "end_lr",
        kind: ValueKind::Number,
        help: "learning rate at the end of the planned epochs",
    },
    RecipeOption {
        key: "warmup_epochs",
        kind: ValueKind::Integer,
        help: "epochs of linear warmup from LR 0",
    },
    RecipeOption {
        key: "train_epochs",
        kind: ValueKind::Integer,
        help: "planned epochs: the decay horizon and the most a run trains",
    },
    RecipeOption {
        key: "lr_decay_power",
        kind: ValueKind::Number,
        help: "power of the polynomial decay",
    },
    RecipeOption {
        key: "weight_decay",
        kind: ValueKind::Number,
        help: "LARS weight decay, as a number",
    },
    RecipeOption {
        key: "weight_decay_n",
        kind: ValueKind::Integer,
        help: "LARS weight decay as 1e-4 · 2^N, giving N",
    },
    RecipeOption {
        key: "momentum",
        kind: ValueKind::Number,
        help: "momentum of LARS and of the skip-list SGD",
    },
    RecipeOption {
        key: "lars_epsilon",
        kind: ValueKind::Number,
        help: "epsilon in the LARS trust ratio's denominator",
    },
    RecipeOption {
        key: "lars_trust_coefficient",
        kind: ValueKind::Number,
        help: "LARS trust coefficient",
    },
    RecipeOption {
        key: "label_smoothing",
        kind: ValueKind::Number,
        help: "label smoothing of the cross-entropy loss",
    },
    RecipeOption {
        key: "eval_start_epoch",
        kind: ValueKind::Integer,
        help: "first evaluated epoch (1-based)",
    },
    RecipeOption {
        key: "eval_every",
        kind: ValueKind::Integer,
        help: "epochs between evaluations before eval_every_epoch_from",
    },
    RecipeOption {
        key: "eval_every_epoch_from",
        kind: ValueKind::Integer,
        help: "from this epoch on, every epoch is evaluated",
    },
    RecipeOption {
        key: "target_accuracy",
        kind: ValueKind::Number,
        help: "top-1 accuracy at which the run stops",
    },
    RecipeOption {
        key: "crop_min_scale",
        kind: ValueKind::Number,
        help: "smallest area, as a share of the image, of a training crop",
    },
    RecipeOption {
        key: "seed",
        kind: ValueKind::Integer,
        help: "seed of weight init, shuffling and augmentation",
    },
    RecipeOption {
        key: "precision",
        kind: ValueKind::Text(Precision::NAMES),
        help: "activation storage: fp32, or fp16/bf16 mixed precision (f32 master weights)",
    },
    RecipeOption {
        key: "loss_scale",
        kind: ValueKind::Number,
        help: "fp16 loss scale: the fixed factor, or the starting one with dynamic_loss_scale",
    },
    RecipeOption {
        key: "dynamic_loss_scale",
        kind: ValueKind::Flag,
        help: "true to halve the fp16 loss scale on overflow and double it after 2000 clean steps",
    },
];

/// A recipe option that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecipeError {
    /// An option that is not a finite JSON number.
    #[error("option {key} must be a number, got {value}")]
    NotANumber {
        /// The option's key.
        key: String,
        /// The value given, as JSON.
        value: String,
    },
    /// A number with a fraction where a whole number is needed.
    #[error("option {key} must be a whole number, got {value}")]
    NotWhole {
        /// The option's key.
        key: String,
        /// The value given.
        value: f64,
    },
    /// A number outside the option's range.
    #[error("option {key} = {value} is out of range {range} ({help})")]
    OutOfRange {
        /// The option's key.
        key: String,
        /// The value given.
        value: f64,
        /// The allowed range in interval notation, as `(0, 1000]`.
        range: String,
        /// The option's help line from [`OPTION_KEYS`] (empty for a key not listed there).
        help: String,
    },
    /// A text option that is not one of its choices, or not text.
    #[error("option {key} must be one of {choices}, got {value}")]
    NotAChoice {
        /// The option's key.
        key: String,
        /// The value given, as JSON.
        value: String,
        /// The accepted values, comma-separated.
        choices: String,
    },
    /// Fields that break a relation between them (warmup longer than training, end LR
    /// above base LR, …), or two options that exclude each other; holds the message.
    #[error("{0}")]
    Inconsistent(String),
}

/// Every hyperparameter of a training run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Recipe {
    /// Images per optimizer step, summed over all devices (1536 in the reference).
    pub global_batch_size: usize,
    /// Images per evaluation batch.
    pub eval_batch_size: usize,
    /// Peak LR, reached after warmup. Used as is by LARS and by the skip-list SGD.
    pub base_lr: f64,
    /// The LR the polynomial decay reaches at the end of `train_epochs` and holds after.
    pub end_lr: f64,
    /// Epochs of linear warmup from LR 0 to `base_lr`; at most `train_epochs`.
    pub warmup_epochs: u32,
    /// The planned epochs: the LR decays to `end_lr` over them, and a run that has not
    /// reached its target by their end stops there.
    pub train_epochs: u32,
    /// The exponent of the polynomial LR decay (2 in the reference).
    pub lr_decay_power: f64,
    /// Weight decay is `weight_decay_base · 2^weight_decay_exponent`.
    pub weight_decay_base: f64,
    /// The exponent N of the weight decay `weight_decay_base · 2^N` (1 in the reference; 0
    /// when the decay was given as a plain number).
    pub weight_decay_exponent: i32,
    /// The momentum factor of LARS and of the skip-list SGD, in [0, 1) (0.9 in the
    /// reference).
    pub momentum: f64,
    /// The ε in the LARS trust ratio's denominator (0 in the reference).
    pub lars_epsilon: f64,
    /// The LARS trust coefficient that scales the layer-wise trust ratio (0.001 in the
    /// reference).
    pub lars_trust_coefficient: f64,
    /// The share of the target probability the cross-entropy loss spreads evenly over all
    /// classes, in [0, 1) (0.1 in the reference).
    pub label_smoothing: f64,
    /// First evaluated epoch, 1-based.
    pub eval_start_epoch: u32,
    /// Epochs between evaluations from `eval_start_epoch` until `eval_every_epoch_from` (4
    /// in the reference).
    pub eval_every: u32,
    /// From this epoch on every epoch is evaluated.
    pub eval_every_epoch_from: u32,
    /// The top-1 validation accuracy, in (0, 1], at which the run stops as converged
    /// (0.759 in the reference).
    pub target_accuracy: f64,
    /// The smallest area of the random resized training crop, as a share of the image's
    /// area, in (0, 1] (0.10 in the reference; the largest is the whole image).
    #[serde(default = "reference_crop_min_scale")]
    pub crop_min_scale: f64,
    /// The seed of weight init, shuffling and augmentation.
    pub seed: u64,
    /// How activations are stored. The reference trains in fp16; f32 is the default here
    /// because the GPU backends store activations in f32 (16-bit storage runs on the
    /// CPU backend, as the numerical reference).
    #[serde(default)]
    pub precision: Precision,
    /// The fp16 loss scale (128 in the v4.0 reference).
    #[serde(default = "reference_loss_scale")]
    pub loss_scale: f64,
    /// Whether the fp16 loss scale adapts to overflows instead of staying fixed.
    #[serde(default)]
    pub dynamic_loss_scale: bool,
}

/// The static loss scale of the v4.0 reference's fp16 runs.
pub const REFERENCE_LOSS_SCALE: f64 = 128.0;

fn reference_loss_scale() -> f64 {
    REFERENCE_LOSS_SCALE
}

/// The smallest training crop of the reference, as a share of the image's area.
pub const REFERENCE_CROP_MIN_SCALE: f64 = 0.10;

fn reference_crop_min_scale() -> f64 {
    REFERENCE_CROP_MIN_SCALE
}

impl Default for Recipe {
    /// The MLPerf Training v4.0 tinybox recipe (see [`Recipe::mlperf`]).
    fn default() -> Self {
        Self::mlperf()
    }
}

impl Recipe {
    /// The MLPerf Training v4.0 ResNet-50 recipe of the tinybox submissions: global
    /// batch 1536, LARS with base LR 7.2 over 2 warmup and 37 planned epochs, end LR
    /// 1e-4, weight decay 1e-4·2¹, evaluation at epochs 3, 7, …, 31 and every epoch from
    /// 33, target top-1 0.759.
    pub fn mlperf() -> Self {
        Self {
            global_batch_size: 1536,
            eval_batch_size: 192,
            base_lr: 7.2,
            end_lr: 1e-4,
            warmup_epochs: 2,
            train_epochs: 37,
            lr_decay_power: 2.0,
            weight_decay_base: WEIGHT_DECAY_UNIT,
            weight_decay_exponent: 1,
            momentum: 0.9,
            lars_epsilon: 0.0,
            lars_trust_coefficient: 0.001,
            label_smoothing: 0.1,
            eval_start_epoch: 3,
            eval_every: 4,
            eval_every_epoch_from: 33,
            target_accuracy: 0.759,
            crop_min_scale: REFERENCE_CROP_MIN_SCALE,
            seed: 0,
            precision: Precision::Fp32,
            loss_scale: REFERENCE_LOSS_SCALE,
            dynamic_loss_scale: false,
        }
    }

    /// The smoke suite's recipe: the same optimizer and schedule at batch 128 with the
    /// base LR scaled linearly from the reference (7.2 · 128 / 1536 = 0.6), one warmup
    /// epoch, a short horizon, evaluation after every epoch and a target that a small
    /// ResNet reaches on the generated dataset.
    pub fn smoke() -> Self {
        let reference = Self::mlperf();
        let batch = 128;
        Self {
            global_batch_size: batch,
            eval_batch_size: 256,
            base_lr: reference.base_lr * batch as f64 / reference.global_batch_size as f64,
            warmup_epochs: 1,
            train_epochs: 12,
            eval_start_epoch: 1,
            eval_every: 1,
            eval_every_epoch_from: 1,
            target_accuracy: 0.70,
            ..reference
        }
    }

    /// The default recipe with `options` applied (see [`Recipe::with_options`]).
    pub fn from_options(options: &Map<String, Value>) -> Result<Self, RecipeError> {
        Self::mlperf().with_options(options)
    }

    /// This recipe with the recipe keys of `options` ([`OPTION_KEYS`]) applied, each
    /// range-checked; other keys belong to other parts of a run and are left alone. When
    /// `batch_size` is given without `base_lr`, the base LR scales linearly with the
    /// batch. `weight_decay` and `weight_decay_n` exclude each other.
    pub fn with_options(&self, options: &Map<String, Value>) -> Result<Self, RecipeError> {
        let mut r = self.clone();
        let opts = Options(options);
        // A base_lr given too replaces the scaled one below.
        if let Some(batch) = opts.whole("batch_size", 1.0, 1_048_576.0)? {
            r.scale_batch(batch as usize);
        }
        if let Some(v) = opts.whole("eval_batch_size", 1.0, 1_048_576.0)? {
            r.eval_batch_size = v as usize;
        }
        if let Some(v) = opts.real("base_lr", Bound::Open(0.0), Bound::Closed(1000.0))? {
            r.base_lr = v;
        }
        if let Some(v) = opts.real("end_lr", Bound::Closed(0.0), Bound::Closed(1000.0))? {
            r.end_lr = v;
        }
        if let Some(v) = opts.whole("warmup_epochs", 0.0, 10_000.0)? {
            r.warmup_epochs = v as u32;
        }
        if let Some(v) = opts.whole("train_epochs", 1.0, 10_000.0)? {
            r.train_epochs = v as u32;
        }
        if let Some(v) = opts.real("lr_decay_power", Bound::Open(0.0), Bound::Closed(16.0))? {
            r.lr_decay_power = v;
        }
        let decay = opts.real("weight_decay", Bound::Closed(0.0), Bound::Closed(1.0))?;
        let decay_n = opts.whole("weight_decay_n", -30.0, 13.0)?;
        match (decay, decay_n) {
            (Some(_), Some(_)) => {
                return Err(RecipeError::Inconsistent(
                    "give weight_decay or weight_decay_n, not both".into(),
                ))
            }
            (Some(v), None) => {
                r.weight_decay_base = v;
                r.weight_decay_exponent = 0;
            }
            (None, Some(n)) => {
                r.weight_decay_base = WEIGHT_DECAY_UNIT;
                r.weight_decay_exponent = n as i32;
            }
            (None, None) => {}
        }
        if let Some(v) = opts.real("momentum", Bound::Closed(0.0), Bound::Open(1.0))? {
            r.momentum = v;
        }
        if let Some(v) = opts.real("lars_epsilon", Bound::Closed(0.0), Bound::Closed(1.0))? {
            r.lars_epsilon = v;
        }
        if let Some(v) = opts.real(
            "lars_trust_coefficient",
            Bound::Closed(0.0),
            Bound::Closed(1.0),
        )? {
            r.lars_trust_coefficient = v;
        }
        if let Some(v) = opts.real("label_smoothing", Bound::Closed(0.0), Bound::Open(1.0))? {
            r.label_smoothing = v;
        }
        if let Some(v) = opts.whole("eval_start_epoch", 1.0, 10_000.0)? {
            r.eval_start_epoch = v as u32;
        }
        if let Some(v) = opts.whole("eval_every", 1.0, 10_000.0)? {
            r.eval_every = v as u32;
        }
        if let Some(v) = opts.whole("eval_every_epoch_from", 1.0, 10_000.0)? {
            r.eval_every_epoch_from = v as u32;
        }
        if let Some(v) = opts.real("target_accuracy", Bound::Open(0.0), Bound::Closed(1.0))? {
            r.target_accuracy = v;
        }
        if let Some(v) = opts.real("crop_min_scale", Bound::Open(0.0), Bound::Closed(1.0))? {
            r.crop_min_scale = v;
        }
        if let Some(seed) = opts.seed("seed")? {
            r.seed = seed;
        }
        if let Some(precision) = opts.precision("precision")? {
            r.precision = precision;
        }
        if let Some(v) = opts.real(
            "loss_scale",
            Bound::Closed(1.0),
            Bound::Closed(f64::from(MAX_LOSS_SCALE)),
        )? {
            r.loss_scale = v;
        }
        if let Some(v) = opts.flag("dynamic_loss_scale")? {
            r.dynamic_loss_scale = v;
        }
        r.validate()?;
        Ok(r)
    }

    /// Sets the global batch to `batch`, the base LR scaled linearly with it (the
    /// linear scaling rule the reference's LR follows).
    pub fn scale_batch(&mut self, batch: usize) {
        self.base_lr *= batch as f64 / self.global_batch_size.max(1) as f64;
        self.global_batch_size = batch;
    }

    /// Checks the relations between fields that single ranges cannot.
    pub fn validate(&self) -> Result<(), RecipeError> {
        if self.global_batch_size == 0 || self.eval_batch_size == 0 {
            return Err(RecipeError::Inconsistent(
                "batch sizes must be at least 1".into(),
            ));
        }
        if self.train_epochs == 0 {
            return Err(RecipeError::Inconsistent(
                "train_epochs must be at least 1".into(),
            ));
        }
        if self.warmup_epochs > self.train_epochs {
            return Err(RecipeError::Inconsistent(format!(
                "warmup_epochs ({}) exceeds train_epochs ({})",
                self.warmup_epochs, self.train_epochs
            )));
        }
        if !(self.base_lr.is_finite() && self.base_lr > 0.0) {
            return Err(RecipeError::Inconsistent(format!(
                "base_lr must be positive, got {}",
                self.base_lr
            )));
        }
        if !(self.end_lr >= 0.0 && self.end_lr <= self.base_lr) {
            return Err(RecipeError::Inconsistent(format!(
                "end_lr ({}) must lie between 0 and base_lr ({})",
                self.end_lr, self.base_lr
            )));
        }
        let wd = self.weight_decay();
        if !(wd.is_finite() && wd >= 0.0) {
            return Err(RecipeError::Inconsistent(format!(
                "weight decay {wd} is not usable"
            )));
        }
        if self.eval_every == 0 {
            return Err(RecipeError::Inconsistent(
                "eval_every must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// How the loss is scaled: only fp16 needs it (bf16 has f32's exponent range).
    pub fn loss_scaling(&self) -> LossScaling {
        if !self.precision.needs_loss_scaling() {
            return LossScaling::None;
        }
        let scale = self.loss_scale as f32;
        if self.dynamic_loss_scale {
            LossScaling::Dynamic {
                initial: scale,
                growth_interval: DEFAULT_GROWTH_INTERVAL,
            }
        } else {
            LossScaling::Static(scale)
        }
    }

    /// `weight_decay_base · 2^weight_decay_exponent` (2e-4 in the reference).
    pub fn weight_decay(&self) -> f64 {
        self.weight_decay_base * 2f64.powi(self.weight_decay_exponent)
    }

    /// The LARS hyperparameters in the optimizer's precision.
    pub fn lars_config(&self) -> LarsConfig {
        LarsConfig {
            momentum: self.momentum as f32,
            weight_decay: self.weight_decay() as f32,
            trust_coefficient: self.lars_trust_coefficient as f32,
            epsilon: self.lars_epsilon as f32,
        }
    }

    /// Steps in an epoch of `train_samples` images: the batch count rounded up, since
    /// the first batch of each epoch is padded.
    pub fn steps_per_epoch(&self, train_samples: usize) -> u64 {
        train_samples.div_ceil(self.global_batch_size.max(1)) as u64
    }

    /// The LR schedule for epochs of `steps_per_epoch` steps.
    pub fn schedule(
        &self,
        steps_per_epoch: u64,
    ) -> Result<PolynomialDecayWithWarmup, ScheduleError> {
        PolynomialDecayWithWarmup::new(
            self.base_lr,
            self.end_lr,
            u64::from(self.warmup_epochs) * steps_per_epoch,
            u64::from(self.train_epochs) * steps_per_epoch,
            self.lr_decay_power,
        )
    }

    /// The LR of step `step` (0-based, counted over the whole run).
    pub fn lr_at(&self, step: u64, steps_per_epoch: u64) -> Result<f64, ScheduleError> {
        Ok(self.schedule(steps_per_epoch)?.lr_at(step))
    }

    /// The hyperparameters a run logs to MLLOG. `lars_opt_learning_rate_decay_steps` is
    /// the planned epochs, as the reference logs it; `bn_span` is the number of images
    /// each batch-norm layer computes its statistics over (the per-device batch).
    pub fn mllog_config(&self, train_samples: u64, eval_samples: u64, bn_span: u64) -> RunConfig {
        RunConfig {
            seed: self.seed,
            global_batch_size: self.global_batch_size as u64,
            train_samples,
            eval_samples,
            gradient_accumulation_steps: 1,
            base_learning_rate: self.base_lr,
            end_learning_rate: self.end_lr,
            warmup_epochs: f64::from(self.warmup_epochs),
            decay_steps: u64::from(self.train_epochs),
            poly_power: self.lr_decay_power,
            momentum: self.momentum,
            weight_decay: self.weight_decay(),
            epsilon: self.lars_epsilon,
            bn_span,
        }
    }

    /// Whether the run evaluates after `epoch` (1-based, as MLLOG's `epoch_num`): every
    /// `eval_every` epochs from `eval_start_epoch`, every epoch from
    /// `eval_every_epoch_from`, and always after the last planned epoch.
    pub fn is_eval_epoch(&self, epoch: u32) -> bool {
        if epoch == 0 {
            return false;
        }
        let cadence = epoch >= self.eval_start_epoch
            && (epoch - self.eval_start_epoch).is_multiple_of(self.eval_every.max(1));
        cadence || epoch >= self.eval_every_epoch_from || epoch == self.train_epochs
    }
}

#[derive(Clone, Copy)]
enum Bound {
    Open(f64),
    Closed(f64),
}

impl Bound {
    fn value(self) -> f64 {
        match self {
            Bound::Open(v) | Bound::Closed(v) => v,
        }
    }
}

struct Options<'a>(&'a Map<String, Value>);

impl Options<'_> {
    fn number(&self, key: &str) -> Result<Option<f64>, RecipeError> {
        let Some(value) = self.0.get(key) else {
            return Ok(None);
        };
        match value.as_f64() {
            Some(n) if n.is_finite() => Ok(Some(n)),
            _ => Err(RecipeError::NotANumber {
                key: key.into(),
                value: value.to_string(),
            }),
        }
    }

    fn real(&self, key: &str, low: Bound, high: Bound) -> Result<Option<f64>, RecipeError> {
        let Some(n) = self.number(key)? else {
            return Ok(None);
        };
        let above = match low {
            Bound::Open(l) => n > l,
            Bound::Closed(l) => n >= l,
        };
        let below = match high {
            Bound::Open(h) => n < h,
            Bound::Closed(h) => n <= h,
        };
        if above && below {
            return Ok(Some(n));
        }
        let open = if matches!(low, Bound::Open(_)) {
            "("
        } else {
            "["
        };
        let close = if matches!(high, Bound::Open(_)) {
            ")"
        } else {
            "]"
        };
        Err(out_of_range(
            key,
            n,
            format!("{open}{}, {}{close}", low.value(), high.value()),
        ))
    }

    /// A seed: any u64, which JSON integers carry exactly (a float would round).
    fn precision(&self, key: &str) -> Result<Option<Precision>, RecipeError> {
        let Some(value) = self.0.get(key) else {
            return Ok(None);
        };
        let not_a_choice = || RecipeError::NotAChoice {
            key: key.to_string(),
            value: value.to_string(),
            choices: Precision::NAMES.join(", "),
        };
        let name = value.as_str().ok_or_else(not_a_choice)?;
        name.parse().map(Some).map_err(|_| not_a_choice())
    }

    fn seed(&self, key: &str) -> Result<Option<u64>, RecipeError> {
        let Some(value) = self.0.get(key) else {
            return Ok(None);
        };
        if let Some(seed) = value.as_u64() {
            return Ok(Some(seed));
        }
        match self.number(key)? {
            Some(n) if n.fract() != 0.0 => Err(RecipeError::NotWhole {
                key: key.into(),
                value: n,
            }),
            Some(n) => Err(out_of_range(key, n, format!("[0, {}]", u64::MAX))),
            None => Ok(None),
        }
    }

    /// `true`/`false`, or 1/0 as the option was once given.
    fn flag(&self, key: &str) -> Result<Option<bool>, RecipeError> {
        if let Some(Value::Bool(b)) = self.0.get(key) {
            return Ok(Some(*b));
        }
        Ok(self.whole(key, 0.0, 1.0)?.map(|v| v == 1.0))
    }

    fn whole(&self, key: &str, low: f64, high: f64) -> Result<Option<f64>, RecipeError> {
        let Some(n) = self.number(key)? else {
            return Ok(None);
        };
        if n.fract() != 0.0 {
            return Err(RecipeError::NotWhole {
                key: key.into(),
                value: n,
            });
        }
        if !(low..=high).contains(&n) {
            return Err(out_of_range(key, n, format!("[{low}, {high}]")));
        }
        Ok(Some(n))
    }
}

fn out_of_range(key: &str, value: f64, range: String) -> RecipeError {
    let help = OPTION_KEYS
        .iter()
        .find(|o| o.key == key)
        .map_or("", |o| o.help);
    RecipeError::OutOfRange {
        key: key.into(),
        value,
        range,
        help: help.into(),
    }
}
