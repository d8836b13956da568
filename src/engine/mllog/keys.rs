//! Key and value names, spelled as `mlperf_logging.mllog.constants` spells them.

// Submission.
/// The benchmark submitted: `resnet` here.
pub const SUBMISSION_BENCHMARK: &str = "submission_benchmark";
/// `closed` or `open`: which division's rules the run follows.
pub const SUBMISSION_DIVISION: &str = "submission_division";
/// The organisation that submits the result.
pub const SUBMISSION_ORG: &str = "submission_org";
/// The system's name, as the system description names it.
pub const SUBMISSION_PLATFORM: &str = "submission_platform";
/// The system's availability: `onprem`, `cloud`, `preview` or `research`.
pub const SUBMISSION_STATUS: &str = "submission_status";

// Run structure.
/// Whether the page cache was dropped before the run (a bool).
pub const CACHE_CLEAR: &str = "cache_clear";
/// The system starts building the model; the dataset must not be touched until `run_start`.
pub const INIT_START: &str = "init_start";
/// Initialisation is over.
pub const INIT_STOP: &str = "init_stop";
/// The timed run begins: time-to-train is measured from here.
pub const RUN_START: &str = "run_start";
/// The timed run ends, with its `status`.
pub const RUN_STOP: &str = "run_stop";
/// Start of a block of epochs trained before the next evaluation.
pub const BLOCK_START: &str = "block_start";
/// End of that block.
pub const BLOCK_STOP: &str = "block_stop";
/// Start of a training epoch.
pub const EPOCH_START: &str = "epoch_start";
/// End of a training epoch.
pub const EPOCH_STOP: &str = "epoch_stop";
/// Start of an evaluation pass.
pub const EVAL_START: &str = "eval_start";
/// End of an evaluation pass.
pub const EVAL_STOP: &str = "eval_stop";
/// The evaluation's top-1 accuracy, as a fraction in [0, 1].
pub const EVAL_ACCURACY: &str = "eval_accuracy";
/// Free-form statistics of an epoch; here `{"throughput": images per second}`.
pub const TRACKED_STATS: &str = "tracked_stats";

// Hyperparameters.
/// The seed the run's randomness derives from.
pub const SEED: &str = "seed";
/// Images per optimizer step, over all devices.
pub const GLOBAL_BATCH_SIZE: &str = "global_batch_size";
/// Images in the training set.
pub const TRAIN_SAMPLES: &str = "train_samples";
/// Images in the evaluation set.
pub const EVAL_SAMPLES: &str = "eval_samples";
/// Batches whose gradients are summed before each optimizer step.
pub const GRADIENT_ACCUMULATION_STEPS: &str = "gradient_accumulation_steps";
/// The optimizer's name: `lars` here.
pub const OPT_NAME: &str = "opt_name";
/// LARS's ε in the trust ratio's denominator.
pub const LARS_EPSILON: &str = "lars_epsilon";
/// The peak learning rate, reached at the end of warmup.
pub const LARS_OPT_BASE_LEARNING_RATE: &str = "lars_opt_base_learning_rate";
/// The learning rate the polynomial decay ends at.
pub const LARS_OPT_END_LR: &str = "lars_opt_end_learning_rate";
/// Epochs of linear learning-rate warmup.
pub const LARS_OPT_LEARNING_RATE_WARMUP_EPOCHS: &str = "lars_opt_learning_rate_warmup_epochs";
/// The power of the polynomial learning-rate decay.
pub const LARS_OPT_LR_DECAY_POLY_POWER: &str = "lars_opt_learning_rate_decay_poly_power";
/// The length of the polynomial learning-rate decay, as the recipe counts it.
pub const LARS_OPT_LR_DECAY_STEPS: &str = "lars_opt_learning_rate_decay_steps";
/// LARS momentum.
pub const LARS_OPT_MOMENTUM: &str = "lars_opt_momentum";
/// LARS weight decay.
pub const LARS_OPT_WEIGHT_DECAY: &str = "lars_opt_weight_decay";
/// Images each batch-norm layer computes its statistics over.
pub const MODEL_BN_SPAN: &str = "model_bn_span";

// Metadata fields.
/// Metadata: the source file that logged the line.
pub const FILE: &str = "file";
/// Metadata: the source line that logged the line.
pub const LINENO: &str = "lineno";
/// Metadata: the epoch (from 1) an epoch or evaluation line belongs to.
pub const EPOCH_NUM: &str = "epoch_num";
/// Metadata of a block: its first epoch.
pub const FIRST_EPOCH_NUM: &str = "first_epoch_num";
/// Metadata of a block: how many epochs it holds.
pub const EPOCH_COUNT: &str = "epoch_count";
/// Metadata of `run_stop`: `success` or `aborted`.
pub const STATUS: &str = "status";
/// Metadata of `tracked_stats`: the epoch the statistics are for.
pub const STEP: &str = "step";
/// The `tracked_stats` field holding training throughput in images per second.
pub const THROUGHPUT: &str = "throughput";

// Values.
/// `submission_benchmark` for ResNet-50.
pub const RESNET: &str = "resnet";
/// `opt_name` for the LARS optimizer.
pub const LARS: &str = "lars";
/// `submission_division` of the closed division, whose rules fix the model and much of the recipe.
pub const CLOSED: &str = "closed";
/// `submission_division` of the open division, which allows any model and recipe.
pub const OPEN: &str = "open";
/// `submission_status` of a system available to buy or rent on premises.
pub const ONPREM: &str = "onprem";
/// `submission_status` of a system available to rent in a cloud.
pub const CLOUD: &str = "cloud";
/// `submission_status` of a system that will be available at a later round.
pub const PREVIEW: &str = "preview";
/// `submission_status` of a research, development or internal system.
pub const RESEARCH: &str = "research";
/// `run_stop` status of a run that reached the target accuracy.
pub const SUCCESS: &str = "success";
/// `run_stop` status of a run that stopped without reaching it.
pub const ABORTED: &str = "aborted";
