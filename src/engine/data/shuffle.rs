//! The order in which an epoch visits a split: a permutation fixed by (seed, epoch).

use super::rng::SampleRng;

const SHUFFLE_STREAM: u64 = 1;

/// A permutation of `0..len` (Fisher–Yates), the same for the same seed and epoch and
/// different from one epoch to the next.
pub fn epoch_order(len: usize, seed: u64, epoch: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    let mut rng = SampleRng::derive(seed, SHUFFLE_STREAM, u64::from(epoch), 0);
    for i in (1..len).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_permutation_that_changes_per_epoch() {
        let a = epoch_order(1000, 5, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_eq!(a, epoch_order(1000, 5, 0));
        assert_ne!(a, epoch_order(1000, 5, 1));
        assert_ne!(a, epoch_order(1000, 6, 0));
        assert!(epoch_order(0, 1, 0).is_empty());
    }
}
