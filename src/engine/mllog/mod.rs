//! MLPerf logging: `:::MLLOG` lines in the format of the `mlperf_logging` Python library,
//! with the keys the closed-division ResNet compliance checker (ruleset 4.0.0) needs.
//!
//! A training run uses it like this:
//! ```no_run
//! # fn main() -> Result<(), tinyperf::engine::mllog::MlLogError> {
//! use tinyperf::engine::mllog::{drop_page_cache, MlLog, RunConfig, RunStatus, Submission, SUBMITTER};
//! let mut log = MlLog::create(std::path::Path::new("/var/lib/tinyperf/runs/x/mllog.txt"))?;
//! log.submission(&Submission::resnet(SUBMITTER, "tinybox_green"))?;
//! log.cache_clear(drop_page_cache().flushed())?;
//! log.init_start()?;
//! // build the model, compile, warm up on synthetic input
//! log.init_stop()?;
//! log.run_start()?;
//! log.run_header(&RunConfig::tinybox_v4_0(42))?;
//! log.epoch_start(1)?;
//! // train one epoch
//! log.epoch_stop(1)?;
//! log.eval_start(1)?;
//! log.eval_accuracy(1, 0.7601)?;
//! log.eval_stop(1)?;
//! log.run_stop(RunStatus::Success)?;
//! # Ok(()) }
//! ```

mod config;
mod encode;
pub mod keys;
mod page_cache;
mod run;
mod writer;

use std::path::PathBuf;

pub use config::{Division, RunConfig, Submission, SubmissionStatus, SUBMITTER};
pub use encode::{encode_line, python_float_repr, Event, EventType, LogValue, LINE_PREFIX};
pub use page_cache::{drop_page_cache, drop_page_cache_via, CacheFlush, DROP_CACHES};
pub use run::{clock_start_ms, MlLog, Phase, RunStatus};
pub use writer::{now_ms, MlLogWriter};

/// The lowest top-1 accuracy that counts as reaching the closed ResNet target.
pub const TARGET_ACCURACY: f64 = 0.759;

/// The ruleset every check of these logs uses: the last one with ResNet.
pub const RULESET: &str = "4.0.0";

#[derive(Debug, thiserror::Error)]
pub enum MlLogError {
    #[error("cannot open the MLLOG file {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {key} to the MLLOG file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        key: String,
        source: std::io::Error,
    },
    #[error("MLLOG {key} must come {expected} (the log is at {phase:?})")]
    OutOfOrder {
        key: &'static str,
        expected: String,
        phase: Phase,
    },
    #[error("MLLOG {key}: {reason}")]
    InvalidValue { key: &'static str, reason: String },
    #[error("invalid run configuration: {0}")]
    InvalidConfig(String),
    #[error(
        "the run configuration breaks the closed-division rules (log it as open division): {0}"
    )]
    NotClosedDivision(String),
}
