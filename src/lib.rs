//! tinyperf: the benchmark appliance agent of a tinybox.
//!
//! Data flows one way: inventory → suite plan → worker executes stages → JSON-lines
//! events → supervisor → store, D-Bus and HTTP. `record` holds what every layer
//! shares (the run record and its store) and imports none of them.

#![warn(missing_docs)]

pub mod agent;
pub mod api;
pub mod cli;
pub mod echo;
pub mod engine;
pub mod inventory;
pub mod mlperf;
pub mod record;
pub mod runtime;
pub mod suite;
pub mod update;

/// The version every interface reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
