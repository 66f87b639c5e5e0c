//! The operation selectors that instructions carry: which ALU operation, which comparison, which
//! memory format, and so on.
//!
//! Every selector is a plain enum with an assembly name (`add`, `lt`, `bf16`, ...), listed in
//! `ALL` so that the assembler, the property tests and the documentation enumerate the same set.

use std::fmt;

macro_rules! named_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every value, in encoding order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The assembly spelling.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// Parses the assembly spelling.
            pub fn from_name(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The position in [`Self::ALL`], used as the binary code.
            pub fn code(self) -> u8 {
                Self::ALL.iter().position(|v| *v == self).expect("value is in ALL") as u8
            }

            /// The value with binary code `code`.
            pub fn from_code(code: u8) -> Option<Self> {
                Self::ALL.get(code as usize).copied()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum!(
    /// Scalar ALU operations on 32-bit integers (`sadd`, `ssub`, ...).
    SAluOp {
        /// Wrapping addition.
        Add = "add",
        /// Wrapping subtraction.
        Sub = "sub",
        /// Wrapping multiplication (low 32 bits).
        Mul = "mul",
        /// Signed division, rounding toward zero; division by zero faults.
        Div = "div",
        /// Signed remainder (sign of the dividend); division by zero faults.
        Rem = "rem",
        /// Unsigned division; division by zero faults.
        DivU = "divu",
        /// Unsigned remainder; division by zero faults.
        RemU = "remu",
        /// Bitwise and.
        And = "and",
        /// Bitwise or.
        Or = "or",
        /// Bitwise exclusive or.
        Xor = "xor",
        /// Shift left by the low 5 bits of the second operand.
        Shl = "shl",
        /// Logical shift right.
        Shr = "shr",
        /// Arithmetic shift right.
        Sra = "sra",
        /// Signed minimum.
        Min = "min",
        /// Signed maximum.
        Max = "max",
    }
);

named_enum!(
    /// Comparisons, for `scmp` (result 0/1) and `vcmp` (result in a mask register).
    CmpOp {
        /// Equal.
        Eq = "eq",
        /// Not equal (true for NaN operands).
        Ne = "ne",
        /// Less than.
        Lt = "lt",
        /// Less than or equal.
        Le = "le",
        /// Greater than.
        Gt = "gt",
        /// Greater than or equal.
        Ge = "ge",
        /// Unsigned less than (integers only).
        LtU = "ltu",
        /// Unsigned greater than or equal (integers only).
        GeU = "geu",
    }
);

named_enum!(
    /// Branch conditions on one scalar register.
    BrCond {
        /// Taken when the register is zero.
        Zero = "z",
        /// Taken when the register is not zero.
        NonZero = "nz",
    }
);

named_enum!(
    /// Values a core can read about where it runs (`ssys`).
    SysReg {
        /// This chip's index in the launch's topology.
        Chip = "chip",
        /// This core's index on its chip.
        Core = "core",
        /// Number of chips in the topology.
        NumChips = "nchips",
        /// Number of cores per chip.
        NumCores = "ncores",
        /// Mesh coordinate along axis 0.
        X = "x",
        /// Mesh coordinate along axis 1.
        Y = "y",
        /// Mesh coordinate along axis 2.
        Z = "z",
        /// Mesh size along axis 0.
        DimX = "dimx",
        /// Mesh size along axis 1.
        DimY = "dimy",
        /// Mesh size along axis 2.
        DimZ = "dimz",
    }
);

named_enum!(
    /// Element type of a vector operation: the 32 bits of each lane read as f32 or i32.
    VType {
        /// IEEE binary32.
        F32 = "f32",
        /// Two's-complement 32-bit integer.
        I32 = "i32",
    }
);

named_enum!(
    /// Binary vector operations (`vadd.f32`, `vmax.i32`, ...).
    VBinOp {
        /// Addition (wrapping for i32).
        Add = "add",
        /// Subtraction (wrapping for i32).
        Sub = "sub",
        /// Multiplication (wrapping for i32).
        Mul = "mul",
        /// Division: IEEE for f32; for i32 rounds toward zero and gives 0 for division by zero.
        Div = "div",
        /// Minimum; NaN wins for f32 (as `torch.minimum`).
        Min = "min",
        /// Maximum; NaN wins for f32 (as `torch.maximum`).
        Max = "max",
        /// Power (f32 only).
        Pow = "pow",
        /// Truncated remainder, the sign of the dividend (C `fmod`; i32 `%`, 0 for division by zero).
        Rem = "rem",
        /// Bitwise and (i32 only).
        And = "and",
        /// Bitwise or (i32 only).
        Or = "or",
        /// Bitwise xor (i32 only).
        Xor = "xor",
        /// Shift left by the low 5 bits (i32 only).
        Shl = "shl",
        /// Arithmetic shift right (i32 only).
        Sra = "sra",
        /// Logical shift right (i32 only).
        Shr = "shr",
    }
);

impl VBinOp {
    /// Whether the operation is defined for `ty`.
    pub fn supports(self, ty: VType) -> bool {
        use VBinOp::*;
        match self {
            Add | Sub | Mul | Div | Min | Max | Rem => true,
            Pow => ty == VType::F32,
            And | Or | Xor | Shl | Sra | Shr => ty == VType::I32,
        }
    }
}

named_enum!(
    /// Unary vector operations (`vexp.f32`, `vabs.i32`, ...).
    VUnOp {
        /// Negation.
        Neg = "neg",
        /// Absolute value.
        Abs = "abs",
        /// Sign: -1, 0 or 1 (NaN stays NaN for f32).
        Sign = "sign",
        /// Natural exponential (f32, transcendental unit).
        Exp = "exp",
        /// Natural logarithm (f32, transcendental unit).
        Log = "log",
        /// log(1 + x) (f32, transcendental unit).
        Log1p = "log1p",
        /// exp(x) - 1 (f32, transcendental unit).
        Expm1 = "expm1",
        /// Square root (f32, transcendental unit).
        Sqrt = "sqrt",
        /// Reciprocal square root (f32, transcendental unit).
        Rsqrt = "rsqrt",
        /// Reciprocal (f32, transcendental unit).
        Rcp = "rcp",
        /// Sine (f32, transcendental unit).
        Sin = "sin",
        /// Cosine (f32, transcendental unit).
        Cos = "cos",
        /// Hyperbolic tangent (f32, transcendental unit).
        Tanh = "tanh",
        /// Error function (f32, transcendental unit).
        Erf = "erf",
        /// Logistic sigmoid 1 / (1 + exp(-x)) (f32, transcendental unit).
        Sigmoid = "sigmoid",
        /// Round toward negative infinity (f32).
        Floor = "floor",
        /// Round toward positive infinity (f32).
        Ceil = "ceil",
        /// Round half to even (f32).
        Round = "round",
        /// Round toward zero (f32).
        Trunc = "trunc",
        /// Bitwise not (i32 only).
        Not = "not",
    }
);

impl VUnOp {
    /// Whether the operation is defined for `ty`.
    pub fn supports(self, ty: VType) -> bool {
        use VUnOp::*;
        match self {
            Neg | Abs | Sign => true,
            Not => ty == VType::I32,
            _ => ty == VType::F32,
        }
    }

    /// Whether the operation runs on the transcendental unit (EUP) rather than the vector ALU.
    pub fn is_transcendental(self) -> bool {
        use VUnOp::*;
        matches!(
            self,
            Exp | Log | Log1p | Expm1 | Sqrt | Rsqrt | Rcp | Sin | Cos | Tanh | Erf | Sigmoid
        )
    }
}

named_enum!(
    /// Conversions between lane interpretations (`vcvt.f2i`, ...).
    CvtOp {
        /// f32 to i32, rounding toward zero; NaN gives 0, out-of-range saturates.
        F2I = "f2i",
        /// i32 to f32, rounding to nearest even.
        I2F = "i2f",
        /// Round an f32 to bf16 precision (nearest even), keeping it in an f32 lane.
        Bf16 = "bf16",
        /// Round an f32 to f16 precision (nearest even, with f16 overflow and subnormals), keeping
        /// it in an f32 lane.
        F16 = "f16",
    }
);

named_enum!(
    /// In-memory element formats of vector loads and stores. A lane always holds 32 bits: loads
    /// widen, stores narrow.
    MemFmt {
        /// 4 bytes, copied as they are (f32 or i32).
        W32 = "w32",
        /// 2-byte bfloat16, widened exactly to f32; stores round to nearest even.
        Bf16 = "bf16",
        /// 2-byte IEEE half, widened exactly to f32; stores round to nearest even.
        F16 = "f16",
        /// 8-byte integer: loads keep the low 32 bits, stores sign-extend an i32.
        I64 = "i64",
        /// 1-byte unsigned: loads zero-extend, stores keep the low 8 bits (bools are 0/1).
        U8 = "u8",
    }
);

impl MemFmt {
    /// Bytes per element in memory.
    pub const fn bytes(self) -> u32 {
        match self {
            MemFmt::W32 => 4,
            MemFmt::Bf16 | MemFmt::F16 => 2,
            MemFmt::I64 => 8,
            MemFmt::U8 => 1,
        }
    }
}

named_enum!(
    /// Cross-lane reductions (`vred.add.f32.lane`, ...).
    RedOp {
        /// Sum, as a pairwise tree (defined order).
        Add = "add",
        /// Maximum (NaN wins for f32).
        Max = "max",
        /// Minimum (NaN wins for f32).
        Min = "min",
    }
);

named_enum!(
    /// Which axis of a vector register an operation runs along.
    Axis {
        /// Along the 128 lanes of each sublane.
        Lane = "lane",
        /// Along the 8 sublanes of each lane.
        Sub = "sub",
    }
);

named_enum!(
    /// What `viota` writes into each element.
    IotaKind {
        /// The lane index, 0..128.
        Lane = "lane",
        /// The sublane index, 0..8.
        Sub = "sub",
        /// The flat index `sublane * 128 + lane`, 0..1024.
        Flat = "flat",
    }
);

named_enum!(
    /// Mask register logic (`mand`, `mor`, ...).
    MaskOp {
        /// Both set.
        And = "and",
        /// Either set.
        Or = "or",
        /// Exactly one set.
        Xor = "xor",
        /// First set and second clear.
        AndNot = "andn",
    }
);

named_enum!(
    /// Input format of matrix-unit operands in VMEM.
    MxuFmt {
        /// bfloat16 operands: one pass.
        Bf16 = "bf16",
        /// f32 operands, split into bf16 parts according to the precision.
        F32 = "f32",
    }
);

impl MxuFmt {
    /// Bytes per element in VMEM.
    pub const fn bytes(self) -> u32 {
        match self {
            MxuFmt::Bf16 => 2,
            MxuFmt::F32 => 4,
        }
    }
}

named_enum!(
    /// Matrix-unit precision: how many bf16 passes an f32 matmul takes.
    Precision {
        /// One bf16 pass (`DEFAULT`): both operands rounded to bf16.
        P1 = "p1",
        /// Three bf16 passes (`HIGH`, bf16x3).
        P3 = "p3",
        /// Six bf16 passes (`HIGHEST`, bf16x6).
        P6 = "p6",
    }
);

impl Precision {
    /// Number of bf16 passes through the array.
    pub const fn passes(self) -> u32 {
        match self {
            Precision::P1 => 1,
            Precision::P3 => 3,
            Precision::P6 => 6,
        }
    }
}

named_enum!(
    /// Memory spaces a DMA reads or writes.
    Space {
        /// The chip's high-bandwidth memory, through an argument slot.
        Hbm = "hbm",
        /// The core's vector memory.
        Vmem = "vmem",
        /// The core's scalar memory.
        Smem = "smem",
    }
);
