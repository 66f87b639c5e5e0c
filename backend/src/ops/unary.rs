//! Unary elementwise operators: arithmetic (`neg`, `abs`, `sign`, `reciprocal`), transcendentals
//! (`exp`, `log`, `log1p`, `sqrt`, `rsqrt`, `sin`, `cos`, `tanh`, `erf`), rounding (`floor`,
//! `ceil`) and activations (`sigmoid`, `relu`, `gelu`, `silu`).
//!
//! Dtype rules follow PyTorch:
//! - *floating* operators (the transcendentals, `reciprocal`, the activations except `relu`)
//!   promote integer and bool inputs to the default float (`torch.exp(int tensor)` is float32);
//!   bf16/f16 inputs compute in f32 and round once at the output;
//! - *keeping* operators (`neg`, `abs`, `sign`, `floor`, `ceil`, `relu`) keep the dtype;
//!   `floor`/`ceil` of integers are the identity; `neg`, `abs`, `relu`, `floor` and `ceil`
//!   reject bool with PyTorch's errors; `sign` of a bool is the identity;
//! - `gelu` and `silu` are defined for floating inputs only.
//!
//! NaN: `relu(NaN)` is NaN (it is `clamp_min(x, 0)`), and `sign(NaN)` is 0, as ATen computes it
//! (`(0 < x) - (x < 0)`; pytorch/pytorch#41245 is still open).

use super::aten;
use super::helpers::{OpScope, map};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, UnOp};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// The error ATen's dispatch macros raise for a dtype a kernel was not built for.
fn not_implemented(kernel: &str, d: DType) -> TpuError {
    TpuError::Unsupported(format!(
        "\"{kernel}\" not implemented for '{}'",
        d.scalar_type_name()
    ))
}

/// The result dtype of a floating operator: float inputs keep theirs, the rest become float32.
pub fn float_result(d: DType) -> DType {
    if d.is_float() { d } else { DType::F32 }
}

/// Runs a floating operator: `f` gets the input converted to f32 and computes in f32; the
/// result is rounded once to the output dtype.
fn floating(
    name: &str,
    x: &Tensor,
    f: impl FnOnce(&mut ProgBuilder, PRef) -> PRef,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let out = float_result(x.dtype());
    Ok(map(&op, &[x], &[out], |p, r| {
        let v = p.cast(r[0], DType::F32);
        vec![f(p, v)]
    })?
    .remove(0))
}

/// Runs a floating operator defined only for floating inputs (`gelu`, `silu`).
fn floating_only(
    name: &str,
    kernel: &str,
    x: &Tensor,
    f: impl FnOnce(&mut ProgBuilder, PRef) -> PRef,
) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(not_implemented(kernel, x.dtype()));
    }
    floating(name, x, f)
}

/// Runs a dtype-keeping operator: `f` gets the input in its lane type (f32 or i32) and the
/// lane type.
fn keeping(
    name: &str,
    x: &Tensor,
    f: impl FnOnce(&mut ProgBuilder, PRef, DType) -> PRef,
) -> Result<Tensor> {
    keeping_checked(name, x, f, false)
}

/// [`keeping`]; `negates`: the operator negates some values, and an int64 `-2^31` is refused
/// on the device (its negation needs 33 bits: `ops::wide`).
fn keeping_checked(
    name: &str,
    x: &Tensor,
    f: impl FnOnce(&mut ProgBuilder, PRef, DType) -> PRef,
    negates: bool,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x])?;
    let check = if negates {
        super::wide::negatable(&op, x)?
    } else {
        super::checks::Pending::none()
    };
    let d = x.dtype();
    let ct = super::helpers::compute(d);
    let r = map(&op, &[x], &[d], |p, r| {
        let v = p.cast(r[0], ct);
        vec![f(p, v, ct)]
    })?
    .remove(0);
    check.guards(op.rt(), &[&r]);
    Ok(r)
}

fn un(name: &str, x: &Tensor, u: UnOp) -> Result<Tensor> {
    floating(name, x, |p, v| p.un(u, v, DType::F32))
}

/// `-x` (integers wrap; bool is an error, as in PyTorch).
pub fn neg(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(TpuError::BadArgs(
            "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.".into(),
        ));
    }
    keeping_checked(Neg::NAME, x, |p, v, ct| p.un(UnOp::Neg, v, ct), true)
}

/// `|x|`.
pub fn abs(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(not_implemented("abs_cpu", x.dtype()));
    }
    keeping_checked(Abs::NAME, x, |p, v, ct| p.un(UnOp::Abs, v, ct), true)
}

/// `sign(x)`: -1, 0 or 1 in the input's dtype; `sign(NaN)` is 0 as in ATen; bool is the
/// identity.
pub fn sign(x: &Tensor) -> Result<Tensor> {
    keeping(Sign::NAME, x, |p, v, ct| {
        // (0 < x) - (x < 0), as ATen's kernel: NaN compares false both ways.
        let zero = p.constant(Scalar::Int(0), ct);
        let pos = p.cmp(CmpKind::Gt, v, zero, ct);
        let negv = p.cmp(CmpKind::Lt, v, zero, ct);
        let (pos, negv) = (p.cast(pos, ct), p.cast(negv, ct));
        p.bin(BinOp::Sub, pos, negv, ct)
    })
}

/// `floor(x)` (the identity on integers).
pub fn floor(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(not_implemented("floor_cpu", x.dtype()));
    }
    keeping(Floor::NAME, x, |p, v, ct| p.un(UnOp::Floor, v, ct))
}

/// `ceil(x)` (the identity on integers).
pub fn ceil(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(not_implemented("ceil_cpu", x.dtype()));
    }
    keeping(Ceil::NAME, x, |p, v, ct| p.un(UnOp::Ceil, v, ct))
}

/// `relu(x) = max(x, 0)`; NaN stays NaN; integers keep their dtype.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(TpuError::BadArgs(
            "Boolean inputs not supported for relu".into(),
        ));
    }
    keeping(Relu::NAME, x, |p, v, ct| {
        let zero = p.constant(Scalar::Int(0), ct);
        p.bin(BinOp::Max, v, zero, ct)
    })
}

/// `exp(x)`.
pub fn exp(x: &Tensor) -> Result<Tensor> {
    un(Exp::NAME, x, UnOp::Exp)
}

/// `log(x)`.
pub fn log(x: &Tensor) -> Result<Tensor> {
    un(Log::NAME, x, UnOp::Log)
}

/// `log1p(x)`.
pub fn log1p(x: &Tensor) -> Result<Tensor> {
    un(Log1p::NAME, x, UnOp::Log1p)
}

/// `sqrt(x)`.
pub fn sqrt(x: &Tensor) -> Result<Tensor> {
    un(Sqrt::NAME, x, UnOp::Sqrt)
}

/// `1 / sqrt(x)`.
pub fn rsqrt(x: &Tensor) -> Result<Tensor> {
    un(Rsqrt::NAME, x, UnOp::Rsqrt)
}

/// `1 / x`.
pub fn reciprocal(x: &Tensor) -> Result<Tensor> {
    un(Reciprocal::NAME, x, UnOp::Rcp)
}

/// `sin(x)`.
pub fn sin(x: &Tensor) -> Result<Tensor> {
    un(Sin::NAME, x, UnOp::Sin)
}

/// `cos(x)`.
pub fn cos(x: &Tensor) -> Result<Tensor> {
    un(Cos::NAME, x, UnOp::Cos)
}

/// `tanh(x)`.
pub fn tanh(x: &Tensor) -> Result<Tensor> {
    un(Tanh::NAME, x, UnOp::Tanh)
}

/// `erf(x)`.
pub fn erf(x: &Tensor) -> Result<Tensor> {
    un(Erf::NAME, x, UnOp::Erf)
}

/// `sigmoid(x) = 1 / (1 + exp(-x))`.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    un(Sigmoid::NAME, x, UnOp::Sigmoid)
}

/// `silu(x) = x / (1 + exp(-x))` (ATen's formula, one division).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    floating_only(Silu::NAME, "silu_cpu", x, |p, v| {
        let f = DType::F32;
        let n = p.un(UnOp::Neg, v, f);
        let e = p.un(UnOp::Exp, n, f);
        let one = p.constant(Scalar::Float(1.0), f);
        let d = p.bin(BinOp::Add, one, e, f);
        p.bin(BinOp::Div, v, d, f)
    })
}

/// How `gelu` approximates the Gaussian CDF.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GeluApprox {
    /// `0.5 x (1 + erf(x / sqrt 2))` (`approximate='none'`).
    None,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (`approximate='tanh'`).
    Tanh,
}

impl GeluApprox {
    /// Parses PyTorch's `approximate` argument.
    pub fn parse(s: &str) -> Result<GeluApprox> {
        match s {
            "none" => Ok(GeluApprox::None),
            "tanh" => Ok(GeluApprox::Tanh),
            other => Err(TpuError::BadArgs(format!(
                "approximate argument must be either none or tanh. (got '{other}')"
            ))),
        }
    }
}

/// `gelu(x, approximate)`, computed as ATen's CPU kernel does (in f32).
pub fn gelu(x: &Tensor, approximate: GeluApprox) -> Result<Tensor> {
    floating_only(Gelu::NAME, "GeluKernelImpl", x, move |p, v| {
        let f = DType::F32;
        let c = |p: &mut ProgBuilder, k: f64| p.constant(Scalar::Float(k), f);
        let half = c(p, 0.5);
        let one = c(p, 1.0);
        let t = match approximate {
            GeluApprox::None => {
                let a = c(p, std::f64::consts::FRAC_1_SQRT_2);
                let s = p.bin(BinOp::Mul, v, a, f);
                p.un(UnOp::Erf, s, f)
            }
            GeluApprox::Tanh => {
                let beta = c(
                    p,
                    std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5,
                );
                let kappa = c(p, 0.044715);
                let x2 = p.bin(BinOp::Mul, v, v, f);
                let x3 = p.bin(BinOp::Mul, x2, v, f);
                let k3 = p.bin(BinOp::Mul, kappa, x3, f);
                let inner = p.bin(BinOp::Add, v, k3, f);
                let inner = p.bin(BinOp::Mul, beta, inner, f);
                p.un(UnOp::Tanh, inner, f)
            }
        };
        let s = p.bin(BinOp::Add, one, t, f);
        let hx = p.bin(BinOp::Mul, half, v, f);
        p.bin(BinOp::Mul, hx, s, f)
    })
}

impl Tensor {
    /// `-self`.
    pub fn neg(&self) -> Result<Tensor> {
        neg(self)
    }

    /// `self.abs()`.
    pub fn abs(&self) -> Result<Tensor> {
        abs(self)
    }

    /// `self.sign()`.
    pub fn sign(&self) -> Result<Tensor> {
        sign(self)
    }

    /// `self.floor()`.
    pub fn floor(&self) -> Result<Tensor> {
        floor(self)
    }

    /// `self.ceil()`.
    pub fn ceil(&self) -> Result<Tensor> {
        ceil(self)
    }

    /// `self.exp()`.
    pub fn exp(&self) -> Result<Tensor> {
        exp(self)
    }

    /// `self.log()`.
    pub fn log(&self) -> Result<Tensor> {
        log(self)
    }

    /// `self.log1p()`.
    pub fn log1p(&self) -> Result<Tensor> {
        log1p(self)
    }

    /// `self.sqrt()`.
    pub fn sqrt(&self) -> Result<Tensor> {
        sqrt(self)
    }

    /// `self.rsqrt()`.
    pub fn rsqrt(&self) -> Result<Tensor> {
        rsqrt(self)
    }

    /// `self.reciprocal()`.
    pub fn reciprocal(&self) -> Result<Tensor> {
        reciprocal(self)
    }

    /// `self.sin()`.
    pub fn sin(&self) -> Result<Tensor> {
        sin(self)
    }

    /// `self.cos()`.
    pub fn cos(&self) -> Result<Tensor> {
        cos(self)
    }

    /// `self.tanh()`.
    pub fn tanh(&self) -> Result<Tensor> {
        tanh(self)
    }

    /// `self.erf()`.
    pub fn erf(&self) -> Result<Tensor> {
        erf(self)
    }

    /// `self.sigmoid()`.
    pub fn sigmoid(&self) -> Result<Tensor> {
        sigmoid(self)
    }

    /// `self.relu()`.
    pub fn relu(&self) -> Result<Tensor> {
        relu(self)
    }

    /// `torch.nn.functional.silu(self)`.
    pub fn silu(&self) -> Result<Tensor> {
        silu(self)
    }

    /// `torch.nn.functional.gelu(self, approximate=...)` (`"none"` or `"tanh"`).
    pub fn gelu(&self, approximate: &str) -> Result<Tensor> {
        gelu(self, GeluApprox::parse(approximate)?)
    }
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::neg", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::All))]
fn neg_op(a: Neg<'_>) -> Result<Tensor> {
    neg(a.self_)
}

#[aten("aten::abs", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn abs_op(a: Abs<'_>) -> Result<Tensor> {
    abs(a.self_)
}

#[aten("aten::sign", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn sign_op(a: Sign<'_>) -> Result<Tensor> {
    sign(a.self_)
}

#[aten("aten::floor", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn floor_op(a: Floor<'_>) -> Result<Tensor> {
    floor(a.self_)
}

#[aten("aten::ceil", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn ceil_op(a: Ceil<'_>) -> Result<Tensor> {
    ceil(a.self_)
}

#[aten("aten::relu", dtypes = DType::NUMERIC, shard = Sharding::pointwise(Lin::No))]
fn relu_op(a: Relu<'_>) -> Result<Tensor> {
    relu(a.self_)
}

#[aten("aten::exp", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn exp_op(a: Exp<'_>) -> Result<Tensor> {
    exp(a.self_)
}

#[aten("aten::log", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn log_op(a: Log<'_>) -> Result<Tensor> {
    log(a.self_)
}

#[aten("aten::log1p", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn log1p_op(a: Log1p<'_>) -> Result<Tensor> {
    log1p(a.self_)
}

#[aten("aten::sqrt", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn sqrt_op(a: Sqrt<'_>) -> Result<Tensor> {
    sqrt(a.self_)
}

#[aten("aten::rsqrt", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn rsqrt_op(a: Rsqrt<'_>) -> Result<Tensor> {
    rsqrt(a.self_)
}

#[aten("aten::reciprocal", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn reciprocal_op(a: Reciprocal<'_>) -> Result<Tensor> {
    reciprocal(a.self_)
}

#[aten("aten::sin", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn sin_op(a: Sin<'_>) -> Result<Tensor> {
    sin(a.self_)
}

#[aten("aten::cos", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn cos_op(a: Cos<'_>) -> Result<Tensor> {
    cos(a.self_)
}

#[aten("aten::tanh", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn tanh_op(a: Tanh<'_>) -> Result<Tensor> {
    tanh(a.self_)
}

#[aten("aten::erf", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn erf_op(a: Erf<'_>) -> Result<Tensor> {
    erf(a.self_)
}

#[aten("aten::sigmoid", dtypes = DType::ALL_TPU, shard = Sharding::pointwise(Lin::No))]
fn sigmoid_op(a: Sigmoid<'_>) -> Result<Tensor> {
    sigmoid(a.self_)
}

#[aten("aten::silu", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn silu_op(a: Silu<'_>) -> Result<Tensor> {
    silu(a.self_)
}

#[aten("aten::gelu", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No))]
fn gelu_op(a: Gelu<'_>) -> Result<Tensor> {
    gelu(a.self_, GeluApprox::parse(a.approximate)?)
}
