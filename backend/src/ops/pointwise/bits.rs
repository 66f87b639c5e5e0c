//! Operators on the bits of floats and on integer divisibility: `frexp`, `nextafter`, `gcd`,
//! `lcm`. Each is one tile node.
//!
//! - `frexp(x) = (m, e)` with `x = m 2^e`, `|m|` in [1/2, 1): the exponent field of the f32 bits
//!   (subnormals scaled by `2^24` first), the mantissa the same bits with the exponent of 1/2;
//!   zero, infinities and NaN give themselves and exponent 0 (glibc's, which PyTorch's CPU
//!   kernel calls). bf16 and f16 inputs are exact in f32 and so are their mantissas;
//! - `nextafter(x, y)`: the neighbour of `x` toward `y` in the dtype, by stepping the f32 bits
//!   by one unit of the dtype's last place (f32 1, bf16 `2^16`, f16 `2^13`; f16 subnormals, not
//!   subnormal in f32, step by `2^-24`); from zero, the smallest subnormal with `y`'s sign;
//!   `x == y` gives `y`, NaN gives NaN;
//! - `gcd(a, b)`: Euclid's algorithm on `|a|`, `|b|`, unrolled to the longest run the dtype
//!   allows (consecutive Fibonacci numbers: 47 steps for int32, 92 for int64); `lcm(a, b) = |a /
//!   gcd * b|`, 0 when the gcd is.

use super::{Arg, Ex, Number, common_dtype, promoted, promoted_exact_raw};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder};
use crate::ops::aten;
use crate::ops::helpers::{OpScope, map};
use crate::ops::sharding::{Lin, Sharding};
use crate::tensor::Tensor;

const I: DType = DType::I32;

fn int(p: &mut ProgBuilder, v: i64) -> PRef {
    p.constant(Scalar::Int(v), I)
}

/// `torch.frexp(x)`.
#[aten("aten::frexp.Tensor", dtypes = DType::FLOATING, shard = Sharding::pointwise(Lin::No), call = FrexpTensor(self_))]
pub fn frexp(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let d = x.dtype();
    if !d.is_float() {
        return Err(TpuError::Unsupported(
            "torch.frexp() only supports floating-point dtypes".into(),
        ));
    }
    let op = OpScope::new(FrexpTensor::NAME, &[x])?;
    let mut outs = map(&op, &[x], &[d, I], |p, r| {
        let v = p.cast(r[0], DType::F32);
        let mut e = Ex::new(p);
        let a = e.abs(v);
        let sub = e.ltk(a, f64::powi(2.0, -126));
        let scaled = e.mulk(v, f64::powi(2.0, 24));
        let w = e.sel(sub, scaled, v);
        let special = {
            let z = e.eqk(v, 0.0);
            let inf = e.isinf(v);
            let nan = e.isnan(v);
            let s = e.or(z, inf);
            e.or(s, nan)
        };
        let p = e.p;
        let bits = p.bitcast(w, I);
        let k23 = int(p, 23);
        let field = p.bin(BinOp::Shr, bits, k23, I);
        let ff = int(p, 0xff);
        let field = p.bin(BinOp::And, field, ff, I);
        let bias = int(p, 126);
        let ex = p.bin(BinOp::Sub, field, bias, I);
        let k24 = int(p, 24);
        let zero = int(p, 0);
        let adj = p.select(sub, k24, zero, I);
        let ex = p.bin(BinOp::Sub, ex, adj, I);
        let ex = p.select(special, zero, ex, I);
        let keep = int(p, 0x807f_ffff_u32 as i32 as i64);
        let m = p.bin(BinOp::And, bits, keep, I);
        let half = int(p, 0x3f00_0000);
        let m = p.bin(BinOp::Or, m, half, I);
        let m = p.bitcast(m, DType::F32);
        let m = p.select(special, v, m, DType::F32);
        vec![m, ex]
    })?;
    let e = outs.pop().expect("two outputs");
    Ok((outs.pop().expect("two outputs"), e))
}

/// `torch.nextafter(x, y)`.
#[aten(
    "aten::nextafter",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::No),
    call = Nextafter(self_, other)
)]
pub fn nextafter(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let name = Nextafter::NAME;
    if !x.dtype().is_float() || x.dtype() != y.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{name}: expected two tensors of the same floating dtype, got {} and {}",
            x.dtype().name(),
            y.dtype().name()
        )));
    }
    let d = x.dtype();
    let (step, tiny) = match d {
        DType::BF16 => (1 << 16, f64::powi(2.0, -133)),
        DType::F16 => (1 << 13, f64::powi(2.0, -24)),
        _ => (1, f64::from(f32::from_bits(1))),
    };
    promoted(
        name,
        &[Arg::Tensor(x), Arg::Tensor(y)],
        Number::Common,
        |c| c,
        |p, v, _| {
            let x = p.cast(v[0], DType::F32);
            let y = p.cast(v[1], DType::F32);
            let mut e = Ex::new(p);
            let up = e.gt(y, x);
            let pos = e.gtk(x, 0.0);
            let differ = e.p.bin(BinOp::Xor, up, pos, DType::Bool);
            let inc = e.not(differ);
            let p = &mut *e.p;
            let bits = p.bitcast(x, I);
            let s = int(p, step);
            let more = p.bin(BinOp::Add, bits, s, I);
            let less = p.bin(BinOp::Sub, bits, s, I);
            let nb = p.select(inc, more, less, I);
            let mut r = p.bitcast(nb, DType::F32);
            let mut e = Ex::new(p);
            if d == DType::F16 {
                // f16 subnormals (and the step down from the smallest normal) are additive.
                let a = e.abs(x);
                let below = e.ltk(a, f64::powi(2.0, -14));
                let edge = e.eqk(a, f64::powi(2.0, -14));
                let dec = e.not(inc);
                let edge_down = e.and(edge, dec);
                let additive = e.or(below, edge_down);
                let u = e.k(tiny);
                let nu = e.k(-tiny);
                let du = e.sel(up, u, nu);
                let ad = e.add(x, du);
                r = e.sel(additive, ad, r);
            }
            let zero = e.eqk(x, 0.0);
            let t = e.k(tiny);
            let nt = e.k(-tiny);
            let from0 = e.sel(up, t, nt);
            r = e.sel(zero, from0, r);
            let same = e.eq(x, y);
            r = e.sel(same, y, r);
            let nan = e.add(x, y);
            let isnan = e.isnan(nan);
            e.sel(isnan, nan, r)
        },
    )
}

/// Euclid's algorithm, unrolled, on `|a|`, `|b|` in the integer dtype `d`.
fn gcd_prog(p: &mut ProgBuilder, a: PRef, b: PRef, d: DType) -> PRef {
    let steps = if d == DType::I64 { 92 } else { 47 };
    let (mut a, mut b) = (
        p.un(crate::ir::UnOp::Abs, a, d),
        p.un(crate::ir::UnOp::Abs, b, d),
    );
    let zero = p.constant(Scalar::Int(0), d);
    let one = p.constant(Scalar::Int(1), d);
    for _ in 0..steps {
        let nz = p.cmp(CmpKind::Ne, a, zero, d);
        let safe = p.select(nz, a, one, d);
        let r = p.bin(BinOp::Rem, b, safe, d);
        let na = p.select(nz, r, a, d);
        b = p.select(nz, a, b, d);
        a = na;
    }
    b
}

fn integral(name: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if !a.dtype().is_int() || !b.dtype().is_int() {
        return Err(TpuError::Unsupported(format!(
            "\"{name}_cpu\" not implemented for '{}'",
            if a.dtype().is_int() {
                b.dtype()
            } else {
                a.dtype()
            }
            .name()
        )));
    }
    Ok(())
}

/// `torch.gcd(a, b)`.
#[aten("aten::gcd", dtypes = INTS, shard = Sharding::pointwise(Lin::No), call = Gcd(self_, other))]
pub fn gcd(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    integral("gcd", a, b)?;
    promoted(
        Gcd::NAME,
        &[Arg::Tensor(a), Arg::Tensor(b)],
        Number::Common,
        |c| c,
        |p, v, c| gcd_prog(p, v[0], v[1], c),
    )
}

/// `torch.lcm(a, b)`.
#[aten("aten::lcm", dtypes = INTS, shard = Sharding::pointwise(Lin::No), call = Lcm(self_, other))]
pub fn lcm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    integral("lcm", a, b)?;
    // The quotient a / gcd, exact in the lanes (it divides), and whether the gcd is 0.
    fn quotient(p: &mut ProgBuilder, a: PRef, b: PRef, c: DType) -> (PRef, PRef) {
        let g = gcd_prog(p, a, b, c);
        let zero = p.constant(Scalar::Int(0), c);
        let one = p.constant(Scalar::Int(1), c);
        let gz = p.cmp(CmpKind::Eq, g, zero, c);
        let safe = p.select(gz, one, g, c);
        (p.bin(BinOp::Div, a, safe, c), gz)
    }
    let c = common_dtype(&[Arg::Tensor(a), Arg::Tensor(b)]);
    promoted_exact_raw(
        Lcm::NAME,
        &[Arg::Tensor(a), Arg::Tensor(b)],
        Number::Common,
        |p, v, c| {
            // |q| |b|, not |q b|: an absolute value taken after the lanes wrapped would fold a
            // result just beyond 2^31 back near it, where the int64 check cannot tell it.
            let (q, gz) = quotient(p, v[0], v[1], c);
            let zero = p.constant(Scalar::Int(0), c);
            let q = p.un(crate::ir::UnOp::Abs, q, c);
            let b = p.un(crate::ir::UnOp::Abs, v[1], c);
            let m = p.bin(BinOp::Mul, q, b, c);
            p.select(gz, zero, m, c)
        },
        // An int64 lcm beyond int32 is refused: the estimate |q| |b| in f32 (0 when the gcd is).
        |p, raw| {
            let (x, y) = (p.cast(raw[0], c), p.cast(raw[1], c));
            let (q, gz) = quotient(p, x, y, c);
            let f = DType::F32;
            let (q, y) = (p.cast(q, f), p.cast(y, f));
            let q = p.un(crate::ir::UnOp::Abs, q, f);
            let y = p.un(crate::ir::UnOp::Abs, y, f);
            let m = p.bin(BinOp::Mul, q, y, f);
            let zero = p.constant(Scalar::Float(0.0), f);
            p.select(gz, zero, m, f)
        },
    )
}

/// Integer dtypes, for `gcd` and `lcm`.
const INTS: &[DType] = &[DType::I32, DType::I64];
