//! The number format a training step stores its activations in. Mixed precision, as in
//! the reference recipe, keeps activations, activation gradients and convolution operands
//! in a 16-bit format while master weights, batch-norm statistics, logits and the loss
//! stay f32.

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

/// How activations are stored between the ops of a training step.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything f32.
    #[default]
    Fp32,
    /// IEEE binary16: 10 mantissa bits, largest finite value 65504, so gradients need loss
    /// scaling to stay out of the subnormal range.
    Fp16,
    /// bfloat16: 7 mantissa bits with f32's exponent range, so no loss scaling is needed.
    Bf16,
}

/// Below this many values a rounding pass runs on the calling thread: splitting it over
/// the pool would cost more than it saves.
const PARALLEL_ROUNDING_MIN: usize = 1 << 16;

impl Precision {
    /// The canonical names, as [`Precision::name`] writes them and options list them.
    pub const NAMES: &'static [&'static str] = &["fp32", "fp16", "bf16"];

    /// The canonical lowercase name: `fp32`, `fp16` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }

    /// Whether activations are held in a 16-bit format.
    pub fn is_reduced(self) -> bool {
        self != Precision::Fp32
    }

    /// Whether small gradients underflow in this format unless the loss is scaled up.
    pub fn needs_loss_scaling(self) -> bool {
        self == Precision::Fp16
    }

    /// `value` rounded to the nearest value of this format (ties to even), as an f32.
    /// Values beyond the format's range become infinite; NaN stays NaN.
    pub fn round(self, value: f32) -> f32 {
        match self {
            Precision::Fp32 => value,
            Precision::Fp16 => half::f16::from_f32(value).to_f32(),
            Precision::Bf16 => half::bf16::from_f32(value).to_f32(),
        }
    }

    /// Rounds every value in place (see [`Precision::round`]).
    pub fn round_slice(self, values: &mut [f32]) {
        if self == Precision::Fp32 {
            return;
        }
        if values.len() < PARALLEL_ROUNDING_MIN {
            values.iter_mut().for_each(|v| *v = self.round(*v));
        } else {
            values
                .par_chunks_mut(PARALLEL_ROUNDING_MIN)
                .for_each(|chunk| chunk.iter_mut().for_each(|v| *v = self.round(*v)));
        }
    }

    /// `dst` := `src` rounded to this format.
    pub fn round_into(self, src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
        self.round_slice(dst);
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A precision name that is none of [`Precision::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown precision {0:?} (expected one of: fp32, fp16, bf16)")]
pub struct UnknownPrecision(pub String);

impl FromStr for Precision {
    type Err = UnknownPrecision;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "f32" => Ok(Precision::Fp32),
            "fp16" | "f16" | "half" => Ok(Precision::Fp16),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            _ => Err(UnknownPrecision(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for name in Precision::NAMES {
            let p: Precision = name.parse().unwrap();
            assert_eq!(p.name(), *name);
            assert_eq!(p.to_string(), *name);
        }
        assert_eq!("HALF".parse::<Precision>().unwrap(), Precision::Fp16);
        let err = "fp8".parse::<Precision>().unwrap_err();
        assert!(err.to_string().contains("\"fp8\""), "{err}");
    }

    #[test]
    fn fp16_rounds_to_eleven_significant_bits_and_overflows_past_65504() {
        let p = Precision::Fp16;
        assert_eq!(p.round(1.0), 1.0);
        // 1 + 2⁻¹¹ is halfway between 1 and the next fp16 value: ties go to even (1).
        assert_eq!(p.round(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(p.round(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        assert_eq!(p.round(65504.0), 65504.0);
        assert_eq!(p.round(65520.0), f32::INFINITY);
        assert_eq!(p.round(-1e6), f32::NEG_INFINITY);
        // The smallest subnormal is 2⁻²⁴; half of it rounds to zero.
        assert_eq!(p.round(2f32.powi(-24)), 2f32.powi(-24));
        assert_eq!(p.round(2f32.powi(-26)), 0.0);
        assert!(p.round(f32::NAN).is_nan());
    }

    #[test]
    fn bf16_keeps_the_f32_range_with_eight_significant_bits() {
        let p = Precision::Bf16;
        assert_eq!(p.round(1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(p.round(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        for big_or_tiny in [1e30f32, 1e-30, 3e38] {
            let r = p.round(big_or_tiny);
            assert!(((r - big_or_tiny) / big_or_tiny).abs() <= 2f32.powi(-9));
            assert_eq!(
                r.to_bits() & 0xffff,
                0,
                "{r} has bits below bf16's mantissa"
            );
        }
        assert!(p.round(f32::NAN).is_nan());
    }

    #[test]
    fn fp32_leaves_values_alone_and_slices_round_like_single_values() {
        let values: Vec<f32> = (0..(PARALLEL_ROUNDING_MIN * 2 + 3))
            .map(|i| (i as f32 * 0.7311).sin() * 1000.0)
            .collect();
        let mut same = values.clone();
        Precision::Fp32.round_slice(&mut same);
        assert_eq!(same, values);
        for p in [Precision::Fp16, Precision::Bf16] {
            let mut rounded = vec![0.0; values.len()];
            p.round_into(&values, &mut rounded);
            for (r, v) in rounded.iter().zip(&values) {
                assert_eq!(*r, p.round(*v));
            }
            assert!(rounded.iter().zip(&values).any(|(r, v)| r != v));
        }
    }
}
