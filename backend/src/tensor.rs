//! `Tensor`: a view of device storage, with a PyTorch-like API.
//!
//! A tensor is shared storage plus a [`Layout`] and a [`DType`]; view operators return tensors
//! over the same storage. Reading values back (`to_vec`, `item`) is a synchronisation point:
//! DeferAndFuse flushes, and device faults are reported there.

use std::fmt;

use half::{bf16, f16};

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::View;
use crate::layout::Layout;
use crate::runtime::Runtime;
use crate::storage::StorageRef;

/// A host element type a tensor can be built from or read into.
pub trait Element: Copy + Send + Sync + 'static {
    /// The matching dtype.
    const DTYPE: DType;
    /// From f64 (rounding as PyTorch's conversion does).
    fn from_f64(v: f64) -> Self;
    /// To f64.
    fn to_f64(self) -> f64;
}

macro_rules! element {
    ($t:ty, $d:expr, $from:expr, $to:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn from_f64(v: f64) -> Self {
                ($from)(v)
            }
            fn to_f64(self) -> f64 {
                ($to)(self)
            }
        }
    };
}

element!(f32, DType::F32, |v: f64| v as f32, |x: f32| x as f64);
element!(bf16, DType::BF16, bf16::from_f64, |x: bf16| x.to_f64());
element!(f16, DType::F16, f16::from_f64, |x: f16| x.to_f64());
element!(i32, DType::I32, |v: f64| v as i32, |x: i32| x as f64);
element!(i64, DType::I64, |v: f64| v as i64, |x: i64| x as f64);
element!(bool, DType::Bool, |v: f64| v != 0.0, |x: bool| x as u8
    as f64);

/// Encodes f64 values as `dtype` bytes (little-endian).
pub(crate) fn encode(values: impl Iterator<Item = f64>, dtype: DType) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        match dtype {
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::BF16 => out.extend(bf16::from_f64(v).to_le_bytes()),
            DType::F16 => out.extend(f16::from_f64(v).to_le_bytes()),
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::Bool => out.push((v != 0.0) as u8),
            DType::U8 => out.push(v as i64 as u8),
            DType::I8 => out.push(v as i64 as i8 as u8),
        }
    }
    out
}

/// Decodes `dtype` bytes to f64.
pub(crate) fn decode(bytes: &[u8], dtype: DType) -> Vec<f64> {
    let n = dtype.size();
    bytes
        .chunks_exact(n)
        .map(|c| match dtype {
            DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            DType::BF16 => bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            DType::F16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
            DType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            DType::I64 => i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64,
            DType::Bool => (c[0] != 0) as u8 as f64,
            DType::U8 => c[0] as f64,
            DType::I8 => c[0] as i8 as f64,
        })
        .collect()
}

/// A tensor on a [`Runtime`].
#[derive(Clone)]
pub struct Tensor {
    pub(crate) rt: Runtime,
    pub(crate) storage: StorageRef,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, device=tpu)",
            self.layout.shape, self.dtype
        )
    }
}

impl Tensor {
    pub(crate) fn from_parts(
        rt: Runtime,
        storage: StorageRef,
        layout: Layout,
        dtype: DType,
    ) -> Self {
        Tensor {
            rt,
            storage,
            layout,
            dtype,
        }
    }

    /// An uninitialised tensor with `layout` (offset 0, dense in some order of its
    /// dimensions, as [`crate::layout::elementwise_layout`] makes).
    pub(crate) fn empty_dense(rt: &Runtime, layout: Layout, dtype: DType) -> Result<Tensor> {
        let storage = {
            let mut st = rt.lock();
            rt.new_storage(
                &mut st,
                crate::layout::storage_bytes(&layout.shape, dtype.size()),
            )?
        };
        Ok(Tensor {
            rt: rt.clone(),
            storage,
            layout,
            dtype,
        })
    }

    /// A new tensor of `shape` with fresh, uninitialised storage (`torch.empty`), its bytes
    /// reserved in the chip's HBM: out of memory here, at the call, when they do not fit (a
    /// shape whose byte count overflows asks for `u64::MAX` bytes, which never fit).
    pub fn empty(rt: &Runtime, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let storage = {
            let mut st = rt.lock();
            rt.new_storage(&mut st, crate::layout::storage_bytes(shape, dtype.size()))?
        };
        Ok(Tensor {
            rt: rt.clone(),
            storage,
            layout: Layout::contiguous(shape),
            dtype,
        })
    }

    /// A tensor holding `data` (row-major, `shape`), copied to the device.
    pub fn from_slice<T: Element>(rt: &Runtime, data: &[T], shape: &[usize]) -> Result<Tensor> {
        Self::from_f64s(
            rt,
            data.iter().map(|x| x.to_f64()),
            data.len(),
            shape,
            T::DTYPE,
        )
    }

    /// A tensor of dtype `dtype` from f64 values (converted as PyTorch's `.to(dtype)` does).
    pub fn from_f64s(
        rt: &Runtime,
        values: impl Iterator<Item = f64>,
        len: usize,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if numel != Some(len) {
            return Err(TpuError::ShapeMismatch(format!(
                "shape {shape:?} is invalid for input of size {len}"
            )));
        }
        let bytes = encode(values, dtype);
        Self::from_bytes(rt, &bytes, shape, dtype)
    }

    /// A tensor from raw little-endian bytes of `dtype`.
    pub fn from_bytes(rt: &Runtime, bytes: &[u8], shape: &[usize], dtype: DType) -> Result<Tensor> {
        if bytes.len() as u64 != crate::layout::storage_bytes(shape, dtype.size()) {
            return Err(TpuError::ShapeMismatch(format!(
                "{} bytes do not hold {shape:?} elements of {dtype}",
                bytes.len()
            )));
        }
        if dtype == DType::I64 {
            for c in bytes.chunks_exact(8) {
                let v = i64::from_le_bytes(c.try_into().expect("8 bytes"));
                if i32::try_from(v).is_err() {
                    return Err(TpuError::Unsupported(format!(
                        "int64 value {v} does not fit the device's 32-bit integer lanes"
                    )));
                }
            }
        }
        let t = Tensor::empty(rt, shape, dtype)?;
        rt.upload(&t.storage, bytes)?;
        Ok(t)
    }

    /// A strided view over a storage uploaded from `storage` bytes (for inputs that are views
    /// of a larger storage, as PyTorch samples can be).
    pub fn from_strided_bytes(
        rt: &Runtime,
        storage: &[u8],
        dtype: DType,
        shape: &[usize],
        strides: &[usize],
        offset: usize,
    ) -> Result<Tensor> {
        if !storage.len().is_multiple_of(dtype.size()) || shape.len() != strides.len() {
            return Err(TpuError::BadArgs(
                "storage bytes do not match the dtype or the layout".into(),
            ));
        }
        let n = storage.len() / dtype.size();
        let base = Self::from_bytes(rt, storage, &[n], dtype)?;
        let layout = Layout {
            shape: shape.to_vec(),
            strides: strides.iter().map(|s| *s as isize).collect(),
            offset,
        };
        let (_, hi) = layout.storage_span();
        if layout.numel() > 0 && hi > n {
            return Err(TpuError::BadArgs(format!(
                "view {shape:?} / {strides:?} + {offset} reaches past a storage of {n} elements"
            )));
        }
        Ok(base.with_layout(layout))
    }

    /// A zero-dimensional tensor holding `v`.
    pub fn scalar(rt: &Runtime, v: Scalar, dtype: DType) -> Result<Tensor> {
        Self::from_f64s(rt, std::iter::once(v.to_f64()), 1, &[], dtype)
    }

    /// The runtime (device) the tensor lives on.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Shape.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// `size(dim)` (negative dims count from the end).
    pub fn size(&self, dim: i64) -> Result<usize> {
        Ok(self.layout.shape[crate::layout::wrap_dim(dim, self.dim())?])
    }

    /// Strides in elements.
    pub fn strides(&self) -> &[isize] {
        &self.layout.strides
    }

    /// Storage offset in elements.
    pub fn storage_offset(&self) -> usize {
        self.layout.offset
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.layout.ndim()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Whether the layout is row-major contiguous.
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// Whether two tensors share storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        std::sync::Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The same storage through another layout.
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        Tensor {
            rt: self.rt.clone(),
            storage: self.storage.clone(),
            layout,
            dtype: self.dtype,
        }
    }

    /// The IR view of this tensor.
    pub(crate) fn view(&self) -> View {
        self.view_as(self.layout.clone())
    }

    /// A view of this tensor's storage through `layout` (its dtype kept).
    pub(crate) fn view_as(&self, layout: Layout) -> View {
        View {
            storage: self.storage.clone(),
            layout,
            dtype: self.dtype,
        }
    }
}

impl Runtime {
    /// Copies host bytes into a storage (allocating it); the host waits for the transfer.
    pub(crate) fn upload(&self, s: &StorageRef, bytes: &[u8]) -> Result<()> {
        let buf = self.ensure_buffer(s)?;
        let mut st = self.lock();
        if bytes.len() as u64 == s.bytes() {
            // Written whole from the host: a value that was not computed is replaced.
            st.checks.overwritten(s);
            st.core.q.overwritten(s);
        }
        let q = &mut st.core.q;
        let done = self.inner.device.write(buf, 0, bytes, q.start_ns([buf]))?;
        q.host_ns = q.host_ns.max(done.end_ns);
        q.metrics.h2d_transfers += 1;
        q.metrics.h2d_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Reads `len` bytes of a storage at `offset` after running everything recorded and waiting
    /// for every kernel (faults are reported here, at the operator that caused them).
    pub(crate) fn download(&self, s: &StorageRef, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut st = self.lock();
        self.synchronize(&mut st, "read to host")?;
        if let Some(e) = st.checks.failure_of(s) {
            return Err(e);
        }
        let mut out = vec![0u8; len];
        if len == 0 {
            return Ok(out);
        }
        let buf = match s.buffer() {
            Some(b) => b,
            None => {
                drop(st);
                let b = self.ensure_buffer(s)?;
                st = self.lock();
                b
            }
        };
        let q = &mut st.core.q;
        let done = self
            .inner
            .device
            .read(buf, offset as u64, &mut out, q.host_ns)?;
        q.host_ns = q.host_ns.max(done.end_ns);
        q.metrics.d2h_transfers += 1;
        q.metrics.d2h_bytes += len as u64;
        Ok(out)
    }
}
