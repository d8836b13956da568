//! A caching device allocator. Every op of a step allocates its outputs and scratch; the
//! runtimes' own allocators synchronise the device, so freed blocks are kept by size class
//! and handed out again. All work runs on one in-order stream, so a block freed by the
//! host can be reused by the next enqueued op without waiting.

use std::collections::HashMap;
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
    blocks: HashMap<usize, Vec<DevicePtr>>,
    cached_bytes: usize,
}

#[derive(Debug)]
pub struct DevicePool {
    driver: Arc<dyn GpuDriver>,
    free: Mutex<FreeLists>,
    cache_limit: usize,
}

impl DevicePool {
    pub fn new(driver: Arc<dyn GpuDriver>, cache_limit: usize) -> Arc<Self> {
        Arc::new(DevicePool {
            driver,
            free: Mutex::new(FreeLists::default()),
            cache_limit,
        })
    }

    pub fn driver(&self) -> &Arc<dyn GpuDriver> {
        &self.driver
    }

    /// A block of at least `bytes`, and the class it belongs to.
    pub fn take(&self, bytes: usize) -> Result<(DevicePtr, usize), DriverError> {
        let class = size_class(bytes);
        {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(ptr) = free.blocks.get_mut(&class).and_then(Vec::pop) {
                free.cached_bytes -= class;
                return Ok((ptr, class));
            }
        }
        match self.driver.alloc(class) {
            Ok(ptr) => Ok((ptr, class)),
            Err(DriverError::OutOfMemory { .. }) => {
                // Cached blocks of other sizes may be what stands in the way.
                self.release_cached()?;
                self.driver.alloc(class).map(|ptr| (ptr, class))
            }
            Err(other) => Err(other),
        }
    }

    /// Returns a block; past the cache limit it goes back to the runtime.
    pub fn give_back(&self, ptr: DevicePtr, class: usize) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.cached_bytes + class <= self.cache_limit {
            free.blocks.entry(class).or_default().push(ptr);
            free.cached_bytes += class;
            return;
        }
        drop(free);
        if self.driver.synchronize().is_ok() {
            // SAFETY: the block came from this driver and the stream has drained.
            unsafe { self.driver.free(ptr) };
        }
    }

    /// Frees every cached block (after the stream drains).
    pub fn release_cached(&self) -> Result<(), DriverError> {
        self.driver.synchronize()?;
        let blocks = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            free.cached_bytes = 0;
            std::mem::take(&mut free.blocks)
        };
        for ptr in blocks.into_values().flatten() {
            // SAFETY: cached blocks are unused and the stream has drained.
            unsafe { self.driver.free(ptr) };
        }
        Ok(())
    }

    pub fn cached_bytes(&self) -> usize {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cached_bytes
    }
}

impl Drop for DevicePool {
    fn drop(&mut self) {
        let _ = self.release_cached();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::backend::gpu::driver::{DeviceInfo, Gemm, KernelArg, LaunchShape};
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// Stands in for device memory, which this machine has none of: hands out addresses
    /// and counts allocations, frees and synchronisations.
    #[derive(Debug)]
    struct CountingFakeDevice {
        info: DeviceInfo,
        next: AtomicU64,
        allocs: AtomicUsize,
        frees: AtomicUsize,
        capacity: usize,
        live: AtomicUsize,
    }

    impl CountingFakeDevice {
        fn new(capacity: usize) -> Arc<Self> {
            Arc::new(CountingFakeDevice {
                info: DeviceInfo {
                    ordinal: 0,
                    name: "fake".into(),
                    arch: "none".into(),
                    pci_address: None,
                    memory_bytes: capacity as u64,
                    multiprocessors: 1,
                },
                next: AtomicU64::new(1 << 20),
                allocs: AtomicUsize::new(0),
                frees: AtomicUsize::new(0),
                capacity,
                live: AtomicUsize::new(0),
            })
        }
    }

    impl GpuDriver for CountingFakeDevice {
        fn info(&self) -> &DeviceInfo {
            &self.info
        }
        fn runtime(&self) -> &'static str {
            "fake"
        }
        fn native_stream(&self) -> *mut std::ffi::c_void {
            std::ptr::null_mut()
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
            if self.live.load(Ordering::SeqCst) + bytes > self.capacity {
                return Err(DriverError::OutOfMemory { bytes });
            }
            self.live.fetch_add(bytes, Ordering::SeqCst);
            self.allocs.fetch_add(1, Ordering::SeqCst);
            Ok(DevicePtr(
                self.next.fetch_add(bytes as u64, Ordering::SeqCst),
            ))
        }
        unsafe fn free(&self, _ptr: DevicePtr) {
            self.frees.fetch_add(1, Ordering::SeqCst);
        }
        fn copy_to_device(&self, _: DevicePtr, _: &[u8]) -> Result<(), DriverError> {
            Ok(())
        }
        fn copy_to_host(&self, _: &mut [u8], _: DevicePtr) -> Result<(), DriverError> {
            Ok(())
        }
        fn copy_on_device(&self, _: DevicePtr, _: DevicePtr, _: usize) -> Result<(), DriverError> {
            Ok(())
        }
        fn zero(&self, _: DevicePtr, _: usize) -> Result<(), DriverError> {
            Ok(())
        }
        fn launch(&self, _: &str, _: LaunchShape, _: &[KernelArg]) -> Result<(), DriverError> {
            Ok(())
        }
        fn gemm(&self, _: &Gemm) -> Result<(), DriverError> {
            Ok(())
        }
        fn synchronize(&self) -> Result<(), DriverError> {
            Ok(())
        }
        fn alloc_pinned(&self, _: usize) -> Result<*mut u8, DriverError> {
            Err(DriverError::InvalidArgument(
                "no host memory on a fake".into(),
            ))
        }
        unsafe fn free_pinned(&self, _: *mut u8) {}
        unsafe fn copy_async(
            &self,
            _: bool,
            _: *mut u8,
            _: DevicePtr,
            _: usize,
        ) -> Result<(), DriverError> {
            Ok(())
        }
        fn enable_peer_access(&self, _: &dyn GpuDriver) -> Result<(), DriverError> {
            Ok(())
        }
        fn copy_to_peer_async(
            &self,
            _: &dyn GpuDriver,
            _: DevicePtr,
            _: DevicePtr,
            _: usize,
        ) -> Result<(), DriverError> {
            Ok(())
        }
        fn matmul_square(
            &self,
            _: crate::engine::backend::gpu::driver::MatmulPrecision,
            _: usize,
            _: DevicePtr,
            _: DevicePtr,
            _: DevicePtr,
        ) -> Result<(), DriverError> {
            Ok(())
        }
        fn time_ms(
            &self,
            work: &mut dyn FnMut() -> Result<(), DriverError>,
        ) -> Result<f64, DriverError> {
            work().map(|()| 0.0)
        }
    }

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
    fn freed_blocks_are_reused_with_a_fake_device() {
        let device = CountingFakeDevice::new(1 << 30);
        let pool = DevicePool::new(device.clone(), 1 << 30);
        let (a, class) = pool.take(1000).unwrap();
        pool.give_back(a, class);
        let (b, _) = pool.take(900).unwrap();
        assert_eq!(a, b, "same class, same block");
        assert_eq!(device.allocs.load(Ordering::SeqCst), 1);
        let (c, _) = pool.take(5000).unwrap();
        assert_ne!(b, c);
        assert_eq!(device.allocs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn blocks_past_the_cache_limit_go_back_to_the_fake_device() {
        let device = CountingFakeDevice::new(1 << 30);
        let pool = DevicePool::new(device.clone(), 1024);
        let (a, ca) = pool.take(1024).unwrap();
        let (b, cb) = pool.take(1024).unwrap();
        pool.give_back(a, ca);
        pool.give_back(b, cb);
        assert_eq!(pool.cached_bytes(), 1024);
        assert_eq!(device.frees.load(Ordering::SeqCst), 1);
        drop(pool);
        assert_eq!(
            device.frees.load(Ordering::SeqCst),
            2,
            "dropping the pool frees the cache"
        );
    }

    #[test]
    fn out_of_memory_empties_the_cache_and_retries_on_a_fake_device() {
        let device = CountingFakeDevice::new(4 << 20);
        let pool = DevicePool::new(device.clone(), 1 << 30);
        let (a, ca) = pool.take(2 << 20).unwrap();
        pool.give_back(a, ca);
        // The fake counts live bytes without subtracting frees, so the retry still fails
        // and the error comes back instead of a panic.
        let err = pool.take(4 << 20).unwrap_err();
        assert!(matches!(err, DriverError::OutOfMemory { .. }));
        assert_eq!(
            pool.cached_bytes(),
            0,
            "the cache was released before the retry"
        );
        assert_eq!(device.frees.load(Ordering::SeqCst), 1);
    }
}
