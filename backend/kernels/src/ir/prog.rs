//! The scalar program of a tile node: what every element (and every row) computes.
//!
//! A [`Prog`] is a list of SSA nodes over a node's iteration space `[outer..., row...]`. A node
//! is either *full* (one value per element) or *per-row* (one value per row, constant along the
//! row dims). Operands are inputs of the tile node: full operands are broadcast to the whole
//! space, per-row operands to the outer dims. Reductions turn a full value into a per-row one.
//! Arithmetic follows the lane types: floating dtypes compute in f32, integers and bool in i32;
//! [`POp::Cast`] rounds to a narrower float or converts, as PyTorch does at operator boundaries.

use crate::dtype::{DType, Scalar};

/// A reference to an earlier node.
pub type PRef = u32;

/// Binary operations (typed by the operands' lane type).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (f32: IEEE; i32: truncating, 0 for division by zero).
    Div,
    /// `torch.minimum` (NaN wins).
    Min,
    /// `torch.maximum` (NaN wins).
    Max,
    /// `a ** b` (f32).
    Pow,
    /// C `fmod` / i32 `%`.
    Rem,
    /// Bitwise and (i32).
    And,
    /// Bitwise or (i32).
    Or,
    /// Bitwise xor (i32).
    Xor,
    /// Shift left by the low 5 bits of `b` (i32).
    Shl,
    /// Logical shift right by the low 5 bits of `b` (i32).
    Shr,
    /// Arithmetic shift right by the low 5 bits of `b` (i32).
    Sra,
}

/// Unary operations.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UnOp {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `sign(x)`.
    Sign,
    /// `exp(x)`.
    Exp,
    /// `log(x)`.
    Log,
    /// `log1p(x)`.
    Log1p,
    /// `expm1(x)`.
    Expm1,
    /// `sqrt(x)`.
    Sqrt,
    /// `1/sqrt(x)`.
    Rsqrt,
    /// `1/x`.
    Rcp,
    /// `sin(x)`.
    Sin,
    /// `cos(x)`.
    Cos,
    /// `tanh(x)`.
    Tanh,
    /// `erf(x)`.
    Erf,
    /// `1/(1+exp(-x))`.
    Sigmoid,
    /// `floor(x)`.
    Floor,
    /// `ceil(x)`.
    Ceil,
    /// Round half to even.
    Round,
    /// Round toward zero.
    Trunc,
    /// Bitwise not (i32).
    Not,
    /// The lane's 32 bits read as the node's lane type (f32 <-> i32), unchanged: see
    /// [`ProgBuilder::bitcast`].
    Bitcast,
}

/// Comparisons; the result is a bool (0/1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmpKind {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// Reductions along the row.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RedKind {
    /// Sum (sequential across 128-lane chunks, then a pairwise tree across lanes).
    Sum,
    /// Maximum (NaN wins).
    Max,
    /// Minimum (NaN wins).
    Min,
    /// Product (sequential across 128-lane chunks, then a tree of lane rotations).
    Prod,
}

/// One operation.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum POp {
    /// Operand `i` of the node (its dtype widened to a lane).
    Input(u32),
    /// A constant.
    Const(Scalar),
    /// The coordinate along dimension `d` of the iteration space (i32).
    Index(u32),
    /// `a op b`.
    Bin(BinOp, PRef, PRef),
    /// `op a`.
    Un(UnOp, PRef),
    /// `a cmp b` (bool).
    Cmp(CmpKind, PRef, PRef),
    /// `c ? a : b` (`c` a bool).
    Select(PRef, PRef, PRef),
    /// Converts to this node's dtype: rounds floats to bf16/f16, truncates floats to ints,
    /// maps non-zero to true for bool.
    Cast(PRef),
    /// Reduces a full value along the row to a per-row value.
    Reduce(RedKind, PRef),
    /// The index along the row of the first maximum (`argmax`) of a full value, as i32
    /// (per-row). NaN counts as the maximum.
    ArgMax(PRef),
    /// Like `ArgMax`, for the minimum.
    ArgMin(PRef),
}

impl POp {
    /// The same operation on arguments renamed by `m` (inputs, constants and coordinates have
    /// none).
    pub fn map_args(self, m: impl Fn(PRef) -> PRef) -> POp {
        match self {
            POp::Input(_) | POp::Const(_) | POp::Index(_) => self,
            POp::Bin(k, a, b) => POp::Bin(k, m(a), m(b)),
            POp::Un(k, a) => POp::Un(k, m(a)),
            POp::Cmp(k, a, b) => POp::Cmp(k, m(a), m(b)),
            POp::Select(c, a, b) => POp::Select(m(c), m(a), m(b)),
            POp::Cast(a) => POp::Cast(m(a)),
            POp::Reduce(k, a) => POp::Reduce(k, m(a)),
            POp::ArgMax(a) => POp::ArgMax(m(a)),
            POp::ArgMin(a) => POp::ArgMin(m(a)),
        }
    }
}

/// A node: operation, result dtype and whether it is per-row.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct PNode {
    /// What it computes.
    pub op: POp,
    /// Its dtype.
    pub dtype: DType,
    /// Constant along the row.
    pub per_row: bool,
}

/// A tile node's program.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Prog {
    /// The nodes, each referring only to earlier ones.
    pub nodes: Vec<PNode>,
    /// What each output of the tile node is.
    pub outputs: Vec<PRef>,
}

impl Prog {
    /// The node `r`.
    pub fn node(&self, r: PRef) -> &PNode {
        &self.nodes[r as usize]
    }

    /// Merges nodes that compute the same thing (the same operation on the same arguments,
    /// dtype and per-row flag; constants compared bit for bit, so `0.0` and `-0.0` stay
    /// apart): a fused group's members each bring their own copy of a shared coordinate,
    /// cast or comparison. The duplicates are gone, their readers read the first copy.
    pub fn cse(&mut self) {
        let same_op = |a: &POp, b: &POp| match (a, b) {
            (POp::Const(x), POp::Const(y)) => match (x, y) {
                (Scalar::Float(x), Scalar::Float(y)) => x.to_bits() == y.to_bits(),
                _ => x == y,
            },
            _ => a == b,
        };
        let mut out = Prog::default();
        let mut map: Vec<PRef> = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let op = n.op.map_args(|r| map[r as usize]);
            let found = out
                .nodes
                .iter()
                .position(|x| x.dtype == n.dtype && x.per_row == n.per_row && same_op(&x.op, &op));
            map.push(match found {
                Some(k) => k as PRef,
                None => out.push(op, n.dtype, n.per_row),
            });
        }
        out.outputs = self.outputs.iter().map(|o| map[*o as usize]).collect();
        *self = out;
    }

    /// Appends a node.
    pub fn push(&mut self, op: POp, dtype: DType, per_row: bool) -> PRef {
        self.nodes.push(PNode { op, dtype, per_row });
        self.nodes.len() as PRef - 1
    }

    /// Whether any node reduces.
    pub fn has_reductions(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.op, POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_)))
    }

    /// A canonical byte string of the program, for cache keys.
    pub fn key(&self) -> String {
        format!("{:?}", self)
    }
}

/// Builds programs with PyTorch's semantics, one helper per elementwise operation.
///
/// Every helper computes in lane precision (f32 or i32) and returns a node of the requested
/// dtype; [`ProgBuilder::round`] applies the rounding PyTorch does when an operator's result is
/// bf16 or f16.
#[derive(Default)]
pub struct ProgBuilder {
    /// The program so far.
    pub prog: Prog,
}

impl ProgBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    fn n(&self, r: PRef) -> PNode {
        *self.prog.node(r)
    }

    /// Operand `i` of dtype `dtype`, full or per-row.
    pub fn input(&mut self, i: u32, dtype: DType, per_row: bool) -> PRef {
        self.prog.push(POp::Input(i), dtype, per_row)
    }

    /// A constant of dtype `dtype` (per-row: it does not vary along the row).
    pub fn constant(&mut self, v: Scalar, dtype: DType) -> PRef {
        self.prog.push(POp::Const(v), dtype, true)
    }

    /// The coordinate along dimension `d` (full). In a program with reductions, `d` must be a
    /// row dim (or a dim of size 1).
    pub fn index(&mut self, d: u32) -> PRef {
        self.prog.push(POp::Index(d), DType::I32, false)
    }

    /// Converts `a` to `dtype` (no-op when equal).
    pub fn cast(&mut self, a: PRef, dtype: DType) -> PRef {
        let na = self.n(a);
        if na.dtype == dtype {
            return a;
        }
        self.prog.push(POp::Cast(a), dtype, na.per_row)
    }

    /// Rounds an f32-precision value to `dtype` (bf16/f16) or converts it: what PyTorch does to
    /// an operator's result.
    pub fn round(&mut self, a: PRef, dtype: DType) -> PRef {
        self.cast(a, dtype)
    }

    /// The lane-level dtype a value computes in (F32 or I32, bool as I32).
    fn compute_dtype(d: DType) -> DType {
        if d.is_float() { DType::F32 } else { DType::I32 }
    }

    /// Binary operation computed in `dtype`'s lane precision; the result has dtype `dtype`
    /// (bf16/f16 results are rounded).
    pub fn bin(&mut self, op: BinOp, a: PRef, b: PRef, dtype: DType) -> PRef {
        let ct = Self::compute_dtype(dtype);
        let (a, b) = (self.cast(a, ct), self.cast(b, ct));
        let per_row = self.n(a).per_row && self.n(b).per_row;
        let r = self.prog.push(POp::Bin(op, a, b), ct, per_row);
        self.cast(r, dtype)
    }

    /// Unary operation computed in `dtype`'s lane precision.
    pub fn un(&mut self, op: UnOp, a: PRef, dtype: DType) -> PRef {
        let ct = Self::compute_dtype(dtype);
        let a = self.cast(a, ct);
        let per_row = self.n(a).per_row;
        let r = self.prog.push(POp::Un(op, a), ct, per_row);
        self.cast(r, dtype)
    }

    /// The 32 bits of `a` reinterpreted as `to` (`F32` or `I32`): IEEE bits of an f32 as an
    /// i32 and back (`signbit`, `nextafter`, `frexp`). `a` must be an f32 or i32 value.
    pub fn bitcast(&mut self, a: PRef, to: DType) -> PRef {
        let na = self.n(a);
        debug_assert!(matches!(na.dtype, DType::F32 | DType::I32));
        debug_assert!(matches!(to, DType::F32 | DType::I32));
        if na.dtype == to {
            return a;
        }
        self.prog.push(POp::Un(UnOp::Bitcast, a), to, na.per_row)
    }

    /// Comparison computed in `dtype` (the promoted operand dtype); the result is bool.
    pub fn cmp(&mut self, op: CmpKind, a: PRef, b: PRef, dtype: DType) -> PRef {
        let ct = Self::compute_dtype(dtype);
        let (a, b) = (self.cast(a, ct), self.cast(b, ct));
        let per_row = self.n(a).per_row && self.n(b).per_row;
        self.prog.push(POp::Cmp(op, a, b), DType::Bool, per_row)
    }

    /// `c ? a : b` in `dtype`.
    pub fn select(&mut self, c: PRef, a: PRef, b: PRef, dtype: DType) -> PRef {
        let c = self.cast(c, DType::Bool);
        let (a, b) = (self.cast(a, dtype), self.cast(b, dtype));
        let per_row = self.n(c).per_row && self.n(a).per_row && self.n(b).per_row;
        self.prog.push(POp::Select(c, a, b), dtype, per_row)
    }

    /// Reduces `a` along the row; the result is per-row of dtype `dtype` (sums accumulate in
    /// the lane precision of `dtype`).
    pub fn reduce(&mut self, kind: RedKind, a: PRef, dtype: DType) -> PRef {
        let ct = Self::compute_dtype(dtype);
        let a = self.cast(a, ct);
        let r = self.prog.push(POp::Reduce(kind, a), ct, true);
        self.cast(r, dtype)
    }

    /// Index of the first maximum (or minimum) along the row, as int64.
    pub fn arg(&mut self, max: bool, a: PRef) -> PRef {
        let ct = Self::compute_dtype(self.n(a).dtype);
        let a = self.cast(a, ct);
        let op = if max { POp::ArgMax(a) } else { POp::ArgMin(a) };
        let r = self.prog.push(op, DType::I32, true);
        self.cast(r, DType::I64)
    }

    /// Marks `r` as the next output.
    pub fn output(&mut self, r: PRef) {
        self.prog.outputs.push(r);
    }

    /// The dtype of `r`.
    pub fn dtype(&self, r: PRef) -> DType {
        self.n(r).dtype
    }

    /// The finished program.
    pub fn finish(self) -> Prog {
        self.prog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cse_merges_repeats_and_keeps_signed_zeros_apart() {
        // Two members each bring the coordinate, the cast of the target and the one-hot
        // compare; by hand the program computes 6 distinct values: x, t, index, cast, compare
        // and the select, plus the two constants 0.0 and -0.0 (different bits, kept apart).
        let mut p = Prog::default();
        let x = p.push(POp::Input(0), DType::F32, false);
        let t = p.push(POp::Input(1), DType::I64, true);
        let i1 = p.push(POp::Index(1), DType::I32, false);
        let c1 = p.push(POp::Cast(t), DType::I32, true);
        let h1 = p.push(POp::Cmp(CmpKind::Eq, i1, c1), DType::Bool, false);
        let i2 = p.push(POp::Index(1), DType::I32, false);
        let c2 = p.push(POp::Cast(t), DType::I32, true);
        let h2 = p.push(POp::Cmp(CmpKind::Eq, i2, c2), DType::Bool, false);
        let z = p.push(POp::Const(Scalar::Float(0.0)), DType::F32, true);
        let nz = p.push(POp::Const(Scalar::Float(-0.0)), DType::F32, true);
        let a = p.push(POp::Select(h1, x, z), DType::F32, false);
        let b = p.push(POp::Select(h2, x, nz), DType::F32, false);
        p.outputs = vec![a, b];
        p.cse();
        assert_eq!(p.nodes.len(), 9);
        let (a, b) = (p.node(p.outputs[0]).op, p.node(p.outputs[1]).op);
        let (POp::Select(ca, xa, za), POp::Select(cb, xb, zb)) = (a, b) else {
            panic!("selects: {a:?} {b:?}")
        };
        assert_eq!((ca, xa), (cb, xb));
        assert_ne!(za, zb);
        // The same node read through a different dtype or per-row flag is another value.
        let mut q = Prog::default();
        let t = q.push(POp::Input(0), DType::I64, true);
        q.push(POp::Cast(t), DType::I32, true);
        q.push(POp::Cast(t), DType::F32, true);
        q.push(POp::Cast(t), DType::I32, false);
        q.cse();
        assert_eq!(q.nodes.len(), 4);
    }
}
