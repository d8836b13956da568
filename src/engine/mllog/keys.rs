//! Key and value names, spelled as `mlperf_logging.mllog.constants` spells them.

// Submission.
pub const SUBMISSION_BENCHMARK: &str = "submission_benchmark";
pub const SUBMISSION_DIVISION: &str = "submission_division";
pub const SUBMISSION_ORG: &str = "submission_org";
pub const SUBMISSION_PLATFORM: &str = "submission_platform";
pub const SUBMISSION_STATUS: &str = "submission_status";

// Run structure.
pub const CACHE_CLEAR: &str = "cache_clear";
pub const INIT_START: &str = "init_start";
pub const INIT_STOP: &str = "init_stop";
pub const RUN_START: &str = "run_start";
pub const RUN_STOP: &str = "run_stop";
pub const BLOCK_START: &str = "block_start";
pub const BLOCK_STOP: &str = "block_stop";
pub const EPOCH_START: &str = "epoch_start";
pub const EPOCH_STOP: &str = "epoch_stop";
pub const EVAL_START: &str = "eval_start";
pub const EVAL_STOP: &str = "eval_stop";
pub const EVAL_ACCURACY: &str = "eval_accuracy";
pub const TRACKED_STATS: &str = "tracked_stats";

// Hyperparameters.
pub const SEED: &str = "seed";
pub const GLOBAL_BATCH_SIZE: &str = "global_batch_size";
pub const TRAIN_SAMPLES: &str = "train_samples";
pub const EVAL_SAMPLES: &str = "eval_samples";
pub const GRADIENT_ACCUMULATION_STEPS: &str = "gradient_accumulation_steps";
pub const OPT_NAME: &str = "opt_name";
pub const LARS_EPSILON: &str = "lars_epsilon";
pub const LARS_OPT_BASE_LEARNING_RATE: &str = "lars_opt_base_learning_rate";
pub const LARS_OPT_END_LR: &str = "lars_opt_end_learning_rate";
pub const LARS_OPT_LEARNING_RATE_WARMUP_EPOCHS: &str = "lars_opt_learning_rate_warmup_epochs";
pub const LARS_OPT_LR_DECAY_POLY_POWER: &str = "lars_opt_learning_rate_decay_poly_power";
pub const LARS_OPT_LR_DECAY_STEPS: &str = "lars_opt_learning_rate_decay_steps";
pub const LARS_OPT_MOMENTUM: &str = "lars_opt_momentum";
pub const LARS_OPT_WEIGHT_DECAY: &str = "lars_opt_weight_decay";
pub const MODEL_BN_SPAN: &str = "model_bn_span";

// Metadata fields.
pub const FILE: &str = "file";
pub const LINENO: &str = "lineno";
pub const EPOCH_NUM: &str = "epoch_num";
pub const FIRST_EPOCH_NUM: &str = "first_epoch_num";
pub const EPOCH_COUNT: &str = "epoch_count";
pub const STATUS: &str = "status";
pub const STEP: &str = "step";
pub const THROUGHPUT: &str = "throughput";

// Values.
pub const RESNET: &str = "resnet";
pub const LARS: &str = "lars";
pub const CLOSED: &str = "closed";
pub const OPEN: &str = "open";
pub const ONPREM: &str = "onprem";
pub const CLOUD: &str = "cloud";
pub const PREVIEW: &str = "preview";
pub const RESEARCH: &str = "research";
pub const SUCCESS: &str = "success";
pub const ABORTED: &str = "aborted";
