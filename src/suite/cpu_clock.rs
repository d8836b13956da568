//! The clock the CPU's cores really run at under load, measured: a chain of dependent
//! 64-bit integer multiplications takes three cycles each on every x86-64 core of the
//! last fifteen years (Intel since Nehalem, AMD since Zen), so multiplications per
//! second is a third of the cycles per second. (A chain of additions of a constant is
//! not a clock: newer Intel cores fold it at register renaming, several a cycle.) `/proc/cpuinfo`'s
//! `cpu MHz` is the nominal clock in a VM and a momentary one on bare metal, never the
//! boost clock a loaded core runs at, so a peak made from it can be exceeded.

use std::time::{Duration, Instant};

/// Multiplications in one unrolled block of the chain.
#[cfg(target_arch = "x86_64")]
const MULS_PER_BLOCK: u64 = 64;
/// Cycles from one multiplication's operands to its result.
#[cfg(target_arch = "x86_64")]
const MUL_LATENCY: u64 = 3;
/// How long one timed chain runs.
const CHAIN_TIME: Duration = Duration::from_millis(20);
/// Timed chains per thread; the fastest counts (a preempted one only reads slower).
const TRIES: usize = 5;

/// The highest clock, in MHz, that `threads` threads each measure while all of them run
/// at once (so every core is loaded as during the GEMM); `None` where this CPU has no
/// such measurement.
pub fn measure_loaded_mhz(threads: usize) -> Option<f64> {
    let threads = threads.max(1);
    let readings: Vec<Option<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| scope.spawn(fastest_chain_mhz))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    readings.into_iter().flatten().reduce(f64::max)
}

fn fastest_chain_mhz() -> Option<f64> {
    // A first chain to size the blocks to about CHAIN_TIME.
    let probe_blocks = 100_000;
    let probe = time_chain(probe_blocks)?;
    let per_block = probe.as_secs_f64() / probe_blocks as f64;
    let blocks = ((CHAIN_TIME.as_secs_f64() / per_block.max(1e-12)) as u64).max(1_000);
    (0..TRIES)
        .filter_map(|_| time_chain(blocks))
        .map(|t| cycles_of(blocks) / t.as_secs_f64() / 1e6)
        .filter(|mhz| mhz.is_finite())
        .reduce(f64::max)
}

#[cfg(target_arch = "x86_64")]
fn cycles_of(blocks: u64) -> f64 {
    (blocks * MULS_PER_BLOCK * MUL_LATENCY) as f64
}

#[cfg(not(target_arch = "x86_64"))]
fn cycles_of(_blocks: u64) -> f64 {
    0.0
}

/// Runs `blocks` blocks of dependent multiplications; how long they took.
#[cfg(target_arch = "x86_64")]
fn time_chain(blocks: u64) -> Option<Duration> {
    let mut value: u64 = 3;
    let factor: u64 = std::hint::black_box(1);
    let mut left = blocks;
    let started = Instant::now();
    // SAFETY: plain register arithmetic on two registers the asm block owns; no memory
    // is touched and the flags it changes are declared clobbered by default.
    unsafe {
        std::arch::asm!(
            "2:",
            ".rept {muls}",
            "imul {value}, {factor}",
            ".endr",
            "dec {left}",
            "jnz 2b",
            value = inout(reg) value,
            factor = in(reg) factor,
            left = inout(reg) left,
            muls = const MULS_PER_BLOCK,
            options(nomem, nostack),
        );
    }
    let elapsed = started.elapsed();
    (value == 3 && left == 0).then_some(elapsed)
}

/// No measurement off x86-64: the multiplications' latency is not known there.
#[cfg(not(target_arch = "x86_64"))]
fn time_chain(_blocks: u64) -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_measured_clock_is_a_clock_a_cpu_can_have() {
        let mhz = measure_loaded_mhz(2).expect("x86-64 measures its clock");
        assert!((200.0..10_000.0).contains(&mhz), "{mhz} MHz");
    }
}
