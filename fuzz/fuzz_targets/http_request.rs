//! What the HTTP server reads from a request before it acts on it: the path (a run's id
//! in it), the query, and a start's JSON body with the suite's options checked as the
//! agent checks them. Input: the path, a newline, the query, a newline, the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyperf::api::http::reading::{endpoint, parse_json, run_limit, StartRequest};
use tinyperf::suite::plan::check_options;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == b'\n');
    let path = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let query = parts.next().map(String::from_utf8_lossy);
    let body = parts.next().unwrap_or_default();
    let _ = endpoint(&path);
    let _ = run_limit(query.as_deref());
    if let Ok(start) = parse_json::<StartRequest>(body) {
        let _ = check_options(&start.suite, &start.options);
    }
});
