//! Elementwise operator families beyond the first `unary`/`binary` set, one file per concept:
//! division and its rounding modes, ternary arithmetic (`addcmul`, `lerp`, `clamp` and `where`
//! forms), predicates (`isnan`, `signbit`, ...), bitwise operators, Bessel and Airy functions,
//! `erfinv`, `ndtri` and the Hurwitz zeta (`bessel`, `special`, their Cephes tables in
//! `cephes`), and the shared machinery:
//! [`promoted`] runs a program over tensors and Python numbers promoted together as
//! `torch.result_type` says; [`expr::Ex`] writes f32 math as a tile program.
//!
//! Every operator here is one tile node (its own kernel; DeferAndFuse fuses it with its
//! neighbours) unless its definition says it is a decomposition.

pub mod expr;

pub(crate) mod activation_grads;
pub(crate) mod activations;
pub(crate) mod bessel;
pub(crate) mod bits;
pub(crate) mod bitwise;
mod cephes;
pub(crate) mod division;
pub(crate) mod gamma;
pub(crate) mod igamma;
mod inverse_trig;
pub(crate) mod math;
pub(crate) mod polynomials;
pub(crate) mod predicates;
pub(crate) mod special;
pub(crate) mod ternary;

use super::helpers::{OpScope, compute, map};
use crate::dtype::{DType, Operand, Scalar, result_type};
use crate::error::{Result, TpuError};
use crate::ir::{PRef, ProgBuilder};
use crate::tensor::Tensor;

pub(crate) use division::is_scalar;
pub use division::{div, floor_divide, fmod};
pub use expr::Ex;

/// An operand of an elementwise operator: a tensor or a Python number.
pub type Arg<'a> = crate::ops::TensorOrNumber<'a>;

/// How a Python number joins a computation whose common dtype is bf16 or f16.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Number {
    /// Rounded to the common dtype first (the number is wrapped into a tensor of that dtype,
    /// as most ATen kernels do).
    Common,
    /// Unrounded, in f32 (the kernel takes the number in its "opmath" type: `add`, `mul`,
    /// `div`, `addcmul`, `lerp`'s weight).
    Opmath,
}

/// The common dtype of `args` (`torch.result_type`).
pub fn common_dtype(args: &[Arg]) -> DType {
    let ops: Vec<Operand> = args.iter().map(Arg::promotion).collect();
    result_type(&ops)
}

/// Runs `f` elementwise over the broadcast of `args` (tensors and numbers promoted together):
/// `f` gets every operand converted to the common dtype `c` (numbers as constants, rounded
/// as `number` says) and `c`; the result is converted to `out(c)`.
pub fn promoted(
    name: &str,
    args: &[Arg],
    number: Number,
    out: impl FnOnce(DType) -> DType,
    f: impl FnOnce(&mut ProgBuilder, &[PRef], DType) -> PRef,
) -> Result<Tensor> {
    let common = common_dtype(args);
    promoted_as(name, args, common, number, out(common), f)
}

/// [`promoted`] for integer arithmetic that may outgrow int32 (`+`, `-`, `*`): an int64
/// result is checked on the device, `f` computing the operator again in f32 to tell
/// (`ops::wide`), and refused rather than wrapped.
pub fn promoted_exact(
    name: &str,
    args: &[Arg],
    number: Number,
    f: impl Fn(&mut ProgBuilder, &[PRef], DType) -> PRef,
) -> Result<Tensor> {
    promoted_checked(name, args, number, &f, |op, r| {
        super::wide::exact_int64(op, args, r, |p, v| f(p, v, DType::F32))
    })
}

/// [`promoted_exact`] for operators whose f32 estimate needs the inputs' own values: `shadow`
/// takes the tensors' registers as loaded (see [`super::wide::exact_int64_raw`]).
pub fn promoted_exact_raw(
    name: &str,
    args: &[Arg],
    number: Number,
    f: impl Fn(&mut ProgBuilder, &[PRef], DType) -> PRef,
    shadow: impl FnOnce(&mut ProgBuilder, &[PRef]) -> PRef,
) -> Result<Tensor> {
    promoted_checked(name, args, number, &f, |op, r| {
        super::wide::exact_int64_raw(op, &tensors_of(args), r, shadow)
    })
}

/// [`promoted`], then `check` of the result, which guards it.
fn promoted_checked(
    name: &str,
    args: &[Arg],
    number: Number,
    f: &impl Fn(&mut ProgBuilder, &[PRef], DType) -> PRef,
    check: impl FnOnce(&OpScope, &Tensor) -> Result<super::checks::Pending>,
) -> Result<Tensor> {
    let common = common_dtype(args);
    let tensors = tensors_of(args);
    if tensors.is_empty() {
        return Err(TpuError::BadArgs(format!("{name}: no tensor arguments")));
    }
    let op = OpScope::new(name, &tensors)?;
    let r = promoted_in(&op, args, common, number, common, f)?;
    check(&op, &r)?.guards(op.rt(), &[&r]);
    Ok(r)
}

/// The tensors among `args`, in order.
pub(crate) fn tensors_of<'a>(args: &[Arg<'a>]) -> Vec<&'a Tensor> {
    args.iter()
        .filter_map(|a| match a {
            Arg::Tensor(t) => Some(*t),
            Arg::Number(_) => None,
        })
        .collect()
}

/// [`promoted`] with the common dtype given (operators whose inputs do not promote together).
pub fn promoted_as(
    name: &str,
    args: &[Arg],
    common: DType,
    number: Number,
    out: DType,
    f: impl FnOnce(&mut ProgBuilder, &[PRef], DType) -> PRef,
) -> Result<Tensor> {
    let tensors = tensors_of(args);
    if tensors.is_empty() {
        return Err(TpuError::BadArgs(format!("{name}: no tensor arguments")));
    }
    let op = OpScope::new(name, &tensors)?;
    promoted_in(&op, args, common, number, out, f)
}

/// [`promoted_as`] as part of operator `op` (one kernel of it).
pub(crate) fn promoted_in(
    op: &OpScope,
    args: &[Arg],
    common: DType,
    number: Number,
    out: DType,
    f: impl FnOnce(&mut ProgBuilder, &[PRef], DType) -> PRef,
) -> Result<Tensor> {
    let tensors = tensors_of(args);
    Ok(map(op, &tensors, &[out], |p, r| {
        let mut next = r.iter();
        let vals: Vec<PRef> = args
            .iter()
            .map(|a| match a {
                Arg::Tensor(_) => {
                    let x = *next.next().expect("one input per tensor");
                    p.cast(x, common)
                }
                Arg::Number(s) => number_const(p, *s, common, number),
            })
            .collect();
        vec![f(p, &vals, common)]
    })?
    .remove(0))
}

/// A number as a program constant of the common dtype's lane type.
pub fn number_const(p: &mut ProgBuilder, s: Scalar, common: DType, number: Number) -> PRef {
    // Program constants of float dtypes hold f32 values: round on the host.
    let s = if number == Number::Common && common.is_float() {
        Scalar::Float(f32::from_bits(s.lane_bits(common)) as f64)
    } else {
        s
    };
    p.constant(s, compute(common))
}

/// The result dtype of a floating operator: float dtypes keep theirs, the rest become float32.
pub fn float_out(d: DType) -> DType {
    if d.is_float() { d } else { DType::F32 }
}

/// A floating unary operator: integer and bool inputs compute as float32, everything computes
/// in f32 and rounds once to the result dtype.
pub fn float1(name: &str, x: &Tensor, f: impl FnOnce(&mut Ex, PRef) -> PRef) -> Result<Tensor> {
    promoted_as(
        name,
        &[Arg::Tensor(x)],
        x.dtype(),
        Number::Common,
        float_out(x.dtype()),
        |p, v, _| {
            let v = p.cast(v[0], DType::F32);
            f(&mut Ex::new(p), v)
        },
    )
}

/// A floating binary operator over promoted operands, computed in f32.
pub fn float2(
    name: &str,
    a: Arg,
    b: Arg,
    f: impl FnOnce(&mut Ex, PRef, PRef) -> PRef,
) -> Result<Tensor> {
    promoted(name, &[a, b], Number::Common, float_out, |p, v, _| {
        let (x, y) = (p.cast(v[0], DType::F32), p.cast(v[1], DType::F32));
        f(&mut Ex::new(p), x, y)
    })
}

/// PyTorch's error for a dtype a kernel is not built for.
pub fn not_implemented(kernel: &str, d: DType) -> TpuError {
    TpuError::Unsupported(format!(
        "\"{kernel}\" not implemented for '{}'",
        d.scalar_type_name()
    ))
}
