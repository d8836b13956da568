//! The run supervisor's state machine: pure, so every transition is asserted in tests.

/// Where the supervisor stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupervisorState {
    /// No run is in progress; a start is accepted.
    Idle,
    /// A run's worker is executing it.
    Running {
        /// The run in progress.
        run_id: String,
    },
    /// Cancel was asked for; the worker has not exited yet.
    Cancelling {
        /// The run being cancelled.
        run_id: String,
    },
}

/// What can happen to the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A run was asked for and passed the preflight.
    Start {
        /// The id the new run is given.
        run_id: String,
    },
    /// A cancel was asked for.
    Cancel {
        /// The run the caller wants cancelled.
        run_id: String,
    },
    /// A worker process ended.
    WorkerExited {
        /// The run that worker executed.
        run_id: String,
    },
}

/// Why an input is refused in the current state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// A start while a run is in progress (or being cancelled).
    #[error("run {current} is in progress")]
    Busy {
        /// The run in progress.
        current: String,
    },
    /// A cancel of a run that is not the one in progress.
    #[error("run {run_id} is not in progress")]
    NotInProgress {
        /// The run the cancel named.
        run_id: String,
    },
    /// An exit of a worker whose run is not the one in progress.
    #[error("a worker for run {run_id} exited, but it was not running")]
    StrayWorker {
        /// The run that worker claimed.
        run_id: String,
    },
}

impl SupervisorState {
    /// The run in progress, if any.
    pub fn current_run(&self) -> Option<&str> {
        match self {
            SupervisorState::Idle => None,
            SupervisorState::Running { run_id } | SupervisorState::Cancelling { run_id } => {
                Some(run_id)
            }
        }
    }

    /// The state after `input`, or why `input` is refused (the state is then unchanged).
    pub fn next(&self, input: &Input) -> Result<SupervisorState, TransitionError> {
        use SupervisorState::*;
        match (self, input) {
            (Idle, Input::Start { run_id }) => Ok(Running {
                run_id: run_id.clone(),
            }),
            (Running { run_id } | Cancelling { run_id }, Input::Start { .. }) => {
                Err(TransitionError::Busy {
                    current: run_id.clone(),
                })
            }
            (
                Running { run_id: current } | Cancelling { run_id: current },
                Input::Cancel { run_id },
            ) if current == run_id => Ok(Cancelling {
                run_id: run_id.clone(),
            }),
            (_, Input::Cancel { run_id }) => Err(TransitionError::NotInProgress {
                run_id: run_id.clone(),
            }),
            (
                Running { run_id: current } | Cancelling { run_id: current },
                Input::WorkerExited { run_id },
            ) if current == run_id => Ok(Idle),
            (_, Input::WorkerExited { run_id }) => Err(TransitionError::StrayWorker {
                run_id: run_id.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SupervisorState::*;

    fn start(id: &str) -> Input {
        Input::Start { run_id: id.into() }
    }
    fn cancel(id: &str) -> Input {
        Input::Cancel { run_id: id.into() }
    }
    fn exited(id: &str) -> Input {
        Input::WorkerExited { run_id: id.into() }
    }
    fn running(id: &str) -> SupervisorState {
        Running { run_id: id.into() }
    }
    fn cancelling(id: &str) -> SupervisorState {
        Cancelling { run_id: id.into() }
    }

    #[test]
    fn a_run_goes_idle_running_idle() {
        let s = Idle.next(&start("a")).unwrap();
        assert_eq!(s, running("a"));
        assert_eq!(s.current_run(), Some("a"));
        assert_eq!(s.next(&exited("a")).unwrap(), Idle);
    }

    #[test]
    fn start_while_running_or_cancelling_is_busy() {
        for s in [running("a"), cancelling("a")] {
            assert_eq!(
                s.next(&start("b")),
                Err(TransitionError::Busy {
                    current: "a".into()
                })
            );
        }
    }

    #[test]
    fn cancel_only_reaches_the_run_in_progress() {
        assert_eq!(running("a").next(&cancel("a")).unwrap(), cancelling("a"));
        assert_eq!(cancelling("a").next(&cancel("a")).unwrap(), cancelling("a"));
        assert_eq!(
            running("a").next(&cancel("b")),
            Err(TransitionError::NotInProgress { run_id: "b".into() })
        );
        assert_eq!(
            Idle.next(&cancel("a")),
            Err(TransitionError::NotInProgress { run_id: "a".into() })
        );
        assert_eq!(cancelling("a").next(&exited("a")).unwrap(), Idle);
    }

    #[test]
    fn a_stray_worker_exit_changes_nothing() {
        assert!(matches!(
            Idle.next(&exited("a")),
            Err(TransitionError::StrayWorker { .. })
        ));
        assert!(matches!(
            running("a").next(&exited("b")),
            Err(TransitionError::StrayWorker { .. })
        ));
    }
}
