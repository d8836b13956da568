//! The training engine.

pub mod data;
pub mod mllog;
