//! The supervisor's watchdog: what the worker was last heard saying, the deadline of
//! the stage it is in, and whether it has gone past either.
//!
//! Pure apart from reading the clock it is handed, so every rule is asserted in tests.

use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::suite::deadline::{silence_limit, stage_deadline, start_deadline};
use crate::suite::event::WorkerEvent;

/// How far into a stage the worker is, and what it last said.
#[derive(Debug, Clone)]
pub struct Watchdog {
    options: Map<String, Value>,
    /// The stage in progress, or `None` before the first and between stages.
    stage: Option<String>,
    since: Instant,
    deadline: Duration,
    last_heard: Instant,
    last_event: String,
    last_event_at: Instant,
}

impl Watchdog {
    /// Watches a worker started `now` for a run with `options`.
    pub fn new(options: Map<String, Value>, now: Instant) -> Watchdog {
        let deadline = start_deadline(&options);
        Watchdog {
            options,
            stage: None,
            since: now,
            deadline,
            last_heard: now,
            last_event: "nothing yet (the worker was starting)".into(),
            last_event_at: now,
        }
    }

    /// Notes an event heard at `now`.
    pub fn heard(&mut self, event: &WorkerEvent, now: Instant) {
        self.last_heard = now;
        match event {
            // Sent by threads of their own: alive, but not a sign the stage moves.
            WorkerEvent::Heartbeat | WorkerEvent::Telemetry { .. } => return,
            WorkerEvent::StageStarted { stage, .. } => {
                self.stage = Some(stage.clone());
                self.since = now;
                self.deadline = stage_deadline(stage, &self.options);
            }
            WorkerEvent::StageFinished { .. } => {
                self.stage = None;
                self.since = now;
                self.deadline = start_deadline(&self.options);
            }
            _ => {}
        }
        self.last_event = describe(event);
        self.last_event_at = now;
    }

    /// Why the worker should be stopped at `now`, if it should.
    pub fn overdue(&self, now: Instant) -> Option<String> {
        let stage = match &self.stage {
            Some(stage) => format!("stage {stage}"),
            None => "the worker, between stages,".to_string(),
        };
        let last = format!(
            "last heard: {} ({:.0} s earlier)",
            self.last_event,
            now.duration_since(self.last_event_at).as_secs_f64()
        );
        let in_stage = now.duration_since(self.since);
        if in_stage > self.deadline {
            return Some(format!(
                "{stage} passed its deadline of {} s (stage_timeout_s sets it); {last}",
                seconds(self.deadline)
            ));
        }
        let silent = now.duration_since(self.last_heard);
        let limit = silence_limit(self.deadline);
        if silent > limit {
            return Some(format!(
                "{stage} sent nothing, not even a heartbeat, for {} s (the limit is {} s); {last}",
                seconds(silent),
                seconds(limit)
            ));
        }
        None
    }
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 || s >= 100.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// An event in a few words, for the message of a run the watchdog ended.
fn describe(event: &WorkerEvent) -> String {
    match event {
        WorkerEvent::RunStarted { suite, .. } => format!("run of {suite} started"),
        WorkerEvent::Hardware { .. } => "inventory taken".into(),
        WorkerEvent::StageStarted { stage, .. } => format!("stage {stage} started"),
        WorkerEvent::Progress {
            stage,
            progress,
            message,
        } => {
            let mut text = format!("{stage} at {:.0} %", progress * 100.0);
            if let Some(m) = message {
                text.push_str(": ");
                text.extend(m.chars().take(120));
            }
            text
        }
        WorkerEvent::StageFinished { result } => {
            format!("stage {} finished ({})", result.name, result.verdict)
        }
        WorkerEvent::RunFinished { state, .. } => format!("run finished ({state})"),
        WorkerEvent::Heartbeat => "a heartbeat".into(),
        WorkerEvent::Train { point } => format!(
            "{} epoch {} step {}/{}",
            point.stage, point.epoch, point.global_step, point.planned_steps
        ),
        WorkerEvent::Telemetry { .. } => "a telemetry sample".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn stage_started(name: &str) -> WorkerEvent {
        WorkerEvent::StageStarted {
            stage: name.into(),
            index: 0,
            total: 1,
        }
    }

    #[test]
    fn a_stage_past_its_deadline_is_overdue_naming_it_and_what_was_heard() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(options(json!({"stage_timeout_s": 3})), t0);
        dog.heard(&stage_started("cpu-gemm"), t0);
        dog.heard(
            &WorkerEvent::Progress {
                stage: "cpu-gemm".into(),
                progress: 0.16,
                message: Some("n=1024".into()),
            },
            t0 + Duration::from_secs(1),
        );
        // Heartbeats keep it from being silent, not from its deadline.
        dog.heard(&WorkerEvent::Heartbeat, t0 + Duration::from_secs(2));
        assert!(dog.overdue(t0 + Duration::from_millis(2900)).is_none());
        let why = dog.overdue(t0 + Duration::from_secs(4)).unwrap();
        assert!(
            why.contains("stage cpu-gemm passed its deadline of 3 s"),
            "{why}"
        );
        assert!(
            why.contains("last heard: cpu-gemm at 16 %: n=1024 (3 s earlier)"),
            "{why}"
        );
    }

    #[test]
    fn a_silent_worker_is_overdue_before_a_long_deadline() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(Map::new(), t0);
        dog.heard(&stage_started("mlperf-resnet"), t0);
        let minute = Duration::from_secs(61);
        let why = dog.overdue(t0 + minute).unwrap();
        assert!(
            why.contains("sent nothing, not even a heartbeat, for 61 s"),
            "{why}"
        );
        dog.heard(&WorkerEvent::Heartbeat, t0 + minute);
        assert!(dog.overdue(t0 + minute + Duration::from_secs(30)).is_none());
    }

    #[test]
    fn a_new_stage_gets_a_new_deadline() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(options(json!({"stage_timeout_s": 2})), t0);
        dog.heard(&stage_started("inventory"), t0);
        let later = t0 + Duration::from_millis(1500);
        dog.heard(&stage_started("cpu-gemm"), later);
        assert!(dog.overdue(later + Duration::from_millis(1900)).is_none());
        assert!(dog.overdue(later + Duration::from_millis(2100)).is_some());
    }
}
