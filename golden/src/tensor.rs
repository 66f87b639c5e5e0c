//! Host-side tensors: the data a golden case feeds to an operator and expects back.
//!
//! A [`HostTensor`] is a storage buffer (little-endian bytes, as in safetensors) plus a layout
//! (shape, strides in elements, storage offset), so a case can hand an operator the same strided
//! view PyTorch saw. Contiguous tensors have row-major strides and offset 0.
//!
//! Elements are read as `f64` (floats, exact for every supported dtype) or `i64` (integers and
//! bool) in logical row-major order; constructors encode `f64`/`i64` values into any dtype, with
//! round-to-nearest-even for bf16 and f16.

use std::fmt;

use half::{bf16, f16};

use crate::error::TensorError;

/// Most elements one case tensor may hold (2^30: 4 GiB of float32), so that a manifest's sizes
/// can never make the runner allocate or walk without bound.
pub const MAX_ELEMENTS: usize = 1 << 30;

/// The element count of `shape`, checked against [`MAX_ELEMENTS`].
pub fn checked_numel(shape: &[usize]) -> Result<usize, TensorError> {
    let numel = shape
        .iter()
        .try_fold(1u128, |acc, &d| acc.checked_mul(d as u128));
    match numel {
        Some(n) if n <= MAX_ELEMENTS as u128 => Ok(n as usize),
        _ => Err(TensorError::TooLarge {
            shape: shape.to_vec(),
            numel,
            max: MAX_ELEMENTS,
        }),
    }
}

/// Element types a case can hold. Names are PyTorch's (`float32`, `bfloat16`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `torch.float32`
    F32,
    /// `torch.bfloat16`
    BF16,
    /// `torch.float16`
    F16,
    /// `torch.float64`
    F64,
    /// `torch.int64`
    I64,
    /// `torch.int32`
    I32,
    /// `torch.int16`
    I16,
    /// `torch.int8`
    I8,
    /// `torch.uint8`
    U8,
    /// `torch.bool` (one byte, 0 or 1)
    Bool,
}

impl DType {
    /// All dtypes, in a fixed order.
    pub const ALL: [DType; 10] = [
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];

    /// PyTorch's name without `torch.`: `float32`, `bfloat16`, `int64`, `bool`, ...
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::F64 => "float64",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I16 => "int16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// The dtype with PyTorch name `name` (see [`DType::name`]).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::BF16 | DType::F16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Floating-point dtypes (compared with a tolerance; everything else is compared exactly).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::BF16 | DType::F16 | DType::F64)
    }

    pub(crate) fn from_safetensors(d: safetensors::Dtype) -> Option<DType> {
        use safetensors::Dtype as S;
        Some(match d {
            S::F32 => DType::F32,
            S::BF16 => DType::BF16,
            S::F16 => DType::F16,
            S::F64 => DType::F64,
            S::I64 => DType::I64,
            S::I32 => DType::I32,
            S::I16 => DType::I16,
            S::I8 => DType::I8,
            S::U8 => DType::U8,
            S::BOOL => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Row-major strides (in elements) for `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1usize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(d.max(1));
    }
    strides
}

/// A tensor on the host: storage bytes plus a strided layout.
#[derive(Clone, PartialEq)]
pub struct HostTensor {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
    data: Vec<u8>,
}

impl HostTensor {
    /// A contiguous tensor from raw little-endian bytes; the length must match the shape.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self, TensorError> {
        let numel = checked_numel(&shape)?;
        if numel * dtype.size() != data.len() {
            return Err(TensorError::DataLength {
                expected: numel * dtype.size(),
                got: data.len(),
                dtype,
                shape,
            });
        }
        let strides = contiguous_strides(&shape);
        Ok(HostTensor {
            dtype,
            shape,
            strides,
            offset: 0,
            data,
        })
    }

    /// A strided view of `storage` (raw bytes of a 1-D storage). Every element the view can reach
    /// must lie inside the storage.
    pub fn strided(
        dtype: DType,
        storage: Vec<u8>,
        shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
    ) -> Result<Self, TensorError> {
        if shape.len() != strides.len() {
            return Err(TensorError::Rank { shape, strides });
        }
        if !storage.len().is_multiple_of(dtype.size()) {
            return Err(TensorError::DataLength {
                expected: storage.len() / dtype.size() * dtype.size(),
                got: storage.len(),
                dtype,
                shape,
            });
        }
        let storage_len = storage.len() / dtype.size();
        checked_numel(&shape)?;
        if shape.iter().all(|&d| d > 0) {
            // In 128 bits: sizes and strides from a manifest must not wrap into range.
            let last = offset as u128
                + shape
                    .iter()
                    .zip(&strides)
                    .map(|(&d, &s)| (d as u128 - 1) * s as u128)
                    .sum::<u128>();
            if last >= storage_len as u128 {
                return Err(TensorError::ViewOutOfBounds {
                    last: usize::try_from(last).unwrap_or(usize::MAX),
                    storage_len,
                });
            }
        }
        Ok(HostTensor {
            dtype,
            shape,
            strides,
            offset,
            data: storage,
        })
    }

    /// A contiguous tensor from `f64` values, encoded into `dtype` (round to nearest even for
    /// floats; truncation toward zero for integers; non-zero is `true` for bool).
    pub fn from_f64s(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Result<Self, TensorError> {
        let mut data = Vec::with_capacity(values.len() * dtype.size());
        for &v in values {
            encode_f64(dtype, v, &mut data);
        }
        HostTensor::new(dtype, shape, data)
    }

    /// A contiguous tensor from `i64` values, encoded into `dtype`.
    pub fn from_i64s(dtype: DType, shape: Vec<usize>, values: &[i64]) -> Result<Self, TensorError> {
        let mut data = Vec::with_capacity(values.len() * dtype.size());
        for &v in values {
            encode_i64(dtype, v, &mut data);
        }
        HostTensor::new(dtype, shape, data)
    }

    /// A contiguous float32 tensor.
    pub fn from_f32s(shape: Vec<usize>, values: &[f32]) -> Result<Self, TensorError> {
        HostTensor::new(
            DType::F32,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Sizes, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Strides in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    /// Storage offset in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The whole storage, little-endian bytes (more than the view covers when strided).
    pub fn storage_bytes(&self) -> &[u8] {
        &self.data
    }
    /// Number of elements of the view.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Row-major strides, offset 0, and a storage of exactly the view's elements.
    pub fn is_contiguous(&self) -> bool {
        self.offset == 0
            && self.data.len() == self.numel() * self.dtype.size()
            && self
                .shape
                .iter()
                .zip(&self.strides)
                .zip(contiguous_strides(&self.shape))
                .all(|((&d, &s), c)| d <= 1 || s == c)
    }

    /// Storage element index of every element of the view, in logical row-major order.
    pub fn storage_indices(&self) -> Vec<usize> {
        let n = self.numel();
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return out;
        }
        let rank = self.shape.len();
        let mut index = vec![0usize; rank];
        for _ in 0..n {
            out.push(
                self.offset
                    + index
                        .iter()
                        .zip(&self.strides)
                        .map(|(i, s)| i * s)
                        .sum::<usize>(),
            );
            for d in (0..rank).rev() {
                index[d] += 1;
                if index[d] < self.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        out
    }

    /// A contiguous copy (the same tensor when already contiguous).
    pub fn contiguous(&self) -> HostTensor {
        if self.is_contiguous() {
            return self.clone();
        }
        let size = self.dtype.size();
        let mut data = Vec::with_capacity(self.numel() * size);
        for i in self.storage_indices() {
            data.extend_from_slice(&self.data[i * size..(i + 1) * size]);
        }
        HostTensor {
            dtype: self.dtype,
            strides: contiguous_strides(&self.shape),
            shape: self.shape.clone(),
            offset: 0,
            data,
        }
    }

    /// The view's elements as `f64`, logical row-major order (exact for every float dtype;
    /// integers beyond 2^53 round).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.storage_indices()
            .into_iter()
            .map(|i| self.read_f64(i))
            .collect()
    }

    /// The view's elements as `i64` (floats truncate toward zero; bool is 0 or 1).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        self.storage_indices()
            .into_iter()
            .map(|i| self.read_i64(i))
            .collect()
    }

    fn bytes_at<const N: usize>(&self, i: usize) -> [u8; N] {
        let mut b = [0u8; N];
        b.copy_from_slice(&self.data[i * N..(i + 1) * N]);
        b
    }

    fn read_f64(&self, i: usize) -> f64 {
        match self.dtype {
            DType::F32 => f32::from_le_bytes(self.bytes_at(i)) as f64,
            DType::BF16 => bf16::from_bits(u16::from_le_bytes(self.bytes_at(i))).to_f64(),
            DType::F16 => f16::from_bits(u16::from_le_bytes(self.bytes_at(i))).to_f64(),
            DType::F64 => f64::from_le_bytes(self.bytes_at(i)),
            _ => self.read_i64(i) as f64,
        }
    }

    fn read_i64(&self, i: usize) -> i64 {
        match self.dtype {
            DType::I64 => i64::from_le_bytes(self.bytes_at(i)),
            DType::I32 => i32::from_le_bytes(self.bytes_at(i)) as i64,
            DType::I16 => i16::from_le_bytes(self.bytes_at(i)) as i64,
            DType::I8 => self.data[i] as i8 as i64,
            DType::U8 => self.data[i] as i64,
            DType::Bool => (self.data[i] != 0) as i64,
            _ => self.read_f64(i) as i64,
        }
    }
}

fn encode_f64(dtype: DType, v: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&bf16::from_f64(v).to_bits().to_le_bytes()),
        DType::F16 => out.extend_from_slice(&f16::from_f64(v).to_bits().to_le_bytes()),
        DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::Bool => out.push((v != 0.0) as u8),
        _ => encode_i64(dtype, v as i64, out),
    }
}

fn encode_i64(dtype: DType, v: i64, out: &mut Vec<u8>) {
    match dtype {
        DType::I64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        DType::I16 => out.extend_from_slice(&(v as i16).to_le_bytes()),
        DType::I8 => out.push(v as i8 as u8),
        DType::U8 => out.push(v as u8),
        DType::Bool => out.push((v != 0) as u8),
        _ => encode_f64(dtype, v as f64, out),
    }
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)?;
        if !self.is_contiguous() {
            write!(f, "(stride {:?}, offset {})", self.strides, self.offset)?;
        }
        let values = self.to_f64_vec();
        let shown: Vec<String> = values.iter().take(8).map(|v| format!("{v}")).collect();
        write!(
            f,
            " [{}{}]",
            shown.join(", "),
            if values.len() > 8 { ", ..." } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_view_reads_in_logical_order() {
        // storage 0..6 as a 2x3 matrix, viewed transposed (3x2, strides [1, 3]).
        let base = HostTensor::from_f64s(DType::F32, vec![6], &[0., 1., 2., 3., 4., 5.]).unwrap();
        let t = HostTensor::strided(
            DType::F32,
            base.storage_bytes().to_vec(),
            vec![3, 2],
            vec![1, 3],
            0,
        )
        .unwrap();
        assert!(!t.is_contiguous());
        assert_eq!(t.to_f64_vec(), vec![0., 3., 1., 4., 2., 5.]);
        assert!(t.contiguous().is_contiguous());
        assert_eq!(t.contiguous().to_f64_vec(), t.to_f64_vec());
    }

    #[test]
    fn view_out_of_storage_is_an_error() {
        let err =
            HostTensor::strided(DType::F32, vec![0; 16], vec![2, 2], vec![2, 1], 1).unwrap_err();
        assert!(matches!(
            err,
            TensorError::ViewOutOfBounds {
                last: 4,
                storage_len: 4
            }
        ));
    }

    #[test]
    fn bf16_round_trip_rounds_to_nearest_even() {
        let t = HostTensor::from_f64s(DType::BF16, vec![2], &[1.0 + 1.0 / 256.0, 3.0]).unwrap();
        assert_eq!(t.to_f64_vec(), vec![1.0, 3.0]);
    }

    #[test]
    fn zero_strides_broadcast() {
        let t = HostTensor::strided(
            DType::I64,
            7i64.to_le_bytes().to_vec(),
            vec![2, 3],
            vec![0, 0],
            0,
        )
        .unwrap();
        assert_eq!(t.to_i64_vec(), vec![7; 6]);
    }
}
