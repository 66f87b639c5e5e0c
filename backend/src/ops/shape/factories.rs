//! Factories: `eye` (+ `.m`), `linspace` and `logspace` (numbers or zero-dimensional tensors as
//! ends), `tril_indices`, `triu_indices`, `arange.start_out`, `empty_strided`,
//! `empty_permuted`, and the resizes `resize_`, `resize_as_`.
//!
//! Values are computed on the device by tile kernels: `linspace` as PyTorch's kernel does (from
//! `start` for the first half, from `end` for the second, in f32 lanes), `tril_indices` from the
//! running count of each row's elements. An integer `linspace`/`logspace` is computed on the host
//! in f64 as PyTorch's kernel computes it (its step is a double; f32 lanes would round
//! `4 - 3/7 * 7` below 1 and truncate it to 0) and uploaded: its ends are read as PyTorch's
//! tensor overloads read them (`item()`). The `layout`, `device` and `pin_memory` arguments are
//! accepted as PyTorch accepts them.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::Shapes;
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind};
use crate::layout::Layout;
use crate::ops::TensorOrNumber;
use crate::ops::aten;
use crate::ops::helpers::shape_of;
use crate::ops::helpers::{OpScope, map_shape};
use crate::ops::prims::{self, reshaped, tile};
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// `torch.eye(n, m)`.
fn eye(rt: &Runtime, n: i64, m: i64, dtype: Option<DType>) -> Result<Tensor> {
    if n < 0 || m < 0 {
        return Err(TpuError::BadArgs(format!(
            "n must be greater or equal to 0, got {}",
            n.min(m)
        )));
    }
    let op = OpScope::on(rt, Eye::NAME, Shapes::text(format!("[{n}, {m}]")));
    let d = dtype.unwrap_or(DType::F32);
    Ok(
        map_shape(&op, &[n as usize, m as usize], &[], &[d], |p, _| {
            let (i, j) = (p.index(0), p.index(1));
            let eq = p.cmp(CmpKind::Eq, i, j, DType::I32);
            vec![p.cast(eq, d)]
        })?
        .remove(0),
    )
}

/// `start + (end - start) * i / (steps - 1)` as PyTorch's `linspace` kernel computes it.
fn lin(p: &mut ProgBuilder, s: PRef, e: PRef, steps: usize) -> PRef {
    let (f, i32t) = (DType::F32, DType::I32);
    let i = p.index(0);
    let fi = p.cast(i, f);
    let span = p.bin(BinOp::Sub, e, s, f);
    let den = p.constant(Scalar::Float((steps.max(2) - 1) as f64), f);
    let step = p.bin(BinOp::Div, span, den, f);
    let a = p.bin(BinOp::Mul, fi, step, f);
    let from_s = p.bin(BinOp::Add, s, a, f);
    let back = p.constant(Scalar::Int(steps as i64 - 1), i32t);
    let r = p.bin(BinOp::Sub, back, i, i32t);
    let rf = p.cast(r, f);
    let b = p.bin(BinOp::Mul, rf, step, f);
    let from_e = p.bin(BinOp::Sub, e, b, f);
    let half = p.constant(Scalar::Int((steps / 2) as i64), i32t);
    let low = p.cmp(CmpKind::Lt, i, half, i32t);
    p.select(low, from_s, from_e, f)
}

/// `linspace`/`logspace` (`base` given).
fn space(
    rt: &Runtime,
    name: &str,
    start: TensorOrNumber<'_>,
    end: TensorOrNumber<'_>,
    steps: i64,
    base: Option<f64>,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let ins: Vec<&Tensor> = [&start, &end]
        .iter()
        .filter_map(|e| match e {
            TensorOrNumber::Tensor(t) => Some(*t),
            TensorOrNumber::Number(_) => None,
        })
        .collect();
    let op = if ins.is_empty() {
        OpScope::on(rt, name, Shapes::text(format!("[{steps}]")))
    } else {
        OpScope::new(name, &ins)?
    };
    if steps < 0 {
        return Err(TpuError::BadArgs(
            "number of steps must be non-negative".into(),
        ));
    }
    for t in &ins {
        if t.dim() != 0 {
            return Err(TpuError::BadArgs(format!(
                "{}() expects its start and end tensors to be 0-dimensional, got {}-D",
                name.trim_start_matches("aten::")
                    .split('.')
                    .next()
                    .unwrap_or(""),
                t.dim()
            )));
        }
    }
    let d = dtype.unwrap_or(DType::F32);
    let n = steps as usize;
    let f = DType::F32;
    if !d.is_float() {
        return integer_space(op.rt(), &start, &end, n, base, d);
    }
    Ok(map_shape(&op, &[n], &ins, &[d], |p, r| {
        // The ends in the result's dtype first, as PyTorch's kernels take them
        // (`start.to<scalar_t>()`: 4.3 is 4 for int64 and 4.3125 for bfloat16).
        let mut k = 0;
        let mut val = |p: &mut ProgBuilder, e: &TensorOrNumber<'_>| match e {
            // (One step is `start` itself, as given: PyTorch fills the result with it.)
            TensorOrNumber::Number(s) if n == 1 => p.constant(*s, f),
            TensorOrNumber::Number(s) => p.constant(s.as_dtype(d), f),
            TensorOrNumber::Tensor(_) => {
                k += 1;
                let v = if n == 1 {
                    r[k - 1]
                } else {
                    p.cast(r[k - 1], d)
                };
                p.cast(v, f)
            }
        };
        let s = val(p, &start);
        let e = val(p, &end);
        let v = if n == 1 { s } else { lin(p, s, e, n) };
        let v = match base {
            Some(b) => {
                let bb = p.constant(Scalar::Float(b), f);
                p.bin(BinOp::Pow, bb, v, f)
            }
            None => v,
        };
        vec![v]
    })?
    .remove(0))
}

/// An integer (or bool) `linspace`/`logspace`, as PyTorch's CPU kernel computes it: the ends in
/// the dtype, a double step, the first half from `start` and the rest from `end`, each value
/// truncated to the dtype.
fn integer_space(
    rt: &Runtime,
    start: &TensorOrNumber<'_>,
    end: &TensorOrNumber<'_>,
    n: usize,
    base: Option<f64>,
    d: DType,
) -> Result<Tensor> {
    let value = |e: &TensorOrNumber<'_>| -> Result<Scalar> {
        Ok(match e {
            TensorOrNumber::Number(s) => *s,
            TensorOrNumber::Tensor(t) => t.item()?,
        })
    };
    let (a, b) = (value(start)?, value(end)?);
    // One step is `start` itself, as given (PyTorch fills the result with it).
    let first = a.to_f64();
    let (a, b) = (a.as_dtype(d).to_f64(), b.as_dtype(d).to_f64());
    let step = if n > 1 { (b - a) / (n - 1) as f64 } else { 0.0 };
    let half = n / 2;
    let values: Vec<i64> = (0..n)
        .map(|i| {
            let x = if n == 1 {
                first
            } else if i < half {
                a + step * i as f64
            } else {
                b - step * (n - i - 1) as f64
            };
            let v = base.map_or(x, |bb| bb.powf(x));
            if d == DType::Bool {
                (v != 0.0) as i64
            } else {
                v as i64
            }
        })
        .collect();
    let t = Tensor::from_slice(rt, &values, &[n])?;
    if d == DType::I64 {
        Ok(t)
    } else {
        crate::ops::compose::cast(&t, d)
    }
}

/// `tril_indices`/`triu_indices(row, col, offset)`: `[2, N]` coordinates in row-major order.
fn tri_indices(
    rt: &Runtime,
    lower: bool,
    row: i64,
    col: i64,
    offset: i64,
    dtype: Option<DType>,
) -> Result<Tensor> {
    let name = if lower {
        TrilIndices::NAME
    } else {
        TriuIndices::NAME
    };
    let op = OpScope::on(rt, name, Shapes::text(format!("[{row}, {col}, {offset}]")));
    if row < 0 || col < 0 {
        return Err(TpuError::BadArgs(format!(
            "row must be non-negative, got {row}"
        )));
    }
    let d = dtype.unwrap_or(DType::I64);
    // Elements in row i, and where they start.
    let count = |i: i64| -> i64 {
        if lower {
            (i + offset + 1).clamp(0, col)
        } else {
            (col - (i + offset).max(0)).clamp(0, col)
        }
    };
    let total: i64 = (0..row).map(count).sum();
    let n = total as usize;
    if n == 0 || row == 0 {
        return Tensor::empty(op.rt(), &[2, n], d);
    }
    prims::fits_i32(n + row as usize)?;
    let r = row as usize;
    let counts = map_shape(&op, &[r], &[], &[DType::I32], |p, _| {
        let i32t = DType::I32;
        let i = p.index(0);
        let v = if lower {
            let k = p.constant(Scalar::Int(offset + 1), i32t);
            p.bin(BinOp::Add, i, k, i32t)
        } else {
            let k = p.constant(Scalar::Int(offset), i32t);
            let s = p.bin(BinOp::Add, i, k, i32t);
            let z = p.constant(Scalar::Int(0), i32t);
            let s = p.bin(BinOp::Max, s, z, i32t);
            let c = p.constant(Scalar::Int(col), i32t);
            p.bin(BinOp::Sub, c, s, i32t)
        };
        let z = p.constant(Scalar::Int(0), i32t);
        let c = p.constant(Scalar::Int(col), i32t);
        let v = p.bin(BinOp::Max, v, z, i32t);
        vec![p.bin(BinOp::Min, v, c, i32t)]
    })?
    .remove(0);
    let before = prims::scan(&op, &counts, RedKind::Sum, DType::I32, true)?;
    // For element k: its row is the last i with before[i] <= k (rows after it start later).
    let bv = before.with_layout(Layout {
        shape: vec![n, r],
        strides: vec![0, 1],
        offset: 0,
    });
    let ks = prims::iota(&op, n)?;
    let mut outs = tile(
        &op,
        &[n, r],
        1,
        &[(&bv, false), (&ks, true)],
        &[(DType::I32, true), (DType::I32, true)],
        |p, v| {
            let i32t = DType::I32;
            let j = p.index(1);
            let zero = p.constant(Scalar::Int(0), i32t);
            let pos = p.cmp(CmpKind::Gt, j, zero, i32t);
            let le = p.cmp(CmpKind::Le, v[0], v[1], i32t);
            let hit = p.bin(BinOp::And, pos, le, DType::Bool);
            let c = p.cast(hit, i32t);
            let rowi = p.reduce(RedKind::Sum, c, i32t);
            let z = p.constant(Scalar::Int(0), i32t);
            let b = p.select(le, v[0], z, i32t);
            let start = p.reduce(RedKind::Max, b, i32t);
            vec![rowi, start]
        },
    )?;
    let start = outs.remove(1);
    let rows = outs.remove(0);
    let rs = reshaped(&rows, &[1, n]);
    let ss = reshaped(&start, &[1, n]);
    Ok(map_shape(&op, &[2, n], &[&rs, &ss], &[d], |p, v| {
        let i32t = DType::I32;
        let which = p.index(0);
        let k = p.index(1);
        let within = p.bin(BinOp::Sub, k, v[1], i32t);
        let colv = if lower {
            within
        } else {
            let o = p.constant(Scalar::Int(offset), i32t);
            let s = p.bin(BinOp::Add, v[0], o, i32t);
            let z = p.constant(Scalar::Int(0), i32t);
            let s = p.bin(BinOp::Max, s, z, i32t);
            p.bin(BinOp::Add, within, s, i32t)
        };
        let z = p.constant(Scalar::Int(0), i32t);
        let is_row = p.cmp(CmpKind::Eq, which, z, i32t);
        vec![p.select(is_row, v[0], colv, i32t)]
    })?
    .remove(0))
}

/// `self.resize_(size)`: the same storage seen contiguously when it holds enough elements, else
/// a new storage holding the old elements first.
#[aten("aten::resize_", dtypes = DType::ALL_TPU, shard = RESIZE, call = ResizeInplace(self_, &size))]
fn resize(x: &Tensor, size: &[i64]) -> Result<Tensor> {
    let op = OpScope::new(ResizeInplace::NAME, &[x])?;
    let shape = shape_of(size)?;
    let n: usize = shape.iter().product();
    let cap = (x.storage.bytes() / x.dtype().size() as u64) as usize;
    let off = x.storage_offset();
    if off + n <= cap {
        return Ok(x.with_layout(Layout {
            offset: off,
            ..Layout::contiguous(&shape)
        }));
    }
    let t = Tensor::empty(op.rt(), &[n], x.dtype())?;
    let keep = x.numel().min(n);
    if keep > 0 {
        let src = reshaped(&prims::dense(&op, x)?, &[x.numel()]);
        let src = src.with_layout(src.layout().slice(0, Some(0), Some(keep as i64), 1)?);
        let dst = t.with_layout(t.layout().slice(0, Some(0), Some(keep as i64), 1)?);
        crate::ops::helpers::write_into(&op, &dst, &[&src], |_, r| r[0])?;
    }
    Ok(reshaped(&t, &shape))
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema),
// but `linspace` and `logspace`, listed in `defs`.

#[aten("aten::eye", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn eye_op(rt: &Runtime, a: Eye<'_>) -> Result<Tensor> {
    eye(rt, a.n, a.n, a.dtype)
}

#[aten("aten::eye.m", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn eye_m_op(rt: &Runtime, a: EyeM<'_>) -> Result<Tensor> {
    eye(rt, a.n, a.m, a.dtype)
}

#[aten("aten::tril_indices", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn tril_indices_op(rt: &Runtime, a: TrilIndices<'_>) -> Result<Tensor> {
    tri_indices(rt, true, a.row, a.col, a.offset, a.dtype)
}

#[aten("aten::triu_indices", dtypes = DType::ALL_TPU, shard = Sharding::Creation)]
fn triu_indices_op(rt: &Runtime, a: TriuIndices<'_>) -> Result<Tensor> {
    tri_indices(rt, false, a.row, a.col, a.offset, a.dtype)
}

const RESIZE: Sharding = Sharding::Replicate("resizes the global tensor");

#[aten("aten::resize_as_", dtypes = DType::ALL_TPU, shard = RESIZE)]
fn resize_as_inplace_op(a: ResizeAsInplace<'_>) -> Result<Tensor> {
    let size: Vec<i64> = a.the_template.shape().iter().map(|s| *s as i64).collect();
    resize(a.self_, &size)
}

// `linspace` and `logspace`: their ends may be numbers or tensors in any overload (the binder
// passes a number in a `Tensor` argument and a one-element tensor in a `Scalar` one), so both
// are `numbers`.

#[aten("aten::linspace", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn linspace_op(rt: &Runtime, a: Linspace<'_>) -> Result<Tensor> {
    space(rt, Linspace::NAME, a.start, a.end, a.steps, None, a.dtype)
}

#[aten("aten::linspace.Tensor_Tensor", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn linspace_tensor_tensor_op(rt: &Runtime, a: LinspaceTensorTensor<'_>) -> Result<Tensor> {
    space(
        rt,
        LinspaceTensorTensor::NAME,
        a.start,
        a.end,
        a.steps,
        None,
        a.dtype,
    )
}

#[aten("aten::linspace.Tensor_Scalar", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn linspace_tensor_scalar_op(rt: &Runtime, a: LinspaceTensorScalar<'_>) -> Result<Tensor> {
    space(
        rt,
        LinspaceTensorScalar::NAME,
        a.start,
        a.end,
        a.steps,
        None,
        a.dtype,
    )
}

#[aten("aten::linspace.Scalar_Tensor", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn linspace_scalar_tensor_op(rt: &Runtime, a: LinspaceScalarTensor<'_>) -> Result<Tensor> {
    space(
        rt,
        LinspaceScalarTensor::NAME,
        a.start,
        a.end,
        a.steps,
        None,
        a.dtype,
    )
}

#[aten("aten::logspace", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn logspace_op(rt: &Runtime, a: Logspace<'_>) -> Result<Tensor> {
    space(
        rt,
        Logspace::NAME,
        a.start,
        a.end,
        a.steps,
        Some(a.base),
        a.dtype,
    )
}

#[aten("aten::logspace.Tensor_Tensor", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn logspace_tensor_tensor_op(rt: &Runtime, a: LogspaceTensorTensor<'_>) -> Result<Tensor> {
    space(
        rt,
        LogspaceTensorTensor::NAME,
        a.start,
        a.end,
        a.steps,
        Some(a.base),
        a.dtype,
    )
}

#[aten("aten::logspace.Tensor_Scalar", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn logspace_tensor_scalar_op(rt: &Runtime, a: LogspaceTensorScalar<'_>) -> Result<Tensor> {
    space(
        rt,
        LogspaceTensorScalar::NAME,
        a.start,
        a.end,
        a.steps,
        Some(a.base),
        a.dtype,
    )
}

#[aten("aten::logspace.Scalar_Tensor", dtypes = DType::ALL_TPU, numbers = "start, end", shard = Sharding::Creation)]
fn logspace_scalar_tensor_op(rt: &Runtime, a: LogspaceScalarTensor<'_>) -> Result<Tensor> {
    space(
        rt,
        LogspaceScalarTensor::NAME,
        a.start,
        a.end,
        a.steps,
        Some(a.base),
        a.dtype,
    )
}
