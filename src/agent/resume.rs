//! Taking up, when the agent starts, a burn-in that a reboot interrupted (a power trip,
//! an update): a new run of the same suite and options (trigger `resume`) that carries
//! over the stages the interrupted run finished and runs the rest.

use tracing::{info, warn};

use super::error::AgentError;
use super::handle::AgentHandle;
use crate::record::RunState;

/// The suites whose interrupted runs are taken up again: hours of work that a reboot
/// should not throw away.
pub const RESUMABLE_SUITES: &[&str] = &[crate::suite::burn_in::NAME];

/// How many times one run is taken up again before it is left interrupted: a box that
/// goes dark at the same stage every time should be looked at, not retried forever.
pub const MAX_RESUMES: usize = 3;

/// Takes up the newest run when a reboot interrupted it and its suite is resumable:
/// the new run's id, why it could not start, or `None` when there was nothing to take up.
pub async fn resume_interrupted(handle: &AgentHandle) -> Option<Result<String, AgentError>> {
    let newest = handle.list_runs(1).into_iter().next()?;
    if newest.state != RunState::Interrupted || !RESUMABLE_SUITES.contains(&newest.suite.as_str()) {
        return None;
    }
    let mut resumes = 0;
    let mut link = handle.get_run(&newest.id).await.ok()?.resumed_from.clone();
    while let Some(earlier) = link {
        resumes += 1;
        if resumes >= MAX_RESUMES {
            warn!(
                run = %newest.id,
                resumes,
                "an interrupted run was already taken up {MAX_RESUMES} times; left interrupted"
            );
            return None;
        }
        link = match handle.get_run(&earlier).await {
            Ok(record) => record.resumed_from.clone(),
            Err(_) => None,
        };
    }
    info!(run = %newest.id, suite = %newest.suite, "taking up the interrupted run");
    Some(handle.resume(&newest.id).await)
}
