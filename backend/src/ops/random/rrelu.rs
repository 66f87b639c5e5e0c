//! The randomized leaky ReLU (`F.rrelu`, `nn.RReLU`): `rrelu_with_noise` (which writes the
//! slopes it drew into `noise`), its functional form (which returns them),
//! `rrelu_with_noise_` (in place; derived) and `rrelu_with_noise_backward`, as PyTorch's CPU
//! kernels compute them:
//!
//! - training: an element `x <= 0` draws a slope `r` uniform in `[lower, upper)` (24 random bits
//!   in f32; the CPU draws a double, 53 bits, and casts it to the compute type), gives `x * r`
//!   (rounded once to the dtype) and writes `r` into `noise`; any other element (NaN too) gives
//!   `x` and writes 1;
//! - evaluation: `leaky_relu` with the slope `(lower + upper) / 2` (in f64, as PyTorch takes
//!   it); `noise` is not touched;
//! - backward: training, `grad * noise`; evaluation, `leaky_relu_backward` with that slope.
//!
//! The slopes come from the device's stream, so their values differ from the CPU's (the CPU
//! draws one number per element `<= 0`, in order, from its Mersenne Twister).

use super::*;
use crate::ops::compose::{op, sv, tv};

/// `(output, noise)` of a training step: `noise` as new values in `noise_dtype`.
fn train(
    x: &Tensor,
    noise_dtype: DType,
    lower: f64,
    upper: f64,
    g: Option<u64>,
) -> Result<(Tensor, Tensor)> {
    let name = "aten::rrelu_with_noise";
    let rt = x.runtime();
    let op = OpScope::new(name, &[x])?;
    let shape = x.shape().to_vec();
    let stream = stream_inputs(rt, g, x.numel() as u64)?;
    let mut all: Vec<&Tensor> = stream.iter().collect();
    all.push(x);
    let d = x.dtype();
    let mut outs = map_shape(&op, &shape, &all, &[d, noise_dtype], |p, r| {
        let s = Stream {
            key: [r[0], r[1]],
            offset: [r[2], r[3]],
        };
        let w = threefry::words(p, &shape, s);
        let u = unit(p, w[0], 24);
        let span = f32c(p, upper - lower);
        let lo = f32c(p, lower);
        let us = fbin(p, BinOp::Mul, u, span);
        let slope = fbin(p, BinOp::Add, us, lo);
        let xf = p.cast(r[4], DType::F32);
        let zero = f32c(p, 0.0);
        let neg = p.cmp(CmpKind::Le, xf, zero, DType::F32);
        let scaled = fbin(p, BinOp::Mul, xf, slope);
        let out = p.select(neg, scaled, xf, DType::F32);
        let one = f32c(p, 1.0);
        let noise = p.select(neg, slope, one, DType::F32);
        vec![out, noise]
    })?;
    let noise = outs.pop().expect("two outputs");
    Ok((outs.pop().expect("two outputs"), noise))
}

/// The checks PyTorch makes before either mode.
fn checked(name: &str, x: &Tensor, noise: &Tensor, lower: f64, upper: f64) -> Result<()> {
    need_float(name, x.dtype())?;
    if noise.dtype() != x.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "expected scalar type {} but found {}",
            x.dtype().scalar_type_name(),
            noise.dtype().scalar_type_name()
        )));
    }
    if lower > upper {
        return Err(bad(format!(
            "Expected from <= to to be true, but got from={lower} > to={upper}"
        )));
    }
    if x.shape() != noise.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "noise tensor shape must match self tensor shape. Got self.shape = {:?} noise.shape = {:?}",
            x.shape(),
            noise.shape()
        )));
    }
    Ok(())
}

/// The evaluation slope, as PyTorch computes it (in f64).
fn slope(lower: f64, upper: f64) -> f64 {
    (lower + upper) / 2.0
}

/// The output and, in training, the slopes drawn (`None` in evaluation).
fn apply(
    name: &str,
    x: &Tensor,
    noise: &Tensor,
    lower: f64,
    upper: f64,
    training: bool,
    g: Option<u64>,
) -> Result<(Tensor, Option<Tensor>)> {
    checked(name, x, noise, lower, upper)?;
    if training {
        let (out, drawn) = train(x, noise.dtype(), lower, upper, g)?;
        return Ok((out, Some(drawn)));
    }
    let slope = sv(Scalar::Float(slope(lower, upper)));
    Ok((
        op(x.runtime(), "aten::leaky_relu", vec![tv(x), slope])?,
        None,
    ))
}

/// `rrelu_with_noise(x, noise, lower, upper, training, generator)`: the output; in training
/// the slopes drawn are written into `noise`.
pub fn rrelu_with_noise(
    x: &Tensor,
    noise: &Tensor,
    lower: f64,
    upper: f64,
    training: bool,
    g: Option<u64>,
) -> Result<Tensor> {
    let name = "aten::rrelu_with_noise";
    let (out, drawn) = apply(name, x, noise, lower, upper, training, g)?;
    if let Some(d) = drawn {
        let args = vec![tv(noise), tv(&d), Value::Bool(false)];
        op(x.runtime(), "aten::copy_", args)?;
    }
    Ok(out)
}

/// `rrelu_with_noise_functional`: the output and the noise (the slopes drawn in training, a
/// copy of `noise` in evaluation: a functional form aliases none of its inputs), nothing
/// written.
pub fn rrelu_with_noise_functional(
    x: &Tensor,
    noise: &Tensor,
    lower: f64,
    upper: f64,
    training: bool,
    g: Option<u64>,
) -> Result<(Tensor, Tensor)> {
    let name = "aten::rrelu_with_noise_functional";
    let (out, drawn) = apply(name, x, noise, lower, upper, training, g)?;
    let noise = match drawn {
        Some(d) => d,
        None => op(x.runtime(), "aten::clone", vec![tv(noise)])?,
    };
    Ok((out, noise))
}

/// `rrelu_with_noise_backward(grad, x_or_result, noise, lower, upper, training,
/// self_is_result)`.
pub fn rrelu_with_noise_backward(
    grad: &Tensor,
    x: &Tensor,
    noise: &Tensor,
    lower: f64,
    upper: f64,
    training: bool,
    self_is_result: bool,
) -> Result<Tensor> {
    let rt = grad.runtime();
    if training {
        return op(rt, "aten::mul.Tensor", vec![tv(noise), tv(grad)]);
    }
    op(
        rt,
        "aten::leaky_relu_backward",
        vec![
            tv(grad),
            tv(x),
            sv(Scalar::Float(slope(lower, upper))),
            Value::Bool(self_is_result),
        ],
    )
}
