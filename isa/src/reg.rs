//! Register and resource names: scalar, vector and mask registers, matrix units, semaphores and
//! argument slots.
//!
//! Each name is a small newtype that can only hold a value inside its architectural range, so a
//! decoded instruction never names a register that does not exist. The printed form is the
//! assembly spelling (`s3`, `v12`, `m1`, `mxu2`, `sem5`, `a0`).

use std::fmt;

/// Number of scalar registers. `s0` always reads as zero; writes to it are discarded.
pub const NUM_SREGS: u8 = 32;
/// Number of architectural vector registers (a chip may implement fewer; see its preset).
pub const NUM_VREGS: u8 = 64;
/// Number of mask registers.
pub const NUM_MREGS: u8 = 16;
/// Largest number of matrix units a core may have.
pub const MAX_MXUS: u8 = 16;
/// Number of semaphores per core.
pub const NUM_SEMS: u8 = 64;
/// Largest number of argument slots a program may declare.
pub const MAX_ARGS: u8 = 64;

/// Sublanes in a vector register.
pub const SUBLANES: usize = 8;
/// Lanes in a vector register.
pub const LANES: usize = 128;
/// 32-bit elements in a vector register (8 x 128).
pub const VREG_ELEMS: usize = SUBLANES * LANES;

macro_rules! reg_type {
    ($(#[$doc:meta])* $name:ident, $limit:expr, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        pub struct $name(u8);

        impl $name {
            /// Exclusive upper bound of the index.
            pub const COUNT: u8 = $limit;
            /// The assembly prefix (`s`, `v`, ...).
            pub const PREFIX: &'static str = $prefix;

            /// Makes the name, or `None` when `index` is out of range.
            pub const fn new(index: u8) -> Option<Self> {
                if index < $limit { Some(Self(index)) } else { None }
            }

            /// Makes the name; panics when out of range. For constants and generated code whose
            /// indices are known to be valid.
            #[track_caller]
            pub const fn n(index: u8) -> Self {
                match Self::new(index) {
                    Some(r) => r,
                    None => panic!(concat!($prefix, " index out of range")),
                }
            }

            /// The index.
            pub const fn index(self) -> u8 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }
    };
}

reg_type!(
    /// A scalar register, `s0`..`s31`. `s0` is hard-wired to zero.
    SReg, NUM_SREGS, "s"
);
reg_type!(
    /// A vector register of 8 sublanes x 128 lanes x 32 bits, `v0`..`v63`.
    VReg, NUM_VREGS, "v"
);
reg_type!(
    /// A mask register of 8 x 128 booleans, `m0`..`m15`.
    MReg, NUM_MREGS, "m"
);
reg_type!(
    /// A matrix unit of the core, `mxu0`..`mxu15`.
    Mxu, MAX_MXUS, "mxu"
);
reg_type!(
    /// A semaphore of the core, `sem0`..`sem63`.
    Sem, NUM_SEMS, "sem"
);
reg_type!(
    /// An argument slot of the program, `a0`..`a63`, bound to a buffer or a scalar at launch.
    ArgSlot, MAX_ARGS, "a"
);

impl SReg {
    /// The zero register `s0`.
    pub const ZERO: SReg = SReg(0);
}
