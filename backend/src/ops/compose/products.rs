//! Products composed on the vector unit: `addr`, `addmv`, `addbmm`, `_trilinear`,
//! `linalg_cross`, and [`contract`] (`sum(a * b)` over some dims), which the integer matrix
//! products use too.
//!
//! Float contractions multiply and accumulate in f32 (bf16 and f16 inputs are widened first,
//! so their products are exact) and round once to the result dtype, as PyTorch's CPU kernels
//! for these operators do; `f32` results are f32 sums, not the matrix unit's bf16 passes (the
//! golden cases check these against PyTorch's f32 arithmetic). Integer contractions are exact
//! (wrapping as PyTorch's do).

use super::{cast, op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::layout::broadcast_shapes;
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// Float dtypes compute in f32; integers in their own dtype.
fn wide(t: &Tensor) -> Result<Tensor> {
    if t.dtype().is_float() {
        cast(t, DType::F32)
    } else {
        Ok(t.clone())
    }
}

/// `sum(a * b, dims)` (broadcasting `a` and `b`): f32 for float inputs, the integer dtype
/// (exact, wrapping) for integer ones.
pub(crate) fn contract(rt: &Runtime, a: &Tensor, b: &Tensor, dims: &[i64]) -> Result<Tensor> {
    let p = op(rt, "aten::mul.Tensor", vec![tv(&wide(a)?), tv(&wide(b)?)])?;
    if dims.is_empty() {
        return Ok(p);
    }
    let d = p.dtype();
    op(
        rt,
        "aten::sum.dim_IntList",
        vec![
            tv(&p),
            Value::Ints(dims.to_vec()),
            Value::Bool(false),
            Value::Dtype(d),
        ],
    )
}

fn unsqueeze(rt: &Runtime, t: &Tensor, d: i64) -> Result<Tensor> {
    op(rt, "aten::unsqueeze", vec![tv(t), Value::Int(d)])
}

fn is_zero(s: Scalar) -> bool {
    s.to_f64() == 0.0
}

/// `beta * self + alpha * prod` in `prod`'s dtype (f32 or an integer), rounded to `out`; `beta
/// == 0` ignores `self` (its NaNs too), as PyTorch's BLAS-style operators do. For an integer
/// product `alpha` and `beta` are first made integers as PyTorch's kernels make them
/// (`Scalar::to<int64_t>`: `alpha=0.6` is 0), not applied as floats.
pub(crate) fn axpby(
    rt: &Runtime,
    self_: &Tensor,
    prod: &Tensor,
    beta: Scalar,
    alpha: Scalar,
    out: DType,
) -> Result<Tensor> {
    let (beta, alpha) = if prod.dtype().is_float() {
        (beta, alpha)
    } else {
        (beta.as_dtype(prod.dtype()), alpha.as_dtype(prod.dtype()))
    };
    let shape = broadcast_shapes(self_.shape(), prod.shape())?;
    if shape != prod.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "the input of shape {:?} does not broadcast to the product's shape {:?}",
            self_.shape(),
            prod.shape()
        )));
    }
    let mut r = if alpha.to_f64() == 1.0 {
        prod.clone()
    } else {
        op(rt, "aten::mul.Scalar", vec![tv(prod), sv(alpha)])?
    };
    if !is_zero(beta) {
        let s = cast(self_, prod.dtype())?;
        let s = if beta.to_f64() == 1.0 {
            s
        } else {
            op(rt, "aten::mul.Scalar", vec![tv(&s), sv(beta)])?
        };
        r = op(rt, "aten::add.Tensor", vec![tv(&r), tv(&s)])?;
    }
    cast(&r, out)
}

fn same_dtypes(name: &str, ts: &[&Tensor]) -> Result<DType> {
    let d = ts[0].dtype();
    if let Some(o) = ts.iter().find(|t| t.dtype() != d) {
        return Err(TpuError::DtypeMismatch(format!(
            "{name}: expected all tensors to have dtype {}, got {}",
            d.name(),
            o.dtype().name()
        )));
    }
    Ok(d)
}

fn need_dims(name: &str, t: &Tensor, what: &str, n: usize) -> Result<()> {
    if t.dim() != n {
        return Err(TpuError::BadArgs(format!(
            "{name}: {what} must be a {n}-D tensor, got {}-D",
            t.dim()
        )));
    }
    Ok(())
}

/// `torch.addr(self, vec1, vec2, beta=, alpha=)`: `beta * self + alpha * outer(vec1, vec2)`; on
/// bool, `(beta and self) or (alpha and vec1 and vec2)`.
#[aten(
    "aten::addr",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Replicate("an outer product on the vector unit: no sharding rule yet"),
    kind = Decomposition,
    call = Addr(rt, self_, vec1, vec2, beta, alpha)
)]
pub fn addr(
    rt: &Runtime,
    self_: &Tensor,
    v1: &Tensor,
    v2: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    let name = Addr::NAME;
    need_dims(name, v1, "vec1", 1)?;
    need_dims(name, v2, "vec2", 1)?;
    let d = same_dtypes(name, &[self_, v1, v2])?;
    let (c, r) = (unsqueeze(rt, v1, 1)?, unsqueeze(rt, v2, 0)?);
    if d == DType::Bool {
        let outer = op(rt, "aten::logical_and", vec![tv(&c), tv(&r)])?;
        let shape = [v1.shape()[0] as i64, v2.shape()[0] as i64];
        let a = if is_zero(alpha) {
            op(rt, "aten::zeros_like", vec![tv(&outer)])?
        } else {
            outer
        };
        if is_zero(beta) {
            return Ok(a);
        }
        let s = op(
            rt,
            "aten::expand",
            vec![tv(self_), Value::Ints(shape.to_vec())],
        )?;
        return op(rt, "aten::logical_or", vec![tv(&a), tv(&s)]);
    }
    // In the dtype, as PyTorch's kernel: `beta * self + (alpha * vec1) * vec2`, with `alpha` and
    // `beta` in the dtype (`Scalar::to<scalar_t>`: truncated for integers, rounded to bf16).
    let (beta, alpha) = (beta.as_dtype(d), alpha.as_dtype(d));
    let c = if alpha.to_f64() == 1.0 {
        c
    } else {
        op(rt, "aten::mul.Scalar", vec![tv(&c), sv(alpha)])?
    };
    let outer = op(rt, "aten::mul.Tensor", vec![tv(&c), tv(&r)])?;
    if is_zero(beta) {
        return Ok(outer);
    }
    let s = if beta.to_f64() == 1.0 {
        self_.clone()
    } else {
        op(rt, "aten::mul.Scalar", vec![tv(self_), sv(beta)])?
    };
    op(rt, "aten::add.Tensor", vec![tv(&s), tv(&outer)])
}

/// `torch.addmv(self, mat, vec, beta=, alpha=)`.
#[aten(
    "aten::addmv",
    dtypes = DType::NUMERIC,
    shard = Sharding::Replicate(CONTRACTION),
    kind = Decomposition,
    call = Addmv(rt, self_, mat, vec, beta, alpha)
)]
pub fn addmv(
    rt: &Runtime,
    self_: &Tensor,
    mat: &Tensor,
    vec: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    let name = Addmv::NAME;
    need_dims(name, mat, "mat", 2)?;
    need_dims(name, vec, "vec", 1)?;
    if mat.shape()[1] != vec.shape()[0] {
        return Err(TpuError::ShapeMismatch(format!(
            "size mismatch, got input ({}), mat ({}x{}), vec ({})",
            mat.shape()[0],
            mat.shape()[0],
            mat.shape()[1],
            vec.shape()[0]
        )));
    }
    let d = same_dtypes(name, &[self_, mat, vec])?;
    let prod = contract(rt, mat, &unsqueeze(rt, vec, 0)?, &[1])?;
    axpby(rt, self_, &prod, beta, alpha, d)
}

/// `torch.addbmm(self, batch1, batch2, beta=, alpha=)`: the batch's products summed.
#[aten(
    "aten::addbmm",
    dtypes = DType::NUMERIC,
    shard = Sharding::Replicate(CONTRACTION),
    kind = Decomposition,
    call = Addbmm(rt, self_, batch1, batch2, beta, alpha)
)]
pub fn addbmm(
    rt: &Runtime,
    self_: &Tensor,
    b1: &Tensor,
    b2: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    let name = Addbmm::NAME;
    need_dims(name, b1, "batch1", 3)?;
    need_dims(name, b2, "batch2", 3)?;
    let (s1, s2) = (b1.shape(), b2.shape());
    if s1[0] != s2[0] || s1[2] != s2[1] {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: batch1 {s1:?} and batch2 {s2:?} do not multiply"
        )));
    }
    let d = same_dtypes(name, &[self_, b1, b2])?;
    let beta = if d.is_float() { beta } else { beta.as_dtype(d) };
    // As PyTorch's CPU kernel: one `addmm` per batch into the result, each rounded to the
    // dtype, `beta` applying to the first only.
    if s1[0] == 0 {
        let shape = vec![s1[1] as i64, s2[2] as i64];
        let s = op(rt, "aten::expand", vec![tv(self_), Value::Ints(shape)])?;
        return if is_zero(beta) {
            op(rt, "aten::zeros_like", vec![tv(&s)])
        } else {
            op(rt, "aten::mul.Scalar", vec![tv(&s), sv(beta)])
        };
    }
    let mut r = self_.clone();
    let mut beta = beta;
    for i in 0..s1[0] as i64 {
        let pick = |t: &Tensor| {
            op(
                rt,
                "aten::select.int",
                vec![tv(t), Value::Int(0), Value::Int(i)],
            )
        };
        let prod = contract(
            rt,
            &unsqueeze(rt, &pick(b1)?, 2)?,
            &unsqueeze(rt, &pick(b2)?, 0)?,
            &[1],
        )?;
        r = axpby(rt, &r, &prod, beta, alpha, d)?;
        beta = Scalar::Int(1);
    }
    Ok(r)
}

/// `torch._trilinear`: the inputs unsqueezed at their `expand` dims (in increasing order),
/// then, as ATen's kernel: `i1 * i2` contracted over the summed dims where `i3` is expanded,
/// rounded to the dtype, then contracted with `i3` over the other summed dims and rounded again
/// (f32 accumulation for floats, exact for integers); the summed dims are dropped.
pub fn trilinear(rt: &Runtime, a: &Args3, expand: [&[i64]; 3], sumdim: &[i64]) -> Result<Tensor> {
    let d = same_dtypes(Trilinear::NAME, a)?;
    let mut ts = Vec::with_capacity(3);
    for (t, e) in a.iter().zip(expand) {
        let mut e = e.to_vec();
        e.sort_unstable();
        let mut t = (*t).clone();
        for d in e {
            t = unsqueeze(rt, &t, d)?;
        }
        ts.push(t);
    }
    let total = ts[0].dim() as i64;
    let norm = |x: i64| if x < 0 { x + total } else { x };
    let e3: Vec<i64> = expand[2].iter().map(|&x| norm(x)).collect();
    let sums: Vec<i64> = sumdim.iter().map(|&x| norm(x)).collect();
    let (d12, d23): (Vec<i64>, Vec<i64>) = sums.iter().partition(|x| e3.contains(x));
    let sum_keep = |t: &Tensor, dims: &[i64]| -> Result<Tensor> {
        if dims.is_empty() {
            return Ok(t.clone());
        }
        let dt = t.dtype();
        op(
            rt,
            "aten::sum.dim_IntList",
            vec![
                tv(t),
                Value::Ints(dims.to_vec()),
                Value::Bool(true),
                Value::Dtype(dt),
            ],
        )
    };
    let x = contract(rt, &ts[0], &ts[1], &[])?;
    let x = cast(&sum_keep(&x, &d12)?, d)?;
    let r = contract(rt, &x, &ts[2], &[])?;
    let r = cast(&sum_keep(&r, &d23)?, d)?;
    let shape: Vec<i64> = r
        .shape()
        .iter()
        .enumerate()
        .filter(|(i, _)| !sums.contains(&(*i as i64)))
        .map(|(_, &s)| s as i64)
        .collect();
    op(rt, "aten::reshape", vec![tv(&r), Value::Ints(shape)])
}

/// The three inputs of `_trilinear`.
pub type Args3<'a> = [&'a Tensor; 3];

/// `torch.linalg.cross(self, other, dim=)`: the inputs broadcast, `dim` of size 3.
#[aten(
    "aten::linalg_cross",
    dtypes = DType::NUMERIC,
    shard = Sharding::Replicate("slices along the cross dimension: no sharding rule yet"),
    kind = Decomposition,
    call = LinalgCross(rt, self_, other, dim)
)]
pub fn linalg_cross(rt: &Runtime, a: &Tensor, b: &Tensor, dim: i64) -> Result<Tensor> {
    let name = LinalgCross::NAME;
    same_dtypes(name, &[a, b])?;
    if a.dim() != b.dim() {
        return Err(TpuError::BadArgs(format!(
            "{name}: inputs must have the same number of dimensions (got {} and {})",
            a.dim(),
            b.dim()
        )));
    }
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let n = shape.len() as i64;
    let d = if dim < 0 { dim + n } else { dim };
    if d < 0 || d >= n.max(1) {
        return Err(TpuError::BadDim(format!(
            "Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
            -n,
            n - 1
        )));
    }
    if shape.get(d as usize) != Some(&3) {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: dimension {dim} does not have size 3"
        )));
    }
    let sz: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
    let expand = |t: &Tensor| op(rt, "aten::expand", vec![tv(t), Value::Ints(sz.clone())]);
    let (a, b) = (expand(a)?, expand(b)?);
    let part = |t: &Tensor, i: i64| {
        op(
            rt,
            "aten::narrow",
            vec![tv(t), Value::Int(d), Value::Int(i), Value::Int(1)],
        )
    };
    let (a0, a1, a2) = (part(&a, 0)?, part(&a, 1)?, part(&a, 2)?);
    let (b0, b1, b2) = (part(&b, 0)?, part(&b, 1)?, part(&b, 2)?);
    let term = |x: &Tensor, y: &Tensor, u: &Tensor, v: &Tensor| -> Result<Tensor> {
        let p = op(rt, "aten::mul.Tensor", vec![tv(x), tv(y)])?;
        let q = op(rt, "aten::mul.Tensor", vec![tv(u), tv(v)])?;
        op(rt, "aten::sub.Tensor", vec![tv(&p), tv(&q)])
    };
    let c0 = term(&a1, &b2, &a2, &b1)?;
    let c1 = term(&a2, &b0, &a0, &b2)?;
    let c2 = term(&a0, &b1, &a1, &b0)?;
    op(
        rt,
        "aten::cat",
        vec![Value::Tensors(vec![c0, c1, c2]), Value::Int(d)],
    )
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten(
    "aten::_trilinear",
    dtypes = DType::NUMERIC,
    shard = Sharding::Replicate(CONTRACTION),
    kind = Decomposition
)]
fn trilinear_op(rt: &Runtime, a: Trilinear<'_>) -> Result<Tensor> {
    trilinear(
        rt,
        &[a.i1, a.i2, a.i3],
        [&a.expand1, &a.expand2, &a.expand3],
        &a.sumdim,
    )
}

/// Why the vector-unit contractions replicate.
const CONTRACTION: &str = "a vector-unit contraction: no sharding rule yet";
