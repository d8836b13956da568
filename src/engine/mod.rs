//! The training engine: tensors over device buffers, the backend boundary every device
//! implements, the CPU backend, layers as explicit forward/backward pairs, and the
//! training recipe (optimizers, LR schedule, weight initialisation, hyperparameters).
//!
//! Activations are NHWC (channels last) and f32. A training step only ever moves data to
//! the host through [`Backend::download`], so the same model code runs on a GPU backend
//! without host round-trips.

pub mod backend;
pub mod cost;
pub mod data;
#[cfg(test)]
pub mod gradcheck;
pub mod init;
pub mod layers;
pub mod mllog;
pub mod model;
pub mod optim;
pub mod parallel;
pub mod precision;
pub mod recipe;
pub mod rng;
pub mod schedule;
pub mod tensor;
pub mod train;

pub use backend::cpu::CpuBackend;
pub use backend::{
    Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved, Conv2dParams,
    CrossEntropyParams, DType, GlobalPoolParams, LinearParams, PoolParams,
};
pub use precision::Precision;
pub use tensor::Tensor;

/// What can go wrong at the engine's API: every case is bad input or a device failure,
/// reported instead of panicking.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{op}: shape mismatch for {what}: expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        op: &'static str,
        what: &'static str,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    #[error("{op}: buffer {what} holds {got} elements, needs {expected}")]
    BufferLength {
        op: &'static str,
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{op}: invalid parameter: {reason}")]
    InvalidParameter { op: &'static str, reason: String },
    #[error("{op}: backward called before forward")]
    MissingForwardState { op: &'static str },
    #[error("backend {backend}: {reason}")]
    Device { backend: String, reason: String },
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
