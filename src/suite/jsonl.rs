//! The worker's side of the JSON-lines protocol: each event, a heartbeat while a stage
//! computes, and live telemetry samples on stdout, one whole line at a time.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::deadline::HEARTBEAT_INTERVAL;
use super::event::WorkerEvent;
use super::worker::EventSink;
use crate::runtime::telemetry::SampleSink;

/// Events as JSON lines on stdout for the agent's supervisor.
pub struct JsonLines {
    heartbeat: Option<Heartbeat>,
    /// Set once the run's last line is out: no heartbeat or sample follows it.
    run_ended: Arc<AtomicBool>,
}

impl JsonLines {
    /// Starts writing; the heartbeat begins at once, since the supervisor reads
    /// silence as a hung worker.
    pub fn start() -> JsonLines {
        JsonLines {
            heartbeat: Some(Heartbeat::start()),
            run_ended: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl EventSink for JsonLines {
    fn event(&mut self, event: &WorkerEvent) -> std::io::Result<()> {
        if matches!(event, WorkerEvent::RunFinished { .. }) {
            self.run_ended.store(true, Ordering::Relaxed);
            self.heartbeat.take();
        }
        // Locked per event, so heartbeats interleave between whole lines.
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", event.to_line()).and_then(|_| out.flush())
    }

    fn live_telemetry(&mut self) -> Option<SampleSink> {
        let run_ended = Arc::clone(&self.run_ended);
        Some(SampleSink::new(move |sample| {
            if run_ended.load(Ordering::Relaxed) {
                return;
            }
            let line = WorkerEvent::Telemetry {
                sample: sample.clone(),
            }
            .to_line();
            let mut out = std::io::stdout().lock();
            // A reader that went away is noticed by the run's own events.
            let _ = writeln!(out, "{line}").and_then(|_| out.flush());
        }))
    }
}

/// Writes a heartbeat line every [`HEARTBEAT_INTERVAL`] until dropped.
struct Heartbeat {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    fn start() -> Heartbeat {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let line = WorkerEvent::Heartbeat.to_line();
        let thread = std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(HEARTBEAT_INTERVAL)
                {
                    let mut out = std::io::stdout().lock();
                    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the heartbeat thread"))
            .ok();
        Heartbeat {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
