//! Scalars known while lowering: grid indices, index maps, loop counters and the conditions of
//! `pl.when`. The grid is unrolled, so `program_id` is a constant in each step and everything
//! computed from it folds here, with JAX's semantics for int32 (wrapping, division toward
//! zero) and float32.

use super::PallasError;
use super::spec::{Atom, Dt, Jaxpr, literal};

/// A scalar value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An int32 (kept wrapped to 32 bits).
    I(i32),
    /// A float32.
    F(f32),
    /// A bool.
    B(bool),
}

impl Scalar {
    /// The literal `x` of dtype `dt`.
    pub fn literal(x: f64, dt: Dt) -> Scalar {
        match dt {
            Dt::F32 | Dt::Bf16 => Scalar::F(x as f32),
            Dt::I32 => Scalar::I(x as i64 as i32),
            Dt::I8 => Scalar::I(x as i64 as i8 as i32),
            Dt::Bool => Scalar::B(x != 0.0),
        }
    }

    /// As an integer (bools are 0 or 1; floats truncate).
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::I(v) => v as i64,
            Scalar::F(v) => v as i64,
            Scalar::B(b) => b as i64,
        }
    }

    /// As a float.
    pub fn as_f32(self) -> f32 {
        match self {
            Scalar::I(v) => v as f32,
            Scalar::F(v) => v,
            Scalar::B(b) => b as i32 as f32,
        }
    }

    /// The 32 bits a vector lane holds for this value as `dt`.
    pub fn bits(self, dt: Dt) -> u32 {
        if dt.is_float() {
            self.as_f32().to_bits()
        } else {
            self.as_i64() as i32 as u32
        }
    }

    /// Converted to `dt` as `convert_element_type` does.
    pub fn convert(self, dt: Dt) -> Scalar {
        match dt {
            Dt::F32 => Scalar::F(self.as_f32()),
            Dt::Bf16 => Scalar::F(half::bf16::from_f32(self.as_f32()).to_f32()),
            Dt::I32 => Scalar::I(match self {
                Scalar::F(v) if v.is_nan() => 0,
                Scalar::F(v) => v.clamp(i32::MIN as f32, i32::MAX as f32) as i32,
                s => s.as_i64() as i32,
            }),
            Dt::I8 => Scalar::I(match self {
                Scalar::F(v) if v.is_nan() => 0,
                Scalar::F(v) => v.clamp(i8::MIN as f32, i8::MAX as f32) as i32,
                s => s.as_i64() as i8 as i32,
            }),
            Dt::Bool => Scalar::B(match self {
                Scalar::F(v) => v != 0.0,
                s => s.as_i64() != 0,
            }),
        }
    }
}

/// Folds primitive `prim` over known scalars; `None` when it is not a scalar primitive this
/// folds (the caller lowers it, or refuses it).
pub fn fold(prim: &str, a: &[Scalar], out: Dt) -> Option<Scalar> {
    use Scalar::*;
    let bin = |f: fn(i32, i32) -> Option<i32>, g: fn(f32, f32) -> f32| -> Option<Scalar> {
        match (a.first()?, a.get(1)?) {
            (F(_), _) | (_, F(_)) => Some(F(g(a[0].as_f32(), a[1].as_f32()))),
            _ => f(a[0].as_i64() as i32, a[1].as_i64() as i32).map(I),
        }
    };
    let cmp = |f: fn(f64, f64) -> bool| -> Option<Scalar> {
        let (x, y) = (a.first()?, a.get(1)?);
        let (x, y) = match (x, y) {
            (F(_), _) | (_, F(_)) => (x.as_f32() as f64, y.as_f32() as f64),
            _ => (x.as_i64() as f64, y.as_i64() as f64),
        };
        Some(B(f(x, y)))
    };
    let r = match prim {
        "add" => bin(|x, y| Some(x.wrapping_add(y)), |x, y| x + y)?,
        "sub" => bin(|x, y| Some(x.wrapping_sub(y)), |x, y| x - y)?,
        "mul" => bin(|x, y| Some(x.wrapping_mul(y)), |x, y| x * y)?,
        // XLA's integer division: x / 0 = -1, x % 0 = x, MIN / -1 wraps.
        "div" => bin(
            |x, y| Some(if y == 0 { -1 } else { x.wrapping_div(y) }),
            |x, y| x / y,
        )?,
        "rem" => bin(
            |x, y| Some(if y == 0 { x } else { x.wrapping_rem(y) }),
            |x, y| x % y,
        )?,
        // NaN wins, as in JAX and the vector unit.
        "max" => bin(
            |x, y| Some(x.max(y)),
            |x, y| {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else {
                    x.max(y)
                }
            },
        )?,
        "min" => bin(
            |x, y| Some(x.min(y)),
            |x, y| {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else {
                    x.min(y)
                }
            },
        )?,
        "and" => match (a.first()?, a.get(1)?) {
            (B(x), B(y)) => B(*x && *y),
            (x, y) => I((x.as_i64() & y.as_i64()) as i32),
        },
        "or" => match (a.first()?, a.get(1)?) {
            (B(x), B(y)) => B(*x || *y),
            (x, y) => I((x.as_i64() | y.as_i64()) as i32),
        },
        "not" => match a.first()? {
            B(x) => B(!x),
            x => I(!(x.as_i64() as i32)),
        },
        "neg" => match a.first()? {
            F(x) => F(-x),
            x => I((x.as_i64() as i32).wrapping_neg()),
        },
        "abs" => match a.first()? {
            F(x) => F(x.abs()),
            x => I((x.as_i64() as i32).wrapping_abs()),
        },
        "sign" => match a.first()? {
            F(x) if x.is_nan() => F(*x),
            F(x) => F(if *x > 0.0 {
                1.0
            } else if *x < 0.0 {
                -1.0
            } else {
                0.0
            }),
            x => I((x.as_i64() as i32).signum()),
        },
        "eq" => cmp(|x, y| x == y)?,
        "ne" => cmp(|x, y| x != y)?,
        "lt" => cmp(|x, y| x < y)?,
        "le" => cmp(|x, y| x <= y)?,
        "gt" => cmp(|x, y| x > y)?,
        "ge" => cmp(|x, y| x >= y)?,
        "select_n" => {
            let which = a.first()?.as_i64();
            *a.get(1 + usize::try_from(which).ok()?)?
        }
        "clamp" => {
            let (lo, x, hi) = (a.first()?, a.get(1)?, a.get(2)?);
            match x {
                F(v) if v.is_nan() || lo.as_f32().is_nan() || hi.as_f32().is_nan() => F(f32::NAN),
                F(v) => F(v.max(lo.as_f32()).min(hi.as_f32())),
                v => I((v.as_i64().max(lo.as_i64()).min(hi.as_i64())) as i32),
            }
        }
        "convert_element_type" | "copy" | "copy_p" | "squeeze" | "reshape" | "broadcast_in_dim" => {
            *a.first()?
        }
        _ => return None,
    };
    Some(r.convert(out))
}

/// Evaluates a jaxpr of scalars (an index map) on known inputs; `prim_src` names the kernel
/// in errors.
pub fn eval(kernel: &str, j: &Jaxpr, inputs: &[Scalar]) -> Result<Vec<Scalar>, PallasError> {
    let mut env: std::collections::HashMap<u32, Scalar> = std::collections::HashMap::new();
    for (v, x) in j.invars.iter().zip(inputs) {
        env.insert(v.id, *x);
    }
    let atom = |env: &std::collections::HashMap<u32, Scalar>, a: &Atom| -> Option<Scalar> {
        match a {
            Atom::Var { v } => env.get(v).copied(),
            Atom::Lit { lit, dtype } => Some(Scalar::literal(literal(lit)?, Dt::parse(dtype)?)),
        }
    };
    for e in &j.eqns {
        let args: Option<Vec<Scalar>> = e.ins.iter().map(|a| atom(&env, a)).collect();
        // `i // 2` and `i % 2` are `jit` calls of jnp's functions.
        if let (Some(args), Some(sub)) = (&args, e.params.get("jaxpr"))
            && let Ok(sub) = serde_json::from_value::<Jaxpr>(sub.clone())
        {
            let outs = eval(kernel, &sub, args)?;
            for (o, v) in e.outs.iter().zip(outs) {
                env.insert(o.id, v);
            }
            continue;
        }
        let out = e.outs.first().and_then(|o| Dt::parse(&o.dtype));
        let r = match (args, out) {
            (Some(args), Some(dt)) if e.outs.len() == 1 => fold(&e.prim, &args, dt),
            _ => None,
        };
        let Some(r) = r else {
            return Err(PallasError::unsupported(
                kernel,
                format!("`{}` in an index map{}", e.prim, at(&e.src)),
            ));
        };
        env.insert(e.outs[0].id, r);
    }
    j.outvars
        .iter()
        .map(|a| {
            atom(&env, a)
                .ok_or_else(|| PallasError::unsupported(kernel, "an index map's result".into()))
        })
        .collect()
}

/// ` (at file.py:12)` when the place is known.
pub fn at(src: &str) -> String {
    if src.is_empty() {
        String::new()
    } else {
        format!(" (at {src})")
    }
}
