//! The OS image's families, on a tinybox OS image only: its version and slot, the boot
//! gate's assessments and rollbacks, and where an OS update stands. Every label value a
//! family can take is written, 0 where it does not hold, so that a fleet rule sees a
//! box's 0 rather than no series.

use super::exposition::{bool_value, Exposition, Kind};
use crate::update::progress::STATES;
use crate::update::status::OsImage;

/// The boot assessments' results, as `boot_assessments_total` counts them.
const RESULTS: [&str; 3] = ["pass", "fail", "rejected"];

pub fn render(out: &mut Exposition, os: &OsImage) {
    out.gauge(
        "tinyperf_image_info",
        "Always 1 on a tinybox OS image; the labels name the OS image's version and the slot \
         (a or b) it booted from.",
        &[("version", &os.version), ("slot", &os.slot)],
        1.0,
    );
    out.single(
        "tinyperf_image_on_trial",
        Kind::Gauge,
        "1 while the running OS version is on trial (kept only once its boot check passes), else 0.",
        bool_value(os.on_trial),
    );
    out.family(
        "tinyperf_image_boot_assessments_total",
        Kind::Counter,
        "Boot checks recorded on this box's state partition, by result: pass, fail (failed but \
         kept, as the version had passed before) and rejected (failed on trial; the box went back).",
    );
    for result in RESULTS {
        let count = os.boot_assessments_total.get(result).copied().unwrap_or(0);
        out.sample(
            "tinyperf_image_boot_assessments_total",
            &[("result", result)],
            count as f64,
        );
    }
    out.single(
        "tinyperf_image_rollbacks_total",
        Kind::Counter,
        "Times this box went back from an OS version it rejected.",
        os.rollbacks_total as f64,
    );
    if let Some(at) = os.rejections.first().and_then(|r| r.at) {
        out.gauge(
            "tinyperf_image_last_rejection_timestamp_seconds",
            "When the newest rejected OS version failed its boot check; the label names it.",
            &[("version", &os.rejections[0].version)],
            at.timestamp_millis() as f64 / 1000.0,
        );
    }
    let Some(update) = &os.update else {
        return;
    };
    let available = update.available.as_str();
    out.gauge(
        "tinyperf_image_update_available",
        "1 when the update source offers a newer OS version than the running one (named by the \
         version label) that this box has not rejected, as of the last check; else 0.",
        &[("version", available)],
        bool_value(!available.is_empty()),
    );
    out.family(
        "tinyperf_image_update_state",
        Kind::Gauge,
        "Where the OS update stands: 1 for the current state, 0 for the others.",
    );
    for state in STATES {
        out.sample(
            "tinyperf_image_update_state",
            &[("state", state)],
            bool_value(update.state == state),
        );
    }
    out.single(
        "tinyperf_image_update_downloaded_bytes",
        Kind::Gauge,
        "Bytes of the OS update in progress or last written, fetched and written so far.",
        update.done_bytes as f64,
    );
    out.single(
        "tinyperf_image_update_size_bytes",
        Kind::Gauge,
        "Bytes of the whole OS update in progress or last written (compressed); 0 when unknown.",
        update.total_bytes as f64,
    );
}
