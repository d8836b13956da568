//! Device buffers and the formats they hold: what a buffer is, how an op readies one to
//! write, and how an operand that arrives in another format is converted for an op.

use std::sync::Arc;

use super::allocator::DeviceAllocator;
use super::driver::{DevicePtr, KernelArg};
use super::enqueue::i64_arg;
use super::source::format_suffix;
use super::GpuBackend;
use crate::engine::backend::Backend;
use crate::engine::{EngineError, Precision, Result};

/// `len` elements on the device, in the format `storage` says (f32 unless an op of a
/// 16-bit backend wrote them). A buffer from [`Backend::alloc`] has no memory until the op
/// writing it picks its format, so a 16-bit activation takes two bytes an element; every
/// other buffer has room for `len` values of its format.
#[derive(Debug)]
pub struct GpuBuffer {
    pub(super) ptr: DevicePtr,
    pub(super) len: usize,
    /// Bytes of the allocator block behind `ptr`; 0 while no op has written the buffer.
    pub(super) class: usize,
    pub(super) allocator: Arc<DeviceAllocator>,
    pub(super) storage: Precision,
}

impl GpuBuffer {
    /// The address of the buffer's `len` f32 values, for a library that reads and writes
    /// them directly (NCCL); `None` while it holds no values or holds 16-bit ones.
    pub fn f32_device_ptr(&self) -> Option<DevicePtr> {
        (self.is_backed() && self.storage == Precision::Fp32).then_some(self.ptr)
    }

    /// Elements in the buffer, whatever format they are stored in.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The format the elements are stored in.
    pub fn storage(&self) -> Precision {
        self.storage
    }

    pub(super) fn is_backed(&self) -> bool {
        self.class > 0
    }

    /// The address of element `elems` in the buffer's format (an op tags its output
    /// before it addresses into it).
    pub(super) fn at(&self, elems: usize) -> DevicePtr {
        self.ptr.offset(elems * element_bytes(self.storage))
    }
}

pub(super) fn element_bytes(format: Precision) -> usize {
    if format.is_reduced() {
        2
    } else {
        4
    }
}

/// An operand in the format an op needs: the caller's buffer, or a converted copy.
pub(super) enum Operand<'a> {
    Borrowed(&'a GpuBuffer),
    Converted(GpuBuffer),
}

impl std::ops::Deref for Operand<'_> {
    type Target = GpuBuffer;

    fn deref(&self) -> &GpuBuffer {
        match self {
            Operand::Borrowed(b) => b,
            Operand::Converted(b) => b,
        }
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        if self.is_backed() {
            self.allocator.give_back(self.ptr, self.class);
        }
    }
}

pub(super) fn as_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every byte pattern is a valid u8.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

pub(super) fn as_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: every byte pattern written is a valid f32 (the device wrote f32 values).
    unsafe {
        std::slice::from_raw_parts_mut(
            values.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(values),
        )
    }
}

impl GpuBackend {
    /// A buffer for the backend's own use with room for `len` values of `format`.
    pub(super) fn scratch(&self, len: usize, format: Precision) -> Result<GpuBuffer> {
        let mut buf = self.alloc(len)?;
        self.output(&mut buf, format)?;
        Ok(buf)
    }

    /// Readies `buf` for an op to write `format` values into: a buffer not yet backed, or
    /// whose block is too small for the format, gets a block of its own (what it held is
    /// not kept, as the op overwrites it); one with room keeps its block and contents.
    pub(super) fn output(&self, buf: &mut GpuBuffer, format: Precision) -> Result<()> {
        let bytes = buf.len * element_bytes(format);
        if !buf.is_backed() || buf.class < bytes {
            // The old block goes back first, so it may serve this very request: work runs
            // on one in-order stream, and nothing reads the old contents any more.
            if buf.is_backed() {
                self.allocator.give_back(buf.ptr, buf.class);
                buf.class = 0;
            }
            let (ptr, class) = self.allocator.take(bytes).map_err(|e| self.device(e))?;
            buf.ptr = ptr;
            buf.class = class;
        }
        buf.storage = format;
        Ok(())
    }

    /// For an operand an op reads: a buffer no op has written holds nothing to read.
    pub(super) fn written(
        &self,
        op: &'static str,
        what: &'static str,
        buf: &GpuBuffer,
    ) -> Result<()> {
        if buf.is_backed() {
            Ok(())
        } else {
            Err(EngineError::InvalidParameter {
                op,
                reason: format!("{what} is read before any op wrote it"),
            })
        }
    }

    /// `buf` in `format`: itself when it is already, else a converted copy.
    pub(super) fn in_format<'a>(
        &self,
        buf: &'a GpuBuffer,
        format: Precision,
    ) -> Result<Operand<'a>> {
        if buf.storage == format {
            return Ok(Operand::Borrowed(buf));
        }
        if buf.storage.is_reduced() && format.is_reduced() {
            let wide = self.in_format(buf, Precision::Fp32)?;
            return Ok(Operand::Converted(self.convert(&wide, format)?));
        }
        Ok(Operand::Converted(self.convert(buf, format)?))
    }

    /// A copy of `buf` (f32 or 16-bit) in `format` (16-bit or f32, the other one).
    pub(super) fn convert(&self, buf: &GpuBuffer, format: Precision) -> Result<GpuBuffer> {
        let mut out = self.alloc(buf.len)?;
        self.convert_into(buf, &mut out, format)?;
        Ok(out)
    }

    pub(super) fn convert_into(
        &self,
        src: &GpuBuffer,
        dst: &mut GpuBuffer,
        format: Precision,
    ) -> Result<()> {
        let kernel = if format.is_reduced() {
            format!("store_{}", format_suffix(format))
        } else {
            format!("load_{}", format_suffix(src.storage))
        };
        self.output(dst, format)?;
        self.elementwise(
            &kernel,
            src.len,
            &[
                KernelArg::Ptr(src.ptr),
                KernelArg::Ptr(dst.ptr),
                i64_arg(src.len),
            ],
        )
    }

    /// An activation operand as f32 values at this backend's storage precision: a 16-bit
    /// buffer widened (exactly), or an f32 buffer rounded through the 16-bit format.
    pub(super) fn stored_as_f32<'a>(&self, buf: &'a GpuBuffer) -> Result<Operand<'a>> {
        if buf.storage == Precision::Fp32 && self.precision.is_reduced() {
            let mut copy = self.alloc(buf.len)?;
            self.copy(buf, &mut copy)?;
            self.round_to_storage(&copy)?;
            return Ok(Operand::Converted(copy));
        }
        self.in_format(buf, Precision::Fp32)
    }

    /// Rounds the f32 values of `buf` to this backend's 16-bit format, as a 16-bit result
    /// turned into f32 is (a weight gradient, an activation left in f32).
    pub(super) fn round_to_storage(&self, buf: &GpuBuffer) -> Result<()> {
        if !self.precision.is_reduced() {
            return Ok(());
        }
        self.elementwise(
            &format!("round_{}", format_suffix(self.precision)),
            buf.len,
            &[KernelArg::Ptr(buf.ptr), i64_arg(buf.len)],
        )
    }

    /// Turns a 16-bit buffer into f32 in place (exactly), for an op that updates it in f32.
    pub(super) fn widen_in_place(&self, buf: &mut GpuBuffer) -> Result<()> {
        if buf.storage == Precision::Fp32 {
            return Ok(());
        }
        let mut wide = self.convert(buf, Precision::Fp32)?;
        std::mem::swap(buf, &mut wide);
        Ok(())
    }

    /// For ops that compute in f32 only: `buf` must hold f32.
    pub(super) fn require_f32(
        &self,
        op: &'static str,
        what: &'static str,
        buf: &GpuBuffer,
    ) -> Result<()> {
        if buf.storage == Precision::Fp32 {
            Ok(())
        } else {
            Err(EngineError::InvalidParameter {
                op,
                reason: format!("{what} holds {} values; this op takes f32", buf.storage),
            })
        }
    }

    /// An operand the op reads: on this device, of length `len`, and written.
    pub(super) fn check(
        &self,
        op: &'static str,
        what: &'static str,
        buf: &GpuBuffer,
        len: usize,
    ) -> Result<()> {
        self.check_output(op, what, buf, len)?;
        self.written(op, what, buf)
    }

    /// A buffer the op writes: on this device and of length `len`.
    pub(super) fn check_output(
        &self,
        op: &'static str,
        what: &'static str,
        buf: &GpuBuffer,
        len: usize,
    ) -> Result<()> {
        if !Arc::ptr_eq(&buf.allocator, &self.allocator) {
            return Err(EngineError::InvalidParameter {
                op,
                reason: format!("buffer {what} belongs to another device"),
            });
        }
        EngineError::check_length(op, what, len, buf.len)
    }
}

/// Takes no memory yet: the op that writes the buffer backs it in the format it
/// writes (see [`GpuBuffer`]).
pub(super) fn alloc(gpu: &GpuBackend, len: usize) -> Result<GpuBuffer> {
    Ok(GpuBuffer {
        ptr: DevicePtr(0),
        len,
        class: 0,
        allocator: gpu.allocator.clone(),
        storage: gpu.precision,
    })
}

pub(super) fn zeros(gpu: &GpuBackend, len: usize) -> Result<GpuBuffer> {
    let buf = gpu.scratch(len, Precision::Fp32)?;
    if len > 0 {
        gpu.driver()
            .zero(buf.ptr, len * 4)
            .map_err(|e| gpu.device(e))?;
    }
    Ok(buf)
}

pub(super) fn upload(gpu: &GpuBackend, host: &[f32]) -> Result<GpuBuffer> {
    let buf = gpu.scratch(host.len(), Precision::Fp32)?;
    if !host.is_empty() {
        gpu.driver()
            .copy_to_device(buf.ptr, as_bytes(host))
            .map_err(|e| gpu.device(e))?;
    }
    Ok(buf)
}

pub(super) fn download(gpu: &GpuBackend, buf: &GpuBuffer, host: &mut [f32]) -> Result<()> {
    EngineError::check_length("download", "host destination", buf.len, host.len())?;
    gpu.check("download", "source", buf, buf.len)?;
    if host.is_empty() {
        return gpu.synchronize();
    }
    let buf = gpu.in_format(buf, Precision::Fp32)?;
    gpu.driver()
        .copy_to_host(as_bytes_mut(host), buf.ptr)
        .map_err(|e| gpu.device(e))
}
