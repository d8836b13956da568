//! A PCI device's binary config space, walked for the Resizable BAR capability.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::inventory::resizable_bars;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(entries)) = resizable_bars(data) {
        for entry in entries {
            let _ = entry.largest_supported();
        }
    }
});
