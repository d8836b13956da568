//! MLLOG text as a submitter's result file gives it: read, scored as the summarizer
//! scores it, and its power readings summed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::mlperf::energy::node_energy_j;
use tinyperf::mlperf::log::MlLogText;
use tinyperf::mlperf::score::{run_start_stop, RunScore};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let log = MlLogText::parse(&text);
    let score = RunScore::of("fuzz", "result_0.txt", &log);
    let _ = serde_json::to_string(&score);
    if let (Some(start), Some(stop)) = run_start_stop(&log) {
        let _ = node_energy_j(&log, stop - start);
    }
});
