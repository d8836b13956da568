//! The BMC's fans and power supplies over a whole run: read through ipmitool on a thread
//! of its own (a BMC answers in seconds, too slow for the GPU sampler's pace), each
//! reading kept against the stage that was running, so that a fan that stops or a supply
//! that fails in the third hour of a burn-in is caught, not only one that was already
//! down when the run began.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::runtime::bmc::{self, sensors};

/// The first time a fan or supply was seen in trouble.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BmcTrouble {
    /// What the BMC said: `fan FAN3 at 0 RPM (cr)`, `power supply PSU2: Failure detected (cr)`.
    pub what: String,
    /// The stage that was running.
    pub stage: String,
    /// Seconds since the watch began.
    pub t_s: f64,
}

/// What the BMC's sensors came to over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BmcExtremes {
    /// Readings taken.
    pub readings: usize,
    /// Each fan's slowest reading, in RPM.
    pub slowest_fans: BTreeMap<String, f64>,
    /// Power supplies seen.
    pub supplies: usize,
    /// Every fan or supply seen in trouble, once each, when first seen.
    pub troubles: Vec<BmcTrouble>,
    /// Why the sensors were not read (no ipmitool, no BMC); `None` when they were.
    pub unread: Option<String>,
}

impl BmcExtremes {
    /// Takes in one reading of the sensors, taken in `stage` at `t_s`.
    pub fn observe(&mut self, report: &sensors::SensorReport, stage: &str, t_s: f64) {
        self.readings += 1;
        self.supplies = self.supplies.max(report.supplies.len());
        for fan in &report.fans {
            if let Some(rpm) = fan.rpm.filter(|r| r.is_finite()) {
                let slowest = self.slowest_fans.entry(fan.name.clone()).or_insert(rpm);
                *slowest = slowest.min(rpm);
            }
        }
        for what in sensors::findings(&report.fans, &report.supplies) {
            if !self.troubles.iter().any(|t| t.what == what) {
                self.troubles.push(BmcTrouble {
                    what,
                    stage: stage.to_string(),
                    t_s,
                });
            }
        }
    }
}

/// The stage the recorder is in, as the watch reads it at each reading.
pub type StageOf = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// A running watch; dropping it stops the thread at its next look.
pub struct BmcWatch {
    extremes: Arc<Mutex<BmcExtremes>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BmcWatch {
    /// Starts reading the sensors every `interval` through `ipmitool` (`None`: the one
    /// `$TINYPERF_IPMITOOL` or the PATH gives), while `stage_of` names a stage. A box
    /// without ipmitool or a BMC gets no thread, only the reason in [`BmcExtremes::unread`].
    pub fn start(ipmitool: Option<PathBuf>, interval: Duration, stage_of: StageOf) -> BmcWatch {
        let extremes = Arc::new(Mutex::new(BmcExtremes::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let program = match ipmitool.map_or_else(bmc::locate, Ok) {
            Ok(program) => program,
            Err(why) => {
                lock(&extremes).unread = Some(why.to_string());
                return BmcWatch {
                    extremes,
                    stop,
                    thread: None,
                };
            }
        };
        let (shared, stopping) = (extremes.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("bmc-sensors".into())
            .spawn(move || watch(&program, interval, &stage_of, &shared, &stopping))
            .map_err(|e| {
                lock(&extremes).unread = Some(format!("cannot start the BMC's thread: {e}"));
            })
            .ok();
        BmcWatch {
            extremes,
            stop,
            thread,
        }
    }

    /// What the readings came to so far.
    pub fn extremes(&self) -> BmcExtremes {
        lock(&self.extremes).clone()
    }
}

impl Drop for BmcWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A reading in progress ends within ipmitool's own time limit; the process
        // exit ends it otherwise, so the thread is not waited for.
        drop(self.thread.take());
    }
}

fn lock(extremes: &Mutex<BmcExtremes>) -> std::sync::MutexGuard<'_, BmcExtremes> {
    extremes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn watch(
    program: &std::path::Path,
    interval: Duration,
    stage_of: &StageOf,
    extremes: &Mutex<BmcExtremes>,
    stop: &AtomicBool,
) {
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Some(stage) = stage_of() {
            match sensors::read(program) {
                Ok(report) => {
                    lock(extremes).observe(&report, &stage, start.elapsed().as_secs_f64())
                }
                Err(why) => {
                    // A BMC that does not answer now will not answer later in the run:
                    // say why once and stop asking.
                    let mut extremes = lock(extremes);
                    if extremes.readings == 0 {
                        extremes.unread = Some(why.to_string());
                        return;
                    }
                }
            }
        }
        let next = Instant::now() + interval;
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bmc::sensors::{FanReading, PsuState, SensorReport};

    fn report(fan3: f64, psu_failed: bool) -> SensorReport {
        SensorReport {
            fans: vec![
                FanReading {
                    name: "FAN1".into(),
                    rpm: Some(3000.0),
                    status: "ok".into(),
                },
                FanReading {
                    name: "FAN3".into(),
                    rpm: Some(fan3),
                    status: if fan3 == 0.0 { "cr" } else { "ok" }.into(),
                },
            ],
            supplies: vec![PsuState {
                name: "PSU2".into(),
                states: if psu_failed {
                    "Presence detected, Failure detected"
                } else {
                    "Presence detected"
                }
                .into(),
                status: if psu_failed { "cr" } else { "ok" }.into(),
                failed: psu_failed,
            }],
        }
    }

    #[test]
    fn a_fan_that_stops_and_a_supply_that_fails_are_kept_once_with_their_stage() {
        let mut extremes = BmcExtremes::default();
        extremes.observe(&report(2800.0, false), "power-ramp", 10.0);
        extremes.observe(&report(0.0, false), "mlperf-resnet", 3600.0);
        extremes.observe(&report(0.0, true), "mlperf-resnet", 3610.0);
        extremes.observe(&report(0.0, true), "mlperf-resnet", 3620.0);
        assert_eq!(extremes.readings, 4);
        assert_eq!(extremes.slowest_fans["FAN3"], 0.0);
        assert_eq!(extremes.slowest_fans["FAN1"], 3000.0);
        assert_eq!(extremes.troubles.len(), 2, "{extremes:?}");
        assert!(extremes.troubles[0].what.contains("FAN3 at 0 RPM"));
        assert_eq!(extremes.troubles[0].t_s, 3600.0);
        assert!(extremes.troubles[1].what.contains("PSU2"));
        assert_eq!(extremes.troubles[1].stage, "mlperf-resnet");
    }

    #[test]
    fn without_ipmitool_the_watch_says_why_and_starts_no_thread() {
        let watch = BmcWatch::start(
            Some("/nonexistent/ipmitool".into()),
            Duration::from_millis(10),
            Arc::new(|| Some("stage".to_string())),
        );
        std::thread::sleep(Duration::from_millis(300));
        let extremes = watch.extremes();
        assert_eq!(extremes.readings, 0);
        assert!(extremes.unread.is_some(), "{extremes:?}");
    }
}
