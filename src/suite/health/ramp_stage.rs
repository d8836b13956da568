//! The `power-ramp` stage of `health`: one GPU at full load, then two, … up to every GPU,
//! each step held for `ramp_seconds`, so that a power supply too small for the whole box
//! trips at the step it cannot carry. Each step's start is written to the run's folder
//! (`power-ramp.json`) before its load begins, so that after a power trip the next start
//! of the agent can say at which step the box went dark. A step that logs a serious kernel
//! message or loses a GPU fails with its GPU count. Off unless `ramp_seconds` is given, except in `burn-in`, which always ramps.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::backend::gpu::driver::{DriverError, GpuDriver, MatmulPrecision};
use crate::engine::backend::gpu::stand_in::StandInDevice;
use crate::inventory::{gpu_link_states, kernel_log, PciAddress};
use crate::record::{Check, StageResult, Verdict};
use crate::runtime::power::PowerMeter;
use crate::suite::gpu_devices;
use crate::suite::options::{self, RAMP_SECONDS};
use crate::suite::stage::{StageContext, StageReport};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "power-ramp";
/// The file in the run's folder that says which step is under way.
pub const PROGRESS_FILE: &str = "power-ramp.json";
/// Stands in for the GPUs on a machine without any, for tests of the ramp's bookkeeping:
/// that many emulated devices whose products are checked and not computed.
pub const STAND_IN_ENV: &str = "TINYPERF_RAMP_STAND_IN_GPUS";
const MATMUL_SIZE: usize = 4096;

/// The ramp's progress, as the run's folder holds it while a step is under way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RampProgress {
    /// The step under way: this many GPUs at full load (1-based).
    pub step: usize,
    /// How many steps the ramp has (the GPU count).
    pub steps: usize,
    /// When the step started, RFC 3339.
    pub started_at: String,
    /// Wall (or summed component) power last read before the step, watts.
    pub last_power_w: Option<f64>,
    /// Whether the step finished (the ramp moves on, or is done).
    pub finished: bool,
}

impl RampProgress {
    /// Reads the progress the ramp left in `run_dir`, if it left any.
    pub fn read(run_dir: &Path) -> Option<RampProgress> {
        let text = std::fs::read_to_string(run_dir.join(PROGRESS_FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// What an unfinished step says about a run that stopped during it.
    pub fn describe_stop(&self) -> Option<String> {
        (!self.finished).then(|| {
            let power = self
                .last_power_w
                .map(|w| format!(", last power reading {w:.0} W"))
                .unwrap_or_default();
            format!(
                "the box lost power or the worker died at power-ramp step {} of {}: {} GPU(s) at full load since {}{power}",
                self.step, self.steps, self.step, self.started_at
            )
        })
    }

    fn write(&self, run_dir: &Path) -> std::io::Result<()> {
        let path = run_dir.join(PROGRESS_FILE);
        let temporary = run_dir.join(format!(".{PROGRESS_FILE}.tmp"));
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&text)?;
            // On disk before the load starts: the step may be the last thing the box does.
            file.sync_all()?;
        }
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(run_dir)?.sync_all()
    }
}

/// Runs the stage (see the module's description); skips when `ramp_seconds` is absent or
/// 0, and on the CPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    // The factory's burn-in always ramps; elsewhere the ramp is asked for.
    let default_seconds = if ctx.plan.suite == crate::suite::burn_in::NAME {
        crate::suite::burn_in::DEFAULT_RAMP_SECONDS
    } else {
        0.0
    };
    let seconds = options::number(ctx.options(), RAMP_SECONDS, default_seconds);
    if seconds <= 0.0 {
        return report.finish_as(
            Verdict::Skip,
            Some("off unless asked for: -o ramp_seconds=N".into()),
        );
    }
    let drivers: Vec<Arc<dyn GpuDriver>> = match stand_ins() {
        Some(stand_ins) => {
            report.findings.push(format!(
                "{} stand-in GPU(s) from {STAND_IN_ENV}: nothing is computed",
                stand_ins.len()
            ));
            stand_ins
        }
        None => match gpu_devices::open_for_stage(ctx.options()) {
            Ok(backends) => backends.iter().map(|b| b.driver().clone()).collect(),
            Err((verdict, why)) => return report.finish_as(verdict, Some(why)),
        },
    };
    let Some(run_dir) = ctx.run_dir.clone() else {
        return report.finish_as(
            Verdict::Error,
            Some("the power ramp needs a run folder to record its steps in".into()),
        );
    };
    let mut meter = PowerMeter::discover(&ctx.root).ok();
    let steps = drivers.len();
    let hold = Duration::from_secs_f64(seconds);
    for step in 1..=steps {
        if ctx.cancel.load(Ordering::Relaxed) {
            return report.finish_as(Verdict::Skip, Some("cancelled".into()));
        }
        let last_power_w = meter.as_mut().and_then(PowerMeter::read);
        let mut progress = RampProgress {
            step,
            steps,
            started_at: chrono::Utc::now().to_rfc3339(),
            last_power_w,
            finished: false,
        };
        if let Err(e) = progress.write(&run_dir) {
            return report.finish_as(
                Verdict::Error,
                Some(format!("cannot record power-ramp step {step}: {e}")),
            );
        }
        ctx.progress(
            (step - 1) as f64 / steps as f64,
            Some(format!(
                "step {step} of {steps}: {step} GPU(s) at full load"
            )),
        );
        let last_seq = kernel_log::read_records(&ctx.root)
            .ok()
            .and_then(|r| r.last().map(|r| r.seq));
        let gpus_before = gpu_link_states(&ctx.root).len();
        let loaded = &drivers[..step];
        let failures = load_together(loaded, hold, ctx.cancel);
        let peak_w = meter.as_mut().and_then(PowerMeter::read);
        let mut problems: Vec<String> = failures.into_iter().flatten().collect();
        let records = kernel_log::read_records(&ctx.root).unwrap_or_default();
        let new: Vec<kernel_log::Record> = records
            .into_iter()
            .filter(|r| last_seq.is_none_or(|s| r.seq > s))
            .collect();
        let addresses: Vec<PciAddress> = gpu_link_states(&ctx.root).iter().map(|s| s.gpu).collect();
        problems.extend(
            kernel_log::gpu_events(&new, &addresses)
                .iter()
                .filter(|e| e.serious)
                .map(|e| e.describe()),
        );
        if addresses.len() < gpus_before {
            problems.push(format!(
                "{} GPU(s) left the PCI bus",
                gpus_before - addresses.len()
            ));
        }
        if let Some(w) = peak_w {
            report.metric(&format!("step{step}_power_w"), w, "W");
        }
        report.checks.push(Check {
            name: "power ramp".into(),
            subject: None,
            expected: format!("{step} GPU(s) at full load for {seconds:.0} s: every GPU answers, no serious kernel message"),
            found: if problems.is_empty() {
                match peak_w {
                    Some(w) => format!("came through at {w:.0} W"),
                    None => "came through".into(),
                }
            } else {
                format!("step {step} ({step} GPU(s)): {}", problems.join("; "))
            },
            verdict: Verdict::pass_if(problems.is_empty()),
        });
        progress.finished = true;
        let _ = progress.write(&run_dir);
        if !problems.is_empty() {
            break;
        }
    }
    report.finish(None)
}

/// The stand-in GPUs [`STAND_IN_ENV`] asks for.
fn stand_ins() -> Option<Vec<Arc<dyn GpuDriver>>> {
    let count: usize = std::env::var(STAND_IN_ENV).ok()?.parse().ok()?;
    Some(
        (0..count)
            .map(|_| StandInDevice::new(1 << 30) as Arc<dyn GpuDriver>)
            .collect(),
    )
}

/// Every driver of `drivers` at full load for `hold`, together; each one's failure, if any.
fn load_together(
    drivers: &[Arc<dyn GpuDriver>],
    hold: Duration,
    cancel: &AtomicBool,
) -> Vec<Option<String>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = drivers
            .iter()
            .map(|driver| scope.spawn(move || load(driver.as_ref(), hold, cancel)))
            .collect();
        handles
            .into_iter()
            .zip(drivers)
            .map(|(handle, driver)| {
                let name = driver
                    .info()
                    .pci_address
                    .clone()
                    .unwrap_or_else(|| driver.info().name.clone());
                match handle.join() {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(format!("{name}: {e}")),
                    Err(_) => Some(format!("{name}: its load thread panicked")),
                }
            })
            .collect()
    })
}

fn load(driver: &dyn GpuDriver, hold: Duration, cancel: &AtomicBool) -> Result<(), DriverError> {
    let n = MATMUL_SIZE;
    let a = driver.alloc(n * n * 2)?;
    let b = driver.alloc(n * n * 2)?;
    let c = driver.alloc(n * n * 4)?;
    let start = Instant::now();
    let mut result = Ok(());
    while result.is_ok() && start.elapsed() < hold && !cancel.load(Ordering::Relaxed) {
        result = driver
            .matmul_square(MatmulPrecision::F16, n, a, b, c)
            .and_then(|()| driver.synchronize());
        if result.is_ok() && driver.info().name == "stand-in" {
            // Nothing runs on a stand-in: spare the CPU the spin.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // SAFETY: the stream has drained (every product was synchronised).
    unsafe {
        driver.free(a);
        driver.free(b);
        driver.free(c);
    }
    result
}
