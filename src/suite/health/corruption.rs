//! The silent-corruption check: the same seeded workloads on every GPU of the box, their
//! results compared bit for bit across GPUs (every workload is deterministic by
//! construction: vendor GEMMs give the same bits on GPUs of one architecture, tinyperf's
//! own kernels reduce in a fixed order) and sampled elements against an f64 reference
//! computed on the CPU. A GPU that disagrees with the majority and with the reference
//! fails, named with the workload and the first element that differs.

use std::collections::BTreeMap;

use half::{bf16, f16};

use crate::engine::backend::gpu::driver::{
    DevicePtr, DriverError, Gemm, GpuDriver, KernelArg, Transpose,
};
use crate::engine::backend::gpu::launch;
use crate::engine::rng::mix64;
use crate::engine::Precision;

use super::Outcome;

/// One workload of the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    /// The backend's f32 GEMM (TF32 tensor cores on NVIDIA).
    GemmF32,
    /// The backend's GEMM on fp16 operands with f32 accumulation (tensor/matrix cores).
    GemmF16,
    /// The backend's GEMM on bf16 operands with f32 accumulation (tensor/matrix cores).
    GemmBf16,
    /// Integer multiply, shift and xor rounds.
    Integer,
    /// sin, cos, exp, log, sqrt.
    Transcendental,
    /// A two-stage reduction (sum of squares).
    Reduction,
}

impl Workload {
    /// Every workload, in the order each round runs them.
    pub const ALL: [Workload; 6] = [
        Workload::GemmF32,
        Workload::GemmF16,
        Workload::GemmBf16,
        Workload::Integer,
        Workload::Transcendental,
        Workload::Reduction,
    ];

    /// Whether the workload is one of the three GEMMs, whose time makes the GPU's TFLOP/s
    /// figure.
    pub fn is_gemm(self) -> bool {
        matches!(
            self,
            Workload::GemmF32 | Workload::GemmF16 | Workload::GemmBf16
        )
    }

    /// The workload's name in findings and check reasons (`gemm_f32`, `integer`, …).
    pub fn name(self) -> &'static str {
        match self {
            Workload::GemmF32 => "gemm_f32",
            Workload::GemmF16 => "gemm_f16",
            Workload::GemmBf16 => "gemm_bf16",
            Workload::Integer => "integer",
            Workload::Transcendental => "transcendental",
            Workload::Reduction => "reduction",
        }
    }
}

/// How big each workload is: small enough for an emulated device, large enough on a GPU
/// to load it (`gemm` 2048 and `elements` 1 << 24 there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// m = n = k of the GEMMs.
    pub gemm: usize,
    /// Elements of the element-wise and reduction workloads.
    pub elements: usize,
}

/// The data pattern of a round: the SDC literature finds faults that only some data
/// patterns trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Values spread evenly over [-1, 1).
    Uniform,
    /// Powers of two with alternating signs: exact products, long carry chains.
    PowersOfTwo,
    /// Mostly zeros with a few large values.
    Sparse,
}

impl Pattern {
    /// The pattern of round `round`: uniform, powers of two and sparse in turn.
    pub fn for_round(round: u64) -> Pattern {
        match round % 3 {
            0 => Pattern::Uniform,
            1 => Pattern::PowersOfTwo,
            _ => Pattern::Sparse,
        }
    }

    fn value(self, seed: u64, i: usize) -> f32 {
        let h = mix64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let unit = (h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        match self {
            Pattern::Uniform => unit,
            Pattern::PowersOfTwo => {
                let exponent = (h % 7) as i32 - 3;
                let sign = if h & (1 << 20) == 0 { 1.0 } else { -1.0 };
                sign * 2f32.powi(exponent)
            }
            Pattern::Sparse => {
                if h.is_multiple_of(16) {
                    unit * 8.0
                } else {
                    0.0
                }
            }
        }
    }
}

/// One round's inputs, the same on every GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// The seed every input of the round is derived from.
    pub seed: u64,
    /// The data pattern of the round's inputs.
    pub pattern: Pattern,
    /// How big each workload is.
    pub sizes: Sizes,
}

impl Round {
    /// Round `index` (0-based): its seed derived from the index, its pattern in turn.
    pub fn new(index: u64, sizes: Sizes) -> Round {
        Round {
            seed: mix64(0x7469_6e79_7065_7266 ^ index),
            pattern: Pattern::for_round(index),
            sizes,
        }
    }

    fn matrix(&self, which: u64, precision: Precision) -> Vec<f32> {
        let n = self.sizes.gemm * self.sizes.gemm;
        (0..n)
            .map(|i| {
                let v = self.pattern.value(self.seed ^ which, i);
                match precision {
                    Precision::Fp16 => f16::from_f32(v).to_f32(),
                    Precision::Bf16 => bf16::from_f32(v).to_f32(),
                    Precision::Fp32 => v,
                }
            })
            .collect()
    }

    fn vector(&self) -> Vec<f32> {
        (0..self.sizes.elements)
            .map(|i| self.pattern.value(self.seed ^ 0x5EED, i))
            .collect()
    }

    fn int_seed(&self) -> i32 {
        self.seed as u32 as i32
    }

    fn transcendental_scale(&self) -> f32 {
        0.001 + (self.seed % 1000) as f32 * 1e-5
    }
}

/// A device buffer, freed on drop.
struct DeviceBuffer<'a> {
    driver: &'a dyn GpuDriver,
    ptr: DevicePtr,
}

impl<'a> DeviceBuffer<'a> {
    fn new(driver: &'a dyn GpuDriver, bytes: usize) -> Result<Self, DriverError> {
        Ok(DeviceBuffer {
            driver,
            ptr: driver.alloc(bytes)?,
        })
    }

    fn upload(driver: &'a dyn GpuDriver, bytes: &[u8]) -> Result<Self, DriverError> {
        let buffer = DeviceBuffer::new(driver, bytes.len())?;
        driver.copy_to_device(buffer.ptr, bytes)?;
        Ok(buffer)
    }

    fn download(&self, words: usize) -> Result<Vec<u32>, DriverError> {
        let mut bytes = vec![0u8; words * 4];
        self.driver.copy_to_host(&mut bytes, self.ptr)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by this driver, freed once, after the last use.
        unsafe { self.driver.free(self.ptr) }
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn bits16_bytes(values: &[f32], precision: Precision) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| match precision {
            Precision::Fp16 => f16::from_f32(v).to_bits().to_le_bytes(),
            _ => bf16::from_f32(v).to_bits().to_le_bytes(),
        })
        .collect()
}

/// Runs `workload` of `round` on `driver`: its output as 32-bit words.
pub fn run(
    driver: &dyn GpuDriver,
    workload: Workload,
    round: &Round,
) -> Result<Vec<u32>, DriverError> {
    let n = round.sizes.elements;
    let words = match workload {
        Workload::GemmF32 | Workload::GemmF16 | Workload::GemmBf16 => {
            let precision = gemm_precision(workload);
            let size = round.sizes.gemm;
            let (a, b) = (round.matrix(1, precision), round.matrix(2, precision));
            let upload = |m: &[f32]| match precision {
                Precision::Fp32 => DeviceBuffer::upload(driver, &f32_bytes(m)),
                p => DeviceBuffer::upload(driver, &bits16_bytes(m, p)),
            };
            let (a, b) = (upload(&a)?, upload(&b)?);
            let c = DeviceBuffer::new(driver, size * size * 4)?;
            let gemm = Gemm {
                m: size,
                n: size,
                k: size,
                a: a.ptr,
                lda: size,
                trans_a: Transpose::No,
                b: b.ptr,
                ldb: size,
                trans_b: Transpose::No,
                c: c.ptr,
                ldc: size,
                alpha: 1.0,
                beta: 0.0,
                types: crate::engine::backend::gpu::driver::GemmTypes::F32,
            }
            .with_types(precision, Precision::Fp32);
            driver.gemm(&gemm)?;
            driver.synchronize()?;
            c.download(size * size)?
        }
        Workload::Integer => elementwise_words(
            driver,
            "health_integer_mix",
            n,
            &[
                KernelArg::I32(round.int_seed()),
                KernelArg::I32(INTEGER_ROUNDS),
            ],
        )?,
        Workload::Transcendental => elementwise_words(
            driver,
            "health_transcendental",
            n,
            &[KernelArg::F32(round.transcendental_scale())],
        )?,
        Workload::Reduction => {
            let x = DeviceBuffer::upload(driver, &f32_bytes(&round.vector()))?;
            let shape = launch::reduction(n);
            let blocks = shape.grid.0 as usize;
            // The partials first, the total last: a fault in either stage shows.
            let out = DeviceBuffer::new(driver, (blocks + 1) * 4)?;
            driver.launch(
                "sum_squares_partial",
                shape,
                &[
                    KernelArg::Ptr(x.ptr),
                    KernelArg::I64(n as i64),
                    KernelArg::Ptr(out.ptr),
                ],
            )?;
            driver.launch(
                "sum_partials",
                launch::single_block(),
                &[
                    KernelArg::Ptr(out.ptr),
                    KernelArg::I32(blocks as i32),
                    KernelArg::Ptr(out.ptr.offset(blocks * 4)),
                    KernelArg::I32(0),
                ],
            )?;
            driver.synchronize()?;
            out.download(blocks + 1)?
        }
    };
    Ok(words)
}

const INTEGER_ROUNDS: i32 = 64;

/// Launches the elementwise `kernel` as `(out, n, rest…)` over `n` fresh words and reads
/// them back.
fn elementwise_words(
    driver: &dyn GpuDriver,
    kernel: &str,
    n: usize,
    rest: &[KernelArg],
) -> Result<Vec<u32>, DriverError> {
    let out = DeviceBuffer::new(driver, n * 4)?;
    let mut args = vec![KernelArg::Ptr(out.ptr), KernelArg::I64(n as i64)];
    args.extend_from_slice(rest);
    driver.launch(kernel, launch::elementwise(n), &args)?;
    driver.synchronize()?;
    out.download(n)
}

fn gemm_precision(workload: Workload) -> Precision {
    match workload {
        Workload::GemmF16 => Precision::Fp16,
        Workload::GemmBf16 => Precision::Bf16,
        _ => Precision::Fp32,
    }
}

/// An element that is wrong, and what it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The element's index in the workload's output.
    pub index: usize,
    /// The 32-bit word the GPU returned there (an f32's bits for the floating-point
    /// workloads).
    pub got: u32,
    /// What the element should be, in words: the majority's word, or the reference value
    /// with its tolerance.
    pub expected: String,
}

/// Elements checked against the CPU per round and workload.
const REFERENCE_SAMPLES: usize = 48;

/// The first sampled element of `words` that the f64 CPU reference refutes.
pub fn check_reference(workload: Workload, round: &Round, words: &[u32]) -> Option<Difference> {
    let samples = |len: usize| -> Vec<usize> {
        (0..REFERENCE_SAMPLES.min(len))
            .map(|s| (mix64(round.seed ^ 0xC0FFEE ^ s as u64) % len as u64) as usize)
            .collect()
    };
    let float = |w: u32| f32::from_bits(w) as f64;
    match workload {
        Workload::GemmF32 | Workload::GemmF16 | Workload::GemmBf16 => {
            let precision = gemm_precision(workload);
            let size = round.sizes.gemm;
            let (a, b) = (round.matrix(1, precision), round.matrix(2, precision));
            // Operands exact in their format, f32 accumulation; TF32 rounds each operand
            // to 10 mantissa bits: allow that against the sum of the terms' magnitudes.
            let tolerance = match precision {
                Precision::Bf16 | Precision::Fp16 | Precision::Fp32 => 4e-3,
            };
            samples(words.len()).into_iter().find_map(|index| {
                let (row, col) = (index / size, index % size);
                let (mut exact, mut magnitude) = (0f64, 0f64);
                for k in 0..size {
                    let term = a[row * size + k] as f64 * b[k * size + col] as f64;
                    exact += term;
                    magnitude += term.abs();
                }
                let got = float(words[index]);
                ((got - exact).abs() > tolerance * magnitude + 1e-30 || !got.is_finite()).then(
                    || Difference {
                        index,
                        got: words[index],
                        expected: format!("{exact:e} ± {:e}", tolerance * magnitude),
                    },
                )
            })
        }
        Workload::Integer => samples(words.len()).into_iter().find_map(|index| {
            let expected = integer_mix(index as u64, round.int_seed() as u32);
            (words[index] != expected).then(|| Difference {
                index,
                got: words[index],
                expected: format!("{expected:#010x}"),
            })
        }),
        Workload::Transcendental => samples(words.len()).into_iter().find_map(|index| {
            let x = ((index % 4093) as f64 - 2046.0) * round.transcendental_scale() as f64;
            let y = ((x.sin() + (x * 0.5).cos()) * 0.5).exp();
            let expected = (y + 1.0).ln() + x.abs().sqrt();
            let got = float(words[index]);
            ((got - expected).abs() > 1e-4 * (1.0 + expected.abs())).then(|| Difference {
                index,
                got: words[index],
                expected: format!("{expected:e}"),
            })
        }),
        Workload::Reduction => {
            let x = round.vector();
            let exact: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
            let index = words.len() - 1;
            let got = float(words[index]);
            ((got - exact).abs() > 1e-4 * exact.abs() + 1e-30).then(|| Difference {
                index,
                got: words[index],
                expected: format!("{exact:e}"),
            })
        }
    }
}

/// The CPU's copy of `health_integer_mix`.
fn integer_mix(i: u64, seed: u32) -> u32 {
    let mut x = (i as u32).wrapping_mul(2_654_435_769) ^ seed;
    for r in 0..INTEGER_ROUNDS as u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x = x.wrapping_mul(2_891_336_453).wrapping_add(r);
    }
    x
}

/// What one round of one workload said about one GPU.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    /// Agrees with the majority (or, without one, with the reference).
    Agrees,
    /// Disagrees with the majority (or, without one, with the reference).
    Corrupt(Difference),
    /// The workload could not run, or the GPUs cannot be told apart from a broken check.
    CouldNotJudge(String),
}

/// Judges one round of one workload over every GPU's result (`Err` where it could not run).
pub fn judge(
    workload: Workload,
    round: &Round,
    results: &[Result<Vec<u32>, String>],
) -> Vec<Judgement> {
    let mut groups: BTreeMap<&[u32], Vec<usize>> = BTreeMap::new();
    for (gpu, result) in results.iter().enumerate() {
        if let Ok(words) = result {
            groups.entry(words.as_slice()).or_default().push(gpu);
        }
    }
    let ran: usize = groups.values().map(Vec::len).sum();
    let majority = groups
        .iter()
        .find(|(_, gpus)| gpus.len() * 2 > ran)
        .map(|(words, _)| *words);
    let majority_refuted = majority.and_then(|words| check_reference(workload, round, words));
    results
        .iter()
        .map(|result| {
            let words = match result {
                Ok(words) => words,
                Err(why) => return Judgement::CouldNotJudge(why.clone()),
            };
            let reference = check_reference(workload, round, words);
            match (majority, &majority_refuted) {
                // All agreeing GPUs wrong the same way: the check, not the GPUs, is suspect.
                (Some(m), Some(refuted)) if m == words.as_slice() => {
                    Judgement::CouldNotJudge(format!(
                        "the GPUs agree but differ from the CPU reference at element {} \
                         ({:#010x}, expected {})",
                        refuted.index, refuted.got, refuted.expected
                    ))
                }
                (Some(m), _) if m == words.as_slice() => Judgement::Agrees,
                (Some(m), _) => {
                    let index = words
                        .iter()
                        .zip(m)
                        .position(|(a, b)| a != b)
                        .unwrap_or(words.len().min(m.len()));
                    let expected = m
                        .get(index)
                        .map_or("nothing".into(), |w| format!("{w:#010x} as the other GPUs"));
                    Judgement::Corrupt(Difference {
                        index,
                        got: words.get(index).copied().unwrap_or(0),
                        expected,
                    })
                }
                // No majority: the reference alone decides.
                (None, _) => match reference {
                    Some(difference) => Judgement::Corrupt(difference),
                    None => Judgement::Agrees,
                },
            }
        })
        .collect()
}

/// What the check found on one GPU over every round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuCorruption {
    /// Rounds whose result differed, by workload.
    pub mismatches: BTreeMap<Workload, u64>,
    /// The first difference seen: its workload, round and element.
    pub first: Option<(Workload, u64, Difference)>,
    /// Why rounds could not be judged (a workload that failed to run, a suspect check).
    pub errors: Vec<String>,
    /// Floating-point operations of the GEMM workloads that ran, and the seconds they
    /// took (uploads and downloads included): a figure to hold the GPU against its peers.
    pub gemm_flops: f64,
    /// Seconds the GEMM workloads took, uploads and downloads included.
    pub gemm_seconds: f64,
}

impl GpuCorruption {
    /// The GEMM workloads' throughput, TFLOP/s.
    pub fn gemm_tflops(&self) -> Option<f64> {
        (self.gemm_seconds > 0.0).then(|| self.gemm_flops / self.gemm_seconds / 1e12)
    }

    /// `Fail` when any round differed, else `Error` when one could not be judged, else
    /// `Pass`.
    pub fn outcome(&self) -> Outcome {
        if !self.mismatches.is_empty() {
            Outcome::Fail
        } else if !self.errors.is_empty() {
            Outcome::Error
        } else {
            Outcome::Pass
        }
    }

    /// One line for a person: what differed first, or why it could not be judged.
    pub fn reason(&self) -> Option<String> {
        if let Some((workload, round, d)) = &self.first {
            let counts: Vec<String> = self
                .mismatches
                .iter()
                .map(|(w, n)| format!("{} {n}", w.name()))
                .collect();
            return Some(format!(
                "{} differs in round {round} at element {}: {:#010x} where {} \
                 (mismatched rounds: {})",
                workload.name(),
                d.index,
                d.got,
                d.expected,
                counts.join(", ")
            ));
        }
        self.errors.first().cloned()
    }
}

/// What the check found over every round, GPU by GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct CorruptionReport {
    /// Rounds run on every GPU (at least one).
    pub rounds: u64,
    /// Seconds from the first round's start to the last one's end.
    pub seconds: f64,
    /// Each GPU's findings, in the order the drivers were given.
    pub per_gpu: Vec<GpuCorruption>,
}

/// Runs every workload on every GPU at once, round after round with new seeds and data
/// patterns, for at least `burn` (and at least one round), judging each round as it ends.
pub fn check(
    drivers: &[&dyn GpuDriver],
    sizes: Sizes,
    burn: std::time::Duration,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> CorruptionReport {
    let started = std::time::Instant::now();
    let mut per_gpu = vec![GpuCorruption::default(); drivers.len()];
    let mut rounds = 0;
    loop {
        let round = Round::new(rounds, sizes);
        type Timed = (Result<Vec<u32>, String>, f64);
        let results: Vec<Vec<Timed>> = std::thread::scope(|scope| {
            let handles: Vec<_> = drivers
                .iter()
                .map(|&driver| {
                    scope.spawn(move || {
                        Workload::ALL
                            .iter()
                            .map(|&w| {
                                let started = std::time::Instant::now();
                                let words = run(driver, w, &round).map_err(|e| e.to_string());
                                (words, started.elapsed().as_secs_f64())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(Err("the workload panicked".to_string()), 0.0); Workload::ALL.len()]
                    })
                })
                .collect()
        });
        let gemm_flops = 2.0 * (sizes.gemm as f64).powi(3);
        for (gpu, per) in results.iter().enumerate() {
            for (&workload, (words, seconds)) in Workload::ALL.iter().zip(per) {
                if workload.is_gemm() && words.is_ok() {
                    per_gpu[gpu].gemm_flops += gemm_flops;
                    per_gpu[gpu].gemm_seconds += seconds;
                }
            }
        }
        for (w, &workload) in Workload::ALL.iter().enumerate() {
            let column: Vec<Result<Vec<u32>, String>> =
                results.iter().map(|per| per[w].0.clone()).collect();
            for (gpu, judgement) in judge(workload, &round, &column).into_iter().enumerate() {
                let record = &mut per_gpu[gpu];
                match judgement {
                    Judgement::Agrees => {}
                    Judgement::Corrupt(difference) => {
                        *record.mismatches.entry(workload).or_default() += 1;
                        record.first.get_or_insert((workload, rounds, difference));
                    }
                    Judgement::CouldNotJudge(why) => {
                        let why = format!("{}: {why}", workload.name());
                        if !record.errors.contains(&why) {
                            record.errors.push(why);
                        }
                    }
                }
            }
        }
        rounds += 1;
        if started.elapsed() >= burn || cancelled() {
            break;
        }
    }
    CorruptionReport {
        rounds,
        seconds: started.elapsed().as_secs_f64(),
        per_gpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round() -> Round {
        Round::new(
            0,
            Sizes {
                gemm: 8,
                elements: 64,
            },
        )
    }

    fn integer_words(r: &Round) -> Vec<u32> {
        (0..r.sizes.elements as u64)
            .map(|i| integer_mix(i, r.int_seed() as u32))
            .collect()
    }

    #[test]
    fn the_gpu_that_differs_from_the_majority_fails_with_the_first_differing_element() {
        let r = round();
        let good = integer_words(&r);
        let mut bad = good.clone();
        bad[17] ^= 1 << 3;
        let results = vec![
            Ok(good.clone()),
            Ok(bad),
            Ok(good.clone()),
            Err("hung".into()),
        ];
        let judged = judge(Workload::Integer, &r, &results);
        assert_eq!(judged[0], Judgement::Agrees);
        assert_eq!(judged[2], Judgement::Agrees);
        match &judged[1] {
            Judgement::Corrupt(d) => {
                assert_eq!(d.index, 17);
                assert_eq!(d.got, good[17] ^ (1 << 3));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&judged[3], Judgement::CouldNotJudge(why) if why == "hung"));
    }

    #[test]
    fn gpus_that_all_agree_against_the_reference_do_not_fail_the_check_is_suspect() {
        let r = round();
        let wrong: Vec<u32> = integer_words(&r)
            .iter()
            .map(|w| w.wrapping_add(1))
            .collect();
        let judged = judge(Workload::Integer, &r, &[Ok(wrong.clone()), Ok(wrong)]);
        assert!(judged
            .iter()
            .all(|j| matches!(j, Judgement::CouldNotJudge(why) if why.contains("CPU reference"))));
    }

    #[test]
    fn without_a_majority_the_reference_decides() {
        let r = round();
        let good = integer_words(&r);
        let mut bad = good.clone();
        for w in bad.iter_mut() {
            *w ^= 0x8000_0000;
        }
        let judged = judge(Workload::Integer, &r, &[Ok(good), Ok(bad)]);
        assert_eq!(judged[0], Judgement::Agrees);
        assert!(matches!(judged[1], Judgement::Corrupt(_)));
    }

    #[test]
    fn the_reference_accepts_a_correct_gemm_and_refutes_a_flipped_exponent() {
        let r = round();
        let size = r.sizes.gemm;
        let (a, b) = (r.matrix(1, Precision::Fp32), r.matrix(2, Precision::Fp32));
        let mut c = vec![0u32; size * size];
        for i in 0..size {
            for j in 0..size {
                let s: f32 = (0..size).map(|k| a[i * size + k] * b[k * size + j]).sum();
                c[i * size + j] = s.to_bits();
            }
        }
        assert_eq!(check_reference(Workload::GemmF32, &r, &c), None);
        for word in c.iter_mut() {
            *word ^= 1 << 29;
        }
        assert!(check_reference(Workload::GemmF32, &r, &c).is_some());
    }

    #[test]
    fn patterns_vary_by_round_and_are_the_same_for_every_gpu() {
        assert_eq!(Round::new(4, round().sizes), Round::new(4, round().sizes));
        assert_ne!(
            Round::new(4, round().sizes).seed,
            Round::new(5, round().sizes).seed
        );
        assert_eq!(Pattern::for_round(1), Pattern::PowersOfTwo);
    }
}
