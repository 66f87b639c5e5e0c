//! Fractional max pooling (`F.fractional_max_pool2d/3d`, `nn.FractionalMaxPool2d/3d`):
//! `fractional_max_pool2d`, `fractional_max_pool3d` and their backwards, composed from
//! registered operators as PyTorch's CPU kernels define them.
//!
//! Each plane `(n, c)` has one random sample `s` per spatial dim (`_random_samples[n, c]`; in
//! 2-d `[w, h]`, in 3-d `[t, h, w]`), and along a dim of input size `I`, output size `O` and
//! pool size `K` the windows start at `int((i + s) α) - int(s α)` for `i < O - 1`, with `α = (I -
//! K) / (O - 1)`, and at `I - K` for the last; computed in the input's dtype, as the CPU kernel's
//! `scalar_t` arithmetic rounds (bfloat16 included). Every window's flat index in the plane is
//! gathered at once (`[N, C, O..., K...]`), and the maximum taken as the CPU kernel takes it:
//! the first largest value, but the last NaN when there is one (`val > max || isnan(val)`).
//! The backward adds each output's gradient at its index (`scatter_add`).
//!
//! PyTorch's checks and messages are kept, including that a 3-d pool must leave room (`O + K -
//! 1 < I`, where 2-d allows equality).

use super::{op, sv, tv};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ops::Value;
use crate::ops::aten;
use crate::ops::sharding::Sharding;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

const NOTE: &str = "windows cross the spatial dims and the samples are per plane";

fn bad(m: String) -> TpuError {
    TpuError::BadArgs(m)
}

/// The operator's name in its messages (PyTorch's: `fractional_max_pool2d()`,
/// `fractional_max_pool3d_out()`).
fn who(nd: usize) -> &'static str {
    if nd == 2 {
        "fractional_max_pool2d()"
    } else {
        "fractional_max_pool3d_out()"
    }
}

/// PyTorch's checks; returns the sizes as `usize`.
fn checks(
    nd: usize,
    x: &Tensor,
    kernel: &[i64],
    output: &[i64],
    samples: &Tensor,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let base = format!("fractional_max_pool{nd}d");
    if kernel.len() != nd {
        return Err(bad(format!(
            "{base}: kernel_size must either be a single Int or tuple of Ints"
        )));
    }
    if output.len() != nd {
        return Err(bad(format!(
            "{base}: output_size must either be a single Int or tuple of Ints"
        )));
    }
    if x.dim() != nd + 1 && x.dim() != nd + 2 {
        return Err(bad(format!(
            "{}: Expected {}D or {}D tensor, but got: {:?}",
            who(nd),
            nd + 1,
            nd + 2,
            x.shape()
        )));
    }
    let first = x.dim() - nd - 1;
    if let Some(d) = (first..x.dim()).find(|&d| x.shape()[d] == 0) {
        return Err(bad(format!(
            "{}: Expected input to have non-zero size for non-batch dimensions, but got{:?} with dimension {d} being empty.",
            who(nd),
            x.shape()
        )));
    }
    if kernel.iter().any(|&k| k <= 0) {
        let ks: Vec<String> = kernel.iter().map(|k| k.to_string()).collect();
        return Err(bad(format!(
            "{}: kernel size should be greater than zero, but got {}",
            who(nd),
            ks.join("x")
        )));
    }
    if output.iter().any(|&o| o < 0) {
        return Err(bad(format!(
            "{}: output size should not be negative, but got {output:?}",
            who(nd)
        )));
    }
    if !x.dtype().is_float() {
        return Err(TpuError::Unsupported(format!(
            "\"{base}_out_frame\" not implemented for '{}'",
            x.dtype().scalar_type_name()
        )));
    }
    if samples.dtype() != x.dtype() {
        return Err(bad(
            "Expect _random_samples to have the same dtype as input".into(),
        ));
    }
    if samples.dim() != 3 {
        return Err(bad(format!(
            "Expect _random_samples to have 3 dimensions, got {}",
            samples.dim()
        )));
    }
    let (n, c) = if first == 1 {
        (x.shape()[0], x.shape()[1])
    } else {
        (1, x.shape()[0])
    };
    if samples.shape()[0] < n {
        return Err(bad(
            "Expect _random_samples.size(0) no less then input batch size.".into(),
        ));
    }
    if samples.shape()[1] != c {
        return Err(bad(
            "Expect _random_samples.size(1) equals to input channel size.".into(),
        ));
    }
    if samples.shape()[2] != nd {
        return Err(bad(format!(
            "Expect _random_samples.size(2) equals to {nd}; got {}.",
            samples.shape()[2]
        )));
    }
    let spatial = x.shape()[first + 1..].to_vec();
    let names: &[&str] = if nd == 2 {
        &["height", "width"]
    } else {
        &["time", "height", "width"]
    };
    // PyTorch's order: 2-d height, width; 3-d time, width, height.
    let order: &[usize] = if nd == 2 { &[0, 1] } else { &[0, 2, 1] };
    for &d in order {
        let (o, k, i) = (output[d], kernel[d], spatial[d] as i64);
        // 2-d lets the last window end at the edge; 3-d wants one element more.
        let fits = if nd == 2 {
            o + k - 1 <= i
        } else {
            o + k - 1 < i
        };
        if !fits {
            return Err(bad(format!(
                "{}: pool {} {k} too large relative to input {} {i}",
                who(nd),
                names[d],
                names[d]
            )));
        }
    }
    let k = kernel.iter().map(|&v| v as usize).collect();
    let o = output.iter().map(|&v| v as usize).collect();
    Ok((k, o))
}

fn reshape(rt: &Runtime, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let s: Vec<i64> = shape.iter().map(|&v| v as i64).collect();
    op(rt, "aten::reshape", vec![tv(t), Value::Ints(s)])
}

/// `0, 1, .., n - 1` in `dtype`.
fn iota(rt: &Runtime, n: usize, dtype: DType) -> Result<Tensor> {
    let v: Vec<i32> = (0..n as i32).collect();
    Tensor::from_slice(rt, &v, &[n])?.to_dtype(dtype)
}

/// `x` in `dtype` rounded as a scalar of that dtype (`alpha`'s two operands and quotient).
fn rounded(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::F16 => half::f16::from_f64(v).to_f64(),
        _ => v as f32 as f64,
    }
}

/// The first input index of every window along one dim: `[N, C, O]` int64, from the samples
/// `s` (`[N, C, 1]`, the input's dtype).
fn starts(rt: &Runtime, s: &Tensor, input: usize, out: usize, k: usize) -> Result<Tensor> {
    let (n, c) = (s.shape()[0], s.shape()[1]);
    let last = Tensor::from_slice(rt, &[(input - k) as i32], &[1])?.to_dtype(DType::I64)?;
    let last = op(
        rt,
        "aten::expand",
        vec![tv(&last), Value::Ints(vec![n as i64, c as i64, 1])],
    )?;
    if out == 1 {
        return Ok(last);
    }
    let dt = s.dtype();
    let alpha = rounded(
        rounded((input - k) as f64, dt) / rounded((out - 1) as f64, dt),
        dt,
    );
    let i = iota(rt, out - 1, dt)?;
    let is = op(rt, "aten::add.Tensor", vec![tv(&i), tv(s)])?;
    let scaled = op(rt, "aten::mul.Tensor", vec![tv(&is), Value::Float(alpha)])?;
    let base = op(rt, "aten::mul.Tensor", vec![tv(s), Value::Float(alpha)])?;
    let a = scaled.to_dtype(DType::I64)?;
    let b = base.to_dtype(DType::I64)?;
    let first = op(rt, "aten::sub.Tensor", vec![tv(&a), tv(&b)])?;
    op(
        rt,
        "aten::cat",
        vec![Value::Tensors(vec![first, last]), Value::Int(2)],
    )
}

/// `fractional_max_pool{nd}d(x, kernel_size, output_size, random_samples)`: the maxima and
/// their flat indices in the input plane.
pub(crate) fn forward(
    rt: &Runtime,
    nd: usize,
    x: &Tensor,
    kernel: &[i64],
    output: &[i64],
    samples: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (k, out) = checks(nd, x, kernel, output, samples)?;
    let batched = x.dim() == nd + 2;
    let xb = if batched {
        x.clone()
    } else {
        op(rt, "aten::unsqueeze", vec![tv(x), Value::Int(0)])?
    };
    let (n, c) = (xb.shape()[0], xb.shape()[1]);
    let spatial = xb.shape()[2..].to_vec();
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(&out);
    let unbatch = |t: Tensor| -> Result<Tensor> {
        if batched {
            Ok(t)
        } else {
            op(rt, "aten::squeeze.dim", vec![tv(&t), Value::Int(0)])
        }
    };
    if out.contains(&0) {
        let v = Tensor::empty(rt, &out_shape, x.dtype())?;
        let i = Tensor::empty(rt, &out_shape, DType::I64)?;
        return Ok((unbatch(v)?, unbatch(i)?));
    }
    let smp = op(
        rt,
        "aten::narrow",
        vec![
            tv(samples),
            Value::Int(0),
            Value::Int(0),
            Value::Int(n as i64),
        ],
    )?;
    // The sample of spatial dim `d`: 2-d keeps [w, h], 3-d [t, h, w].
    let sample_of = |d: usize| if nd == 2 { 1 - d } else { d };
    // Each window's flat index in the plane, [N, C, O1, K1, O2, K2, ...].
    let mut stride = 1usize;
    let mut idx: Option<Tensor> = None;
    for d in (0..nd).rev() {
        let s = op(
            rt,
            "aten::select.int",
            vec![tv(&smp), Value::Int(2), Value::Int(sample_of(d) as i64)],
        )?;
        let s = op(rt, "aten::unsqueeze", vec![tv(&s), Value::Int(2)])?;
        let st = starts(rt, &s, spatial[d], out[d], k[d])?; // [N, C, O]
        let st = op(rt, "aten::unsqueeze", vec![tv(&st), Value::Int(3)])?;
        let ks = iota(rt, k[d], DType::I64)?;
        let pos = op(rt, "aten::add.Tensor", vec![tv(&st), tv(&ks)])?; // [N, C, O, K]
        let pos = op(
            rt,
            "aten::mul.Tensor",
            vec![tv(&pos), Value::Int(stride as i64)],
        )?;
        let mut shape = vec![n, c];
        shape.extend(std::iter::repeat_n(1, 2 * nd));
        shape[2 + 2 * d] = out[d];
        shape[3 + 2 * d] = k[d];
        let term = reshape(rt, &pos, &shape)?;
        idx = Some(match idx {
            None => term,
            Some(t) => op(rt, "aten::add.Tensor", vec![tv(&t), tv(&term)])?,
        });
        stride *= spatial[d];
    }
    let idx = idx.expect("at least one spatial dim");
    // [N, C, O..., K...] with the window's elements last, in the kernel's order.
    let mut perm: Vec<i64> = vec![0, 1];
    perm.extend((0..nd).map(|d| 2 + 2 * d as i64));
    perm.extend((0..nd).map(|d| 3 + 2 * d as i64));
    let idx = op(rt, "aten::permute", vec![tv(&idx), Value::Ints(perm)])?;
    let kn: usize = k.iter().product();
    let mut win_shape = out_shape.clone();
    win_shape.push(kn);
    let idx = reshape(rt, &idx, &win_shape)?;
    let flat = reshape(rt, &idx, &[n, c, out.iter().product::<usize>() * kn])?;
    let plane = reshape(rt, &xb, &[n, c, stride])?;
    let v = op(
        rt,
        "aten::gather",
        vec![tv(&plane), Value::Int(2), tv(&flat)],
    )?;
    let v = reshape(rt, &v, &win_shape)?;
    // The first largest value, or the last NaN.
    let last = win_shape.len() as i64 - 1;
    let nan = op(rt, "aten::isnan", vec![tv(&v)])?;
    let any = op(
        rt,
        "aten::any.dim",
        vec![tv(&nan), Value::Int(last), Value::Bool(true)],
    )?;
    let flipped =
        op(rt, "aten::flip", vec![tv(&nan), Value::Ints(vec![last])])?.to_dtype(DType::I32)?;
    let first_from_end = op(
        rt,
        "aten::argmax",
        vec![tv(&flipped), Value::Int(last), Value::Bool(true)],
    )?;
    let last_nan = op(
        rt,
        "aten::rsub.Scalar",
        vec![tv(&first_from_end), sv(Scalar::Int(kn as i64 - 1))],
    )?;
    let largest = op(
        rt,
        "aten::argmax",
        vec![tv(&v), Value::Int(last), Value::Bool(true)],
    )?;
    let pick = op(
        rt,
        "aten::where.self",
        vec![tv(&any), tv(&last_nan), tv(&largest)],
    )?;
    let vals = op(
        rt,
        "aten::gather",
        vec![tv(&v), Value::Int(last), tv(&pick)],
    )?;
    let inds = op(
        rt,
        "aten::gather",
        vec![tv(&idx), Value::Int(last), tv(&pick)],
    )?;
    let vals = op(rt, "aten::squeeze.dim", vec![tv(&vals), Value::Int(last)])?;
    let inds = op(rt, "aten::squeeze.dim", vec![tv(&inds), Value::Int(last)])?;
    Ok((unbatch(vals)?, unbatch(inds)?))
}

/// `fractional_max_pool{nd}d_backward(grad, x, kernel_size, output_size, indices)`: each
/// output's gradient added at its index in the input plane.
pub(crate) fn backward(
    rt: &Runtime,
    nd: usize,
    grad: &Tensor,
    x: &Tensor,
    output: &[i64],
    indices: &Tensor,
) -> Result<Tensor> {
    if grad.shape() != indices.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "fractional_max_pool{nd}d_backward(): gradOutput of shape {:?} does not match the indices' {:?}",
            grad.shape(),
            indices.shape()
        )));
    }
    if indices.dtype() != DType::I64 {
        return Err(TpuError::DtypeMismatch(format!(
            "expected scalar type Long but found {}",
            indices.dtype().scalar_type_name()
        )));
    }
    if x.dim() != nd + 1 && x.dim() != nd + 2 {
        return Err(bad(format!(
            "fractional_max_pool{nd}d_backward(): Expected {}D or {}D input, but got: {:?}",
            nd + 1,
            nd + 2,
            x.shape()
        )));
    }
    let lead = x.dim() - nd;
    if grad.dim() != x.dim()
        || grad.shape()[lead..] != output.iter().map(|&o| o as usize).collect::<Vec<_>>()[..]
    {
        return Err(TpuError::ShapeMismatch(format!(
            "fractional_max_pool{nd}d_backward(): gradOutput of shape {:?} does not match output_size {output:?}",
            grad.shape()
        )));
    }
    let planes: usize = x.shape()[..lead].iter().product();
    let plane: usize = x.shape()[lead..].iter().product();
    let g = reshape(rt, grad, &[planes, grad.numel() / planes.max(1)])?;
    let i = reshape(rt, indices, &[planes, indices.numel() / planes.max(1)])?;
    let zeros = crate::ops::creation::full(rt, &[planes, plane], Scalar::Int(0), grad.dtype())?;
    let gi = op(
        rt,
        "aten::scatter_add",
        vec![tv(&zeros), Value::Int(1), tv(&i), tv(&g)],
    )?;
    reshape(rt, &gi, x.shape())
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten(
    "aten::fractional_max_pool2d",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(NOTE),
    kind = Decomposition
)]
fn fractional_max_pool2d_op(rt: &Runtime, a: FractionalMaxPool2d<'_>) -> Result<(Tensor, Tensor)> {
    forward(
        rt,
        2,
        a.self_,
        &a.kernel_size,
        &a.output_size,
        a.random_samples,
    )
}

#[aten(
    "aten::fractional_max_pool3d",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(NOTE),
    kind = Decomposition
)]
fn fractional_max_pool3d_op(rt: &Runtime, a: FractionalMaxPool3d<'_>) -> Result<(Tensor, Tensor)> {
    forward(
        rt,
        3,
        a.self_,
        &a.kernel_size,
        &a.output_size,
        a.random_samples,
    )
}

#[aten(
    "aten::fractional_max_pool2d_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(NOTE),
    kind = Decomposition
)]
fn fractional_max_pool2d_backward_op(
    rt: &Runtime,
    a: FractionalMaxPool2dBackward<'_>,
) -> Result<Tensor> {
    backward(rt, 2, a.grad_output, a.self_, &a.output_size, a.indices)
}

#[aten(
    "aten::fractional_max_pool3d_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(NOTE),
    kind = Decomposition
)]
fn fractional_max_pool3d_backward_op(
    rt: &Runtime,
    a: FractionalMaxPool3dBackward<'_>,
) -> Result<Tensor> {
    backward(rt, 3, a.grad_output, a.self_, &a.output_size, a.indices)
}
