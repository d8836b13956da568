//! Training over several devices in one process: a thread per device, the global batch
//! split evenly between them, gradients summed by an all-reduce, and the same optimizer
//! step applied on every replica. Batch-norm statistics stay per device.
//!
//! [`ring`] is the ring all-reduce schedule as data, [`collective`] the interface the
//! training loop calls on every replica's thread, [`host_ring`] the ring run through host
//! memory (for devices without a native collective library), [`nccl`] the one over NCCL
//! for CUDA devices, [`data_parallel`] the training step over replicas, [`buckets`] and
//! [`overlap`] the all-reduce split into buckets that run during the backward pass, and
//! [`throughput`] and [`bandwidth`] the measurements of the acceptance suite.

pub mod bandwidth;
pub mod buckets;
pub mod collective;
pub mod data_parallel;
pub mod error;
pub mod host_ring;
pub mod nccl;
pub mod overlap;
pub mod per_rank;
pub mod ring;
pub mod shard;
pub mod throughput;

pub use bandwidth::{measure_all_reduce_bandwidth, BandwidthReport};
pub use buckets::{bucket_bytes_from_env, BucketPlan, BUCKET_ENV, DEFAULT_BUCKET_BYTES};
pub use collective::{AbortOnPanic, AllReduce};
pub use data_parallel::{DataParallel, Replica};
pub use error::ParallelError;
pub use host_ring::HostRing;
pub use nccl::{gpu_all_reduce, NcclAllReduce};
pub use overlap::GradientBuckets;
pub use per_rank::run_per_rank;
pub use ring::{ring_bus_factor, Combine, RingSchedule, Transfer};
pub use shard::split_batch;
pub use throughput::measure_data_parallel_throughput;
