//! Per-thread scratch memory for im2col tiles: reused across calls so the hot loops never
//! allocate, bounded by the largest tile a thread has needed.

use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's scratch slice of `len` elements (contents unspecified).
/// `f` must not call `with_scratch` again.
pub fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| {
        let mut buf = cell.borrow_mut();
        if buf.len() < len {
            buf.resize(len, 0.0);
        }
        f(&mut buf[..len])
    })
}
