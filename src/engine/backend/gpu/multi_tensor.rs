//! The tables the multi-tensor kernels read: one entry per parameter tensor, laid out as
//! the kernel source's `MomentumEntry` and `SquaresEntry` (C layout, 64-bit pointers).

use super::driver::{DevicePtr, LaunchShape};
use super::launch::BLOCK;

/// Blocks per tensor at most: enough to keep a tensor's row of the grid busy, few enough
/// that the rows of small tensors are not mostly idle blocks.
pub const MAX_BLOCKS_PER_TENSOR: usize = 32;

/// One tensor's momentum update.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MomentumEntry {
    /// Address of the f32 weights.
    pub w: u64,
    /// Address of the f32 gradient.
    pub g: u64,
    /// Address of the f32 momentum buffer.
    pub b: u64,
    /// Elements in each of the three.
    pub n: i64,
    /// This tensor's learning rate.
    pub step: f32,
    /// Learning rate times weight decay.
    pub step_decay: f32,
}

/// One tensor whose sum of squares the multi-tensor reduction takes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SquaresEntry {
    /// Address of the f32 values.
    pub x: u64,
    /// Elements.
    pub n: i64,
}

impl MomentumEntry {
    /// The entry for `n` elements of weights, gradient and momentum, with the tensor's
    /// learning rate and weight decay.
    pub fn new(w: DevicePtr, g: DevicePtr, b: DevicePtr, n: usize, step: f32, decay: f32) -> Self {
        MomentumEntry {
            w: w.0,
            g: g.0,
            b: b.0,
            n: n as i64,
            step,
            step_decay: step * decay,
        }
    }
}

/// The bytes of a table, as the device reads them.
pub fn table_bytes<T: Copy>(entries: &[T]) -> &[u8] {
    // SAFETY: the entry types are repr(C) plain data without padding (checked below).
    unsafe {
        std::slice::from_raw_parts(
            entries.as_ptr().cast::<u8>(),
            std::mem::size_of_val(entries),
        )
    }
}

/// A row of blocks per tensor, as many as the largest tensor fills up to the cap.
pub fn shape(tensors: usize, largest: usize) -> LaunchShape {
    let blocks = largest
        .div_ceil(BLOCK as usize)
        .clamp(1, MAX_BLOCKS_PER_TENSOR);
    LaunchShape {
        grid: (blocks as u32, tensors.max(1) as u32, 1),
        block: (BLOCK, 1, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_have_the_kernel_source_layout() {
        // Three pointers, a long long and two floats; a pointer and a long long.
        assert_eq!(std::mem::size_of::<MomentumEntry>(), 40);
        assert_eq!(std::mem::align_of::<MomentumEntry>(), 8);
        assert_eq!(std::mem::size_of::<SquaresEntry>(), 16);
        let e = MomentumEntry::new(DevicePtr(1), DevicePtr(2), DevicePtr(3), 4, 0.5, 0.25);
        let bytes = table_bytes(std::slice::from_ref(&e));
        assert_eq!(&bytes[24..32], &4i64.to_le_bytes());
        assert_eq!(&bytes[32..36], &0.5f32.to_le_bytes());
        assert_eq!(&bytes[36..40], &0.125f32.to_le_bytes());
    }

    #[test]
    fn every_tensor_gets_a_row_of_blocks_bounded_by_the_cap() {
        let s = shape(161, 2048 * 1000);
        assert_eq!(s.grid, (MAX_BLOCKS_PER_TENSOR as u32, 161, 1));
        assert_eq!(shape(3, 10).grid, (1, 3, 1));
        assert_eq!(shape(0, 0).grid, (1, 1, 1));
    }
}
