//! Sampling without a closed-form transform: `multinomial` and `randperm`, built from the
//! stream's draws and the backend's own operators (each a kernel on the chip).
//!
//! - `multinomial` without replacement: PyTorch's algorithm (`ATen/native/Distributions.cpp`),
//!   the exponential race — `q ~ Exp(1)` per category, the `num_samples` largest of `p / q`
//!   (`argmax` for one sample), which draws categories in proportion to `p` one after another.
//! - `multinomial` with replacement: inverse transform sampling, `u ~ U[0, 1)` per sample and
//!   the number of inclusive cumulative sums `<= u * total` (a category of probability 0 has
//!   an empty interval and is never drawn).
//! - `randperm(n)`: the stable order of `n` random 31-bit keys (a uniformly random
//!   permutation, up to ties between keys, which keep their index order).
//!
//! The invalid distributions PyTorch's CPU kernels refuse (an element `< 0`, `inf` or `nan`;
//! a row that sums to 0) are read back and refused with PyTorch's messages: a synchronisation,
//! as on PyTorch's CUDA backend, which checks with a device-to-host copy too.

use super::super::aten;
use super::super::compose::{op, sv, tv};
use super::super::sharding::Sharding;
use super::*;

const NOTE: &str = "a sample couples a whole row of probabilities";

#[aten("aten::multinomial", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn multinomial_op(a: Multinomial<'_>) -> Result<Tensor> {
    multinomial(
        a.self_,
        a.num_samples,
        a.replacement,
        generator(a.generator),
    )
}

#[aten("aten::randperm", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randperm_op(rt: &Runtime, a: Randperm<'_>) -> Result<Tensor> {
    randperm(rt, a.n, a.dtype.unwrap_or(DType::I64), None)
}

#[aten("aten::randperm.generator", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randperm_generator_op(rt: &Runtime, a: RandpermGenerator<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(DType::I64);
    randperm(rt, a.n, d, generator(a.generator))
}

fn verbatim(m: &str) -> TpuError {
    TpuError::Verbatim(m.to_string())
}

/// `torch.multinomial(p, num_samples, replacement, generator=g)`: int64 category indices,
/// `[num_samples]` for a 1-D `p`, `[rows, num_samples]` for a 2-D one.
pub fn multinomial(
    p: &Tensor,
    num_samples: i64,
    replacement: bool,
    g: Option<u64>,
) -> Result<Tensor> {
    let rt = p.runtime();
    if !p.dtype().is_float() {
        return Err(verbatim(&format!(
            "multinomial only supports floating-point dtypes for input, got: {}",
            p.dtype().scalar_type_name()
        )));
    }
    if p.dim() == 0 || p.dim() > 2 {
        return Err(verbatim("prob_dist must be 1 or 2 dim"));
    }
    let cats = p.shape()[p.dim() - 1];
    if num_samples <= 0 {
        return Err(verbatim("cannot sample n_sample <= 0 samples"));
    }
    let n = num_samples as usize;
    if !replacement && n > cats {
        return Err(verbatim(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement",
        ));
    }
    if cats > 1 << 24 {
        return Err(verbatim("number of categories cannot exceed 2^24"));
    }
    let rows = if p.dim() == 2 { p.shape()[0] } else { 1 };
    let out_shape: Vec<usize> = if p.dim() == 2 { vec![rows, n] } else { vec![n] };
    if rows == 0 || cats == 0 {
        return empty(rt, &out_shape, DType::I64);
    }
    // [rows, cats] in f32.
    let p2 = p
        .reshape(&[rows as i64, cats as i64])?
        .to_dtype(DType::F32)?;
    check_distribution(rt, &p2, replacement)?;
    let idx = if replacement {
        let cdf = op(
            rt,
            "aten::cumsum",
            vec![tv(&p2), Value::Int(-1), Value::None],
        )?;
        let total = crate::ops::linalg::narrow(rt, &cdf, 1, cats - 1, 1)?; // [rows, 1]
        let u = empty(rt, &[rows, n], DType::F32)?;
        let u = uniform("aten::multinomial", Dest::Into(&u), 0.0, 1.0, g)?;
        let v = op(rt, "aten::mul.Tensor", vec![tv(&u), tv(&total)])?; // [rows, n]
        // [rows, 1, cats] <= [rows, n, 1], counted over the categories.
        let le = op(
            rt,
            "aten::le.Tensor",
            vec![tv(&cdf.unsqueeze(1)?), tv(&v.unsqueeze(2)?)],
        )?;
        let count = op(
            rt,
            "aten::sum.dim_IntList",
            vec![
                tv(&le),
                Value::Ints(vec![-1]),
                Value::Bool(false),
                Value::None,
            ],
        )?;
        // `u * total` may round up to `total`: the last category then.
        op(
            rt,
            "aten::clamp_max",
            vec![tv(&count), sv(Scalar::Int(cats as i64 - 1))],
        )?
        .to_dtype(DType::I64)?
    } else {
        let q = empty(rt, &[rows, cats], DType::F32)?;
        let q = exponential(Dest::Into(&q), 1.0, g)?;
        let r = op(rt, "aten::div.Tensor", vec![tv(&p2), tv(&q)])?;
        if n == 1 {
            op(
                rt,
                "aten::argmax",
                vec![tv(&r), Value::Int(-1), Value::Bool(true)],
            )?
        } else {
            let k = super::super::call(
                rt,
                "aten::topk",
                vec![
                    tv(&r),
                    Value::Int(n as i64),
                    Value::Int(-1),
                    Value::Bool(true),
                    Value::Bool(true),
                ],
            )?;
            match k.into_iter().nth(1) {
                Some(Value::Tensor(t)) => t,
                _ => return Err(bad("aten::topk: expected indices".into())),
            }
        }
    };
    idx.reshape(&out_shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?
        .contiguous()
}

/// Refuses what PyTorch's CPU kernel refuses, with its messages: reads two flags back.
fn check_distribution(rt: &Runtime, p: &Tensor, replacement: bool) -> Result<()> {
    // Negative, infinite or nan elements (`!(0 <= x < inf)`), and rows summing to 0.
    let ok = op(rt, "aten::ge.Scalar", vec![tv(p), sv(Scalar::Float(0.0))])?;
    let fin = op(
        rt,
        "aten::lt.Scalar",
        vec![tv(p), sv(Scalar::Float(f64::INFINITY))],
    )?;
    let ok = op(rt, "aten::logical_and", vec![tv(&ok), tv(&fin)])?;
    let bad_elems = op(rt, "aten::logical_not", vec![tv(&ok)])?;
    let any_bad = op(rt, "aten::any", vec![tv(&bad_elems)])?;
    let sums = op(
        rt,
        "aten::sum.dim_IntList",
        vec![
            tv(p),
            Value::Ints(vec![-1]),
            Value::Bool(false),
            Value::None,
        ],
    )?;
    let zero = op(
        rt,
        "aten::le.Scalar",
        vec![tv(&sums), sv(Scalar::Float(0.0))],
    )?;
    let any_zero = op(rt, "aten::any", vec![tv(&zero)])?;
    let flags = op(
        rt,
        "aten::stack",
        vec![Value::Tensors(vec![any_bad, any_zero]), Value::Int(0)],
    )?
    .to_dtype(DType::I32)?
    .to_vec::<i32>()?;
    if flags[0] != 0 {
        return Err(verbatim(if replacement {
            "invalid multinomial distribution (encountering probability entry < 0, infinity or NaN)"
        } else {
            "probability tensor contains either `inf`, `nan` or element < 0"
        }));
    }
    if flags[1] != 0 {
        return Err(verbatim(
            "invalid multinomial distribution (sum of probabilities <= 0)",
        ));
    }
    Ok(())
}

/// `torch.randperm(n, dtype=dtype, generator=g)`.
pub fn randperm(rt: &Runtime, n: i64, dtype: DType, g: Option<u64>) -> Result<Tensor> {
    if n < 0 {
        return Err(verbatim(&format!("n must be non-negative, got{n}")));
    }
    let n = n as usize;
    // The largest value, n - 1, must be exact in the dtype (and in the 32-bit lanes).
    let max: u64 = match dtype {
        DType::BF16 => 1 << 8,
        DType::F16 => 1 << 11,
        DType::F32 => 1 << 24,
        DType::U8 => 255,
        DType::I8 => 127,
        DType::Bool => 1,
        _ => i32::MAX as u64,
    };
    if n > 0 && (n - 1) as u64 > max {
        return Err(TpuError::Unsupported(format!(
            "randperm: n = {n} does not fit {}: its largest value {} is not exact (at most {max})",
            dtype.scalar_type_name(),
            n - 1
        )));
    }
    if n == 0 {
        return empty(rt, &[0], dtype);
    }
    let keys = empty(rt, &[n], DType::I32)?;
    let keys = random_range("aten::randperm", Dest::Into(&keys), 0, i32::MAX as i64, g)?;
    let sorted = super::super::call(
        rt,
        "aten::sort.stable",
        vec![
            tv(&keys),
            Value::Bool(true),
            Value::Int(0),
            Value::Bool(false),
        ],
    )?;
    let idx = match sorted.into_iter().nth(1) {
        Some(Value::Tensor(t)) => t,
        _ => return Err(bad("aten::sort: expected indices".into())),
    };
    idx.to_dtype(dtype)
}
