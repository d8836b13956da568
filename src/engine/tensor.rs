//! A tensor: a device buffer with a shape. Activations are NHWC `[n, h, w, c]`; vectors and
//! matrices use one and two dimensions.

use super::backend::{Backend, DType};
use super::{EngineError, Result};

/// A device buffer of f32 values with its shape; the buffer's length is always the
/// product of the shape.
pub struct Tensor<B: Backend> {
    buffer: B::Buffer,
    shape: Vec<usize>,
    dtype: DType,
}

impl<B: Backend> Tensor<B> {
    /// A tensor of `shape` filled with zeros.
    pub fn zeros(backend: &B, shape: &[usize]) -> Result<Self> {
        let buffer = backend.zeros(shape.iter().product())?;
        Ok(Tensor {
            buffer,
            shape: shape.to_vec(),
            dtype: DType::F32,
        })
    }

    /// A tensor with unspecified contents, for the output of an op (every op overwrites
    /// its outputs); on the CPU it reuses a dropped buffer of the same size.
    pub fn alloc(backend: &B, shape: &[usize]) -> Result<Self> {
        let buffer = backend.alloc(shape.iter().product())?;
        Ok(Tensor {
            buffer,
            shape: shape.to_vec(),
            dtype: DType::F32,
        })
    }

    /// Uploads host values laid out in this tensor's order (row-major over `shape`).
    pub fn from_host(backend: &B, shape: &[usize], values: &[f32]) -> Result<Self> {
        let numel: usize = shape.iter().product();
        EngineError::check_length("Tensor::from_host", "host values", numel, values.len())?;
        Ok(Tensor {
            buffer: backend.upload(values)?,
            shape: shape.to_vec(),
            dtype: DType::F32,
        })
    }

    /// Wraps an existing buffer; its length must match the shape.
    pub fn from_buffer(backend: &B, shape: &[usize], buffer: B::Buffer) -> Result<Self> {
        let numel: usize = shape.iter().product();
        let len = backend.buffer_len(&buffer);
        EngineError::check_length("Tensor::from_buffer", "buffer", numel, len)?;
        Ok(Tensor {
            buffer,
            shape: shape.to_vec(),
            dtype: DType::F32,
        })
    }

    /// Copies the values to the host: the explicit synchronisation point of a step.
    pub fn to_host(&self, backend: &B) -> Result<Vec<f32>> {
        let mut host = vec![0.0; self.numel()];
        backend.download(&self.buffer, &mut host)?;
        Ok(host)
    }

    /// A device-side copy.
    pub fn duplicate(&self, backend: &B) -> Result<Self> {
        let mut buffer = backend.alloc(self.numel())?;
        backend.copy(&self.buffer, &mut buffer)?;
        Ok(Tensor {
            buffer,
            shape: self.shape.clone(),
            dtype: self.dtype,
        })
    }

    /// The dimensions, outermost first (`[n, h, w, c]` for activations).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The element type the buffer holds (every tensor built here is f32).
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The element count: the product of the shape.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// The device buffer, for passing to a backend op.
    pub fn buffer(&self) -> &B::Buffer {
        &self.buffer
    }
    /// The device buffer, for an op to write into.
    pub fn buffer_mut(&mut self) -> &mut B::Buffer {
        &mut self.buffer
    }
    /// Gives up the shape and returns the device buffer.
    pub fn into_buffer(self) -> B::Buffer {
        self.buffer
    }

    /// The same data under another shape with the same element count.
    pub fn reshape(self, shape: &[usize]) -> Result<Self> {
        if shape.iter().product::<usize>() != self.numel() {
            return Err(EngineError::ShapeMismatch {
                op: "reshape",
                what: "element count",
                expected: self.shape,
                got: shape.to_vec(),
            });
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            ..self
        })
    }

    /// Errors unless this tensor has exactly `expected` shape.
    pub fn expect_shape(
        &self,
        op: &'static str,
        what: &'static str,
        expected: &[usize],
    ) -> Result<()> {
        if self.shape == expected {
            Ok(())
        } else {
            Err(EngineError::ShapeMismatch {
                op,
                what,
                expected: expected.to_vec(),
                got: self.shape.clone(),
            })
        }
    }

    /// The NHWC dimensions, or an error naming `op` when this is not a 4-D tensor.
    pub fn nhwc(&self, op: &'static str) -> Result<[usize; 4]> {
        match self.shape[..] {
            [n, h, w, c] => Ok([n, h, w, c]),
            _ => Err(EngineError::ShapeMismatch {
                op,
                what: "NHWC input (4 dimensions)",
                expected: vec![],
                got: self.shape.clone(),
            }),
        }
    }

    /// Whether any element is NaN or infinite.
    pub fn has_non_finite(&self, backend: &B) -> Result<bool> {
        backend.has_non_finite(&self.buffer)
    }
}
