//! All-reduce bandwidth of any [`AllReduce`], reported the way nccl-tests does: the
//! algorithm bandwidth (buffer bytes over time) and the bus bandwidth (algorithm
//! bandwidth times the ring's `2(n-1)/n`, the bytes each rank's links actually carry).

use std::time::Instant;

use crate::engine::backend::Backend;

use super::collective::AllReduce;
use super::error::ParallelError;
use super::per_rank::run_per_rank;
use super::ring::ring_bus_factor;

/// One all-reduce bandwidth measurement: the buffer, the ranks and the time per call.
#[derive(Debug, Clone, PartialEq)]
pub struct BandwidthReport {
    /// The collective's name in reports (`nccl`, `rccl`, `host-ring`).
    pub collective: String,
    /// Ranks that took part, one per device.
    pub ranks: usize,
    /// Size of the buffer each rank reduces.
    pub bytes: usize,
    /// Timed all-reduces, after the untimed warmup ones.
    pub iterations: usize,
    /// Wall time of one all-reduce, from the slowest rank.
    pub seconds_per_call: f64,
}

impl BandwidthReport {
    /// Algorithm bandwidth in GB/s (10⁹ bytes).
    pub fn algbw_gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds_per_call / 1e9
    }

    /// Bus bandwidth in GB/s: comparable across rank counts and with link speeds.
    pub fn busbw_gbps(&self) -> f64 {
        self.algbw_gbps() * ring_bus_factor(self.ranks)
    }
}

/// Times `iterations` all-reduces (after `warmup` untimed ones) of `elements` f32 on
/// every rank, `backends[r]` being rank `r`'s device. Each call also reduces a one-element
/// marker whose download closes the call (so asynchronous implementations are timed to
/// completion) and whose sum checks that every rank took part.
pub fn measure_all_reduce_bandwidth<B: Backend>(
    collective: &dyn AllReduce<B>,
    backends: &[B],
    elements: usize,
    warmup: usize,
    iterations: usize,
) -> Result<BandwidthReport, ParallelError> {
    if iterations == 0 {
        return Err(ParallelError::Setup {
            reason: "a bandwidth measurement needs at least one timed iteration".into(),
        });
    }
    let ranks = collective.ranks();
    let devices: Vec<String> = backends.iter().map(Backend::name).collect();
    let mut states: Vec<&B> = backends.iter().collect();
    let seconds = run_per_rank(collective, &mut states, &devices, |rank, backend| {
        let backend: &B = backend;
        let mut data = backend.zeros(elements)?;
        let mut marker = backend.zeros(1)?;
        let mut sum = [0.0f32];
        let mut started = Instant::now();
        for i in 0..warmup + iterations {
            if i == warmup {
                started = Instant::now();
            }
            backend.fill(&mut marker, 1.0)?;
            collective.all_reduce_sum(rank, backend, &mut [&mut data, &mut marker])?;
            backend.download(&marker, &mut sum)?;
            if sum[0] != ranks as f32 {
                return Err(ParallelError::Collective {
                    name: collective.name().to_string(),
                    reason: format!(
                        "the marker summed to {} on rank {rank}, expected {ranks}",
                        sum[0]
                    ),
                });
            }
        }
        Ok(started.elapsed().as_secs_f64())
    })?;
    let slowest = seconds.into_iter().fold(0.0, f64::max);
    Ok(BandwidthReport {
        collective: collective.name().to_string(),
        ranks,
        bytes: elements * std::mem::size_of::<f32>(),
        iterations,
        seconds_per_call: slowest / iterations as f64,
    })
}
