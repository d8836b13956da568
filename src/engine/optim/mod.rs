//! The reference optimizer split: LARS on conv and FC weights, plain momentum SGD with
//! no weight decay on the skip list (batch-norm γ and β, including the downsample
//! path's batch norm, and biases).
//!
//! The updates work on plain `f32` slices plus precomputed norms, so a GPU backend can
//! reduce the norms on its device and apply the same scalar logic in its kernel.

pub mod lars;
pub mod sgd;

pub use lars::{lars_step, lars_trust_ratio, LarsConfig};
pub use sgd::sgd_momentum_step;

pub use crate::engine::layers::ParamKind;

impl ParamKind {
    /// The kind of a parameter from its PyTorch state-dict name in torchvision's ResNet
    /// naming (`conv1.weight`, `layer1.0.bn2.bias`, `layer2.0.downsample.0.weight`,
    /// `layer2.0.downsample.1.weight`, `fc.weight`, `fc.bias`), or `None` for names
    /// outside that scheme.
    pub fn from_torch_name(name: &str) -> Option<Self> {
        let (module, leaf) = name.rsplit_once('.')?;
        let last = module.rsplit('.').next().unwrap_or(module);
        let is_bn = last.starts_with("bn") || module.ends_with("downsample.1");
        let is_conv = last.starts_with("conv") || module.ends_with("downsample.0");
        match (leaf, is_bn, is_conv, last) {
            ("weight", true, _, _) => Some(Self::BatchNormGamma),
            ("bias", true, _, _) => Some(Self::BatchNormBeta),
            ("weight", false, true, _) => Some(Self::ConvWeight),
            ("weight", false, false, "fc") => Some(Self::LinearWeight),
            ("bias", false, false, "fc") => Some(Self::LinearBias),
            _ => None,
        }
    }

    /// Whether the kind gets plain momentum SGD without weight decay instead of LARS.
    pub fn in_skip_list(self) -> bool {
        in_skip_list(self)
    }
}

/// Whether `kind` is in the reference skip list: batch-norm γ/β and biases get plain
/// momentum SGD with no weight decay; conv and FC weights get LARS.
pub fn in_skip_list(kind: ParamKind) -> bool {
    match kind {
        ParamKind::ConvWeight | ParamKind::LinearWeight => false,
        ParamKind::LinearBias | ParamKind::BatchNormGamma | ParamKind::BatchNormBeta => true,
    }
}

/// The reference's own skip rule on state-dict names: any name containing `bn`, `bias`
/// or `downsample.1`.
pub fn torch_name_in_skip_list(name: &str) -> bool {
    name.contains("bn") || name.contains("bias") || name.contains("downsample.1")
}

/// The Euclidean norm of `values`, accumulated in f64.
pub fn l2_norm(values: &[f32]) -> f32 {
    values
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt() as f32
}

/// Bad arguments to an optimizer step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptimError {
    /// A gradient or momentum buffer whose length differs from the parameter's.
    #[error("optimizer step: {what} holds {got} elements, the parameter {expected}")]
    LengthMismatch {
        /// Which slice is off: `"gradient"` or `"momentum buffer"`.
        what: &'static str,
        /// The parameter's length in elements.
        expected: usize,
        /// The offending slice's length in elements.
        got: usize,
    },
}

fn check_lengths(param: usize, grad: usize, momentum: usize) -> Result<(), OptimError> {
    if grad != param {
        return Err(OptimError::LengthMismatch {
            what: "gradient",
            expected: param,
            got: grad,
        });
    }
    if momentum != param {
        return Err(OptimError::LengthMismatch {
            what: "momentum buffer",
            expected: param,
            got: momentum,
        });
    }
    Ok(())
}

/// One optimizer step of a parameter of `kind` on host slices: LARS with `config` for
/// conv and FC weights, momentum SGD without weight decay for the skip list. Returns the
/// trust ratio applied (1 for the skip list).
pub fn step_param(
    kind: ParamKind,
    param: &mut [f32],
    grad: &[f32],
    momentum: &mut [f32],
    lr: f32,
    config: &LarsConfig,
) -> Result<f32, OptimError> {
    check_lengths(param.len(), grad.len(), momentum.len())?;
    if in_skip_list(kind) {
        sgd_momentum_step(param, grad, momentum, lr, config.momentum)?;
        return Ok(1.0);
    }
    let trust = lars_trust_ratio(
        l2_norm(param),
        l2_norm(grad),
        config.weight_decay,
        config.trust_coefficient,
        config.epsilon,
    );
    lars_step(
        param,
        grad,
        momentum,
        lr,
        trust,
        config.weight_decay,
        config.momentum,
    )?;
    Ok(trust)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESNET_NAMES: &[(&str, ParamKind)] = &[
        ("conv1.weight", ParamKind::ConvWeight),
        ("bn1.weight", ParamKind::BatchNormGamma),
        ("bn1.bias", ParamKind::BatchNormBeta),
        ("layer1.0.conv3.weight", ParamKind::ConvWeight),
        ("layer1.0.bn3.weight", ParamKind::BatchNormGamma),
        ("layer1.0.downsample.0.weight", ParamKind::ConvWeight),
        ("layer1.0.downsample.1.weight", ParamKind::BatchNormGamma),
        ("layer1.0.downsample.1.bias", ParamKind::BatchNormBeta),
        ("layer4.2.bn3.bias", ParamKind::BatchNormBeta),
        ("fc.weight", ParamKind::LinearWeight),
        ("fc.bias", ParamKind::LinearBias),
    ];

    #[test]
    fn kinds_from_torch_names_agree_with_the_reference_skip_rule() {
        for &(name, kind) in RESNET_NAMES {
            assert_eq!(ParamKind::from_torch_name(name), Some(kind), "{name}");
            assert_eq!(
                in_skip_list(kind),
                torch_name_in_skip_list(name),
                "{name}: kind {kind:?}"
            );
        }
        assert_eq!(
            ParamKind::from_torch_name("layer1.0.bn1.running_mean"),
            None
        );
        assert_eq!(ParamKind::from_torch_name("weight"), None);
        assert_eq!(ParamKind::from_torch_name("head.proj.weight"), None);
    }

    #[test]
    fn skip_list_is_bn_and_biases_only() {
        assert!(!in_skip_list(ParamKind::ConvWeight));
        assert!(!in_skip_list(ParamKind::LinearWeight));
        assert!(in_skip_list(ParamKind::LinearBias));
        assert!(in_skip_list(ParamKind::BatchNormGamma));
        assert!(ParamKind::BatchNormBeta.in_skip_list());
    }

    #[test]
    fn l2_norm_of_a_pythagorean_pair() {
        assert_eq!(l2_norm(&[3.0, 4.0]), 5.0);
        assert_eq!(l2_norm(&[]), 0.0);
    }

    #[test]
    fn step_param_routes_weights_to_lars_and_the_skip_list_to_sgd() {
        let config = LarsConfig::default();
        let grad = [0.5f32, -0.5];
        // Skip list: w - lr * g, no weight decay, trust 1.
        let mut gamma = [1.0f32, 1.0];
        let mut buf = [0.0f32; 2];
        let trust = step_param(
            ParamKind::BatchNormGamma,
            &mut gamma,
            &grad,
            &mut buf,
            0.1,
            &config,
        )
        .unwrap();
        assert_eq!(trust, 1.0);
        assert_eq!(gamma, [0.95, 1.05]);
        // Weights: trust = 0.001 · |w| / (|g| + wd · |w|) with |w| = √2, |g| = √½.
        let mut w = [1.0f32, 1.0];
        let mut buf = [0.0f32; 2];
        let trust =
            step_param(ParamKind::ConvWeight, &mut w, &grad, &mut buf, 0.1, &config).unwrap();
        let expected = 0.001 * 2f64.sqrt() / (0.5f64.sqrt() + 2e-4 * 2f64.sqrt());
        assert!(
            (f64::from(trust) - expected).abs() < 1e-9,
            "{trust} vs {expected}"
        );
        assert!(w[0] < 1.0 && w[1] > 1.0 - 1e-3);
    }

    #[test]
    fn step_param_rejects_mismatched_slices() {
        let config = LarsConfig::default();
        let mut w = [1.0f32; 3];
        let mut buf = [0.0f32; 3];
        let err = step_param(
            ParamKind::ConvWeight,
            &mut w,
            &[1.0; 2],
            &mut buf,
            0.1,
            &config,
        )
        .unwrap_err();
        assert!(err.to_string().contains("gradient holds 2"), "{err}");
        let mut short = [0.0f32; 1];
        assert!(step_param(
            ParamKind::BatchNormBeta,
            &mut w,
            &[1.0; 3],
            &mut short,
            0.1,
            &config
        )
        .is_err());
        assert_eq!(w, [1.0; 3], "nothing changes on error");
    }
}
