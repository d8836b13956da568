//! amdgpu's binary `gpu_metrics` table, every format revision.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::runtime::telemetry::gpu_metrics;

fuzz_target!(|data: &[u8]| {
    let _ = gpu_metrics::parse(data);
});
