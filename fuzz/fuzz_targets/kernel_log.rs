//! Kernel messages: a log pasted in any shape (`tinyperf health --kernel-log`) and
//! records as /dev/kmsg gives them, judged for two GPUs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::inventory::kernel_log::{gpu_events, parse_pasted, parse_records};
use tinyperf::inventory::PciAddress;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let gpus: Vec<PciAddress> = ["0000:01:00.0", "0000:c1:00.0"]
        .iter()
        .filter_map(|a| PciAddress::parse(a))
        .collect();
    for records in [parse_pasted(&text), parse_records(&text)] {
        for event in gpu_events(&records, &gpus) {
            let _ = event.describe();
        }
    }
});
