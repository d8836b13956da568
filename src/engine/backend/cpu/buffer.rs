//! Host buffers and the pool that recycles them. Activations of a training step have the
//! same sizes every step; handing a dropped buffer to the next allocation of the same
//! length avoids the page faults and zeroing that fresh large allocations cost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Buffers smaller than this come from the allocator directly: cheap to get fresh.
const POOLED_MIN_LEN: usize = 1 << 16;

/// Dropped large host buffers kept by length for the next allocation of that length, up to
/// a limit in bytes; buffers that would pass the limit are freed instead.
#[derive(Debug)]
pub struct BufferPool {
    free: Mutex<PoolState>,
    limit_bytes: usize,
}

#[derive(Debug, Default)]
struct PoolState {
    by_len: HashMap<usize, Vec<Vec<f32>>>,
    bytes: usize,
}

impl BufferPool {
    /// An empty pool that keeps at most `limit_bytes` of dropped buffers.
    pub fn new(limit_bytes: usize) -> Arc<Self> {
        Arc::new(BufferPool {
            free: Mutex::new(PoolState::default()),
            limit_bytes,
        })
    }

    fn take(&self, len: usize) -> Option<Vec<f32>> {
        let mut state = self.free.lock().ok()?;
        let data = state.by_len.get_mut(&len)?.pop()?;
        state.bytes -= len * 4;
        Some(data)
    }

    fn put(&self, data: Vec<f32>) {
        let Ok(mut state) = self.free.lock() else {
            return;
        };
        let bytes = data.len() * 4;
        if state.bytes + bytes <= self.limit_bytes {
            state.bytes += bytes;
            state.by_len.entry(data.len()).or_default().push(data);
        }
    }

    /// Bytes held for reuse right now.
    pub fn pooled_bytes(&self) -> usize {
        self.free.lock().map(|s| s.bytes).unwrap_or(0)
    }

    /// Frees every held buffer.
    pub fn clear(&self) {
        if let Ok(mut state) = self.free.lock() {
            state.by_len.clear();
            state.bytes = 0;
        }
    }

    /// A buffer of `len` elements with unspecified (but initialised) contents.
    pub fn alloc(self: &Arc<Self>, len: usize) -> CpuBuffer {
        if len < POOLED_MIN_LEN {
            return CpuBuffer::unpooled(vec![0.0; len]);
        }
        let data = self.take(len).unwrap_or_else(|| vec![0.0; len]);
        CpuBuffer {
            data,
            pool: Some(Arc::clone(self)),
        }
    }
}

/// A buffer of f32 values in host memory; large ones return to their pool when dropped.
#[derive(Debug, Clone, Default)]
pub struct CpuBuffer {
    data: Vec<f32>,
    pool: Option<Arc<BufferPool>>,
}

impl CpuBuffer {
    fn unpooled(data: Vec<f32>) -> Self {
        CpuBuffer { data, pool: None }
    }
    /// The values.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
    /// The values, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.data
    }
}

impl Drop for CpuBuffer {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.put(std::mem::take(&mut self.data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_large_buffers_are_reused_and_the_limit_holds() {
        let pool = BufferPool::new(POOLED_MIN_LEN * 4);
        let mut a = pool.alloc(POOLED_MIN_LEN);
        a.as_mut_slice()[0] = 3.0;
        let address = a.as_slice().as_ptr();
        drop(a);
        assert_eq!(pool.pooled_bytes(), POOLED_MIN_LEN * 4);
        let b = pool.alloc(POOLED_MIN_LEN);
        assert_eq!(b.as_slice().as_ptr(), address);
        assert_eq!(pool.pooled_bytes(), 0);
        // Over the limit: the second dropped buffer is freed, not kept.
        let c = pool.alloc(POOLED_MIN_LEN);
        drop(b);
        drop(c);
        assert_eq!(pool.pooled_bytes(), POOLED_MIN_LEN * 4);
        pool.clear();
        assert_eq!(pool.pooled_bytes(), 0);
        assert_eq!(pool.alloc(10).as_slice().len(), 10);
    }
}
