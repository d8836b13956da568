//! The `cpu-gemm` stage: sustained single-precision GEMM throughput of the CPU, with the
//! `gemm` crate, against the CPU's theoretical peak.

use std::path::Path;
use std::time::{Duration, Instant};

use gemm::Parallelism;

use super::cpu_peak;
use super::options::{self, GEMM_MIN_FRACTION, GEMM_SECONDS, GEMM_SIZE};
use super::stage::{StageContext, StageReport};
use crate::record::{Check, StageResult, Verdict};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "cpu-gemm";
/// The matrix side N when `gemm_size` is not given.
pub const DEFAULT_SIZE: usize = 2048;
/// Seconds the GEMM is sustained when `gemm_seconds` is not given.
pub const DEFAULT_SECONDS: f64 = 3.0;
/// A healthy CPU reaches well over half its peak with this GEMM; a third leaves room for
/// shared machines while still catching a throttled or misconfigured one.
pub const DEFAULT_MIN_FRACTION: f64 = 0.3;

/// Square matrices in column-major order, filled with a deterministic pattern.
pub struct GemmProblem {
    /// The side of the three n×n matrices.
    pub n: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl GemmProblem {
    /// Fills A and B with a deterministic pattern of small values of both signs; C starts
    /// at zero.
    pub fn new(n: usize) -> Self {
        // Small values of both signs keep sums well inside f32 range and exercise rounding.
        let fill = |seed: usize| -> Vec<f32> {
            (0..n * n)
                .map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 - 1000.0) / 1000.0)
                .collect()
        };
        GemmProblem {
            n,
            a: fill(1),
            b: fill(2),
            c: vec![0.0; n * n],
        }
    }

    /// The floating-point operations of one product: 2·n³.
    pub fn flops(&self) -> f64 {
        2.0 * (self.n as f64).powi(3)
    }

    /// C = A·B on `threads` threads.
    pub fn multiply(&mut self, threads: usize) {
        let n = self.n;
        let parallelism = if threads > 1 {
            Parallelism::Rayon(threads)
        } else {
            Parallelism::None
        };
        let stride = n as isize;
        // SAFETY: the three buffers hold n×n elements each, the strides describe
        // column-major n×n matrices inside them, and C does not alias A or B.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                self.c.as_mut_ptr(),
                stride,
                1,
                false,
                self.a.as_ptr(),
                stride,
                1,
                self.b.as_ptr(),
                stride,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
    }

    /// The largest relative error of C against a direct f64 computation, over `samples`
    /// entries spread across the matrix.
    pub fn worst_relative_error(&self, samples: usize) -> f64 {
        let n = self.n;
        let mut worst: f64 = 0.0;
        for s in 0..samples {
            let i = (s * 7 + 3) % n;
            let j = (s * 13 + 5) % n;
            let mut exact = 0.0f64;
            let mut magnitude = 0.0f64;
            for k in 0..n {
                let term = self.a[i + k * n] as f64 * self.b[k + j * n] as f64;
                exact += term;
                magnitude += term.abs();
            }
            let got = self.c[i + j * n] as f64;
            // Relative to the sum of magnitudes: the scale f32 rounding works at.
            worst = worst.max((got - exact).abs() / magnitude.max(f64::MIN_POSITIVE));
        }
        worst
    }
}

/// The widest vector instructions the GEMM kernels can use on this CPU (the `gemm`
/// crate picks its kernels at run time).
pub fn simd_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return "AVX-512";
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return "AVX2+FMA";
        }
    }
    "baseline"
}

/// Threads the GEMM uses: every CPU this process may run on.
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Runs the stage: checks one product against a direct computation, sustains products on
/// every usable CPU for `gemm_seconds`, and fails when the sustained GFLOP/s falls below
/// `gemm_min_fraction` of the CPU's theoretical peak (a finding, not a check, when no peak
/// can be estimated).
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut stage = StageReport::new(NAME);
    let n = options::number(ctx.options(), GEMM_SIZE, DEFAULT_SIZE as f64) as usize;
    let seconds = options::number(ctx.options(), GEMM_SECONDS, DEFAULT_SECONDS);
    let min_fraction = options::number(ctx.options(), GEMM_MIN_FRACTION, DEFAULT_MIN_FRACTION);
    let threads = usable_cpus();

    ctx.progress(0.0, Some(format!("{n}×{n} SGEMM on {threads} threads")));
    let mut problem = GemmProblem::new(n);
    problem.multiply(threads);
    let error = problem.worst_relative_error(32);

    let budget = Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut calls = 0u32;
    let mut best = Duration::MAX;
    let mut last_report = Instant::now();
    while started.elapsed() < budget && !ctx.cancelled() {
        let t = Instant::now();
        problem.multiply(threads);
        best = best.min(t.elapsed());
        calls += 1;
        if last_report.elapsed() > Duration::from_millis(250) {
            last_report = Instant::now();
            let fraction = started.elapsed().as_secs_f64() / seconds;
            ctx.progress(fraction, None);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    if calls == 0 {
        return stage.finish_as(Verdict::Error, Some("cancelled before measuring".into()));
    }
    let sustained = problem.flops() * calls as f64 / elapsed / 1e9;
    let best_gflops = problem.flops() / best.as_secs_f64() / 1e9;
    stage.metric("gflops_sustained", sustained, "GFLOP/s");
    stage.metric("gflops_best", best_gflops, "GFLOP/s");
    stage.metric("matrix_size", n as f64, "n");
    stage.metric("threads", threads as f64, "count");
    stage.metric("calls", calls as f64, "count");
    stage.metric("seconds", elapsed, "s");
    stage.metric("max_relative_error", error, "ratio");
    stage
        .findings
        .push(format!("GEMM kernels: {}", simd_level()));

    stage.checks.push(Check {
        name: "gemm result matches a direct computation".into(),
        subject: None,
        expected: "relative error ≤ 1e-5".into(),
        found: format!("{error:.2e}"),
        verdict: Verdict::pass_if(error <= 1e-5),
    });

    // Measured right after the GEMM, while the cores still run at their loaded clock.
    match cpu_peak::estimate(Path::new("/"), threads, || {
        super::cpu_clock::measure_loaded_mhz(threads)
    }) {
        Ok(peak) => {
            let peak_gflops = peak.gflops();
            let fraction = sustained / peak_gflops;
            stage.metric("gflops_peak", peak_gflops, "GFLOP/s");
            stage.metric("fraction_of_peak", fraction, "ratio");
            stage.metric("peak_cores", peak.cores as f64, "count");
            stage.metric("peak_clock", peak.clock_mhz, "MHz");
            stage.metric("peak_flops_per_cycle", peak.flops_per_cycle, "FLOP/cycle");
            stage.checks.push(Check {
                name: "sustained GEMM throughput".into(),
                subject: None,
                expected: format!(
                    "≥ {:.0} GFLOP/s ({:.0} % of the {:.0} GFLOP/s peak: {} cores × {:.0} MHz ({}) × {} FLOP/cycle)",
                    peak_gflops * min_fraction,
                    min_fraction * 100.0,
                    peak_gflops,
                    peak.cores,
                    peak.clock_mhz,
                    peak.clock_source,
                    peak.flops_per_cycle
                ),
                found: format!("{sustained:.1} GFLOP/s ({:.0} % of peak)", fraction * 100.0),
                verdict: Verdict::pass_if(fraction >= min_fraction),
            });
        }
        Err(e) => stage
            .findings
            .push(format!("no theoretical peak to compare with: {e}")),
    }
    ctx.progress(1.0, None);
    let message = format!("{sustained:.1} GFLOP/s sustained over {calls} calls of {n}³");
    if ctx.cancelled() {
        return stage.finish_as(Verdict::Error, Some(format!("cancelled after {message}")));
    }
    stage.finish(Some(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_agrees_with_direct_computation() {
        for threads in [1, 2] {
            let mut p = GemmProblem::new(96);
            p.multiply(threads);
            let err = p.worst_relative_error(96);
            assert!(err < 1e-5, "threads={threads} error={err}");
        }
    }

    #[test]
    fn a_wrong_product_is_caught() {
        let mut p = GemmProblem::new(64);
        p.multiply(1);
        p.c[3 + 5 * 64] += 1.0;
        assert!(p.worst_relative_error(64) > 1e-3);
    }
}
