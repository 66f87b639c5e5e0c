//! Reading a tensor's values back to the host (`to_vec`, `to_bytes`, `item`, `sync_read`): a
//! synchronisation point — DeferAndFuse flushes, device faults are reported here. A strided
//! tensor is made contiguous on the device first (a copy kernel), so this sits with the
//! operators, above `tensor`, which only holds the view.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::tensor::{Element, Tensor, decode};

impl Tensor {
    /// The elements, row-major, as f64 (a synchronisation point).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(decode(&self.to_bytes()?, self.dtype))
    }

    /// The elements, row-major, converted to `T` (a synchronisation point).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.to_f64_vec()?.into_iter().map(T::from_f64).collect())
    }

    /// The raw bytes of the elements, row-major (a synchronisation point). A tensor of a meta
    /// runtime has no values: an error.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if !self.rt.has_values() {
            return Err(TpuError::NeedsValues(format!(
                "{self:?} is a meta tensor: it has a shape and timing but no values (use sync_read to time a read)"
            )));
        }
        self.read_back()
    }

    /// Does everything reading the tensor back does — runs what is recorded, waits for the
    /// kernels, transfers the bytes — and discards them: the timing of `.item()` or `.cpu()`,
    /// on any runtime, a meta one included.
    pub fn sync_read(&self) -> Result<()> {
        self.read_back().map(|_| ())
    }

    fn read_back(&self) -> Result<Vec<u8>> {
        let t = if self.is_contiguous() {
            self.clone()
        } else {
            super::layout_ops::contiguous(self)?
        };
        self.rt.download(
            &t.storage,
            t.layout.offset * t.dtype.size(),
            t.numel() * t.dtype.size(),
        )
    }

    /// The value of a one-element tensor (`.item()`).
    pub fn item(&self) -> Result<Scalar> {
        if self.numel() != 1 {
            return Err(TpuError::BadArgs(format!(
                "a Tensor with {} elements cannot be converted to Scalar",
                self.numel()
            )));
        }
        let v = self.to_f64_vec()?[0];
        Ok(match self.dtype {
            d if d.is_float() => Scalar::Float(v),
            DType::Bool => Scalar::Bool(v != 0.0),
            _ => Scalar::Int(v as i64),
        })
    }
}
