//! A small vocabulary for writing elementwise math as tile programs: f32 arithmetic,
//! comparisons and selects on [`ProgBuilder`] nodes, with constants written as numbers.
//!
//! Everything computes in f32 lanes, as PyTorch's CPU kernels compute float, bfloat16 and
//! float16 operators in their "opmath" type; the operator rounds once at its output. A
//! function with branches (`x < 0.5 ? f(x) : g(x)`) computes every branch and selects, as a
//! vector unit does.

use crate::dtype::{DType, Scalar};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, UnOp};

const F: DType = DType::F32;

/// f32 expressions over a program being built.
pub struct Ex<'a> {
    /// The program.
    pub p: &'a mut ProgBuilder,
}

macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, a: PRef) -> PRef {
                self.p.un(UnOp::$op, a, F)
            }
        )*
    };
}

macro_rules! binary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, a: PRef, b: PRef) -> PRef {
                self.p.bin(BinOp::$op, a, b, F)
            }
        )*
    };
}

macro_rules! compare {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, a: PRef, b: PRef) -> PRef {
                self.p.cmp(CmpKind::$op, a, b, F)
            }
        )*
    };
}

impl<'a> Ex<'a> {
    /// Expressions over `p`.
    pub fn new(p: &'a mut ProgBuilder) -> Self {
        Ex { p }
    }

    /// The f32 constant `v`.
    pub fn k(&mut self, v: f64) -> PRef {
        self.p.constant(Scalar::Float(v), F)
    }

    /// `a` converted to f32.
    pub fn f(&mut self, a: PRef) -> PRef {
        self.p.cast(a, F)
    }

    unary! {
        /// `-a`.
        neg => Neg,
        /// `|a|`.
        abs => Abs,
        /// `e^a`.
        exp => Exp,
        /// `ln a`.
        log => Log,
        /// `ln(1 + a)`.
        log1p => Log1p,
        /// `e^a - 1`.
        expm1 => Expm1,
        /// `sqrt a`.
        sqrt => Sqrt,
        /// `1 / sqrt a`.
        rsqrt => Rsqrt,
        /// `1 / a`.
        rcp => Rcp,
        /// `sin a`.
        sin => Sin,
        /// `cos a`.
        cos => Cos,
        /// `tanh a`.
        tanh => Tanh,
        /// `erf a`.
        erf => Erf,
        /// `1 / (1 + e^-a)`.
        sigmoid => Sigmoid,
        /// Round down.
        floor => Floor,
        /// Round up.
        ceil => Ceil,
        /// Round half to even.
        round => Round,
        /// Round toward zero.
        trunc => Trunc,
    }

    binary! {
        /// `a + b`.
        add => Add,
        /// `a - b`.
        sub => Sub,
        /// `a * b`.
        mul => Mul,
        /// `a / b`.
        div => Div,
        /// `torch.minimum` (NaN wins).
        min => Min,
        /// `torch.maximum` (NaN wins).
        max => Max,
        /// `a ** b`.
        pow => Pow,
        /// C `fmod`.
        fmod => Rem,
    }

    compare! {
        /// `a < b`.
        lt => Lt,
        /// `a <= b`.
        le => Le,
        /// `a > b`.
        gt => Gt,
        /// `a >= b`.
        ge => Ge,
        /// `a == b`.
        eq => Eq,
        /// `a != b` (true for NaN).
        ne => Ne,
    }

    /// `a + k`.
    pub fn addk(&mut self, a: PRef, k: f64) -> PRef {
        let c = self.k(k);
        self.add(a, c)
    }

    /// `a * k`.
    pub fn mulk(&mut self, a: PRef, k: f64) -> PRef {
        let c = self.k(k);
        self.mul(a, c)
    }

    /// `k - a`.
    pub fn ksub(&mut self, k: f64, a: PRef) -> PRef {
        let c = self.k(k);
        self.sub(c, a)
    }

    /// `k / a`.
    pub fn kdiv(&mut self, k: f64, a: PRef) -> PRef {
        let c = self.k(k);
        self.div(c, a)
    }

    /// `a < k`.
    pub fn ltk(&mut self, a: PRef, k: f64) -> PRef {
        let c = self.k(k);
        self.lt(a, c)
    }

    /// `a <= k`.
    pub fn lek(&mut self, a: PRef, k: f64) -> PRef {
        let c = self.k(k);
        self.le(a, c)
    }

    /// `a > k`.
    pub fn gtk(&mut self, a: PRef, k: f64) -> PRef {
        let c = self.k(k);
        self.gt(a, c)
    }

    /// `a >= k`.
    pub fn gek(&mut self, a: PRef, k: f64) -> PRef {
        let c = self.k(k);
        self.ge(a, c)
    }

    /// `a == k`.
    pub fn eqk(&mut self, a: PRef, k: f64) -> PRef {
        let c = self.k(k);
        self.eq(a, c)
    }

    /// `c ? a : b` (f32).
    pub fn sel(&mut self, c: PRef, a: PRef, b: PRef) -> PRef {
        self.p.select(c, a, b, F)
    }

    /// `c ? k : b`.
    pub fn selk(&mut self, c: PRef, k: f64, b: PRef) -> PRef {
        let kv = self.k(k);
        self.sel(c, kv, b)
    }

    /// Both bools.
    pub fn and(&mut self, a: PRef, b: PRef) -> PRef {
        self.p.bin(BinOp::And, a, b, DType::Bool)
    }

    /// Either bool.
    pub fn or(&mut self, a: PRef, b: PRef) -> PRef {
        self.p.bin(BinOp::Or, a, b, DType::Bool)
    }

    /// Not a bool.
    pub fn not(&mut self, a: PRef) -> PRef {
        let one = self.p.constant(Scalar::Int(1), DType::I32);
        self.p.bin(BinOp::Xor, a, one, DType::Bool)
    }

    /// `a` is NaN.
    pub fn isnan(&mut self, a: PRef) -> PRef {
        self.ne(a, a)
    }

    /// `|a| == inf`.
    pub fn isinf(&mut self, a: PRef) -> PRef {
        let m = self.abs(a);
        self.eqk(m, f64::INFINITY)
    }

    /// `c0 x^n + c1 x^(n-1) + ... + cn` by Horner's rule, highest coefficient first (Cephes'
    /// `polevl`).
    pub fn poly(&mut self, x: PRef, coeffs: &[f64]) -> PRef {
        let mut acc = self.k(coeffs[0]);
        for &c in &coeffs[1..] {
            let m = self.mul(acc, x);
            acc = self.addk(m, c);
        }
        acc
    }

    /// Like [`Ex::poly`] with an implicit leading coefficient 1 (Cephes' `p1evl`).
    pub fn poly1(&mut self, x: PRef, coeffs: &[f64]) -> PRef {
        let mut acc = self.addk(x, coeffs[0]);
        for &c in &coeffs[1..] {
            let m = self.mul(acc, x);
            acc = self.addk(m, c);
        }
        acc
    }

    /// Cephes' `chbevl`: a Chebyshev series `sum' c_i T_i(x / 2)`, coefficients highest first.
    pub fn chbevl(&mut self, x: PRef, coeffs: &[f64]) -> PRef {
        let mut b0 = self.k(coeffs[0]);
        let mut b1 = self.k(0.0);
        let mut b2 = b1;
        for &c in &coeffs[1..] {
            b2 = b1;
            b1 = b0;
            let t = self.mul(x, b1);
            let t = self.sub(t, b2);
            b0 = self.addk(t, c);
        }
        let d = self.sub(b0, b2);
        self.mulk(d, 0.5)
    }

    /// `copysign(|a|, sign of b)` for a sign taken from a comparison (`neg` true: negative).
    pub fn with_sign(&mut self, a: PRef, neg: PRef) -> PRef {
        let m = self.neg(a);
        self.sel(neg, m, a)
    }
}
