//! The global batch cut into one equal, contiguous shard per replica.

use crate::engine::data::Batch;

use super::error::ParallelError;

/// Splits `batch` into `parts` batches of equal size, in order: shard `r` holds samples
/// `r·n/parts .. (r+1)·n/parts`. Fails, naming both sizes, when they do not divide.
pub fn split_batch(batch: &Batch, parts: usize) -> Result<Vec<Batch>, ParallelError> {
    let n = batch.len();
    if parts == 0 || !n.is_multiple_of(parts) || n == 0 {
        return Err(ParallelError::BatchNotDivisible {
            batch: n,
            replicas: parts,
        });
    }
    let pixels = batch.image_size * batch.image_size * 3;
    let lengths_agree =
        batch.images.len() == n * pixels && batch.valid.len() == n && batch.sample_ids.len() == n;
    if !lengths_agree {
        return Err(ParallelError::Setup {
            reason: format!(
                "batch of {n} labels has {} image values ({pixels} per sample), {} valid \
                 flags and {} sample ids",
                batch.images.len(),
                batch.valid.len(),
                batch.sample_ids.len()
            ),
        });
    }
    let per = n / parts;
    Ok((0..parts)
        .map(|r| {
            let samples = r * per..(r + 1) * per;
            Batch {
                epoch: batch.epoch,
                index: batch.index,
                image_size: batch.image_size,
                images: batch.images[samples.start * pixels..samples.end * pixels].to_vec(),
                labels: batch.labels[samples.clone()].to_vec(),
                valid: batch.valid[samples.clone()].to_vec(),
                sample_ids: batch.sample_ids[samples].to_vec(),
                // Replacements are counted per batch, not per sample: the first shard
                // carries them so the shards add up to the batch.
                replaced: if r == 0 { batch.replaced } else { 0 },
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize, image_size: usize) -> Batch {
        let pixels = image_size * image_size * 3;
        Batch {
            epoch: 2,
            index: 5,
            image_size,
            images: (0..n * pixels).map(|v| v as f32).collect(),
            labels: (0..n as u32).collect(),
            valid: (0..n).map(|i| i % 3 != 0).collect(),
            sample_ids: (100..100 + n).collect(),
            replaced: 1,
        }
    }

    #[test]
    fn shards_are_contiguous_equal_and_reassemble_the_batch() {
        let b = batch(12, 2);
        let shards = split_batch(&b, 4).unwrap();
        assert_eq!(shards.len(), 4);
        assert!(shards.iter().all(|s| s.len() == 3 && s.image_size == 2));
        assert_eq!(shards[1].labels, vec![3, 4, 5]);
        assert_eq!(shards[1].image(0), b.image(3));
        let images: Vec<f32> = shards.iter().flat_map(|s| s.images.clone()).collect();
        let valid: Vec<bool> = shards.iter().flat_map(|s| s.valid.clone()).collect();
        let ids: Vec<usize> = shards.iter().flat_map(|s| s.sample_ids.clone()).collect();
        assert_eq!(images, b.images);
        assert_eq!(valid, b.valid);
        assert_eq!(ids, b.sample_ids);
        assert_eq!(shards.iter().map(|s| s.replaced).sum::<usize>(), 1);
    }

    #[test]
    fn an_uneven_split_names_both_sizes() {
        let err = split_batch(&batch(10, 1), 4).unwrap_err().to_string();
        assert!(err.contains("10") && err.contains('4'), "{err}");
        assert!(split_batch(&batch(4, 1), 0).is_err());
        assert!(split_batch(&batch(0, 1), 2).is_err());
        let mut bad = batch(4, 1);
        bad.images.pop();
        assert!(split_batch(&bad, 2).is_err());
    }
}
