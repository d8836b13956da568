//! Softmax cross-entropy with label smoothing, as PyTorch's
//! `CrossEntropyLoss(label_smoothing=ε)`: per sample
//! `(1-ε)·(-log p_y) + ε·mean_k(-log p_k)`, averaged over the valid samples.

use crate::engine::backend::CrossEntropyParams;
use crate::engine::{EngineError, Result};

/// The class of each sample, or `None` for a padded one (negative label).
pub fn parse_labels(p: &CrossEntropyParams, labels: &[f32]) -> Result<Vec<Option<usize>>> {
    labels
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            if l < 0.0 {
                Ok(None)
            } else if l.fract() == 0.0 && (l as usize) < p.classes {
                Ok(Some(l as usize))
            } else {
                Err(EngineError::InvalidParameter {
                    op: "cross_entropy",
                    reason: format!("label {l} of sample {i} is not a class in 0..{}", p.classes),
                })
            }
        })
        .collect()
}

fn log_sum_exp(z: &[f32]) -> f64 {
    let max = z.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    max + z.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln()
}

fn valid_count(labels: &[Option<usize>]) -> Result<usize> {
    match labels.iter().filter(|l| l.is_some()).count() {
        0 => Err(EngineError::InvalidParameter {
            op: "cross_entropy",
            reason: "every sample of the batch is padding".into(),
        }),
        n => Ok(n),
    }
}

/// Returns the mean loss and writes per-sample correctness (1.0 or 0.0).
pub fn forward(
    p: &CrossEntropyParams,
    logits: &[f32],
    labels: &[Option<usize>],
    correct: &mut [f32],
) -> Result<f32> {
    let valid = valid_count(labels)?;
    let eps = p.label_smoothing as f64;
    let mut total = 0.0f64;
    for ((z, label), hit) in logits.chunks_exact(p.classes).zip(labels).zip(correct) {
        *hit = 0.0;
        let Some(y) = *label else { continue };
        let lse = log_sum_exp(z);
        let mean_z = z.iter().map(|&v| v as f64).sum::<f64>() / p.classes as f64;
        total += (1.0 - eps) * (lse - z[y] as f64) + eps * (lse - mean_z);
        // The first maximal logit is the prediction, as arg-max reports it.
        let predicted = z
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv {
                    (i, v)
                } else {
                    (bi, bv)
                }
            })
            .0;
        if predicted == y {
            *hit = 1.0;
        }
    }
    Ok((total / valid as f64) as f32)
}

/// d/dz = (softmax(z) − (1-ε)·onehot(y) − ε/K) / valid; zero for padded samples.
pub fn backward(
    p: &CrossEntropyParams,
    logits: &[f32],
    labels: &[Option<usize>],
    dlogits: &mut [f32],
) -> Result<()> {
    let valid = valid_count(labels)? as f64;
    let eps = p.label_smoothing as f64;
    let uniform = eps / p.classes as f64;
    for ((z, label), dz) in logits
        .chunks_exact(p.classes)
        .zip(labels)
        .zip(dlogits.chunks_exact_mut(p.classes))
    {
        let Some(y) = *label else {
            dz.fill(0.0);
            continue;
        };
        let lse = log_sum_exp(z);
        for (k, (d, &v)) in dz.iter_mut().zip(z).enumerate() {
            let target = if k == y { 1.0 - eps } else { 0.0 } + uniform;
            *d = (((v as f64 - lse).exp() - target) / valid) as f32;
        }
    }
    Ok(())
}
