//! The SMBIOS entry point and structure table, as the kernel exposes them in
//! `sys/firmware/dmi/tables`; the first byte says where the entry point ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::inventory::smbios;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let (entry_point, table) = rest.split_at(usize::from(cut).min(rest.len()));
    let _ = smbios::parse(entry_point, table);
    // The walk itself, past the entry point's checksum.
    if let Ok(structures) = smbios::structures(table, None) {
        for s in &structures {
            for offset in 0..s.formatted.len() {
                let _ = s.string(offset);
                let _ = s.dword(offset);
            }
        }
    }
});
