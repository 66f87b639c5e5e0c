//! `equal`, `allclose`, `dist`, `renorm`, `glu` and `_prelu_kernel`.
//!
//! - `equal(a, b)`: false for different shapes, else `eq(a, b).all()` read back (NaN is not
//!   equal to itself; dtypes promote, as `torch.equal`'s do);
//! - `allclose(a, b, rtol, atol, equal_nan)`: `isclose(...).all()` read back, `isclose` composed
//!   as PyTorch's composite is, operator by operator in the inputs' dtype: `a == b`, or
//!   `|a - b|` finite and `<= atol + |rtol * b|`, or both NaN when `equal_nan`;
//! - `dist(a, b, p) = linalg_vector_norm(a - b, p)`;
//! - `renorm(x, p, dim, maxnorm)`: each slice along `dim` scaled by `maxnorm / (norm + 1e-7)`
//!   where its p-norm exceeds `maxnorm` (the norm in f32 for bf16/f16, the factor rounded to
//!   the dtype, then one multiplication, as ATen's `renorm` does);
//! - `glu(x, dim) = a * sigmoid(b)` for the halves `a`, `b` of `dim`, one kernel in f32;
//! - `_prelu_kernel(x, w) = x > 0 ? x : w x` (broadcasting `w`), one kernel.

use super::{cast, op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::pointwise::{Arg, float2};
use crate::ops::sharding::{Lin, Sharding};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// A bool tensor's single value, read back.
fn read_all(rt: &Runtime, t: &Tensor) -> Result<bool> {
    let all = op(rt, "aten::all", vec![tv(t)])?;
    Ok(all.item()?.to_f64() != 0.0)
}

/// `torch.equal(a, b)`.
pub fn equal(rt: &Runtime, a: &Tensor, b: &Tensor) -> Result<bool> {
    if a.shape() != b.shape() {
        return Ok(false);
    }
    let eq = op(rt, "aten::eq.Tensor", vec![tv(a), tv(b)])?;
    read_all(rt, &eq)
}

/// `torch.isclose(a, b, rtol, atol, equal_nan)`, composed as PyTorch's composite.
pub fn isclose(
    rt: &Runtime,
    a: &Tensor,
    b: &Tensor,
    rtol: f64,
    atol: f64,
    equal_nan: bool,
) -> Result<Tensor> {
    if a.dtype() != b.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{} did not match {}",
            a.dtype().name(),
            b.dtype().name()
        )));
    }
    if rtol < 0.0 || atol < 0.0 {
        return Err(TpuError::BadArgs(format!(
            "rtol and atol must be non-negative, got rtol={rtol} and atol={atol}"
        )));
    }
    let mut close = op(rt, "aten::eq.Tensor", vec![tv(a), tv(b)])?;
    if equal_nan && a.dtype().is_float() {
        let na = op(rt, "aten::isnan", vec![tv(a)])?;
        let nb = op(rt, "aten::isnan", vec![tv(b)])?;
        let both = op(rt, "aten::logical_and", vec![tv(&na), tv(&nb)])?;
        close = op(rt, "aten::logical_or", vec![tv(&close), tv(&both)])?;
    }
    if rtol == 0.0 && atol == 0.0 {
        return Ok(close);
    }
    let rb = op(rt, "aten::mul.Scalar", vec![tv(b), Value::Float(rtol)])?;
    let rb = op(rt, "aten::abs", vec![tv(&rb)])?;
    let allowed = op(rt, "aten::add.Scalar", vec![tv(&rb), Value::Float(atol)])?;
    let diff = op(rt, "aten::sub.Tensor", vec![tv(a), tv(b)])?;
    let actual = op(rt, "aten::abs", vec![tv(&diff)])?;
    let fin = op(rt, "aten::isfinite", vec![tv(&actual)])?;
    let le = op(rt, "aten::le.Tensor", vec![tv(&actual), tv(&allowed)])?;
    let ok = op(rt, "aten::logical_and", vec![tv(&fin), tv(&le)])?;
    op(rt, "aten::logical_or", vec![tv(&close), tv(&ok)])
}

/// `torch.dist(a, b, p)`.
#[aten(
    "aten::dist",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("a norm of a difference: no sharding rule yet"),
    kind = Decomposition,
    call = Dist(rt, self_, other, p)
)]
pub fn dist(rt: &Runtime, a: &Tensor, b: &Tensor, p: Scalar) -> Result<Tensor> {
    let d = op(rt, "aten::sub.Tensor", vec![tv(a), tv(b)])?;
    op(rt, "aten::linalg_vector_norm", vec![tv(&d), sv(p)])
}

/// `torch.renorm(x, p, dim, maxnorm)`.
#[aten(
    "aten::renorm",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("norms across every other dimension: no sharding rule yet"),
    kind = Decomposition,
    call = Renorm(rt, self_, p, dim, maxnorm)
)]
pub fn renorm(rt: &Runtime, x: &Tensor, p: Scalar, dim: i64, maxnorm: Scalar) -> Result<Tensor> {
    let n = x.dim() as i64;
    let d = if dim < 0 { dim + n } else { dim };
    if n == 0 || d < 0 || d >= n {
        return Err(TpuError::BadDim(format!(
            "Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
            -n.max(1),
            n.max(1) - 1
        )));
    }
    if p.to_f64() <= 0.0 {
        return Err(TpuError::BadArgs(format!(
            "renorm: non-positive-norm not supported, got {}",
            p.to_f64()
        )));
    }
    if maxnorm.to_f64() < 0.0 {
        return Err(TpuError::BadArgs(format!(
            "renorm: expected maxnorm to be >= 0 but got {}",
            maxnorm.to_f64()
        )));
    }
    let dims: Vec<i64> = (0..n).filter(|&i| i != d).collect();
    let acc = DType::F32;
    let norm = op(
        rt,
        "aten::linalg_vector_norm",
        vec![
            tv(x),
            sv(p),
            Value::Ints(dims),
            Value::Bool(true),
            Value::Dtype(acc),
        ],
    )?;
    let big = op(rt, "aten::gt.Scalar", vec![tv(&norm), sv(maxnorm)])?;
    let den = op(rt, "aten::add.Scalar", vec![tv(&norm), Value::Float(1e-7)])?;
    let num = op(rt, "aten::full_like", vec![tv(&den), sv(maxnorm)])?;
    let f = op(rt, "aten::div.Tensor", vec![tv(&num), tv(&den)])?;
    let f = op(
        rt,
        "aten::where.ScalarOther",
        vec![tv(&big), tv(&f), Value::Float(1.0)],
    )?;
    let f = cast(&f, x.dtype())?;
    op(rt, "aten::mul.Tensor", vec![tv(x), tv(&f)])
}

/// `torch.nn.functional.glu(x, dim)`.
#[aten(
    "aten::glu",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("halves of one dimension: no sharding rule yet"),
    kind = Decomposition,
    call = Glu(rt, self_, dim)
)]
pub fn glu(rt: &Runtime, x: &Tensor, dim: i64) -> Result<Tensor> {
    let n = x.dim() as i64;
    let d = if dim < 0 { dim + n } else { dim };
    if n == 0 || d < 0 || d >= n {
        return Err(TpuError::BadArgs(
            "glu does not support scalars because halving size must be even".into(),
        ));
    }
    let size = x.shape()[d as usize] as i64;
    if size % 2 != 0 {
        return Err(TpuError::BadArgs(format!(
            "Halving dimension must be even, but dimension {d} is size {size}"
        )));
    }
    let half = |start| {
        op(
            rt,
            "aten::narrow",
            vec![
                tv(x),
                Value::Int(d),
                Value::Int(start),
                Value::Int(size / 2),
            ],
        )
    };
    let (a, b) = (half(0)?, half(size / 2)?);
    float2(Glu::NAME, Arg::Tensor(&a), Arg::Tensor(&b), |e, a, b| {
        let s = e.sigmoid(b);
        e.mul(a, s)
    })
}

/// `torch._prelu_kernel(x, w)`.
#[aten(
    "aten::_prelu_kernel",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::No),
    call = PreluKernel(self_, weight)
)]
pub fn prelu_kernel(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    float2(
        PreluKernel::NAME,
        Arg::Tensor(x),
        Arg::Tensor(w),
        |e, x, w| {
            let pos = e.gtk(x, 0.0);
            let wx = e.mul(w, x);
            e.sel(pos, x, wx)
        },
    )
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten(
    "aten::equal",
    dtypes = DType::ALL_TPU,
    shard = Sharding::Replicate(HOST),
    kind = Decomposition
)]
fn equal_op(rt: &Runtime, a: Equal<'_>) -> Result<Value> {
    Ok(Value::Bool(equal(rt, a.self_, a.other)?))
}

#[aten(
    "aten::allclose",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(HOST),
    kind = Decomposition
)]
fn allclose_op(rt: &Runtime, a: Allclose<'_>) -> Result<Value> {
    let c = isclose(rt, a.self_, a.other, a.rtol, a.atol, a.equal_nan)?;
    Ok(Value::Bool(read_all(rt, &c)?))
}

/// Why `equal` and `allclose` replicate.
const HOST: &str = "reads one bool back to the host";
