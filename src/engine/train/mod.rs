//! Training: the loop that drives a [`Model`](crate::engine::model::Model) through the
//! recipe, the optimizer applied on the device, and the throughput measurement of the
//! acceptance suite.

pub mod data_parallel;
pub mod loss_scale;
pub mod models;
pub mod optimizer;
pub mod step;
pub mod throughput;
pub mod trainer;

pub use data_parallel::{data_parallel_for, train_data_parallel};
pub use loss_scale::{LossScaler, LossScaling, OverflowVerdict};
pub use models::ModelChoice;
pub use optimizer::{DeviceOptimizer, UpdateOutcome};
pub use step::{
    compute_gradients, compute_gradients_notifying, eval_step, train_step, DeviceBatch,
    GradientOutcome, StepOutcome, StepResult,
};
pub use throughput::{measure_train_throughput, ThroughputReport};
pub use trainer::{
    train, EpochReport, StepReport, StopReason, TrainData, TrainObserver, TrainSummary,
};
