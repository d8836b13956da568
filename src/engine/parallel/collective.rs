//! The collective the data-parallel step calls: every rank's thread calls it with its own
//! backend and buffers, and it returns when the buffers hold the sum over all ranks.

use crate::engine::backend::Backend;

use super::error::ParallelError;

/// An all-reduce over a fixed group of ranks, one rank per device.
///
/// Buffers stay where the backend keeps them: an implementation over a collective library
/// (NCCL, RCCL) works on device memory directly; [`HostRing`](super::HostRing) stages
/// through [`Backend::download`] and [`Backend::upload`].
///
/// Contract for callers: every rank makes the same sequence of calls, each with buffers
/// of the same lengths in the same order. A rank that fails anywhere between two
/// collectives, or stops calling them, must call [`AllReduce::abort`] so the others stop
/// waiting; [`AbortOnPanic`] does that for a panicking thread.
pub trait AllReduce<B: Backend>: Send + Sync {
    /// A short name for reports, e.g. `host-ring`.
    fn name(&self) -> &str;

    /// Number of ranks taking part.
    fn ranks(&self) -> usize;

    /// Replaces each of `buffers` by its elementwise sum over all ranks. Collective: it
    /// returns once every rank has made the matching call, or with an error naming the
    /// rank that failed when one does. All ranks end with bit-identical sums.
    fn all_reduce_sum(
        &self,
        rank: usize,
        backend: &B,
        buffers: &mut [&mut B::Buffer],
    ) -> Result<(), ParallelError>;

    /// Marks `rank` as failed for `reason`: every rank waiting in, or later entering, a
    /// collective returns [`ParallelError::PeerFailed`] naming it. The first abort wins;
    /// the group cannot be used afterwards.
    fn abort(&self, rank: usize, reason: &str);
}

/// Aborts the collective for `rank` when dropped during a panic, so a panicking replica
/// thread cannot leave the others waiting.
pub struct AbortOnPanic<'a, B: Backend> {
    collective: &'a dyn AllReduce<B>,
    rank: usize,
}

impl<'a, B: Backend> AbortOnPanic<'a, B> {
    /// A guard for `rank` of `collective`; keep it alive for as long as the thread takes
    /// part.
    pub fn new(collective: &'a dyn AllReduce<B>, rank: usize) -> Self {
        AbortOnPanic { collective, rank }
    }
}

impl<B: Backend> Drop for AbortOnPanic<'_, B> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.collective.abort(self.rank, "its thread panicked");
        }
    }
}
