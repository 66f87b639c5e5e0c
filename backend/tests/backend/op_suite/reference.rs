//! The host reference: slow, obvious implementations of PyTorch's semantics over f64.
//!
//! A [`HostTensor`] is a shape, a dtype and its values as f64 (already rounded to the dtype).
//! The helpers here are the parts every operator family shares: rounding to a dtype as PyTorch's
//! conversions do, type promotion (`torch.promote_types`, `torch.result_type`), broadcasting,
//! and row-major index arithmetic. Nothing here calls the backend: the reference must not share
//! code with what it checks.

use tpuemu_backend::{DType, Scalar};

/// The index arithmetic and rounding the rest of the suite shares.
pub use crate::host::{numel, ravel, reduced_shape, round, unravel};

/// Values of one tensor on the host, row-major, each exactly representable in `dtype`.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Sizes.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Row-major values, rounded to `dtype`.
    pub data: Vec<f64>,
}

impl HostTensor {
    /// A tensor of `shape` and `dtype` holding `data` rounded to `dtype`.
    pub fn new(shape: &[usize], dtype: DType, data: Vec<f64>) -> HostTensor {
        assert_eq!(numel(shape), data.len(), "reference: shape {shape:?}");
        HostTensor {
            shape: shape.to_vec(),
            dtype,
            data: data.into_iter().map(|v| round(v, dtype)).collect(),
        }
    }

    /// `f(index)` at every index of `shape`, rounded to `dtype`.
    pub fn from_fn(
        shape: &[usize],
        dtype: DType,
        mut f: impl FnMut(&[usize]) -> f64,
    ) -> HostTensor {
        let data = indices(shape).map(|i| f(&i)).collect();
        HostTensor::new(shape, dtype, data)
    }

    /// A zero-dimensional tensor.
    pub fn scalar(v: f64, dtype: DType) -> HostTensor {
        HostTensor::new(&[], dtype, vec![v])
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The element at `idx`.
    pub fn at(&self, idx: &[usize]) -> f64 {
        self.data[ravel(idx, &self.shape)]
    }

    /// The element at `idx` of the broadcast of this tensor to a shape of `idx.len()` dims.
    pub fn at_broadcast(&self, idx: &[usize]) -> f64 {
        let lead = idx.len() - self.dim();
        let own: Vec<usize> = (0..self.dim())
            .map(|d| if self.shape[d] == 1 { 0 } else { idx[lead + d] })
            .collect();
        self.at(&own)
    }

    /// The same values converted to `dtype` (PyTorch's `.to(dtype)`).
    pub fn to(&self, dtype: DType) -> HostTensor {
        HostTensor::new(&self.shape, dtype, self.data.clone())
    }

    /// The same values with another shape of the same element count.
    pub fn reshaped(&self, shape: &[usize]) -> HostTensor {
        HostTensor::new(shape, self.dtype, self.data.clone())
    }

    /// Dims permuted: result dim `i` is this tensor's dim `perm[i]`.
    pub fn permuted(&self, perm: &[usize]) -> HostTensor {
        let shape: Vec<usize> = perm.iter().map(|p| self.shape[*p]).collect();
        HostTensor::from_fn(&shape, self.dtype, |i| {
            let mut src = vec![0; self.dim()];
            for (k, p) in perm.iter().enumerate() {
                src[*p] = i[k];
            }
            self.at(&src)
        })
    }

    /// Broadcast to `shape`.
    pub fn broadcast_to(&self, shape: &[usize]) -> HostTensor {
        HostTensor::from_fn(shape, self.dtype, |i| self.at_broadcast(i))
    }
}

/// Every index of `shape`, row-major.
pub fn indices(shape: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    (0..numel(shape)).map(move |f| unravel(f, shape))
}

/// The unit roundoff of a float dtype (half an ulp of 1), or 0 for exact types.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f64::powi(2.0, -24),
        DType::BF16 => f64::powi(2.0, -8),
        DType::F16 => f64::powi(2.0, -11),
        _ => 0.0,
    }
}

/// `torch.promote_types`.
pub fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    let rank = |d: DType| match d {
        Bool => 0,
        U8 | I8 => 1,
        I32 => 2,
        I64 => 3,
        F16 | BF16 => 4,
        F32 => 5,
    };
    match (a, b) {
        _ if a == b => a,
        (F16, BF16) | (BF16, F16) => F32,
        // int16 in PyTorch; not a dtype here.
        (U8, I8) | (I8, U8) => I32,
        _ if rank(a) >= rank(b) => a,
        _ => b,
    }
}

/// An operand of `torch.result_type`.
#[derive(Clone, Copy, Debug)]
pub enum Operand {
    /// A tensor with dimensions.
    Dim(DType),
    /// A zero-dimensional tensor.
    Zero(DType),
    /// A Python number.
    Number(Scalar),
}

/// The operand for a tensor argument.
pub fn operand(t: &HostTensor) -> Operand {
    if t.dim() == 0 {
        Operand::Zero(t.dtype)
    } else {
        Operand::Dim(t.dtype)
    }
}

fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::I32 | DType::I64 => 1,
        _ => 2,
    }
}

/// `torch.result_type`: the promotion of the dimensioned tensors, unless a zero-dimensional
/// tensor or a number is of a higher category (bool < integer < float); a Python float counts
/// as the default dtype (float32), a Python int as int64.
pub fn result_type(ops: &[Operand]) -> DType {
    let mut classes: [Option<DType>; 3] = [None; 3];
    for o in ops {
        let (c, d) = match *o {
            Operand::Dim(d) => (0, d),
            Operand::Zero(d) => (1, d),
            Operand::Number(Scalar::Bool(_)) => (2, DType::Bool),
            Operand::Number(Scalar::Int(_)) => (2, DType::I64),
            Operand::Number(Scalar::Float(_)) => (2, DType::F32),
        };
        classes[c] = Some(classes[c].map_or(d, |a| promote(a, d)));
    }
    let combine = |hi: Option<DType>, lo: Option<DType>| match (hi, lo) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) if category(l) > category(h) => Some(promote(h, l)),
        (h, _) => h,
    };
    combine(classes[0], combine(classes[1], classes[2])).unwrap_or(DType::F32)
}

/// The broadcast of `shapes` (`torch.broadcast_shapes`), or `None` when they do not broadcast.
pub fn broadcast(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let n = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1; n];
    for s in shapes {
        for (k, &d) in s.iter().enumerate() {
            let o = &mut out[n - s.len() + k];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// `f` elementwise over the broadcast of `inputs`, rounded to `out`.
pub fn zip_map(inputs: &[&HostTensor], out: DType, f: impl Fn(&[f64]) -> f64) -> HostTensor {
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let shape = broadcast(&shapes).expect("reference: shapes broadcast");
    HostTensor::from_fn(&shape, out, |i| {
        let vals: Vec<f64> = inputs.iter().map(|t| t.at_broadcast(i)).collect();
        f(&vals)
    })
}

/// A dim index as PyTorch wraps it (negative counts from the end; a 0-d tensor takes 0 and -1).
pub fn wrap(dim: i64, ndim: usize) -> usize {
    let n = ndim.max(1) as i64;
    assert!(-n <= dim && dim < n, "reference: dim {dim} of {ndim}");
    (if dim < 0 { dim + n } else { dim }) as usize
}

/// The rows of a reduction over `dims`: for each kept index (row-major), the reduced elements
/// in row-major order; and the kept shape.
pub fn rows(x: &HostTensor, dims: &[usize]) -> (Vec<Vec<f64>>, Vec<usize>) {
    let kept: Vec<usize> = (0..x.dim()).filter(|d| !dims.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|d| x.shape[*d]).collect();
    let mut out = vec![Vec::new(); numel(&kshape)];
    for (flat, v) in x.data.iter().enumerate() {
        let idx = unravel(flat, &x.shape);
        let k: Vec<usize> = kept.iter().map(|d| idx[*d]).collect();
        out[ravel(&k, &kshape)].push(*v);
    }
    (out, kshape)
}
