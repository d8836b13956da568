//! The health pass the agent runs on its own while nobody uses the box: a run like any
//! other (trigger `schedule`), due `every` after the last one once no run has ended for
//! `after`, and gone the moment somebody starts a run of their own (the supervisor
//! cancels it and starts theirs).

use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::{info, warn};

use super::config::IdleHealth;
use super::error::AgentError;
use super::handle::AgentHandle;
use super::status::AgentState;
use crate::record::{RunBrief, Trigger};

/// The longest the schedule sleeps between looks, so that a pass is not late by more.
const MAX_NAP: Duration = Duration::from_secs(60);
/// How many recent runs are looked through for the last scheduled one.
const RUNS_LOOKED_AT: usize = 1000;

/// When the next pass is due, from what has run. `None` when it is due now.
pub fn wait_before_next(
    schedule: &IdleHealth,
    now: DateTime<Utc>,
    agent_started: DateTime<Utc>,
    runs: &[RunBrief],
) -> Option<Duration> {
    // The box is in use until `after` has passed since the last run ended, or since the
    // agent started (a box that just booted has its boot suite, and its owner, first).
    let last_ended = runs
        .iter()
        .map(|r| r.finished_at.unwrap_or(r.started_at))
        .max()
        .map_or(agent_started, |t| t.max(agent_started));
    let idle_at = last_ended + chrono_duration(schedule.after);
    let last_pass = runs
        .iter()
        .filter(|r| r.trigger == Trigger::Schedule)
        .map(|r| r.started_at)
        .max();
    let due_at = match last_pass {
        Some(started) => idle_at.max(started + chrono_duration(schedule.every)),
        None => idle_at,
    };
    (due_at - now).to_std().ok().filter(|d| !d.is_zero())
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Starts the schedule on the agent's runtime.
pub fn spawn(handle: AgentHandle, schedule: IdleHealth) -> tokio::task::JoinHandle<()> {
    let agent_started = Utc::now();
    info!(
        every_s = schedule.every.as_secs_f64(),
        after_s = schedule.after.as_secs_f64(),
        suite = %schedule.suite,
        "idle health passes scheduled"
    );
    tokio::spawn(async move {
        loop {
            let wait = if handle.status().state == AgentState::Idle {
                let runs = handle.list_runs(RUNS_LOOKED_AT);
                wait_before_next(&schedule, Utc::now(), agent_started, &runs)
            } else {
                Some(MAX_NAP)
            };
            match wait {
                Some(wait) => tokio::time::sleep(wait.min(MAX_NAP)).await,
                None => {
                    start_pass(&handle, &schedule).await;
                    // Whatever came of it, the runs it left decide the next look.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    })
}

async fn start_pass(handle: &AgentHandle, schedule: &IdleHealth) {
    match handle
        .start(&schedule.suite, schedule.options.clone(), Trigger::Schedule)
        .await
    {
        Ok(id) => info!(run = %id, suite = %schedule.suite, "idle health pass started"),
        // Somebody started a run in between: theirs goes first.
        Err(AgentError::Busy(_)) => {}
        Err(e) => {
            // A pass that cannot start (a full disk, say) is tried again when next due,
            // not in a tight loop.
            warn!(error = %e, "cannot start the idle health pass");
            tokio::time::sleep(schedule.every.min(Duration::from_secs(3600))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RunRecord;

    fn schedule() -> IdleHealth {
        IdleHealth {
            every: Duration::from_secs(6 * 3600),
            after: Duration::from_secs(30 * 60),
            suite: "health".into(),
            options: Default::default(),
        }
    }

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + chrono::Duration::minutes(minutes)
    }

    fn run(trigger: Trigger, started: i64, finished: i64) -> RunBrief {
        let mut record = RunRecord::new(
            format!("r{started}"),
            "health".into(),
            trigger,
            Default::default(),
        );
        record.started_at = at(started);
        record.finish(crate::record::RunState::Passed, None);
        record.finished_at = Some(at(finished));
        RunBrief::from(&record)
    }

    fn minutes(d: Option<Duration>) -> Option<u64> {
        d.map(|d| d.as_secs() / 60)
    }

    #[test]
    fn a_pass_waits_for_the_box_to_be_idle_long_enough() {
        // The agent started at 0: nothing before 30 minutes.
        assert_eq!(
            minutes(wait_before_next(&schedule(), at(10), at(0), &[])),
            Some(20)
        );
        assert_eq!(wait_before_next(&schedule(), at(30), at(0), &[]), None);
        // A user's run that ended at 100 holds the pass until 130.
        let runs = [run(Trigger::Http, 40, 100)];
        assert_eq!(
            minutes(wait_before_next(&schedule(), at(110), at(0), &runs)),
            Some(20)
        );
        assert_eq!(wait_before_next(&schedule(), at(131), at(0), &runs), None);
    }

    #[test]
    fn the_next_pass_is_due_every_period_after_the_last() {
        let runs = [run(Trigger::Schedule, 60, 70)];
        // Six hours after the last pass began, and idle since it ended.
        assert_eq!(
            minutes(wait_before_next(&schedule(), at(100), at(0), &runs)),
            Some(320)
        );
        assert_eq!(wait_before_next(&schedule(), at(420), at(0), &runs), None);
        // A user's run after the pass pushes it back until the box is idle again.
        let runs = [run(Trigger::Schedule, 60, 70), run(Trigger::Dbus, 400, 415)];
        assert_eq!(
            minutes(wait_before_next(&schedule(), at(420), at(0), &runs)),
            Some(25)
        );
    }
}
