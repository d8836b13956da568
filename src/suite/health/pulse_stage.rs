//! The `power-pulse` stage of `health`: every GPU switched between full load and idle
//! together, at swept frequencies, so the box's power supplies see the current steps
//! that crash multi-GPU consumer boxes while steady burn tests pass. The box must come
//! through with every GPU still answering, no new Xid, ring timeout or reset in the
//! kernel's log, and no uncorrectable AER error. Off unless `pulse_seconds` is given;
//! each GPU's power over the stage is in the run's telemetry.

use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::engine::backend::gpu::driver::{DriverError, GpuDriver, MatmulPrecision};
use crate::inventory::{gpu_link_states, kernel_log, PciAddress};
use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices;
use crate::suite::gpu_devices::open_gpus_or_finish;
use crate::suite::options::{self, PULSE_SECONDS};
use crate::suite::stage::{StageContext, StageReport};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "power-pulse";
/// Load/idle cycles per second, swept from slow steps to the range power stages ring at.
pub const FREQUENCIES_HZ: &[f64] = &[0.5, 2.0, 8.0, 20.0];
const MATMUL_SIZE: usize = 4096;

/// Runs the stage: pulses every GPU together for `pulse_seconds`, split evenly over
/// [`FREQUENCIES_HZ`], and fails a GPU whose products failed or that shows a new serious
/// kernel message or uncorrectable AER error; skips when `pulse_seconds` is absent or 0,
/// and on the CPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let seconds = options::number(ctx.options(), PULSE_SECONDS, 0.0);
    if seconds <= 0.0 {
        return report.finish_as(
            Verdict::Skip,
            Some("off unless asked for: -o pulse_seconds=N".into()),
        );
    }
    let backends = open_gpus_or_finish!(ctx, report);
    let drivers = gpu_devices::drivers_of(&backends);
    let root = ctx.root.clone();
    let last_seq_before = kernel_log::read_records(&root)
        .ok()
        .and_then(|r| r.last().map(|r| r.seq));
    let links_before = gpu_link_states(&root);
    ctx.progress(
        0.0,
        Some(format!(
            "{} GPU(s) pulsed together at {:?} Hz for {seconds:.0} s",
            drivers.len(),
            FREQUENCIES_HZ
        )),
    );
    let per_frequency = Duration::from_secs_f64(seconds / FREQUENCIES_HZ.len() as f64);
    let barrier = Barrier::new(drivers.len());
    let failures: Mutex<Vec<Option<String>>> = Mutex::new(vec![None; drivers.len()]);
    std::thread::scope(|scope| {
        for (i, &driver) in drivers.iter().enumerate() {
            let (barrier, failures) = (&barrier, &failures);
            scope.spawn(move || {
                if let Err(e) = pulse(driver, barrier, per_frequency) {
                    failures.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(e.to_string());
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    let records = kernel_log::read_records(&root).unwrap_or_default();
    let new_records: Vec<kernel_log::Record> = records
        .into_iter()
        .filter(|r| last_seq_before.is_none_or(|s| r.seq > s))
        .collect();
    let gpus: Vec<PciAddress> = links_before.iter().map(|s| s.gpu).collect();
    let events = kernel_log::gpu_events(&new_records, &gpus);
    let links_after = gpu_link_states(&root);
    for (driver, failure) in drivers.iter().zip(failures) {
        let address = driver
            .info()
            .pci_address
            .as_deref()
            .and_then(PciAddress::parse);
        let mut problems: Vec<String> = failure.into_iter().collect();
        if let Some(address) = address {
            problems.extend(
                events
                    .iter()
                    .filter(|e| e.serious && e.concerns(address))
                    .map(|e| e.describe()),
            );
            let before = links_before.iter().find(|s| s.gpu == address);
            let after = links_after.iter().find(|s| s.gpu == address);
            if let (Some(b), Some(a)) = (before, after) {
                for ((device, _, old), (_, _, new)) in b.counters.iter().zip(&a.counters) {
                    let grew = match (old, new) {
                        (Some(o), Some(n)) => n.uncorrectable().saturating_sub(o.uncorrectable()),
                        _ => 0,
                    };
                    if grew > 0 {
                        problems.push(format!("{grew} uncorrectable AER error(s) at {device}"));
                    }
                }
            }
        }
        report.checks.push(Check {
            name: "power transients".into(),
            subject: driver.info().pci_address.clone(),
            expected: "answers throughout; no Xid, ring timeout, reset or uncorrectable AER error"
                .into(),
            found: if problems.is_empty() {
                "came through".into()
            } else {
                problems.join("; ")
            },
            verdict: Verdict::pass_if(problems.is_empty()),
        });
    }
    report.finish(None)
}

/// One GPU's part: for each frequency, loaded and idle half-periods in step with the
/// other GPUs (a barrier at every edge, met by every GPU the same number of times).
pub fn pulse(
    driver: &dyn GpuDriver,
    barrier: &Barrier,
    per_frequency: Duration,
) -> Result<(), DriverError> {
    let n = MATMUL_SIZE;
    let a = driver.alloc(n * n * 2)?;
    let b = driver.alloc(n * n * 2)?;
    let c = driver.alloc(n * n * 4)?;
    let mut result = Ok(());
    for &hz in FREQUENCIES_HZ {
        let half = Duration::from_secs_f64(0.5 / hz);
        // The same count on every GPU, so each reaches every barrier; a GPU whose products
        // fail keeps meeting them, idle.
        let cycles = (per_frequency.as_secs_f64() * hz).ceil().max(1.0) as u64;
        for _ in 0..cycles {
            barrier.wait();
            let edge = Instant::now();
            while result.is_ok() && edge.elapsed() < half {
                result = driver
                    .matmul_square(MatmulPrecision::F16, n, a, b, c)
                    .and_then(|()| driver.synchronize());
            }
            barrier.wait();
            std::thread::sleep(half);
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
