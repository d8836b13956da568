//! The command line: argument definitions and the D-Bus client commands.

pub mod args;
pub mod boot_check;
pub mod box_record;
pub mod client;
pub mod dataset;
pub mod generate;
pub mod gpu;
mod gpu_compile;
mod gpu_floors;
pub mod human;
pub mod image;
pub mod image_update;
pub mod kernel_log;
pub mod mlperf;
pub mod printable;
pub mod progress;
pub mod run;

/// A mistake in how tinyperf was called, reported with exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
