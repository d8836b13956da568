//! The text files of sysfs and procfs the inventory and telemetry read (and ipmitool's
//! power reading): the first byte picks the reader, the rest is the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::inventory::aer::parse_counter_file;
use tinyperf::inventory::{
    parse_cpuinfo, parse_mem_total, parse_nvidia_version, parse_resource, LinkSpeed, PciAddress,
};
use tinyperf::runtime::power::ipmi::parse_dcmi_reading;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 8 {
        0 => drop(parse_counter_file(&text)),
        1 => drop(parse_cpuinfo(&text)),
        2 => drop(parse_mem_total(&text)),
        3 => drop(parse_resource(&text)),
        4 => drop(PciAddress::parse(&text)),
        5 => drop(LinkSpeed::parse_sysfs(&text)),
        6 => drop(parse_nvidia_version(&text)),
        _ => drop(parse_dcmi_reading(&text)),
    }
});
