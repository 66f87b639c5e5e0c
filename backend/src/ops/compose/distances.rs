//! Pairwise distances and the multi-class margin loss, composed from registered operators:
//!
//! - `_euclidean_dist(x1, x2)`: PyTorch's formula, `[-2 x1, |x1|^2, 1] . [x2, 1, |x2|^2]`, clamped
//!   at 0, square-rooted; the product on the vector unit in f32 (`contract`);
//! - `_cdist_forward(x1, x2, p, compute_mode)`: that formula where PyTorch uses it (`p = 2` and
//!   mode 1, or mode 0/None with more than 25 rows), else the p-norm of every row difference;
//! - `_pdist_forward(x, p)`: the p-norm of `x[i] - x[j]` for `i < j`, row-major;
//! - `_cdist_backward` and `_pdist_backward`: ATen's CPU kernels' gradients, each pair's
//!   difference weighted by its output gradient and summed;
//! - `multi_margin_loss(x, y, p, margin, weight, reduction)`: per sample, `sum over j != y of
//!   max(0, margin - x[y] + x[j])^p (times weight[y])`, over the class count, then the
//!   reduction; `multi_margin_loss_backward`, ATen's CPU kernel's gradient.

use super::{contract, op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

fn norm_last(rt: &Runtime, d: &Tensor, p: f64) -> Result<Tensor> {
    op(
        rt,
        "aten::linalg_vector_norm",
        vec![
            tv(d),
            Value::Float(p),
            Value::Ints(vec![-1]),
            Value::Bool(false),
        ],
    )
}

fn unsqueeze(rt: &Runtime, t: &Tensor, d: i64) -> Result<Tensor> {
    op(rt, "aten::unsqueeze", vec![tv(t), Value::Int(d)])
}

/// `torch._euclidean_dist(x1, x2)`.
#[aten(
    "aten::_euclidean_dist",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(PAIRWISE),
    kind = Decomposition,
    call = EuclideanDist(rt, x1, x2)
)]
pub fn euclidean_dist(rt: &Runtime, x1: &Tensor, x2: &Tensor) -> Result<Tensor> {
    let sq = |x: &Tensor| -> Result<Tensor> {
        let s = op(rt, "aten::mul.Tensor", vec![tv(x), tv(x)])?;
        op(
            rt,
            "aten::sum.dim_IntList",
            vec![tv(&s), Value::Ints(vec![-1]), Value::Bool(true)],
        )
    };
    let (n1, n2) = (sq(x1)?, sq(x2)?);
    let (o1, o2) = (
        op(rt, "aten::ones_like", vec![tv(&n1)])?,
        op(rt, "aten::ones_like", vec![tv(&n2)])?,
    );
    let m2 = op(rt, "aten::mul.Scalar", vec![tv(x1), Value::Int(-2)])?;
    let a = op(
        rt,
        "aten::cat",
        vec![Value::Tensors(vec![m2, n1, o1]), Value::Int(-1)],
    )?;
    let b = op(
        rt,
        "aten::cat",
        vec![Value::Tensors(vec![x2.clone(), o2, n2]), Value::Int(-1)],
    )?;
    let r = contract(rt, &unsqueeze(rt, &a, -2)?, &unsqueeze(rt, &b, -3)?, &[-1])?;
    let r = op(rt, "aten::clamp_min", vec![tv(&r), Value::Float(0.0)])?;
    let r = op(rt, "aten::sqrt", vec![tv(&r)])?;
    super::cast(&r, x1.dtype())
}

/// `torch._cdist_forward(x1, x2, p, compute_mode)`.
#[aten(
    "aten::_cdist_forward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(PAIRWISE),
    kind = Decomposition,
    call = CdistForward(rt, x1, x2, p, compute_mode)
)]
pub fn cdist(rt: &Runtime, x1: &Tensor, x2: &Tensor, p: f64, mode: Option<i64>) -> Result<Tensor> {
    if x1.dim() < 2 || x2.dim() < 2 {
        return Err(TpuError::BadArgs(format!(
            "cdist only supports at least 2D tensors, X1 got: {}D, X2 got: {}D",
            x1.dim(),
            x2.dim()
        )));
    }
    if p < 0.0 {
        return Err(TpuError::BadArgs(
            "cdist only supports non-negative p values".into(),
        ));
    }
    let (r1, r2) = (x1.shape()[x1.dim() - 2], x2.shape()[x2.dim() - 2]);
    let mm = p == 2.0 && matches!(mode, Some(1))
        || (p == 2.0 && matches!(mode, None | Some(0)) && (r1 > 25 || r2 > 25));
    if mm {
        return euclidean_dist(rt, x1, x2);
    }
    let d = op(
        rt,
        "aten::sub.Tensor",
        vec![tv(&unsqueeze(rt, x1, -2)?), tv(&unsqueeze(rt, x2, -3)?)],
    )?;
    norm_last(rt, &d, p)
}

/// `torch._pdist_forward(x, p)`.
#[aten(
    "aten::_pdist_forward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(PAIRWISE),
    kind = Decomposition,
    call = PdistForward(rt, self_, p)
)]
pub fn pdist(rt: &Runtime, x: &Tensor, p: f64) -> Result<Tensor> {
    if x.dim() != 2 {
        return Err(TpuError::BadArgs(format!(
            "pdist only supports 2D tensors, got: {}D",
            x.dim()
        )));
    }
    let n = x.shape()[0] as i64;
    let idx = op(
        rt,
        "aten::triu_indices",
        vec![Value::Int(n), Value::Int(n), Value::Int(1)],
    )?;
    let pick = |row: i64| -> Result<Tensor> {
        let i = op(
            rt,
            "aten::select.int",
            vec![tv(&idx), Value::Int(0), Value::Int(row)],
        )?;
        op(rt, "aten::index_select", vec![tv(x), Value::Int(0), tv(&i)])
    };
    let d = op(rt, "aten::sub.Tensor", vec![tv(&pick(0)?), tv(&pick(1)?)])?;
    norm_last(rt, &d, p)
}

/// What the margin loss and its gradient share: `x` as `[n, c]`, `z = (margin - x[y]) + x[j]`
/// (as ATen's kernel adds them) and where `j` is the target class.
struct Margins {
    n: i64,
    c: usize,
    z: Tensor,
    own: Tensor,
}

fn margins(rt: &Runtime, x: &Tensor, y: &Tensor, margin: Scalar) -> Result<Margins> {
    let c = if x.dim() == 0 {
        1
    } else {
        x.shape()[x.dim() - 1]
    };
    let n = if x.dim() == 2 { x.shape()[0] as i64 } else { 1 };
    let x2 = op(
        rt,
        "aten::reshape",
        vec![tv(x), Value::Ints(vec![n, c as i64])],
    )?;
    let t2 = op(rt, "aten::reshape", vec![tv(y), Value::Ints(vec![n, 1])])?;
    let xt = op(rt, "aten::gather", vec![tv(&x2), Value::Int(1), tv(&t2)])?;
    let m = op(rt, "aten::rsub.Scalar", vec![tv(&xt), sv(margin)])?;
    let z = op(rt, "aten::add.Tensor", vec![tv(&m), tv(&x2)])?;
    let cols = op(
        rt,
        "aten::arange",
        vec![Value::Int(c as i64), Value::Dtype(DType::I64)],
    )?;
    let own = op(rt, "aten::eq.Tensor", vec![tv(&cols), tv(&t2)])?;
    Ok(Margins { n, c, z, own })
}

/// `h` (`[n, c]`) times each sample's target-class weight.
fn weighted(rt: &Runtime, h: &Tensor, w: &Tensor, y: &Tensor, n: i64) -> Result<Tensor> {
    let flat = op(rt, "aten::reshape", vec![tv(y), Value::Ints(vec![n])])?;
    let wt = op(
        rt,
        "aten::index_select",
        vec![tv(w), Value::Int(0), tv(&flat)],
    )?;
    op(
        rt,
        "aten::mul.Tensor",
        vec![tv(h), tv(&unsqueeze(rt, &wt, 1)?)],
    )
}

/// `torch.multi_margin_loss(x, y, p, margin, weight, reduction)`.
pub fn multi_margin_loss(
    rt: &Runtime,
    x: &Tensor,
    y: &Tensor,
    p: i64,
    margin: Scalar,
    weight: Option<&Tensor>,
    reduction: i64,
) -> Result<Tensor> {
    if p != 1 && p != 2 {
        return Err(TpuError::BadArgs("only p == 1 and p == 2 supported".into()));
    }
    if !x.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "multi_margin_loss: expected a floating input, got {}",
            x.dtype().name()
        )));
    }
    if x.dim() > 2 {
        return Err(TpuError::BadArgs(format!(
            "Expected non-empty vector or matrix with optional 0-dim batch size, but got: {:?}",
            x.shape()
        )));
    }
    let batch: Vec<i64> = if x.dim() == 2 {
        vec![x.shape()[0] as i64]
    } else {
        vec![]
    };
    let Margins { n, c, z, own } = margins(rt, x, y, margin)?;
    let mut h = op(rt, "aten::relu", vec![tv(&z)])?;
    if p == 2 {
        h = op(rt, "aten::mul.Tensor", vec![tv(&h), tv(&h)])?;
    }
    if let Some(w) = weight {
        h = weighted(rt, &h, w, y, n)?;
    }
    let h = op(
        rt,
        "aten::where.ScalarSelf",
        vec![tv(&own), Value::Float(0.0), tv(&h)],
    )?;
    let s = op(
        rt,
        "aten::sum.dim_IntList",
        vec![tv(&h), Value::Ints(vec![1]), Value::Bool(false)],
    )?;
    let l = op(rt, "aten::div.Scalar", vec![tv(&s), Value::Int(c as i64)])?;
    match reduction {
        0 => op(rt, "aten::reshape", vec![tv(&l), Value::Ints(batch)]),
        1 => op(rt, "aten::mean", vec![tv(&l)]),
        2 => op(rt, "aten::sum", vec![tv(&l)]),
        r => Err(TpuError::BadArgs(format!(
            "{r} is not a valid value for reduction"
        ))),
    }
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

/// The margin loss's `p`: a `Scalar` in the schema but read as an int, as it always was here.
fn margin_p(name: &str, p: Scalar) -> Result<i64> {
    match p {
        Scalar::Int(p) => Ok(p),
        Scalar::Bool(b) => Ok(b as i64),
        Scalar::Float(_) => Err(TpuError::BadArgs(format!(
            "{name}(): argument 2 must be int, not float"
        ))),
    }
}

#[aten(
    "aten::multi_margin_loss",
    dtypes = DType::FLOATING_AND_I64,
    shard = Sharding::Replicate("a loss reduced over every element: no sharding rule yet"),
    kind = Decomposition
)]
fn multi_margin_loss_op(rt: &Runtime, a: MultiMarginLoss<'_>) -> Result<Tensor> {
    let p = margin_p(MultiMarginLoss::NAME, a.p)?;
    multi_margin_loss(rt, a.self_, a.target, p, a.margin, a.weight, a.reduction)
}

/// `multi_margin_loss_backward(grad_output, x, y, p, margin, weight, reduction)`, as ATen's CPU
/// kernel: for `j != y` with `z = margin - x[y] + x[j] > 0`, `h = 1` (`p = 1`) or `2 z`
/// (`p = 2`), times `weight[y]`, over the class count (and the sample count for a mean);
/// `x[y]`'s gradient is minus the sum of its row's; all times `grad_output`.
#[allow(clippy::too_many_arguments)]
pub fn multi_margin_loss_backward(
    rt: &Runtime,
    g: &Tensor,
    x: &Tensor,
    y: &Tensor,
    p: i64,
    margin: Scalar,
    weight: Option<&Tensor>,
    reduction: i64,
) -> Result<Tensor> {
    if p != 1 && p != 2 {
        return Err(TpuError::BadArgs("only p == 1 and p == 2 supported".into()));
    }
    if !x.dtype().is_float() || x.dim() > 2 {
        return Err(TpuError::BadArgs(format!(
            "multi_margin_loss_backward: expected a floating vector or matrix, got {} {:?}",
            x.dtype().name(),
            x.shape()
        )));
    }
    if !(0..=2).contains(&reduction) {
        return Err(TpuError::BadArgs(format!(
            "{reduction} is not a valid value for reduction"
        )));
    }
    let Margins { n, c, z, own } = margins(rt, x, y, margin)?;
    let pos = op(rt, "aten::gt.Scalar", vec![tv(&z), sv(Scalar::Float(0.0))])?;
    let other = op(rt, "aten::logical_not", vec![tv(&own)])?;
    let active = op(rt, "aten::logical_and", vec![tv(&pos), tv(&other)])?;
    // The factor ATen's kernel starts from: 1 / dim, or 1 / (n dim) for a mean.
    let scale = if reduction == 1 {
        1.0 / (n as f64 * c as f64)
    } else {
        1.0 / c as f64
    };
    let per = if p == 1 {
        op(rt, "aten::full_like", vec![tv(&z), Value::Float(scale)])?
    } else {
        op(
            rt,
            "aten::mul.Scalar",
            vec![tv(&z), Value::Float(2.0 * scale)],
        )?
    };
    let mut h = op(
        rt,
        "aten::where.ScalarOther",
        vec![tv(&active), tv(&per), Value::Float(0.0)],
    )?;
    if let Some(w) = weight {
        h = weighted(rt, &h, w, y, n)?;
    }
    let s = op(
        rt,
        "aten::sum.dim_IntList",
        vec![tv(&h), Value::Ints(vec![1]), Value::Bool(true)],
    )?;
    let neg = op(rt, "aten::neg", vec![tv(&s)])?;
    let grad = op(rt, "aten::where.self", vec![tv(&own), tv(&neg), tv(&h)])?;
    // Times grad_output: one number, or one per sample (reduction none).
    let go = if reduction == 0 && g.dim() > 0 {
        op(rt, "aten::reshape", vec![tv(g), Value::Ints(vec![n, 1])])?
    } else {
        g.clone()
    };
    let grad = op(rt, "aten::mul.Tensor", vec![tv(&grad), tv(&go)])?;
    let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    op(rt, "aten::reshape", vec![tv(&grad), Value::Ints(shape)])?.to_dtype(x.dtype())
}

#[aten(
    "aten::multi_margin_loss_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate("a loss reduced over every element: no sharding rule yet"),
    kind = Decomposition
)]
fn multi_margin_loss_backward_op(rt: &Runtime, a: MultiMarginLossBackward<'_>) -> Result<Tensor> {
    let p = margin_p(MultiMarginLossBackward::NAME, a.p)?;
    multi_margin_loss_backward(
        rt,
        a.grad_output,
        a.self_,
        a.target,
        p,
        a.margin,
        a.weight,
        a.reduction,
    )
}

/// Why the pairwise distances replicate.
const PAIRWISE: &str = "pairwise distances: no sharding rule yet";

/// `_cdist_backward(grad, x1, x2, p, cdist)`: the gradient with respect to `x1` (`[..., P, M]`,
/// its batch broadcast with `x2`'s), as ATen's CPU kernel: with `d = x1[i] - x2[j]` and `D` the
/// distance, the sum over `j` of `g_ij` times `sign(d)` (`p = 1`), `d / D` (`p = 2`),
/// `sign(d) [|d| = D]` (`p = inf`), `sign(d) |d|^(p-1) / D^(p-1)` (`p < 2`) or
/// `d |d|^(p-2) / D^(p-1)`; 0 where `D = 0` (and where `d = 0` for `p < 1`), all 0 for `p = 0`.
pub fn cdist_backward(
    rt: &Runtime,
    g: &Tensor,
    x1: &Tensor,
    x2: &Tensor,
    p: f64,
    dist: &Tensor,
) -> Result<Tensor> {
    if x1.dim() < 2 || x2.dim() < 2 || g.shape() != dist.shape() {
        return Err(TpuError::BadArgs(format!(
            "_cdist_backward: expected x1 [..., P, M], x2 [..., R, M] and grad and cdist [..., P, R], got {:?}, {:?}, {:?}, {:?}",
            x1.shape(),
            x2.shape(),
            g.shape(),
            dist.shape()
        )));
    }
    let dt = x1.dtype();
    let f = |t: &Tensor| t.to_dtype(DType::F32);
    let (x1f, x2f, gf, df) = (f(x1)?, f(x2)?, f(g)?, f(dist)?);
    let diff = op(
        rt,
        "aten::sub.Tensor",
        vec![tv(&unsqueeze(rt, &x1f, -2)?), tv(&unsqueeze(rt, &x2f, -3)?)],
    )?; // [..., P, R, M]
    let gd = unsqueeze(rt, &gf, -1)?;
    let dd = unsqueeze(rt, &df, -1)?;
    let mul = |a: &Tensor, b: &Tensor| op(rt, "aten::mul.Tensor", vec![tv(a), tv(b)]);
    let div = |a: &Tensor, b: &Tensor| op(rt, "aten::div.Tensor", vec![tv(a), tv(b)]);
    let pow = |a: &Tensor, e: f64| op(rt, "aten::pow.Tensor_Scalar", vec![tv(a), Value::Float(e)]);
    let sign = op(rt, "aten::sign", vec![tv(&diff)])?;
    let abs = op(rt, "aten::abs", vec![tv(&diff)])?;
    let term = if p == 0.0 {
        op(rt, "aten::mul.Scalar", vec![tv(&diff), Value::Float(0.0)])?
    } else if p == 1.0 {
        sign
    } else if p == 2.0 {
        div(&diff, &dd)?
    } else if p.is_infinite() {
        let at = op(rt, "aten::eq.Tensor", vec![tv(&abs), tv(&dd)])?.to_dtype(DType::F32)?;
        mul(&sign, &at)?
    } else if p < 2.0 {
        let t = mul(&sign, &pow(&abs, p - 1.0)?)?;
        let t = div(&t, &pow(&dd, p - 1.0)?)?;
        if p < 1.0 {
            let z = op(rt, "aten::eq.Scalar", vec![tv(&diff), Value::Float(0.0)])?;
            op(
                rt,
                "aten::where.ScalarSelf",
                vec![tv(&z), Value::Float(0.0), tv(&t)],
            )?
        } else {
            t
        }
    } else {
        let t = mul(&diff, &pow(&abs, p - 2.0)?)?;
        div(&t, &pow(&dd, p - 1.0)?)?
    };
    let zero = op(rt, "aten::eq.Scalar", vec![tv(&dd), Value::Float(0.0)])?;
    let term = op(
        rt,
        "aten::where.ScalarSelf",
        vec![tv(&zero), Value::Float(0.0), tv(&term)],
    )?;
    let w = mul(&term, &gd)?;
    op(
        rt,
        "aten::sum.dim_IntList",
        vec![tv(&w), Value::Ints(vec![-2]), Value::Bool(false)],
    )?
    .to_dtype(dt)
}

#[aten(
    "aten::_cdist_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(PAIRWISE),
    kind = Decomposition
)]
fn cdist_backward_op(rt: &Runtime, a: CdistBackward<'_>) -> Result<Tensor> {
    cdist_backward(rt, a.grad_output, a.x1, a.x2, a.p, a.cdist)
}

/// `_pdist_backward(grad, x, p, pdist)`: the pairs `i < j` (row-major) spread into full
/// symmetric `[N, N]` matrices of gradients and distances, then `_cdist_backward` of `x`
/// against itself (a pair's distance is `x[i] - x[j]`'s for `i` and `x[j] - x[i]`'s for `j`;
/// the zero diagonal contributes nothing).
pub fn pdist_backward(
    rt: &Runtime,
    g: &Tensor,
    x: &Tensor,
    p: f64,
    dist: &Tensor,
) -> Result<Tensor> {
    if x.dim() != 2 {
        return Err(TpuError::BadArgs(format!(
            "_pdist_backward requires X to be a 2-D tensor, got {:?}",
            x.shape()
        )));
    }
    let n = x.shape()[0];
    let pairs = n * n.saturating_sub(1) / 2;
    if g.shape() != [pairs] || dist.shape() != [pairs] {
        return Err(TpuError::BadArgs(format!(
            "_pdist_backward: grad and pdist must have the {pairs} pair distances of {n} rows, got {:?} and {:?}",
            g.shape(),
            dist.shape()
        )));
    }
    let (mut rows, mut cols) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
    for i in 0..n {
        for j in i + 1..n {
            rows.push(i as f64);
            cols.push(j as f64);
        }
    }
    let idx = |v: Vec<f64>| Tensor::from_f64s(rt, v.into_iter(), pairs, &[pairs], DType::I64);
    let (r, c) = (idx(rows)?, idx(cols)?);
    let full = |v: &Tensor| -> Result<Tensor> {
        let z = crate::ops::linalg::zeros(rt, &[n, n], DType::F32)?;
        let v = v.to_dtype(DType::F32)?;
        let put = |z: &Tensor, a: &Tensor, b: &Tensor| {
            op(
                rt,
                "aten::index_put",
                vec![
                    tv(z),
                    Value::OptTensors(vec![Some(a.clone()), Some(b.clone())]),
                    tv(&v),
                    Value::Bool(false),
                ],
            )
        };
        let z = put(&z, &r, &c)?;
        put(&z, &c, &r)
    };
    cdist_backward(rt, &full(g)?, x, x, p, &full(dist)?)
}

#[aten(
    "aten::_pdist_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(PAIRWISE),
    kind = Decomposition
)]
fn pdist_backward_op(rt: &Runtime, a: PdistBackward<'_>) -> Result<Tensor> {
    pdist_backward(rt, a.grad_output, a.self_, a.p, a.pdist)
}
