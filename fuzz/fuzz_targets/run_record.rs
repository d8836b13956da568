//! A run's `run.json` as the store reads it back (hand-made or cut short): read, made
//! into the index's brief, and written again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::record::brief::RunBrief;
use tinyperf::record::RunRecord;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = serde_json::from_slice::<RunRecord>(data) {
        let brief = RunBrief::from(&record);
        let _ = serde_json::to_vec(&brief);
        let _ = serde_json::to_vec(&record);
        let _ = record.verdict();
        let _ = record.state_from_stages();
    }
});
