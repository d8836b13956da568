//! One thread per rank for the length of one collective piece of work, so a failing
//! rank can never leave the others waiting.

use std::any::Any;

use crate::engine::backend::Backend;

use super::collective::{AbortOnPanic, AllReduce};
use super::error::ParallelError;

/// Runs `work(rank, &mut states[rank])` for every rank on its own scoped thread. A rank
/// that fails or panics aborts `collective`, which releases the others. Returns every
/// rank's value, or the error of the rank that failed first (the others' errors only
/// report that it did), naming the rank and its device from `devices`.
pub fn run_per_rank<B, S, T, F>(
    collective: &dyn AllReduce<B>,
    states: &mut [S],
    devices: &[String],
    work: F,
) -> Result<Vec<T>, ParallelError>
where
    B: Backend,
    S: Send,
    T: Send,
    F: Fn(usize, &mut S) -> Result<T, ParallelError> + Sync,
{
    if states.len() != collective.ranks() || devices.len() != states.len() {
        return Err(ParallelError::Setup {
            reason: format!(
                "{} ranks with {} devices for a collective of {} ranks",
                states.len(),
                devices.len(),
                collective.ranks()
            ),
        });
    }
    let joined: Vec<std::thread::Result<Result<T, ParallelError>>> = std::thread::scope(|s| {
        let handles: Vec<_> = states
            .iter_mut()
            .enumerate()
            .map(|(rank, state)| {
                let work = &work;
                s.spawn(move || {
                    let _abort_on_panic = AbortOnPanic::new(collective, rank);
                    let result = work(rank, state);
                    if let Err(e) = &result {
                        if !e.is_consequence() {
                            collective.abort(rank, &e.to_string());
                        }
                    }
                    result
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });

    let mut values = Vec::with_capacity(joined.len());
    let mut errors = Vec::new();
    for (rank, outcome) in joined.into_iter().enumerate() {
        let device = devices[rank].clone();
        match outcome {
            Ok(Ok(value)) => values.push(value),
            Ok(Err(source)) => errors.push(ParallelError::ReplicaFailed {
                replica: rank,
                device,
                source: Box::new(source),
            }),
            Err(payload) => errors.push(ParallelError::ReplicaPanicked {
                replica: rank,
                device,
                message: panic_message(payload.as_ref()),
            }),
        }
    }
    if errors.is_empty() {
        return Ok(values);
    }
    // The ranks that only saw the abort name the rank that caused it.
    let aborted_by = errors.iter().find_map(ParallelError::failed_peer);
    let root = errors
        .iter()
        .position(|e| e.replica().is_some() && e.replica() == aborted_by)
        .or_else(|| errors.iter().position(|e| !e.is_consequence()))
        .unwrap_or(0);
    Err(errors.swap_remove(root))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}
