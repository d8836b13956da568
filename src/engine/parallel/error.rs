//! What can go wrong when several devices train together.

use std::time::Duration;

use crate::engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum ParallelError {
    /// Another rank failed or gave up; every rank of the collective reports this one.
    #[error("collective aborted because rank {failed} failed: {reason}")]
    PeerFailed { failed: usize, reason: String },
    #[error("rank {rank} waited {waited:?} for data from rank {peer}")]
    Timeout {
        rank: usize,
        peer: usize,
        waited: Duration,
    },
    /// Ranks called the collective with different buffers or in a different order.
    #[error("rank {rank} disagrees with rank {peer}: {reason}")]
    Mismatch {
        rank: usize,
        peer: usize,
        reason: String,
    },
    #[error("rank {rank} is out of range for a collective of {ranks} ranks")]
    InvalidRank { rank: usize, ranks: usize },
    #[error("rank {rank} called the collective while already inside it")]
    Reentered { rank: usize },
    /// A failure inside a collective library (e.g. an NCCL error code).
    #[error("{name}: {reason}")]
    Collective { name: String, reason: String },
    #[error(transparent)]
    Backend(#[from] EngineError),
    #[error("replica {replica} ({device}): {source}")]
    ReplicaFailed {
        replica: usize,
        device: String,
        source: Box<ParallelError>,
    },
    #[error("replica {replica} ({device}) panicked: {message}")]
    ReplicaPanicked {
        replica: usize,
        device: String,
        message: String,
    },
    #[error("a global batch of {batch} samples does not split evenly over {replicas} replicas")]
    BatchNotDivisible { batch: usize, replicas: usize },
    #[error("data-parallel setup: {reason}")]
    Setup { reason: String },
}

impl ParallelError {
    /// Whether this error only reports that some other rank failed first.
    pub fn is_consequence(&self) -> bool {
        match self {
            ParallelError::PeerFailed { .. } => true,
            ParallelError::ReplicaFailed { source, .. } => source.is_consequence(),
            _ => false,
        }
    }

    /// The rank whose failure this error reports, when it only reports another's.
    pub fn failed_peer(&self) -> Option<usize> {
        match self {
            ParallelError::PeerFailed { failed, .. } => Some(*failed),
            ParallelError::ReplicaFailed { source, .. } => source.failed_peer(),
            _ => None,
        }
    }

    /// The replica a data-parallel error is about.
    pub fn replica(&self) -> Option<usize> {
        match self {
            ParallelError::ReplicaFailed { replica, .. }
            | ParallelError::ReplicaPanicked { replica, .. } => Some(*replica),
            _ => None,
        }
    }
}
