//! A caching device allocator. Every op of a step allocates its outputs and scratch; the
//! runtimes' own allocators synchronise the device, so freed blocks are kept by size class
//! and handed out again. All work runs on one in-order stream, so a block freed by the
//! host can be reused by the next enqueued op without waiting.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::driver::{DevicePtr, DriverError, GpuDriver};

/// Smallest block handed out.
const MIN_CLASS: usize = 256;
/// Up to this size classes are powers of two; above it, multiples of [`LARGE_STEP`].
const SMALL_LIMIT: usize = 1 << 20;
const LARGE_STEP: usize = 2 << 20;

/// The size class `bytes` is rounded up to.
pub fn size_class(bytes: usize) -> usize {
    if bytes <= SMALL_LIMIT {
        bytes.max(MIN_CLASS).next_power_of_two()
    } else {
        bytes.div_ceil(LARGE_STEP) * LARGE_STEP
    }
}

#[derive(Debug, Default)]
struct FreeLists {
    blocks: BTreeMap<usize, Vec<DevicePtr>>,
    cached_bytes: usize,
    memory: AllocatorMemory,
}

/// How much device memory an allocator holds, now and at its highest since the last
/// [`DeviceAllocator::reset_peaks`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AllocatorMemory {
    /// Bytes in blocks handed out and not yet given back.
    pub in_use_bytes: usize,
    /// The most [`Self::in_use_bytes`] has been since the peaks were last reset.
    pub peak_in_use_bytes: usize,
    /// Bytes taken from the runtime: in use plus cached.
    pub reserved_bytes: usize,
    /// The most [`Self::reserved_bytes`] has been since the peaks were last reset.
    pub peak_reserved_bytes: usize,
}

impl AllocatorMemory {
    fn hand_out(&mut self, class: usize, fresh: bool) {
        self.in_use_bytes += class;
        self.peak_in_use_bytes = self.peak_in_use_bytes.max(self.in_use_bytes);
        if fresh {
            self.reserved_bytes += class;
            self.peak_reserved_bytes = self.peak_reserved_bytes.max(self.reserved_bytes);
        }
    }
}

/// The caching allocator of one device, shared by every backend view of it: freed blocks
/// are kept by size class for the next request of that class, up to a cache limit in bytes.
#[derive(Debug)]
pub struct DeviceAllocator {
    driver: Arc<dyn GpuDriver>,
    free: Mutex<FreeLists>,
    cache_limit: usize,
}

impl DeviceAllocator {
    /// An allocator over `driver` that keeps at most `cache_limit` bytes of freed blocks.
    pub fn new(driver: Arc<dyn GpuDriver>, cache_limit: usize) -> Arc<Self> {
        Arc::new(DeviceAllocator {
            driver,
            free: Mutex::new(FreeLists::default()),
            cache_limit,
        })
    }

    /// The driver the blocks come from and go back to.
    pub fn driver(&self) -> &Arc<dyn GpuDriver> {
        &self.driver
    }

    /// A block of at least `bytes`, and the class it belongs to.
    pub fn take(&self, bytes: usize) -> Result<(DevicePtr, usize), DriverError> {
        let class = size_class(bytes);
        {
            let mut free = self.lock();
            if let Some(ptr) = free.blocks.get_mut(&class).and_then(Vec::pop) {
                free.cached_bytes -= class;
                free.memory.hand_out(class, false);
                return Ok((ptr, class));
            }
        }
        let ptr = match self.driver.alloc(class) {
            Ok(ptr) => ptr,
            // Cached blocks of other sizes may be what stands in the way. Handing back only
            // as many as the request needs keeps the rest for the ops that take them next
            // (near the device's limit a step would otherwise reallocate most of its
            // blocks); the whole cache goes when that is not enough, as the runtime's free
            // memory may be fragmented.
            Err(DriverError::OutOfMemory { .. }) => {
                self.release_cached_bytes(class)?;
                match self.driver.alloc(class) {
                    Ok(ptr) => ptr,
                    Err(DriverError::OutOfMemory { .. }) => {
                        self.release_cached()?;
                        self.driver.alloc(class)?
                    }
                    Err(other) => return Err(other),
                }
            }
            Err(other) => return Err(other),
        };
        self.lock().memory.hand_out(class, true);
        Ok((ptr, class))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FreeLists> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns a block; past the cache limit it goes back to the runtime.
    pub fn give_back(&self, ptr: DevicePtr, class: usize) {
        let mut free = self.lock();
        free.memory.in_use_bytes -= class;
        if free.cached_bytes + class <= self.cache_limit {
            free.blocks.entry(class).or_default().push(ptr);
            free.cached_bytes += class;
            return;
        }
        drop(free);
        // A block the runtime does not get back (the stream failed) stays counted as held.
        if self.driver.synchronize().is_ok() {
            // SAFETY: the block came from this driver and the stream has drained.
            unsafe { self.driver.free(ptr) };
            self.lock().memory.reserved_bytes -= class;
        }
    }

    /// Frees cached blocks, the largest first, until at least `wanted` bytes are freed or
    /// none is left (after the stream drains).
    fn release_cached_bytes(&self, wanted: usize) -> Result<(), DriverError> {
        self.driver.synchronize()?;
        let mut released = Vec::new();
        {
            let mut free = self.lock();
            let mut freed = 0;
            while freed < wanted {
                let Some(mut entry) = free.blocks.last_entry() else {
                    break;
                };
                let class = *entry.key();
                let ptr = entry.get_mut().pop();
                if entry.get().is_empty() {
                    entry.remove();
                }
                if let Some(ptr) = ptr {
                    released.push(ptr);
                    freed += class;
                }
            }
            free.cached_bytes -= freed;
            free.memory.reserved_bytes -= freed;
        }
        for ptr in released {
            // SAFETY: cached blocks are unused and the stream has drained.
            unsafe { self.driver.free(ptr) };
        }
        Ok(())
    }

    /// Frees every cached block (after the stream drains).
    pub fn release_cached(&self) -> Result<(), DriverError> {
        self.release_cached_bytes(usize::MAX)
    }

    /// Bytes in freed blocks kept for reuse instead of handed back to the runtime.
    pub fn cached_bytes(&self) -> usize {
        self.lock().cached_bytes
    }

    /// What the allocator holds now and at its peaks.
    pub fn memory(&self) -> AllocatorMemory {
        self.lock().memory
    }

    /// Starts the peaks over from the current figures.
    pub fn reset_peaks(&self) {
        let memory = &mut self.lock().memory;
        memory.peak_in_use_bytes = memory.in_use_bytes;
        memory.peak_reserved_bytes = memory.reserved_bytes;
    }
}

impl Drop for DeviceAllocator {
    fn drop(&mut self) {
        let _ = self.release_cached();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::backend::gpu::stand_in::StandInDevice;

    #[test]
    fn size_classes_round_up_and_never_shrink() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(1), 256);
        assert_eq!(size_class(257), 512);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 2 << 20);
        assert_eq!(size_class((5 << 20) + 3), 6 << 20);
        for bytes in [3, 1000, 70_000, 3_000_000, 123_456_789] {
            assert!(size_class(bytes) >= bytes);
            assert_eq!(size_class(size_class(bytes)), size_class(bytes));
        }
    }

    #[test]
    fn freed_blocks_are_reused_on_a_stand_in_device() {
        let device = StandInDevice::new(1 << 30);
        let allocator = DeviceAllocator::new(device.clone(), 1 << 30);
        let (a, class) = allocator.take(1000).unwrap();
        allocator.give_back(a, class);
        let (b, _) = allocator.take(900).unwrap();
        assert_eq!(a, b, "same class, same block");
        assert_eq!(device.allocs(), 1);
        let (c, _) = allocator.take(5000).unwrap();
        assert_ne!(b, c);
        assert_eq!(device.allocs(), 2);
    }

    #[test]
    fn blocks_past_the_cache_limit_go_back_to_a_stand_in_device() {
        let device = StandInDevice::new(1 << 30);
        let allocator = DeviceAllocator::new(device.clone(), 1024);
        let (a, ca) = allocator.take(1024).unwrap();
        let (b, cb) = allocator.take(1024).unwrap();
        allocator.give_back(a, ca);
        allocator.give_back(b, cb);
        assert_eq!(allocator.cached_bytes(), 1024);
        assert_eq!(device.frees(), 1);
        drop(allocator);
        assert_eq!(device.frees(), 2, "dropping the allocator frees the cache");
    }

    #[test]
    fn out_of_memory_empties_the_cache_and_retries_on_a_stand_in_device() {
        let device = StandInDevice::new(4 << 20);
        let allocator = DeviceAllocator::new(device.clone(), 1 << 30);
        let (a, ca) = allocator.take(2 << 20).unwrap();
        allocator.give_back(a, ca);
        // Only the cached 2 MiB block stands between this request and the device's 4 MiB.
        let (b, cb) = allocator.take(4 << 20).unwrap();
        assert_eq!(device.frees(), 1, "the cache was released before the retry");
        assert_eq!(allocator.cached_bytes(), 0);
        let err = allocator.take(2 << 20).unwrap_err();
        assert!(matches!(err, DriverError::OutOfMemory { .. }), "{err}");
        allocator.give_back(b, cb);
    }

    #[test]
    fn out_of_memory_hands_back_only_as_much_cache_as_the_request_needs_on_a_stand_in_device() {
        let device = StandInDevice::new(12 << 20);
        let allocator = DeviceAllocator::new(device.clone(), 1 << 30);
        let (small, cs) = allocator.take(2 << 20).unwrap();
        let (large, cl) = allocator.take(8 << 20).unwrap();
        allocator.give_back(small, cs);
        allocator.give_back(large, cl);
        // 4 MiB more does not fit beside the 10 MiB cached; freeing the 8 MiB block is enough.
        let (block, class) = allocator.take(4 << 20).unwrap();
        assert_eq!(device.frees(), 1);
        assert_eq!(
            allocator.cached_bytes(),
            2 << 20,
            "the 2 MiB block stays cached"
        );
        assert_eq!(allocator.memory().reserved_bytes, 6 << 20);
        assert_eq!(device.live_bytes(), 6 << 20);
        let (again, _) = allocator.take(2 << 20).unwrap();
        assert_eq!(again, small, "and is handed out again without the runtime");
        allocator.give_back(block, class);
    }

    #[test]
    fn the_allocator_counts_what_is_in_use_and_what_it_holds_on_a_stand_in_device() {
        let device = StandInDevice::new(1 << 30);
        let allocator = DeviceAllocator::new(device.clone(), 1 << 30);
        let (a, ca) = allocator.take(3 << 20).unwrap();
        let (b, cb) = allocator.take(1000).unwrap();
        assert_eq!((ca, cb), (4 << 20, 1024));
        allocator.give_back(a, ca);
        let memory = allocator.memory();
        assert_eq!(memory.in_use_bytes, 1024);
        assert_eq!(memory.peak_in_use_bytes, (4 << 20) + 1024);
        assert_eq!(
            memory.reserved_bytes,
            (4 << 20) + 1024,
            "the freed block is cached"
        );
        assert_eq!(device.live_bytes(), memory.reserved_bytes);
        let (c, cc) = allocator.take(4 << 20).unwrap();
        assert_eq!(c, a, "the cached block is handed out again");
        assert_eq!(allocator.memory().reserved_bytes, (4 << 20) + 1024);
        allocator.give_back(c, cc);
        allocator.reset_peaks();
        assert_eq!(allocator.memory().peak_in_use_bytes, 1024);
        allocator.release_cached().unwrap();
        assert_eq!(allocator.memory().reserved_bytes, 1024);
        assert_eq!(device.live_bytes(), 1024);
        allocator.give_back(b, cb);
        assert_eq!(allocator.memory().in_use_bytes, 0);
    }
}
