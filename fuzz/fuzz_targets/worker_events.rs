//! What the agent reads from its worker's stdout, line by line, and the worker's
//! `train.jsonl` as a run's page reads it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::suite::epoch_log;
use tinyperf::suite::event::WorkerEvent;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        if let Some(Ok(event)) = WorkerEvent::parse_line(line) {
            let _ = event.to_line();
        }
    }
    let _ = epoch_log::parse(&text);
});
