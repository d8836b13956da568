//! Launch geometry: how many blocks of which shape each kind of kernel gets.

use super::driver::LaunchShape;

/// Threads per block of the one-dimensional kernels; the kernel source's `BLOCK`.
pub const BLOCK: u32 = 256;

/// Grid-stride kernels need no more blocks than fill the device several times over;
/// beyond this each thread loops.
pub const MAX_GRID_BLOCKS: u64 = 65_535;

/// Rows of a batch-norm slab: one block reduces this many rows of 32 channels.
pub const BN_ROWS_PER_SLAB: usize = 1024;

/// Blocks the first stage of a two-stage reduction uses at most.
pub const REDUCTION_BLOCKS: u64 = 1024;

/// A grid-stride launch over `n` elements: one thread per element up to the grid cap.
pub fn elementwise(n: usize) -> LaunchShape {
    let blocks = (n as u64).div_ceil(BLOCK as u64).clamp(1, MAX_GRID_BLOCKS);
    LaunchShape {
        grid: (blocks as u32, 1, 1),
        block: (BLOCK, 1, 1),
    }
}

/// One thread per item, every item its own thread (no grid-stride loop in the kernel).
pub fn one_thread_each(n: usize) -> LaunchShape {
    let blocks = (n as u64).div_ceil(BLOCK as u64).max(1);
    LaunchShape {
        grid: (blocks.min(u32::MAX as u64) as u32, 1, 1),
        block: (BLOCK, 1, 1),
    }
}

/// The first stage of a two-stage reduction over `n` elements; its block count is the
/// number of partial sums the second stage adds.
pub fn reduction(n: usize) -> LaunchShape {
    let blocks = (n as u64).div_ceil(BLOCK as u64).clamp(1, REDUCTION_BLOCKS);
    LaunchShape {
        grid: (blocks as u32, 1, 1),
        block: (BLOCK, 1, 1),
    }
}

/// A single block of `BLOCK` threads.
pub fn single_block() -> LaunchShape {
    LaunchShape {
        grid: (1, 1, 1),
        block: (BLOCK, 1, 1),
    }
}

/// One block per row (softmax rows).
pub fn block_per_row(rows: usize) -> LaunchShape {
    LaunchShape {
        grid: (rows.max(1) as u32, 1, 1),
        block: (BLOCK, 1, 1),
    }
}

/// Slabs of [`BN_ROWS_PER_SLAB`] rows over `rows`.
pub fn bn_slabs(rows: usize) -> usize {
    rows.div_ceil(BN_ROWS_PER_SLAB).max(1)
}

/// Batch-norm partial sums: 32 channels by 8 row lanes per block, a slab per grid row.
pub fn bn_partials(rows: usize, channels: usize) -> LaunchShape {
    LaunchShape {
        grid: (
            channels.div_ceil(32).max(1) as u32,
            bn_slabs(rows) as u32,
            1,
        ),
        block: (32, 8, 1),
    }
}

/// Channels from which im2col copies whole rows ([`block_per_output_row`]) instead of
/// spending a thread per element on index arithmetic.
pub const IM2COL_ROWS_MIN_CHANNELS: usize = 16;

/// A block per row of `segment` contiguous elements: a warp-multiple of threads up to 128.
pub fn block_per_output_row(rows: usize, segment: usize) -> LaunchShape {
    let threads = segment.div_ceil(32).clamp(1, 4) * 32;
    LaunchShape {
        grid: (rows.clamp(1, i32::MAX as usize) as u32, 1, 1),
        block: (threads as u32, 1, 1),
    }
}

/// Images per im2col chunk so that the column buffer stays near `budget_elems`.
pub fn im2col_images(batch: usize, rows_per_image: usize, k: usize, budget_elems: usize) -> usize {
    let per_image = rows_per_image.saturating_mul(k).max(1);
    (budget_elems / per_image).clamp(1, batch.max(1))
}

/// The implicit-GEMM convolution kernels' tile of the output (rows × columns), the depth
/// of one staged slice and the threads of a block: the kernel source's `IG_BM`, `IG_BN`,
/// `IG_BK` and `IG_THREADS`.
pub const IMPLICIT_TILE: usize = 64;
/// Depth of one staged slice of the implicit GEMM (`IG_BK`).
pub const IMPLICIT_SLICE: usize = 16;
/// Threads of one implicit-GEMM block (`IG_THREADS`).
pub const IMPLICIT_THREADS: u32 = 128;

/// Blocks per multiprocessor the filter gradient's split aims for.
const IMPLICIT_BLOCKS_PER_MULTIPROCESSOR: usize = 4;

/// A split is at least this deep, so that each block's partial is worth its store.
const IMPLICIT_MIN_SPLIT_DEPTH: usize = 8 * IMPLICIT_SLICE;

/// Splits at most, and at most this many f32 partials in all.
const IMPLICIT_MAX_SPLITS: usize = 64;
const IMPLICIT_SPLIT_BUDGET_ELEMS: usize = 1 << 26;

/// Output tiles of an implicit-GEMM convolution pass writing `rows × cols`.
pub fn implicit_tiles(rows: usize, cols: usize) -> usize {
    rows.div_ceil(IMPLICIT_TILE) * cols.div_ceil(IMPLICIT_TILE)
}

/// How the filter gradient's depth (every output pixel of the batch) is cut: `(splits,
/// split_depth)`, each split a multiple of the slice deep, so that a `rows × cols`
/// gradient with few tiles still fills `multiprocessors`. Each split sums into a partial
/// of its own, which one more kernel adds in a fixed order.
pub fn implicit_splits(
    rows: usize,
    cols: usize,
    depth: usize,
    multiprocessors: u32,
) -> (usize, usize) {
    let tiles = implicit_tiles(rows, cols).max(1);
    let wanted = (multiprocessors as usize * IMPLICIT_BLOCKS_PER_MULTIPROCESSOR).div_ceil(tiles);
    let by_depth = depth / IMPLICIT_MIN_SPLIT_DEPTH;
    let by_memory = IMPLICIT_SPLIT_BUDGET_ELEMS / (rows * cols).max(1);
    let splits = wanted
        .min(by_depth)
        .min(by_memory)
        .clamp(1, IMPLICIT_MAX_SPLITS);
    let split_depth = depth.div_ceil(splits).div_ceil(IMPLICIT_SLICE).max(1) * IMPLICIT_SLICE;
    (depth.div_ceil(split_depth).max(1), split_depth)
}

/// A block per output tile (grid x) and per split of the depth (grid y).
pub fn implicit_gemm(rows: usize, cols: usize, splits: usize) -> LaunchShape {
    LaunchShape {
        grid: (
            implicit_tiles(rows, cols).clamp(1, u32::MAX as usize) as u32,
            splits.max(1) as u32,
            1,
        ),
        block: (IMPLICIT_THREADS, 1, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(s: LaunchShape) -> u64 {
        let (g, b) = (s.grid, s.block);
        g.0 as u64 * g.1 as u64 * g.2 as u64 * b.0 as u64 * b.1 as u64 * b.2 as u64
    }

    #[test]
    fn elementwise_covers_small_inputs_and_caps_large_ones() {
        assert_eq!(elementwise(0).grid.0, 1);
        assert_eq!(elementwise(1).grid.0, 1);
        assert_eq!(elementwise(256).grid.0, 1);
        assert_eq!(elementwise(257).grid.0, 2);
        assert!(threads(elementwise(1000)) >= 1000);
        let big = elementwise(1 << 34);
        assert_eq!(big.grid.0 as u64, MAX_GRID_BLOCKS);
    }

    #[test]
    fn one_thread_each_has_a_thread_per_item() {
        for n in [1, 255, 256, 257, 100_000] {
            assert!(threads(one_thread_each(n)) >= n as u64);
            assert!(threads(one_thread_each(n)) < n as u64 + BLOCK as u64);
        }
    }

    #[test]
    fn reductions_have_a_bounded_number_of_partials() {
        assert_eq!(reduction(10).grid.0, 1);
        assert_eq!(reduction(1 << 30).grid.0 as u64, REDUCTION_BLOCKS);
        assert!(
            REDUCTION_BLOCKS <= 4 * BLOCK as u64,
            "the second stage loops over partials"
        );
    }

    #[test]
    fn batch_norm_slabs_cover_every_row_and_channel() {
        for (rows, channels) in [(2, 1), (1024, 32), (1025, 33), (802_816, 64), (49, 2048)] {
            let s = bn_partials(rows, channels);
            assert!(s.grid.0 as usize * 32 >= channels);
            assert!(s.grid.1 as usize * BN_ROWS_PER_SLAB >= rows);
            assert_eq!(s.grid.1 as usize, bn_slabs(rows));
            assert_eq!(s.block, (32, 8, 1));
        }
    }

    #[test]
    fn row_blocks_fit_their_segment() {
        assert_eq!(block_per_output_row(10, 21).block.0, 32);
        assert_eq!(block_per_output_row(10, 192).block.0, 128);
        assert_eq!(block_per_output_row(10, 65).block.0, 96);
        assert_eq!(block_per_output_row(802_816, 576).grid.0, 802_816);
        assert_eq!(block_per_output_row(0, 1).grid.0, 1);
    }

    #[test]
    fn im2col_chunks_respect_the_budget_but_take_at_least_one_image() {
        // ResNet-50's first 3×3 conv at batch 256: 56·56 rows of 576 per image.
        let images = im2col_images(256, 56 * 56, 576, 1 << 26);
        assert!((1..256).contains(&images));
        assert!(images * 56 * 56 * 576 <= 1 << 26);
        assert_eq!(im2col_images(4, 10, 10, 1 << 26), 4);
        assert_eq!(im2col_images(4, 1 << 20, 1 << 20, 16), 1);
    }

    #[test]
    fn implicit_splits_cover_the_depth_in_whole_slices_and_stay_bounded() {
        // ResNet-50's first 3×3 filter gradient at batch 256: 576 × 64 in 9 tiles over
        // 802,816 pixels, on a 132-multiprocessor H100.
        let pixels = 256 * 56 * 56;
        let (splits, depth) = implicit_splits(576, 64, pixels, 132);
        assert!(splits > 1 && splits <= IMPLICIT_MAX_SPLITS, "{splits}");
        assert!(9 * splits >= 4 * 132, "{splits}");
        assert_eq!(depth % IMPLICIT_SLICE, 0);
        assert!(splits * depth >= pixels);
        assert!((splits - 1) * depth < pixels, "an empty split");
        assert!(splits * 576 * 64 <= IMPLICIT_SPLIT_BUDGET_ELEMS);
        // Its last 3×3: 4608 × 512 in 576 tiles, enough without a split.
        assert_eq!(implicit_splits(4608, 512, 256 * 7 * 7, 132).0, 1);
        // The stem's: 147 × 64 in 3 tiles over 802,816 pixels.
        let (splits, depth) = implicit_splits(147, 64, 256 * 112 * 112, 132);
        assert!(splits >= 32, "{splits}");
        assert!(splits * depth >= 256 * 112 * 112 && (splits - 1) * depth < 256 * 112 * 112);
        // Enough tiles already, or too shallow to split: one split over the whole depth.
        assert_eq!(implicit_splits(4096, 4096, 10_000, 132), (1, 10_000));
        assert_eq!(implicit_splits(64, 64, 100, 132), (1, 112));
        assert_eq!(implicit_splits(64, 64, 0, 1), (1, IMPLICIT_SLICE));
    }

    #[test]
    fn implicit_launches_have_a_block_per_tile_and_split() {
        let s = implicit_gemm(65, 64, 3);
        assert_eq!(s.grid, (2, 3, 1));
        assert_eq!(s.block, (IMPLICIT_THREADS, 1, 1));
        assert_eq!(implicit_gemm(0, 0, 0).grid, (1, 1, 1));
        assert_eq!(implicit_tiles(256 * 56 * 56, 64), 12_544);
    }
}
