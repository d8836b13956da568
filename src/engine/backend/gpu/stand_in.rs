//! A stand-in for a GPU's memory, for tests on machines without one: it hands out
//! addresses against a capacity and keeps account of what is live, and does nothing else
//! (launches and GEMMs are accepted and not run; downloads read zeros). It shows what a
//! device would be asked to hold, never what it would compute.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::driver::{
    DeviceInfo, DevicePtr, DriverError, Gemm, GpuDriver, KernelArg, LaunchShape, MatmulPrecision,
};

#[derive(Debug, Default)]
struct Ledger {
    next: u64,
    blocks: HashMap<u64, usize>,
    live: usize,
    allocs: usize,
    frees: usize,
}

#[derive(Debug)]
pub struct StandInDevice {
    info: DeviceInfo,
    capacity: usize,
    ledger: Mutex<Ledger>,
}

impl StandInDevice {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(StandInDevice {
            info: DeviceInfo {
                ordinal: 0,
                name: "stand-in".into(),
                arch: "none".into(),
                pci_address: None,
                memory_bytes: capacity as u64,
                multiprocessors: 1,
            },
            capacity,
            ledger: Mutex::new(Ledger {
                next: 1 << 20,
                ..Ledger::default()
            }),
        })
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn live_bytes(&self) -> usize {
        self.ledger().live
    }

    pub fn allocs(&self) -> usize {
        self.ledger().allocs
    }

    pub fn frees(&self) -> usize {
        self.ledger().frees
    }
}

impl GpuDriver for StandInDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn runtime(&self) -> &'static str {
        "stand-in"
    }
    fn native_stream(&self) -> *mut std::ffi::c_void {
        std::ptr::null_mut()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        let mut ledger = self.ledger();
        if ledger.live + bytes > self.capacity {
            return Err(DriverError::OutOfMemory { bytes });
        }
        let ptr = ledger.next;
        // Addresses never repeat, and a gap keeps any two blocks apart.
        ledger.next += bytes as u64 + 4096;
        ledger.blocks.insert(ptr, bytes);
        ledger.live += bytes;
        ledger.allocs += 1;
        Ok(DevicePtr(ptr))
    }
    unsafe fn free(&self, ptr: DevicePtr) {
        let mut ledger = self.ledger();
        if let Some(bytes) = ledger.blocks.remove(&ptr.0) {
            ledger.live -= bytes;
            ledger.frees += 1;
        }
    }
    fn copy_to_device(&self, _: DevicePtr, _: &[u8]) -> Result<(), DriverError> {
        Ok(())
    }
    fn copy_to_host(&self, dst: &mut [u8], _: DevicePtr) -> Result<(), DriverError> {
        dst.fill(0);
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
            "a stand-in device has no pinned host memory".into(),
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
        _: MatmulPrecision,
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
