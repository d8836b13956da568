//! The training engine.

pub mod data;
