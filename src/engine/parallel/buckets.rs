//! Gradient buckets: the parameters cut into contiguous groups, filled from the last
//! parameter back (the order a backward pass finishes them), each closed once it holds
//! at least the bucket size, so every bucket's all-reduce can start as soon as the
//! backward has passed it. A tensor larger than the bucket size fills a bucket alone.

use std::ops::Range;

use super::error::ParallelError;

/// PyTorch DDP's default `bucket_cap_mb`.
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

/// Names the bucket size in MiB for data-parallel training; unset, empty or 0 keeps the
/// single all-reduce after the backward (the default: on CPU replicas the buckets measured
/// slower, and on GPUs they are not measured yet).
pub const BUCKET_ENV: &str = "TINYPERF_GRAD_BUCKET_MB";

/// The bucket size [`BUCKET_ENV`] asks for.
pub fn bucket_bytes_from_env() -> Result<Option<usize>, ParallelError> {
    parse_bucket_mb(std::env::var(BUCKET_ENV).ok().as_deref())
}

fn parse_bucket_mb(value: Option<&str>) -> Result<Option<usize>, ParallelError> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    match text.parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(mb) if mb > 0.0 && mb <= 4096.0 => Ok(Some((mb * 1024.0 * 1024.0) as usize)),
        _ => Err(ParallelError::Setup {
            reason: format!("{BUCKET_ENV}={text}: not a size in MiB between 0 and 4096"),
        }),
    }
}

/// The buckets of one model, in the order they are all-reduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPlan {
    /// Parameter-index ranges; the first holds the last parameters.
    buckets: Vec<Range<usize>>,
    params: usize,
}

impl BucketPlan {
    /// Buckets over parameters of `lens` f32 values each, of at least `bucket_bytes`
    /// (the last one may be smaller). A bucket size of 0 gives one bucket per parameter.
    pub fn new(lens: &[usize], bucket_bytes: usize) -> Self {
        let mut buckets = Vec::new();
        let mut end = lens.len();
        let mut bytes = 0usize;
        for i in (0..lens.len()).rev() {
            bytes += lens[i] * std::mem::size_of::<f32>();
            if bytes >= bucket_bytes {
                buckets.push(i..end);
                end = i;
                bytes = 0;
            }
        }
        if end > 0 {
            buckets.push(0..end);
        }
        BucketPlan {
            buckets,
            params: lens.len(),
        }
    }

    /// Parameter-index ranges, in all-reduce order: the first holds the last parameters.
    pub fn buckets(&self) -> &[Range<usize>] {
        &self.buckets
    }

    /// Parameters the plan covers: the length of the `lens` it was built from.
    pub fn params(&self) -> usize {
        self.params
    }

    /// The bucket holding parameter `index`.
    pub fn bucket_of(&self, index: usize) -> Option<usize> {
        self.buckets.iter().position(|b| b.contains(&index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covered_once(plan: &BucketPlan) -> bool {
        let mut seen = vec![0; plan.params()];
        for b in plan.buckets() {
            for i in b.clone() {
                seen[i] += 1;
            }
        }
        seen.iter().all(|&n| n == 1)
    }

    #[test]
    fn buckets_cover_every_parameter_once_from_the_last() {
        let lens = [10, 20, 30, 40, 50, 60];
        let plan = BucketPlan::new(&lens, 100 * 4);
        // From the end: 60+50 = 110 ≥ 100; 40+30+20 = 90, +10 = 100.
        assert_eq!(plan.buckets(), &[4..6, 0..4]);
        assert!(covered_once(&plan));
    }

    #[test]
    fn the_last_bucket_may_be_smaller() {
        let plan = BucketPlan::new(&[5, 100, 100], 100 * 4);
        assert_eq!(plan.buckets(), &[2..3, 1..2, 0..1]);
        let plan = BucketPlan::new(&[3, 4, 60, 60], 100 * 4);
        assert_eq!(plan.buckets(), &[2..4, 0..2]);
        assert!(covered_once(&plan));
    }

    #[test]
    fn a_tensor_larger_than_a_bucket_fills_one_alone() {
        let plan = BucketPlan::new(&[1, 1000, 1], 10 * 4);
        assert_eq!(plan.buckets(), &[1..3, 0..1]);
        let plan = BucketPlan::new(&[1, 1, 1000], 10 * 4);
        assert_eq!(plan.buckets(), &[2..3, 0..2]);
        assert_eq!(plan.bucket_of(1), Some(1));
        assert!(covered_once(&plan));
    }

    #[test]
    fn size_zero_is_one_bucket_per_parameter_and_huge_is_one_bucket() {
        let lens = [7, 8, 9];
        assert_eq!(BucketPlan::new(&lens, 0).buckets(), &[2..3, 1..2, 0..1]);
        let one = BucketPlan::new(&lens, usize::MAX);
        assert_eq!((one.buckets().len(), one.buckets()[0].clone()), (1, 0..3));
        assert!(BucketPlan::new(&[], 100).buckets().is_empty());
    }

    #[test]
    fn the_bucket_size_setting_is_off_unless_a_positive_size_is_given() {
        assert_eq!(parse_bucket_mb(None).unwrap(), None);
        assert_eq!(parse_bucket_mb(Some(" ")).unwrap(), None);
        assert_eq!(parse_bucket_mb(Some("0")).unwrap(), None);
        assert_eq!(
            parse_bucket_mb(Some("25")).unwrap(),
            Some(DEFAULT_BUCKET_BYTES)
        );
        assert_eq!(parse_bucket_mb(Some("0.5")).unwrap(), Some(512 * 1024));
        for bad in ["-1", "many", "1e9"] {
            let e = parse_bucket_mb(Some(bad)).unwrap_err().to_string();
            assert!(e.contains(BUCKET_ENV) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn resnet50_at_25_mb_has_few_buckets() {
        use crate::engine::cost::NetworkShape;
        use crate::engine::model::resnet::ResNetConfig;
        let net = NetworkShape::new(&ResNetConfig::resnet50(1000), 224);
        let mut lens = Vec::new();
        for c in net.convs() {
            lens.extend([c.weights() as usize, c.out_c, c.out_c]);
        }
        lens.extend([net.features * net.classes, net.classes]);
        let plan = BucketPlan::new(&lens, DEFAULT_BUCKET_BYTES);
        assert!(covered_once(&plan));
        // 102 MB of f32 gradients in 25 MB buckets.
        assert!(
            (4..=5).contains(&plan.buckets().len()),
            "{:?}",
            plan.buckets()
        );
    }
}
