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
pub use page_cache::{
    drop_page_cache, drop_page_cache_via, evict_from_page_cache, flush_page_cache, CacheFlush,
    DROP_CACHES,
};
pub use run::{clock_start_ms, MlLog, Phase, RunStatus};
pub use writer::{now_ms, MlLogWriter};

/// The lowest top-1 accuracy that counts as reaching the closed ResNet target.
pub const TARGET_ACCURACY: f64 = 0.759;

/// The ruleset every check of these logs uses: the last one with ResNet.
pub const RULESET: &str = "4.0.0";

/// Why an MLLOG call wrote nothing: the file failed, or the call would make a log the
/// compliance checker rejects.
#[derive(Debug, thiserror::Error)]
pub enum MlLogError {
    /// The log file could not be opened for appending.
    #[error("cannot open the MLLOG file {}: {source}", path.display())]
    Open {
        /// The log file.
        path: PathBuf,
        /// Why it could not be opened.
        source: std::io::Error,
    },
    /// A line could not be written, or the file could not be synced to disk.
    #[error("cannot write {key} to the MLLOG file {}: {source}", path.display())]
    Write {
        /// The log file.
        path: PathBuf,
        /// The key of the line being written, or `(sync)` for the sync.
        key: String,
        /// The write's error.
        source: std::io::Error,
    },
    /// A call came at a point of the sequence where the key is not allowed.
    #[error("MLLOG {key} must come {expected} (the log is at {phase:?})")]
    OutOfOrder {
        /// The key that was refused.
        key: &'static str,
        /// When it may come, e.g. `"after run_start"`.
        expected: String,
        /// Where the log was when the call came.
        phase: Phase,
    },
    /// A value no log may carry (an empty name, an accuracy outside [0, 1], …).
    #[error("MLLOG {key}: {reason}")]
    InvalidValue {
        /// The key whose value was refused.
        key: &'static str,
        /// What is wrong with the value.
        reason: String,
    },
    /// The hyperparameters hold values no run can log; the problems, joined by `; `.
    #[error("invalid run configuration: {0}")]
    InvalidConfig(String),
    /// A closed-division log was given hyperparameters the closed rules forbid; the
    /// violations, joined by `; `.
    #[error(
        "the run configuration breaks the closed-division rules (log it as open division): {0}"
    )]
    NotClosedDivision(String),
}
