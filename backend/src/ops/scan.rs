//! Cumulative operators: `cumsum`, `cumprod`, `cummax`, `cummin`, `logcumsumexp`.
//!
//! Each is a scan along one dim ([`prims::scan`]): the dim is moved last (a view), the running
//! value at `i` is a reduction over `j <= i`, computed in f32 lanes for floats (bf16/f16 rounded
//! once at the output, as PyTorch's CPU kernels accumulate in `acc_type`) and in 32-bit lanes
//! for integers. `cumsum`/`cumprod` of integer and bool tensors give int64, as in PyTorch.
//!
//! `cummax`/`cummin` give, as PyTorch, the index of the last element equal to the running
//! extreme (a tie moves the index forward), and once a NaN appears the value stays NaN with the
//! index of the latest NaN. `logcumsumexp` subtracts the running maximum before exponentiating.

use super::aten;
use super::checks::checks_on;
use super::helpers::{OpScope, map_shape};
use super::prims::{self, along, back, isnan, pairwise, tile};
use super::wide;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, RedKind, UnOp};
use crate::ops::sharding::Sharding;
use crate::tensor::Tensor;

fn lanes(d: DType) -> DType {
    if d.is_float() { DType::F32 } else { DType::I32 }
}

/// `cumsum`/`cumprod`.
fn cum(name: &str, x: &Tensor, dim: i64, dtype: Option<DType>, kind: RedKind) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let out = dtype.unwrap_or(if x.dtype().is_float() {
        x.dtype()
    } else {
        DType::I64
    });
    let (xl, d) = along(x, dim)?;
    let src = if out != x.dtype() {
        // PyTorch converts to `dtype` first.
        map_shape(&op, xl.shape(), &[&xl], &[out], |_, r| vec![r[0]])?.remove(0)
    } else {
        xl
    };
    let acc = lanes(out);
    let n = src.shape().last().copied().unwrap_or(1);
    let wide = out == DType::I64 && checks_on(&op);
    if wide && kind == RedKind::Prod {
        wide::checkable_product(n)?;
    }
    let s = prims::scan(&op, &src, kind, acc, false)?;
    let s = if s.dtype() != out {
        map_shape(&op, s.shape(), &[&s], &[out], |_, r| vec![r[0]])?.remove(0)
    } else {
        s
    };
    if wide && s.numel() > 0 {
        // The running values again in f32 tell whether the lanes' ones wrapped (`ops::wide`).
        let f = DType::F32;
        let vf = map_shape(&op, src.shape(), &[&src], &[f], |_, r| vec![r[0]])?.remove(0);
        let e = prims::scan(&op, &vf, kind, f, false)?;
        let check = if kind == RedKind::Sum {
            let a = map_shape(&op, vf.shape(), &[&vf], &[f], |p, r| {
                vec![p.un(UnOp::Abs, r[0], f)]
            })?
            .remove(0);
            let a = prims::scan(&op, &a, RedKind::Sum, f, false)?;
            wide::sums_fit(&op, &e, &a, n)?
        } else {
            wide::products_fit(&op, &s, &e)?
        };
        check.guards(op.rt(), &[&s]);
    }
    back(x, &s, d)
}

/// `torch.cumsum(x, dim, dtype=None)`.
#[aten("aten::cumsum", dtypes = DType::ALL_TPU, shard = ALONG_DIM, call = Cumsum(self_, dim, dtype))]
pub fn cumsum(x: &Tensor, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
    cum(Cumsum::NAME, x, dim, dtype, RedKind::Sum)
}

/// `torch.cumprod(x, dim, dtype=None)`.
#[aten("aten::cumprod", dtypes = DType::ALL_TPU, shard = ALONG_DIM, call = Cumprod(self_, dim, dtype))]
pub fn cumprod(x: &Tensor, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
    cum(Cumprod::NAME, x, dim, dtype, RedKind::Prod)
}

/// `cummax`/`cummin`: values and int64 indices.
fn cum_extreme(x: &Tensor, dim: i64, max: bool) -> Result<(Tensor, Tensor)> {
    let name = if max { Cummax::NAME } else { Cummin::NAME };
    let op = OpScope::new(name, &[x])?;
    let (xl, d) = along(x, dim)?;
    if x.numel() == 0 {
        return Ok((
            Tensor::empty(op.rt(), x.shape(), x.dtype())?,
            Tensor::empty(op.rt(), x.shape(), DType::I64)?,
        ));
    }
    let kind = if max { RedKind::Max } else { RedKind::Min };
    let dt = x.dtype();
    let acc = lanes(dt);
    let values = prims::scan(&op, &xl, kind, acc, false)?;
    // The last j <= i holding the running value (or, once NaN, the last NaN).
    let nd = xl.dim();
    let (xj, ii, shape) = pairwise(&op, &xl)?;
    let jd = nd as u32;
    let idx = tile(
        &op,
        &shape,
        1,
        &[(&xj, false), (&ii, true), (&values, true)],
        &[(DType::I64, true)],
        |p, r| {
            let j = p.index(jd);
            let upto = p.cmp(CmpKind::Le, j, r[1], DType::I32);
            let x = p.cast(r[0], acc);
            let m = r[2];
            let mut hit = p.cmp(CmpKind::Eq, x, m, acc);
            if acc == DType::F32 {
                let (nx, nm) = (isnan(p, x), isnan(p, m));
                let both = p.bin(BinOp::And, nx, nm, DType::Bool);
                hit = p.bin(BinOp::Or, hit, both, DType::Bool);
            }
            let ok = p.bin(BinOp::And, hit, upto, DType::Bool);
            let none = p.constant(Scalar::Int(-1), DType::I32);
            let v = p.select(ok, j, none, DType::I32);
            vec![p.reduce(RedKind::Max, v, DType::I32)]
        },
    )?
    .remove(0);
    let values = map_shape(&op, values.shape(), &[&values], &[dt], |_, r| vec![r[0]])?.remove(0);
    Ok((back(x, &values, d)?, back(x, &idx, d)?))
}

/// `torch.cummax(x, dim)`: `(values, indices)`.
#[aten("aten::cummax", dtypes = DType::ALL_TPU, shard = ALONG_DIM, call = Cummax(self_, dim))]
pub fn cummax(x: &Tensor, dim: i64) -> Result<(Tensor, Tensor)> {
    cum_extreme(x, dim, true)
}

/// `torch.cummin(x, dim)`: `(values, indices)`.
#[aten("aten::cummin", dtypes = DType::ALL_TPU, shard = ALONG_DIM, call = Cummin(self_, dim))]
pub fn cummin(x: &Tensor, dim: i64) -> Result<(Tensor, Tensor)> {
    cum_extreme(x, dim, false)
}

/// `torch.logcumsumexp(x, dim)`: `log(sum_{j<=i} exp(x_j))`, shifted by the running maximum.
#[aten("aten::logcumsumexp", dtypes = DType::FLOATING, shard = ALONG_DIM, call = Logcumsumexp(self_, dim))]
pub fn logcumsumexp(x: &Tensor, dim: i64) -> Result<Tensor> {
    let op = OpScope::new(Logcumsumexp::NAME, &[x])?;
    if !x.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"logcumsumexp_out_cpu\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    let (xl, d) = along(x, dim)?;
    if x.numel() == 0 {
        return Tensor::empty(op.rt(), x.shape(), x.dtype());
    }
    let f = DType::F32;
    let m = prims::scan(&op, &xl, RedKind::Max, f, false)?;
    let nd = xl.dim();
    let (xj, ii, shape) = pairwise(&op, &xl)?;
    let jd = nd as u32;
    let dt = x.dtype();
    let out = tile(
        &op,
        &shape,
        1,
        &[(&xj, false), (&ii, true), (&m, true)],
        &[(dt, true)],
        |p, r| {
            let j = p.index(jd);
            let upto = p.cmp(CmpKind::Le, j, r[1], DType::I32);
            // An infinite running maximum shifts by 0 (all -inf stays -inf, +inf stays +inf).
            let am = p.un(UnOp::Abs, r[2], f);
            let inf = p.constant(Scalar::Float(f64::INFINITY), f);
            let is_inf = p.cmp(CmpKind::Eq, am, inf, f);
            let zero = p.constant(Scalar::Float(0.0), f);
            let shift = p.select(is_inf, zero, r[2], f);
            let x = p.cast(r[0], f);
            let dx = p.bin(BinOp::Sub, x, shift, f);
            let e = p.un(UnOp::Exp, dx, f);
            let e = p.select(upto, e, zero, f);
            let s = p.reduce(RedKind::Sum, e, f);
            let l = p.un(UnOp::Log, s, f);
            vec![p.bin(BinOp::Add, l, shift, f)]
        },
    )?
    .remove(0);
    back(x, &out, d)
}

/// Every scan's rule.
const ALONG_DIM: Sharding =
    Sharding::Replicate("a scan along a sharded dim needs the preceding shards");
