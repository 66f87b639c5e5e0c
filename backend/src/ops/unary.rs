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

use super::helpers::{OpScope, map};
use super::registry::{OpDef, OpImpl};
use super::t1;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, UnOp};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

/// PyTorch's C++ name of a dtype, as it appears in "not implemented for 'Bool'" errors.
pub(crate) fn scalar_type_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "Bool",
        DType::U8 => "Byte",
        DType::I8 => "Char",
        DType::I32 => "Int",
        DType::I64 => "Long",
        DType::F16 => "Half",
        DType::BF16 => "BFloat16",
        DType::F32 => "Float",
    }
}

/// The error ATen's dispatch macros raise for a dtype a kernel was not built for.
fn not_implemented(kernel: &str, d: DType) -> TpuError {
    TpuError::Unsupported(format!(
        "\"{kernel}\" not implemented for '{}'",
        scalar_type_name(d)
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
    let ct = super::binary::compute(d);
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
    keeping_checked("aten::neg", x, |p, v, ct| p.un(UnOp::Neg, v, ct), true)
}

/// `|x|`.
pub fn abs(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(not_implemented("abs_cpu", x.dtype()));
    }
    keeping_checked("aten::abs", x, |p, v, ct| p.un(UnOp::Abs, v, ct), true)
}

/// `sign(x)`: -1, 0 or 1 in the input's dtype; `sign(NaN)` is 0 as in ATen; bool is the
/// identity.
pub fn sign(x: &Tensor) -> Result<Tensor> {
    keeping("aten::sign", x, |p, v, ct| {
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
    keeping("aten::floor", x, |p, v, ct| p.un(UnOp::Floor, v, ct))
}

/// `ceil(x)` (the identity on integers).
pub fn ceil(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(not_implemented("ceil_cpu", x.dtype()));
    }
    keeping("aten::ceil", x, |p, v, ct| p.un(UnOp::Ceil, v, ct))
}

/// `relu(x) = max(x, 0)`; NaN stays NaN; integers keep their dtype.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(TpuError::BadArgs(
            "Boolean inputs not supported for relu".into(),
        ));
    }
    keeping("aten::relu", x, |p, v, ct| {
        let zero = p.constant(Scalar::Int(0), ct);
        p.bin(BinOp::Max, v, zero, ct)
    })
}

/// `exp(x)`.
pub fn exp(x: &Tensor) -> Result<Tensor> {
    un("aten::exp", x, UnOp::Exp)
}

/// `log(x)`.
pub fn log(x: &Tensor) -> Result<Tensor> {
    un("aten::log", x, UnOp::Log)
}

/// `log1p(x)`.
pub fn log1p(x: &Tensor) -> Result<Tensor> {
    un("aten::log1p", x, UnOp::Log1p)
}

/// `sqrt(x)`.
pub fn sqrt(x: &Tensor) -> Result<Tensor> {
    un("aten::sqrt", x, UnOp::Sqrt)
}

/// `1 / sqrt(x)`.
pub fn rsqrt(x: &Tensor) -> Result<Tensor> {
    un("aten::rsqrt", x, UnOp::Rsqrt)
}

/// `1 / x`.
pub fn reciprocal(x: &Tensor) -> Result<Tensor> {
    un("aten::reciprocal", x, UnOp::Rcp)
}

/// `sin(x)`.
pub fn sin(x: &Tensor) -> Result<Tensor> {
    un("aten::sin", x, UnOp::Sin)
}

/// `cos(x)`.
pub fn cos(x: &Tensor) -> Result<Tensor> {
    un("aten::cos", x, UnOp::Cos)
}

/// `tanh(x)`.
pub fn tanh(x: &Tensor) -> Result<Tensor> {
    un("aten::tanh", x, UnOp::Tanh)
}

/// `erf(x)`.
pub fn erf(x: &Tensor) -> Result<Tensor> {
    un("aten::erf", x, UnOp::Erf)
}

/// `sigmoid(x) = 1 / (1 + exp(-x))`.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    un("aten::sigmoid", x, UnOp::Sigmoid)
}

/// `silu(x) = x / (1 + exp(-x))` (ATen's formula, one division).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    floating_only("aten::silu", "silu_cpu", x, |p, v| {
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
    floating_only("aten::gelu", "GeluKernelImpl", x, move |p, v| {
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

/// A one-argument overload `name(Tensor self) -> Tensor`.
fn simple(name: &'static str, dtypes: &'static [DType], run: super::RunFn) -> OpDef {
    OpDef::new(name, OpImpl::Kernel, dtypes, run)
}

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    const ALL: &[DType] = &[
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    const NUM: &[DType] = &[DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64];
    const FLOAT: &[DType] = &[DType::F32, DType::BF16, DType::F16];
    vec![
        simple("aten::neg", NUM, |_, a| t1(neg(a.tensor(0)?))).shard(Sharding::pointwise(Lin::All)),
        simple("aten::abs", NUM, |_, a| t1(abs(a.tensor(0)?))).shard(Sharding::pointwise(Lin::No)),
        simple("aten::sign", ALL, |_, a| t1(sign(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::floor", NUM, |_, a| t1(floor(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::ceil", NUM, |_, a| t1(ceil(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::relu", NUM, |_, a| t1(relu(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::exp", ALL, |_, a| t1(exp(a.tensor(0)?))).shard(Sharding::pointwise(Lin::No)),
        simple("aten::log", ALL, |_, a| t1(log(a.tensor(0)?))).shard(Sharding::pointwise(Lin::No)),
        simple("aten::log1p", ALL, |_, a| t1(log1p(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::sqrt", ALL, |_, a| t1(sqrt(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::rsqrt", ALL, |_, a| t1(rsqrt(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::reciprocal", ALL, |_, a| t1(reciprocal(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::sin", ALL, |_, a| t1(sin(a.tensor(0)?))).shard(Sharding::pointwise(Lin::No)),
        simple("aten::cos", ALL, |_, a| t1(cos(a.tensor(0)?))).shard(Sharding::pointwise(Lin::No)),
        simple("aten::tanh", ALL, |_, a| t1(tanh(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::erf", ALL, |_, a| t1(erf(a.tensor(0)?))).shard(Sharding::pointwise(Lin::No)),
        simple("aten::sigmoid", ALL, |_, a| t1(sigmoid(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::silu", FLOAT, |_, a| t1(silu(a.tensor(0)?)))
            .shard(Sharding::pointwise(Lin::No)),
        simple("aten::gelu", FLOAT, |_, a| {
            let approx = GeluApprox::parse(a.opt_str(1)?.unwrap_or("none"))?;
            t1(gelu(a.tensor(0)?, approx))
        })
        .shard(Sharding::pointwise(Lin::No)),
    ]
}
