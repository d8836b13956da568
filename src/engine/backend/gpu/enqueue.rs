//! How an op puts work on the device's stream: kernels by name with their launch shapes,
//! GEMMs, tables the kernels read, and the driver's errors as the engine's.

use super::buffer::GpuBuffer;
use super::driver::{DriverError, Gemm, KernelArg, LaunchShape, Transpose};
use super::source::storage_kernel;
use super::{launch, multi_tensor, GpuBackend};
use crate::engine::{EngineError, Precision, Result};

impl GpuBackend {
    pub(super) fn device(&self, error: DriverError) -> EngineError {
        EngineError::Device {
            backend: self.name.clone(),
            reason: error.to_string(),
        }
    }

    pub(super) fn launch(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<()> {
        self.timed(kernel, || {
            self.driver()
                .launch(kernel, shape, args)
                .map_err(|e| self.device(e))
        })
    }

    pub(super) fn gemm(&self, gemm: Gemm) -> Result<()> {
        let name = format!(
            "gemm {}{}",
            if gemm.trans_a == Transpose::Yes {
                "T"
            } else {
                "N"
            },
            if gemm.trans_b == Transpose::Yes {
                "T"
            } else {
                "N"
            }
        );
        self.timed(&name, || {
            self.driver().gemm(&gemm).map_err(|e| self.device(e))
        })
    }

    pub(super) fn elementwise(&self, kernel: &str, n: usize, args: &[KernelArg]) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch(kernel, launch::elementwise(n), args)
    }

    /// A kernel that handles four elements per thread.
    pub(super) fn elementwise_vec4(
        &self,
        kernel: &str,
        n: usize,
        args: &[KernelArg],
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch(kernel, launch::elementwise(n.div_ceil(4)), args)
    }

    /// The element-wise kernel `f32_kernel`, or its 16-bit form, for buffers in `format`
    /// (four elements per thread in every format).
    pub(super) fn storage_elementwise(
        &self,
        f32_kernel: &str,
        format: Precision,
        n: usize,
        args: &[KernelArg],
    ) -> Result<()> {
        self.elementwise_vec4(&storage_kernel(f32_kernel, format), n, args)
    }

    /// `entries` copied to the device, for a kernel that reads them as a table.
    pub(super) fn device_table<T: Copy>(&self, entries: &[T]) -> Result<GpuBuffer> {
        let bytes = multi_tensor::table_bytes(entries);
        let table = self.scratch(bytes.len().div_ceil(4), Precision::Fp32)?;
        self.driver()
            .copy_to_device(table.ptr, bytes)
            .map_err(|e| self.device(e))?;
        Ok(table)
    }
}

pub(super) fn i32_arg(v: usize) -> KernelArg {
    KernelArg::I32(v.min(i32::MAX as usize) as i32)
}

pub(super) fn i64_arg(v: usize) -> KernelArg {
    KernelArg::I64(v as i64)
}

pub(super) fn dims_fit_i32(op: &'static str, dims: &[usize]) -> Result<()> {
    if dims.iter().all(|&d| d <= i32::MAX as usize) {
        Ok(())
    } else {
        Err(EngineError::InvalidParameter {
            op,
            reason: format!("dimensions {dims:?} exceed the kernels' 32-bit index range"),
        })
    }
}
