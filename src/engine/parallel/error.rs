//! What can go wrong when several devices train together.

use std::time::Duration;

use crate::engine::EngineError;

/// A failure of a collective or of a data-parallel step, naming the rank or replica it
/// happened on where there is one.
#[derive(Debug, thiserror::Error)]
pub enum ParallelError {
    /// Another rank failed or gave up; every rank of the collective reports this one.
    #[error("collective aborted because rank {failed} failed: {reason}")]
    PeerFailed {
        /// The rank that failed first (0-based).
        failed: usize,
        /// Why, as the failing rank gave it to `AllReduce::abort`.
        reason: String,
    },
    /// A rank waited past the collective's timeout for data from a peer.
    #[error("rank {rank} waited {waited:?} for data from rank {peer}")]
    Timeout {
        /// The rank that gave up waiting.
        rank: usize,
        /// The rank it was waiting for.
        peer: usize,
        /// How long it waited.
        waited: Duration,
    },
    /// Ranks called the collective with different buffers or in a different order.
    #[error("rank {rank} disagrees with rank {peer}: {reason}")]
    Mismatch {
        /// The rank that noticed.
        rank: usize,
        /// The rank whose data did not match (its ring predecessor).
        peer: usize,
        /// What differed.
        reason: String,
    },
    /// A call for a rank the collective does not have.
    #[error("rank {rank} is out of range for a collective of {ranks} ranks")]
    InvalidRank {
        /// The rank asked for.
        rank: usize,
        /// The collective's rank count; valid ranks are `0..ranks`.
        ranks: usize,
    },
    /// A second call for a rank whose previous call has not returned.
    #[error("rank {rank} called the collective while already inside it")]
    Reentered {
        /// The rank called twice.
        rank: usize,
    },
    /// A failure inside a collective library (e.g. an NCCL error code).
    #[error("{name}: {reason}")]
    Collective {
        /// The collective's name in reports (`nccl`, `rccl`, `host-ring`).
        name: String,
        /// What failed, with the library's own message where it gave one.
        reason: String,
    },
    /// A backend operation (upload, download, a kernel) failed.
    #[error(transparent)]
    Backend(#[from] EngineError),
    /// A replica's thread returned an error; `source` is that error.
    #[error("replica {replica} ({device}): {source}")]
    ReplicaFailed {
        /// The replica's index, which is its rank (0-based).
        replica: usize,
        /// The replica's backend name.
        device: String,
        /// The error the replica's thread returned.
        source: Box<ParallelError>,
    },
    /// A replica's thread panicked.
    #[error("replica {replica} ({device}) panicked: {message}")]
    ReplicaPanicked {
        /// The replica's index, which is its rank (0-based).
        replica: usize,
        /// The replica's backend name.
        device: String,
        /// The panic's message, where it carried a string.
        message: String,
    },
    /// A batch that cannot be cut into equal shards, one per replica.
    #[error("a global batch of {batch} samples does not split evenly over {replicas} replicas")]
    BatchNotDivisible {
        /// Samples in the batch.
        batch: usize,
        /// Replicas it was to be split over.
        replicas: usize,
    },
    /// Data-parallel training or a collective cannot be set up as asked (no ranks,
    /// replicas that do not match the collective, a bad bucket size, …).
    #[error("data-parallel setup: {reason}")]
    Setup {
        /// What is wrong.
        reason: String,
    },
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
