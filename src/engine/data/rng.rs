//! A small, fast, seedable random generator, and the derivation of independent streams
//! from (seed, epoch, index) so that results never depend on which thread did the work.

/// SplitMix64: 64 bits of state, passes BigCrush, and every seed gives a full-period stream.
#[derive(Debug, Clone)]
pub struct SampleRng {
    state: u64,
}

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SampleRng {
    /// A stream seeded from `seed` alone.
    pub fn new(seed: u64) -> Self {
        SampleRng { state: mix(seed) }
    }

    /// The stream for one (seed, stream, epoch, index) tuple; different tuples give
    /// statistically independent streams.
    pub fn derive(seed: u64, stream: u64, epoch: u64, index: u64) -> Self {
        let mut h = mix(seed ^ 0x5EED_0000_0000_0001);
        for part in [stream, epoch, index] {
            h = mix(h ^ mix(part.wrapping_add(GOLDEN_GAMMA)));
        }
        SampleRng { state: h }
    }

    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in [0, n); 0 when n is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability p.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// Approximately standard normal (sum of four uniforms, rescaled): cheap, and
    /// enough for image noise.
    pub fn normalish(&mut self) -> f64 {
        let s: f64 = (0..4).map(|_| self.next_f64()).sum();
        (s - 2.0) * (3.0f64).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4)
            .map(|_| SampleRng::derive(1, 0, 2, 3).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let b = SampleRng::derive(1, 0, 2, 4).next_u64();
        let c = SampleRng::derive(1, 0, 3, 3).next_u64();
        assert_ne!(a[0], b);
        assert_ne!(a[0], c);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SampleRng::new(7);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let v = rng.below(5) as usize;
            assert!(v < 5);
            seen[v] = true;
        }
        assert!(seen.iter().all(|&s| s));
        let mean: f64 = (0..10000).map(|_| rng.next_f64()).sum::<f64>() / 10000.0;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
    }
}
