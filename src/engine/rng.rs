//! A counter-based deterministic generator: every number is a pure function of
//! `(seed, stream, index)`, so any element of any tensor can be drawn independently, in
//! any order, on any thread, and reproduced bit for bit by a few lines of numpy with
//! wrapping `uint64` arithmetic (`scripts/torch_reference.py` does exactly that).
//!
//! The construction is SplitMix64 addressed by counter:
//!
//! ```text
//! key(seed, stream) = mix64(mix64(seed + GOLDEN) + (stream + 1) * STREAM_GAMMA)
//! bits(i)           = mix64(key + (i + 1) * GOLDEN)            (all wrapping u64)
//! uniform(i)        = (bits(i) >> 11) * 2^-53                  in [0, 1)
//! normal(j)         = sqrt(-2 ln u1) * cos(TAU * u2)           (Box–Muller, f64)
//!                     u1 = ((bits(2j) >> 11) + 1) * 2^-53      in (0, 1]
//!                     u2 = uniform(2j + 1)
//! ```
//!
//! `ln` and `cos` come from the platform's libm (glibc on Linux), which is also what
//! Python's `math` module calls, so the Python twin uses `math.log` and `math.cos`. A
//! libm that rounds differently (musl) can move a rare value by one ulp.

/// 2^64 / φ: the SplitMix64 increment.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// An odd constant that spreads stream ids over the key space.
const STREAM_GAMMA: u64 = 0xD1B5_4A32_D192_ED03;
/// 2^-53: turns the top 53 bits of a word into a double in [0, 1).
const UNIT: f64 = 1.0 / (1u64 << 53) as f64;

/// The SplitMix64 output function (Stafford's variant 13): a bijective avalanche mix.
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One independent stream of numbers, addressed by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterRng {
    key: u64,
}

impl CounterRng {
    /// The stream `stream` of generator `seed`. Different streams of one seed are
    /// independent for every practical purpose.
    pub const fn new(seed: u64, stream: u64) -> Self {
        let base = mix64(seed.wrapping_add(GOLDEN));
        let key = mix64(base.wrapping_add(stream.wrapping_add(1).wrapping_mul(STREAM_GAMMA)));
        Self { key }
    }

    /// The 64 random bits at `index`.
    pub const fn bits(&self, index: u64) -> u64 {
        mix64(
            self.key
                .wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN)),
        )
    }

    /// A uniform double in [0, 1) from the bits at `index`.
    pub fn uniform(&self, index: u64) -> f64 {
        (self.bits(index) >> 11) as f64 * UNIT
    }

    /// A standard normal double: Box–Muller on the bits at `2 * index` and
    /// `2 * index + 1` (the cosine branch only, so every index stands alone).
    pub fn normal(&self, index: u64) -> f64 {
        let first = index.wrapping_mul(2);
        // Shifted to (0, 1] so the logarithm is finite.
        let u1 = ((self.bits(first) >> 11) + 1) as f64 * UNIT;
        let u2 = self.uniform(first.wrapping_add(1));
        let radius = (-2.0 * u1.ln()).sqrt();
        radius * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix64_matches_the_splitmix64_reference_sequence() {
        // SplitMix64 seeded with 0 yields mix64(GOLDEN), mix64(2 * GOLDEN), … and its
        // first output is the published value 0xE220A8397B1DCDAF.
        assert_eq!(mix64(GOLDEN), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(GOLDEN.wrapping_mul(2)), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn same_address_gives_same_number_and_streams_differ() {
        let a = CounterRng::new(7, 0);
        let b = CounterRng::new(7, 0);
        let c = CounterRng::new(7, 1);
        let d = CounterRng::new(8, 0);
        assert_eq!(a.bits(12345), b.bits(12345));
        assert_ne!(a.bits(0), c.bits(0));
        assert_ne!(a.bits(0), d.bits(0));
        assert_ne!(a.bits(0), a.bits(1));
    }

    #[test]
    fn uniforms_lie_in_the_unit_interval_with_the_right_mean() {
        let rng = CounterRng::new(1, 2);
        let n = 200_000;
        let mut sum = 0.0;
        for i in 0..n {
            let u = rng.uniform(i);
            assert!((0.0..1.0).contains(&u));
            sum += u;
        }
        let mean = sum / n as f64;
        // Standard error of the mean is 0.29 / sqrt(n) ≈ 6.5e-4.
        assert!((mean - 0.5).abs() < 4e-3, "mean {mean}");
    }

    #[test]
    fn normals_have_zero_mean_unit_variance_and_gaussian_tails() {
        let rng = CounterRng::new(3, 4);
        let n = 200_000u64;
        let (mut sum, mut sum_sq, mut beyond_two) = (0.0, 0.0, 0u64);
        for i in 0..n {
            let z = rng.normal(i);
            assert!(z.is_finite());
            sum += z;
            sum_sq += z * z;
            if z.abs() > 2.0 {
                beyond_two += 1;
            }
        }
        let mean = sum / n as f64;
        let var = sum_sq / n as f64 - mean * mean;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        // P(|Z| > 2) = 0.0455.
        let tail = beyond_two as f64 / n as f64;
        assert!((tail - 0.0455).abs() < 0.003, "tail {tail}");
    }
}
