//! Elementwise work, lowered lazily: the values of the body as trees.
//!
//! A pointwise equation emits nothing: it builds an [`Expr`] node over its operands. Code is
//! generated when a value is consumed — stored into a reference, reduced, fed to the matrix
//! unit, or used twice — one (8, 128) tile at a time ([`super::tiles`]); [`emit`] is one
//! operation's vector code.
//!
//! Broadcasting follows the layout rule of [`super::values`]: a node whose rows (or columns)
//! are 1 is evaluated at tile row (column) 0 and holds the row (column) in every sublane
//! (lane).

use std::cell::RefCell;
use std::rc::Rc;

use tpuemu_isa::ops::{CmpOp, CvtOp, VBinOp, VType, VUnOp};
use tpuemu_isa::{MReg, ProgramBuilder, VReg, VSrc};

use super::scalar::Scalar;
use super::spec::Dt;
use super::values::{Arr, LANES, SUB, vtype};

/// A pointwise operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// `vbin`.
    Bin(VBinOp),
    /// An int32 shift: amounts of 32 or more (unsigned) give 0, or the sign for `sra`, as in
    /// XLA (the instruction takes the amount's low 5 bits).
    Shift(VBinOp),
    /// int32 division (`Div`) or remainder (`Rem`) as XLA defines them: by zero -1 and `x`,
    /// `MIN / -1` wraps to `MIN`.
    IntDiv(VBinOp),
    /// `vun`.
    Un(VUnOp),
    /// Logical not of a bool (0/1).
    NotBool,
    /// 2^x.
    Exp2,
    /// x * x.
    Square,
    /// x^y for a whole y.
    IntPow(i32),
    /// A comparison: a bool.
    Cmp(CmpOp),
    /// `select_n(which, case0, case1)`.
    Select,
    /// `convert_element_type`.
    Convert,
    /// The value itself.
    Copy,
}

/// What a node computes.
#[derive(Debug)]
pub enum Kind {
    /// An array in VMEM.
    Leaf(Arr),
    /// A constant.
    Const(Scalar, Dt),
    /// A scalar computed while running, broadcast (its register's bits as the dtype's lanes).
    Dyn(Rc<super::values::Sr>, Dt),
    /// An int32 iota along the lanes (`true`: the column index) or the sublanes (the row
    /// index), computed in a register per tile; its values in each tile are known while
    /// lowering, so comparisons of it decide whole tiles ([`range`]).
    Iota(bool),
    /// A pointwise operation of `args`, computed in `ty` lanes from operands of dtype `from`.
    Op {
        /// The operation.
        op: Op,
        /// The lanes' type.
        ty: VType,
        /// The first operand's dtype.
        from: Dt,
        /// Operands.
        args: Vec<Rc<Expr>>,
    },
    /// The operand's values, seen with another extent (a broadcast) or shape.
    View(Rc<Expr>),
    /// The operand repeated along rows and columns (`jnp.tile`, whole tiles).
    Tile(Rc<Expr>),
}

/// An array value of the body.
#[derive(Debug)]
pub struct Expr {
    /// What it computes.
    pub kind: Kind,
    /// Logical rows (1: the same row in every sublane of every tile row).
    pub rows: u32,
    /// Logical columns (1: the same value in every lane).
    pub cols: u32,
    /// Its dtype.
    pub dt: Dt,
    /// Its logical shape.
    pub shape: Vec<usize>,
    /// Where it was stored once computed.
    pub cache: RefCell<Option<Arr>>,
}

impl Expr {
    /// An array in VMEM as a value.
    pub fn leaf(a: Arr) -> Rc<Expr> {
        Rc::new(Expr {
            rows: a.rows,
            cols: a.cols,
            dt: a.dt,
            shape: a.shape.clone(),
            kind: Kind::Leaf(a),
            cache: RefCell::new(None),
        })
    }

    /// A node of `kind` with this extent.
    pub fn new(kind: Kind, rows: u32, cols: u32, dt: Dt, shape: Vec<usize>) -> Rc<Expr> {
        Rc::new(Expr {
            kind,
            rows,
            cols,
            dt,
            shape,
            cache: RefCell::new(None),
        })
    }

    /// Row tiles.
    pub fn ti(&self) -> u32 {
        self.rows.div_ceil(SUB)
    }

    /// Column tiles.
    pub fn tj(&self) -> u32 {
        self.cols.div_ceil(LANES)
    }

    /// The array it is, if it is stored.
    pub fn stored(&self) -> Option<Arr> {
        if let Some(a) = self.cache.borrow().as_ref() {
            return Some(a.clone());
        }
        match &self.kind {
            Kind::Leaf(a) => Some(a.clone()),
            _ => None,
        }
    }

    /// The operands it is computed from (none once stored).
    pub fn children(&self) -> Vec<&Rc<Expr>> {
        if self.cache.borrow().is_some() {
            return Vec::new();
        }
        match &self.kind {
            Kind::Leaf(_) | Kind::Const(..) | Kind::Dyn(..) | Kind::Iota(_) => Vec::new(),
            Kind::Op { args, .. } => args.iter().collect(),
            Kind::View(a) | Kind::Tile(a) => vec![a],
        }
    }
}

/// The least and greatest value an int32 node takes in tile (i, j), when known while lowering
/// (iotas, constants, and sums, differences and products of them); `None` otherwise.
pub fn range(n: &Expr, i: u32, j: u32) -> Option<(i64, i64)> {
    if n.cache.borrow().is_some() || n.dt != Dt::I32 {
        return None;
    }
    let child = |a: &Expr| {
        (
            if a.rows == 1 { 0 } else { i },
            if a.cols == 1 { 0 } else { j },
        )
    };
    let r = match &n.kind {
        Kind::Iota(true) => {
            let b = (j * LANES) as i64;
            (b, b + LANES as i64 - 1)
        }
        Kind::Iota(false) => {
            let b = (i * SUB) as i64;
            (b, b + SUB as i64 - 1)
        }
        Kind::Const(s, _) => (s.as_i64(), s.as_i64()),
        Kind::View(a) => {
            let (ci, cj) = child(a);
            range(a, ci, cj)?
        }
        Kind::Op {
            op: Op::Bin(b),
            ty: VType::I32,
            args,
            ..
        } if args.len() == 2 => {
            let (ai, aj) = child(&args[0]);
            let (bi, bj) = child(&args[1]);
            let (x, y) = (range(&args[0], ai, aj)?, range(&args[1], bi, bj)?);
            match b {
                VBinOp::Add => (x.0 + y.0, x.1 + y.1),
                VBinOp::Sub => (x.0 - y.1, x.1 - y.0),
                VBinOp::Mul => {
                    let c = [x.0 * y.0, x.0 * y.1, x.1 * y.0, x.1 * y.1];
                    (*c.iter().min()?, *c.iter().max()?)
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    // Wrapping arithmetic past int32 is not decided here.
    let fits = |v: i64| v >= i32::MIN as i64 && v <= i32::MAX as i64;
    (fits(r.0) && fits(r.1)).then_some(r)
}

/// Whether bool node `n` is the same in every element of tile (i, j), and which: an int32
/// comparison whose operands' ranges there do not overlap the other way (the causal mask of
/// a block off the diagonal).
pub fn decided(n: &Expr, i: u32, j: u32) -> Option<bool> {
    if n.cache.borrow().is_some() {
        return None;
    }
    let Kind::Op {
        op: Op::Cmp(c),
        ty: VType::I32,
        args,
        ..
    } = &n.kind
    else {
        return None;
    };
    let at = |a: &Expr| {
        (
            if a.rows == 1 { 0 } else { i },
            if a.cols == 1 { 0 } else { j },
        )
    };
    let (ai, aj) = at(&args[0]);
    let (bi, bj) = at(&args[1]);
    let (x, y) = (range(&args[0], ai, aj)?, range(&args[1], bi, bj)?);
    match c {
        CmpOp::Lt if x.1 < y.0 => Some(true),
        CmpOp::Lt if x.0 >= y.1 => Some(false),
        CmpOp::Le if x.1 <= y.0 => Some(true),
        CmpOp::Le if x.0 > y.1 => Some(false),
        CmpOp::Gt if x.0 > y.1 => Some(true),
        CmpOp::Gt if x.1 <= y.0 => Some(false),
        CmpOp::Ge if x.0 >= y.1 => Some(true),
        CmpOp::Ge if x.1 < y.0 => Some(false),
        CmpOp::Eq if x.0 == x.1 && y.0 == y.1 => Some(x.0 == y.0),
        CmpOp::Eq | CmpOp::Ne if x.1 < y.0 || y.1 < x.0 => Some(*c == CmpOp::Ne),
        CmpOp::Ne if x.0 == x.1 && y.0 == y.1 => Some(x.0 != y.0),
        _ => None,
    }
}

/// Computes `op` of `src` (the first a register) into `dst`, rounding a bf16 result; `tmp` and
/// `m` are scratch.
#[allow(clippy::too_many_arguments)]
pub fn emit(
    e: &mut ProgramBuilder,
    op: Op,
    ty: VType,
    from: Dt,
    to: Dt,
    dst: VReg,
    src: &[VSrc],
    (tmp, m): (VReg, MReg),
) {
    let reg = |s: &VSrc| match s {
        VSrc::V(v) => *v,
        _ => tmp,
    };
    let a = reg(&src[0]);
    match op {
        Op::Bin(b) => {
            e.vbin(b, ty, dst, a, src[1]);
        }
        Op::Shift(b) => match src[1] {
            VSrc::Imm(k) if k >= 32 && b == VBinOp::Sra => {
                e.vbin(b, VType::I32, dst, a, 31u32);
            }
            VSrc::Imm(k) if k >= 32 => {
                e.vmov(VType::I32, dst, 0u32);
            }
            VSrc::Imm(_) => {
                e.vbin(b, VType::I32, dst, a, src[1]);
            }
            _ => {
                let amount = reg(&src[1]);
                e.vcmp(CmpOp::LtU, VType::I32, m, amount, 32u32);
                if b == VBinOp::Sra {
                    e.vsel(VType::I32, tmp, m, amount, 31u32);
                    e.vbin(b, VType::I32, dst, a, tmp);
                } else {
                    e.vbin(b, VType::I32, dst, a, amount);
                    e.vsel(VType::I32, dst, m, dst, 0u32);
                }
            }
        },
        Op::IntDiv(b) => match src[1] {
            VSrc::Imm(0) if b == VBinOp::Div => {
                e.vmov(VType::I32, dst, u32::MAX);
            }
            VSrc::Imm(0) => {
                e.vmov(VType::I32, dst, a);
            }
            VSrc::Imm(k) if k == u32::MAX && b == VBinOp::Div => {
                e.vbin(VBinOp::Mul, VType::I32, dst, a, u32::MAX);
            }
            VSrc::Imm(_) => {
                e.vbin(b, VType::I32, dst, a, src[1]);
            }
            _ => {
                let d = reg(&src[1]);
                e.vbin(b, VType::I32, dst, a, d);
                if b == VBinOp::Div {
                    // x / -1 is -x, wrapping (MIN stays MIN).
                    e.vcmp(CmpOp::Eq, VType::I32, m, d, u32::MAX);
                    e.vbin(VBinOp::Mul, VType::I32, tmp, a, u32::MAX);
                    e.vsel(VType::I32, dst, m, tmp, dst);
                    e.vcmp(CmpOp::Eq, VType::I32, m, d, 0u32);
                    e.vmov(VType::I32, tmp, u32::MAX);
                    e.vsel(VType::I32, dst, m, tmp, dst);
                } else {
                    e.vcmp(CmpOp::Eq, VType::I32, m, d, 0u32);
                    e.vsel(VType::I32, dst, m, a, dst);
                }
            }
        },
        Op::Un(u) => {
            e.vun(u, ty, dst, a);
        }
        Op::NotBool => {
            e.vbin(VBinOp::Xor, VType::I32, dst, a, 1u32);
        }
        Op::Exp2 => {
            e.vbin(
                VBinOp::Mul,
                VType::F32,
                dst,
                a,
                std::f32::consts::LN_2.to_bits(),
            );
            e.vun(VUnOp::Exp, VType::F32, dst, dst);
        }
        Op::Square => {
            e.vbin(VBinOp::Mul, ty, dst, a, a);
        }
        Op::IntPow(y) => {
            let one = if ty == VType::F32 {
                1.0f32.to_bits()
            } else {
                1
            };
            e.vmov(ty, tmp, a);
            e.vmov(ty, dst, one);
            let mut k = y.unsigned_abs();
            while k > 0 {
                if k & 1 == 1 {
                    e.vbin(VBinOp::Mul, ty, dst, dst, tmp);
                }
                k >>= 1;
                if k > 0 {
                    e.vbin(VBinOp::Mul, ty, tmp, tmp, tmp);
                }
            }
            if y < 0 {
                e.vmov(VType::F32, tmp, 1.0f32.to_bits());
                e.vbin(VBinOp::Div, VType::F32, dst, tmp, dst);
            }
        }
        Op::Cmp(c) => {
            e.vcmp(c, ty, m, a, src[1]);
            e.vmask(dst, m);
        }
        Op::Select => {
            // select_n(which, case0, case1): case1 where `which` is set.
            e.vcmp(CmpOp::Ne, VType::I32, m, a, 0u32);
            let c1 = match src[2] {
                VSrc::V(v) => v,
                other => {
                    e.vmov(vtype(to), tmp, other);
                    tmp
                }
            };
            e.vsel(vtype(to), dst, m, c1, src[1]);
        }
        Op::Copy => {
            e.vmov(ty, dst, a);
        }
        Op::Convert => match (from.is_float(), to) {
            (true, Dt::F32) => {
                e.vmov(VType::F32, dst, a);
            }
            // Rounded below.
            (true, Dt::Bf16) if from != Dt::Bf16 => {
                e.vcvt(CvtOp::Bf16, dst, a);
                return;
            }
            (true, Dt::Bf16) => {
                e.vmov(VType::F32, dst, a);
            }
            (true, Dt::I32) => {
                e.vcvt(CvtOp::F2I, dst, a);
            }
            (false, Dt::F32) | (false, Dt::Bf16) => {
                e.vcvt(CvtOp::I2F, dst, a);
            }
            (false, Dt::I32) => {
                e.vmov(VType::I32, dst, a);
            }
            // Wrapped to 8 bits, sign extended.
            (f, Dt::I8) => {
                if f {
                    e.vcvt(CvtOp::F2I, dst, a);
                    e.vbin(VBinOp::Shl, VType::I32, dst, dst, 24u32);
                } else {
                    e.vbin(VBinOp::Shl, VType::I32, dst, a, 24u32);
                }
                e.vbin(VBinOp::Sra, VType::I32, dst, dst, 24u32);
            }
            (f, Dt::Bool) => {
                let t = if f { VType::F32 } else { VType::I32 };
                e.vcmp(CmpOp::Ne, t, m, a, 0u32);
                e.vmask(dst, m);
            }
        },
    }
    let round = to == Dt::Bf16
        && !matches!(op, Op::Copy | Op::Select | Op::Cmp(_))
        && !(op == Op::Convert && from == Dt::Bf16);
    if round {
        e.vcvt(CvtOp::Bf16, dst, dst);
    }
}
