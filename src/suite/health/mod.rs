//! The health checks: per GPU, each with one of pass, warn, fail, skip (does not apply)
//! and error (could not run), kept apart: a check that could not run never reads as a
//! broken GPU, nor the reverse.

pub mod bmc_checks;
pub mod corruption;
pub mod corruption_stage;
pub mod driver_reports;
pub mod kernel_stage;
pub mod link_stage;
pub mod memory;
pub mod memory_stage;
pub mod peers;
pub mod pulse_stage;
pub mod ramp_stage;
pub mod result;
pub mod throttle_stage;

use serde::{Deserialize, Serialize};

/// The suite's name.
pub const SUITE: &str = "health";

/// The outcome of one check on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Ran and found nothing wrong.
    Pass,
    /// Works, with something a person should know.
    Warn,
    /// The GPU (or its link, slot or memory) is faulty.
    Fail,
    /// Does not apply to this GPU, with why.
    Skip,
    /// Could not run, with why: says nothing about the GPU.
    Error,
}

impl Outcome {
    /// The outcome as the health result spells it: `pass`, `warn`, `fail`, `skip` or
    /// `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Warn => "warn",
            Outcome::Fail => "fail",
            Outcome::Skip => "skip",
            Outcome::Error => "error",
        }
    }
}
