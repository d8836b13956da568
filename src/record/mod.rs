//! The run record (states, verdicts, metrics, checks) and the durable store of runs.
//!
//! Every other layer uses these types; this module uses none of them, so data can
//! flow one way: inventory → suite plan → worker → events → store → D-Bus and HTTP.

pub mod brief;
pub mod energy;
pub mod files;
mod index;
pub mod latest;
pub mod newer_fields;
mod run;
pub mod store;
pub mod writer;

pub use brief::{Figure, RunBrief, StageBrief};
pub use energy::{joules_to_kwh, run_energy_j, ENERGY_METRIC, JOULES_PER_KWH};
pub use latest::{LatestResults, StageOutcome, SuiteResult};
pub use run::*;
