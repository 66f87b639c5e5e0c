//! Pointwise primitives: JAX's names mapped to [`Op`]s, their operands' extents checked (equal,
//! or 1 where broadcast), a node of the lazy tree built ([`super::expr`]).

use std::rc::Rc;

use tpuemu_isa::ops::{CmpOp, VBinOp, VType, VUnOp};

use super::PallasError;
use super::body::{Body, Val};
use super::expr::{Expr, Kind, Op};
use super::scalar::at;
use super::spec::{Dt, Eqn};
use super::values::{two_d_merged, vtype};

/// The operation of primitive `prim` on a first operand of dtype `first`, if lowered.
fn op_of(eq: &Eqn, first: Dt, nargs: usize) -> Option<Op> {
    let int = first == Dt::I32;
    let bin = |op| Some(Op::Bin(op));
    let un = |op| Some(Op::Un(op));
    match eq.prim.as_str() {
        "add" => bin(VBinOp::Add),
        "sub" => bin(VBinOp::Sub),
        "mul" => bin(VBinOp::Mul),
        // Integer division and remainder as XLA defines them (x / 0 = -1, x % 0 = x).
        "div" if int => Some(Op::IntDiv(VBinOp::Div)),
        "rem" if int => Some(Op::IntDiv(VBinOp::Rem)),
        "div" => bin(VBinOp::Div),
        "max" => bin(VBinOp::Max),
        "min" => bin(VBinOp::Min),
        "rem" => bin(VBinOp::Rem),
        "pow" if first.is_float() => bin(VBinOp::Pow),
        "and" if !first.is_float() => bin(VBinOp::And),
        "or" if !first.is_float() => bin(VBinOp::Or),
        "xor" if !first.is_float() => bin(VBinOp::Xor),
        "shift_left" if int => Some(Op::Shift(VBinOp::Shl)),
        "shift_right_arithmetic" if int => Some(Op::Shift(VBinOp::Sra)),
        "shift_right_logical" if int => Some(Op::Shift(VBinOp::Shr)),
        "neg" => un(VUnOp::Neg),
        "abs" => un(VUnOp::Abs),
        "sign" => un(VUnOp::Sign),
        "floor" => un(VUnOp::Floor),
        "ceil" => un(VUnOp::Ceil),
        // `jnp.round` rounds half to even (method 1); `lax.round`'s default does not.
        "round" if eq.params.get("rounding_method").and_then(|v| v.as_i64()) == Some(1) => {
            un(VUnOp::Round)
        }
        "not" if first == Dt::Bool => Some(Op::NotBool),
        "not" if int => un(VUnOp::Not),
        "exp" => un(VUnOp::Exp),
        "exp2" => Some(Op::Exp2),
        "log" => un(VUnOp::Log),
        "log1p" => un(VUnOp::Log1p),
        "expm1" => un(VUnOp::Expm1),
        "sqrt" => un(VUnOp::Sqrt),
        "rsqrt" => un(VUnOp::Rsqrt),
        "tanh" => un(VUnOp::Tanh),
        "logistic" => un(VUnOp::Sigmoid),
        "erf" => un(VUnOp::Erf),
        "sin" => un(VUnOp::Sin),
        "cos" => un(VUnOp::Cos),
        "square" => Some(Op::Square),
        "integer_pow" => {
            let y = eq.params.get("y").and_then(|v| v.as_i64())? as i32;
            // An integer to a negative power is not an integer.
            (y >= 0 || first.is_float()).then_some(Op::IntPow(y))
        }
        "eq" => Some(Op::Cmp(CmpOp::Eq)),
        "ne" => Some(Op::Cmp(CmpOp::Ne)),
        "lt" => Some(Op::Cmp(CmpOp::Lt)),
        "le" => Some(Op::Cmp(CmpOp::Le)),
        "gt" => Some(Op::Cmp(CmpOp::Gt)),
        "ge" => Some(Op::Cmp(CmpOp::Ge)),
        "select_n" if nargs == 3 => Some(Op::Select),
        "convert_element_type" => Some(Op::Convert),
        "copy" | "copy_p" | "optimization_barrier" | "stop_gradient" | "multiple_of" => {
            Some(Op::Copy)
        }
        _ => None,
    }
}

impl Body<'_> {
    pub(super) fn pointwise(
        &mut self,
        eq: &Eqn,
        ins: Vec<Val>,
        dt: Dt,
    ) -> Result<Vec<Val>, PallasError> {
        // Elementwise work commutes with a transpose: done on what is stored, still transposed.
        let transposed = ins.iter().any(|v| matches!(v, Val::T(_)));
        if transposed
            && !ins
                .iter()
                .all(|v| matches!(v, Val::T(_) | Val::S(..) | Val::D(..)))
        {
            return Err(self.unsupported(format!(
                "`{}` of a transposed and a plain array{} (a transpose is lowered only into a \
                 matrix product)",
                eq.prim,
                at(&eq.src)
            )));
        }
        let dtype = |v: &Val| match v {
            Val::S(_, d) | Val::D(_, d) => *d,
            Val::Smem(m) => m.dt,
            Val::L(l) => l.dt,
            Val::E(a) | Val::T(a) => a.dt,
            Val::Ref(a) => a.dt,
            Val::Hbm(h) => h.dt,
            Val::Sems(..) => Dt::I32,
        };
        let in_dt: Vec<Dt> = ins.iter().map(dtype).collect();
        let first = *in_dt.first().unwrap_or(&dt);
        // A select's lanes are its cases'.
        let lanes = if eq.prim == "select_n" {
            *in_dt.get(1).unwrap_or(&dt)
        } else {
            first
        };
        let ty = vtype(lanes);
        let Some(op) = op_of(eq, first, ins.len()) else {
            return Err(self.unsupported(format!(
                "`{}` on {}{}",
                eq.prim,
                in_dt
                    .iter()
                    .map(|d| format!("{d:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                at(&eq.src)
            )));
        };
        if matches!(op, Op::Un(u) if !u.supports(ty)) {
            return Err(self.unsupported(format!("`{}` on {first:?}{}", eq.prim, at(&eq.src))));
        }
        // A conversion to the same dtype is the value itself.
        if op == Op::Convert && first == dt && ins.len() == 1 {
            return Ok(ins);
        }
        let mut out_shape = eq.outs[0].shape.clone();
        if transposed {
            out_shape.reverse();
        }
        // The result's extent: the operands' (equal, or 1 where broadcast).
        let mut rows = 1;
        let mut cols = 1;
        let mut arrays = Vec::new();
        for v in &ins {
            if let Val::E(a) | Val::T(a) = v {
                rows = rows.max(a.rows);
                cols = cols.max(a.cols);
                arrays.push(a.clone());
            }
        }
        for a in &arrays {
            if (a.rows != rows && a.rows != 1) || (a.cols != cols && a.cols != 1) {
                return Err(self.unsupported(format!(
                    "`{}` of arrays laid out as {}x{} and {rows}x{cols}{} (a 1-D value is a row \
                     or a column as it was computed)",
                    eq.prim,
                    a.rows,
                    a.cols,
                    at(&eq.src)
                )));
            }
        }
        let (er, ec) = two_d_merged(self.kernel, &out_shape, rows > 1 && cols == 1)?;
        if (er, ec) != (rows, cols) && !arrays.is_empty() {
            return Err(self.unsupported(format!(
                "`{}` producing {:?}{}",
                eq.prim,
                out_shape,
                at(&eq.src)
            )));
        }
        let (rows, cols) = (er, ec);
        let args: Vec<Rc<Expr>> = ins
            .iter()
            .zip(&in_dt)
            .map(|(v, d)| match v {
                Val::E(a) | Val::T(a) => Ok(a.clone()),
                Val::S(s, _) => Ok(Expr::new(Kind::Const(*s, *d), 1, 1, *d, Vec::new())),
                Val::D(r, _) => Ok(Expr::new(Kind::Dyn(r.clone(), *d), 1, 1, *d, Vec::new())),
                Val::Ref(_) | Val::Hbm(_) | Val::Sems(..) | Val::Smem(_) | Val::L(_) => {
                    Err(PallasError::Spec("a reference used as a value".into()))
                }
            })
            .collect::<Result<_, _>>()?;
        // `x + 0` and `x - 0` of integers, `x * 1`: the value itself (exact; a float `x + 0.0`
        // is not, for `-0.0`).
        let is_const = |a: &Rc<Expr>, v: f32| {
            matches!(&a.kind, Kind::Const(s, _) if s.as_f32() == v) && a.cache.borrow().is_none()
        };
        let keep = match (op, args.as_slice()) {
            (Op::Bin(VBinOp::Add), [x, c]) | (Op::Bin(VBinOp::Add), [c, x])
                if ty == VType::I32 && is_const(c, 0.0) =>
            {
                Some(x.clone())
            }
            (Op::Bin(VBinOp::Sub), [x, c]) if ty == VType::I32 && is_const(c, 0.0) => {
                Some(x.clone())
            }
            (Op::Bin(VBinOp::Mul), [x, c]) | (Op::Bin(VBinOp::Mul), [c, x]) if is_const(c, 1.0) => {
                Some(x.clone())
            }
            _ => None,
        };
        if let Some(x) = keep
            && (x.rows, x.cols, x.dt) == (rows, cols, dt)
            && !transposed
        {
            return Ok(vec![Val::E(if x.shape == out_shape {
                x
            } else {
                Expr::new(Kind::View(x), rows, cols, dt, out_shape)
            })]);
        }
        let node = Expr::new(
            Kind::Op {
                op,
                ty,
                from: first,
                args,
            },
            rows,
            cols,
            dt,
            out_shape,
        );
        Ok(vec![if transposed {
            Val::T(node)
        } else {
            Val::E(node)
        }])
    }
}
