//! The training engine: the recipe (optimizers, LR schedule, weight initialisation,
//! hyperparameters), the deterministic generator everything random draws from, and
//! MLLOG.

pub mod init;
pub mod mllog;
pub mod optim;
pub mod recipe;
pub mod rng;
pub mod schedule;
