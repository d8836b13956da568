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
    /// A tensor's shape is not the one the op needs.
    #[error("{op}: shape mismatch for {what}: expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        /// The op that refused the input, e.g. `"batch_norm"`.
        op: &'static str,
        /// Which operand or property was checked.
        what: &'static str,
        /// The shape the op needs (empty when only the rank was wrong).
        expected: Vec<usize>,
        /// The shape it was given.
        got: Vec<usize>,
    },
    /// A buffer holds a different number of elements than its shape or op implies.
    #[error("{op}: buffer {what} holds {got} elements, needs {expected}")]
    BufferLength {
        /// The op that checked the buffer.
        op: &'static str,
        /// Which buffer was checked.
        what: &'static str,
        /// Elements the op needs.
        expected: usize,
        /// Elements the buffer holds.
        got: usize,
    },
    /// A scalar or configuration argument is out of range or inconsistent.
    #[error("{op}: invalid parameter: {reason}")]
    InvalidParameter {
        /// The op that refused the argument.
        op: &'static str,
        /// What is wrong with it, for a person.
        reason: String,
    },
    /// A layer's backward ran without the state its forward saves.
    #[error("{op}: backward called before forward")]
    MissingForwardState {
        /// The layer or op whose saved state was missing.
        op: &'static str,
    },
    /// The device or its runtime failed (allocation, launch, copy or a fault).
    #[error("backend {backend}: {reason}")]
    Device {
        /// The backend's name, e.g. `"cuda:0"`.
        backend: String,
        /// The runtime's error message.
        reason: String,
    },
}

impl EngineError {
    /// `Ok` when a buffer holds the `expected` number of elements, else
    /// [`EngineError::BufferLength`] naming the op that checked and the buffer.
    pub fn check_length(
        op: &'static str,
        what: &'static str,
        expected: usize,
        got: usize,
    ) -> Result<()> {
        if got == expected {
            Ok(())
        } else {
            Err(EngineError::BufferLength {
                op,
                what,
                expected,
                got,
            })
        }
    }
}

/// A result whose error is an [`EngineError`] unless said otherwise.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
