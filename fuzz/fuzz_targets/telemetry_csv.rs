//! A run's `telemetry.csv` as the run's page and the power log read it back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::runtime::telemetry::csv;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = csv::parse(&text);
});
