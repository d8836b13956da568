//! `Start`'s `a{sv}` options as a D-Bus caller sends them, in the wire format: read,
//! turned into a run's options and checked for each suite.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use tinyperf::api::dbus::options_from_dbus;
use tinyperf::suite::plan::check_options;
use tinyperf::suite::SUITES;
use zbus::wire::serialized::{Context, Data};
use zbus::wire::LE;
use zbus::OwnedVariant;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let wire = Data::new(rest, Context::new(LE, 0));
    let Ok((options, _)) = wire.deserialize::<HashMap<String, OwnedVariant>>() else {
        return;
    };
    if let Ok(options) = options_from_dbus(options) {
        let _ = check_options(SUITES[which as usize % SUITES.len()], &options);
    }
});
