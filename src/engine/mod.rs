//! The training engine: the recipe (optimizers, LR schedule, weight initialisation,
//! hyperparameters) and the deterministic generator everything random draws from.

pub mod init;
pub mod optim;
pub mod recipe;
pub mod rng;
pub mod schedule;
