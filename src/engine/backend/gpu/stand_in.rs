//! A stand-in for a GPU's memory, for tests on machines without one: it hands out
//! addresses against a capacity, keeps account of what is live, and refuses any copy,
//! kernel pointer, GEMM operand or DNN tensor that does not lie inside one live block
//! (for the extent its format needs). Nothing is computed: launches, GEMMs and
//! convolutions are checked and not run, and downloads read zeros. It shows what a device
//! would be asked to hold and where, never what it would compute. One made
//! [`with_dnn`](StandInDevice::with_dnn) also takes a DNN workspace from its own memory as
//! cuDNN does: kept between convolutions and grown when one needs more (here, as many bytes
//! as the convolution's output).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::buffer::element_bytes;
use super::driver::{
    DeviceInfo, DevicePtr, DnnConv, DriverError, Gemm, GpuDriver, KernelArg, LaunchShape,
    MatmulPrecision, Transpose,
};

#[derive(Debug, Default)]
struct Ledger {
    next: u64,
    /// Start address → bytes.
    blocks: BTreeMap<u64, usize>,
    live: usize,
    allocs: usize,
    frees: usize,
    /// The DNN workspace block and its size.
    workspace: Option<(DevicePtr, usize)>,
}

/// The emulated device: a ledger of live blocks against a capacity in bytes.
#[derive(Debug)]
pub struct StandInDevice {
    /// Whether it claims a DNN library, so that convolutions take the backend's DNN path.
    dnn: bool,
    info: DeviceInfo,
    capacity: usize,
    ledger: Mutex<Ledger>,
}

impl StandInDevice {
    /// A device with `capacity` bytes of memory.
    pub fn new(capacity: usize) -> Arc<Self> {
        Self::build(capacity, false)
    }

    /// One whose convolutions go through the DNN path.
    pub fn with_dnn(capacity: usize) -> Arc<Self> {
        Self::build(capacity, true)
    }

    fn build(capacity: usize, dnn: bool) -> Arc<Self> {
        Arc::new(StandInDevice {
            dnn,
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

    /// `bytes` from `ptr` must lie inside one live block (a pointer at least inside one).
    fn within(&self, what: &str, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        let ledger = self.ledger();
        let inside = ledger
            .blocks
            .range(..=ptr.0)
            .next_back()
            .is_some_and(|(&start, &size)| ptr.0 + bytes.max(1) as u64 <= start + size as u64);
        if inside {
            Ok(())
        } else {
            Err(DriverError::InvalidArgument(format!(
                "{what}: {bytes} bytes at {:#x} are not inside a live block",
                ptr.0
            )))
        }
    }

    /// Bytes in blocks allocated and not yet freed.
    pub fn live_bytes(&self) -> usize {
        self.ledger().live
    }

    /// Allocations made so far.
    pub fn allocs(&self) -> usize {
        self.ledger().allocs
    }

    /// Blocks freed so far.
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
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError> {
        self.within("copy to device", dst, src.len())
    }
    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError> {
        self.within("copy to host", src, dst.len())?;
        dst.fill(0);
        Ok(())
    }
    fn copy_on_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        self.within("copy destination", dst, bytes)?;
        self.within("copy source", src, bytes)
    }
    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        self.within("zero", dst, bytes)
    }
    fn launch(&self, kernel: &str, _: LaunchShape, args: &[KernelArg]) -> Result<(), DriverError> {
        for (index, arg) in args.iter().enumerate() {
            if let KernelArg::Ptr(ptr) = arg {
                self.within(&format!("{kernel} argument {index}"), *ptr, 1)?;
            }
        }
        Ok(())
    }
    fn gemm(&self, g: &Gemm) -> Result<(), DriverError> {
        // Row-major: the last element of a rows×cols operand with leading dimension ld.
        let extent = |rows: usize, cols: usize, ld: usize| {
            if rows == 0 || cols == 0 {
                0
            } else {
                (rows - 1) * ld + cols
            }
        };
        let (a_rows, a_cols) = match g.trans_a {
            Transpose::No => (g.m, g.k),
            Transpose::Yes => (g.k, g.m),
        };
        let (b_rows, b_cols) = match g.trans_b {
            Transpose::No => (g.k, g.n),
            Transpose::Yes => (g.n, g.k),
        };
        let operand = element_bytes(g.types.operands);
        self.within("GEMM A", g.a, extent(a_rows, a_cols, g.lda) * operand)?;
        self.within("GEMM B", g.b, extent(b_rows, b_cols, g.ldb) * operand)?;
        let output = extent(g.m, g.n, g.ldc) * element_bytes(g.types.output);
        self.within("GEMM C", g.c, output)
    }
    fn dnn_library(&self) -> Option<String> {
        self.dnn.then(|| "stand-in DNN".to_string())
    }
    fn dnn_conv(&self, conv: &DnnConv) -> Result<bool, DriverError> {
        let bytes = element_bytes(conv.dtype);
        let needed = conv.shape.output_len() * bytes;
        let held = self.ledger().workspace;
        if held.is_none_or(|(_, size)| size < needed) {
            if let Some((ptr, _)) = held {
                // SAFETY: the workspace is this device's own block.
                unsafe { self.free(ptr) };
                self.ledger().workspace = None;
            }
            let ptr = self.alloc(needed)?;
            self.ledger().workspace = Some((ptr, needed));
        }
        self.within("DNN x", conv.x, conv.shape.input_len() * bytes)?;
        self.within("DNN w", conv.w, conv.shape.weight_len() * bytes)?;
        self.within("DNN y", conv.y, conv.shape.output_len() * bytes)?;
        Ok(true)
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
