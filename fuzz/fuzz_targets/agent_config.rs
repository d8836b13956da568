//! The agent's `tinyperf.toml`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::agent::config::Config;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = Config::parse(&text, std::path::Path::new("/etc/tinyperf/tinyperf.toml"));
});
