//! Threefry-2x32 (20 rounds) as a tile program: two 32-bit words per element from the
//! element's 64-bit counter and the 64-bit key, with the vector unit's i32 add, xor and shifts.
//!
//! Threefry needs no multiply (Philox needs a 32x32->64 multiply-high the vector unit lacks),
//! which is why JAX uses it on TPUs. The algorithm is Random123's `threefry2x32_R(20, ...)`:
//! rotation constants `R_32x2`, key-schedule parity `0x1BD11BDA`, a key injection after every
//! four rounds. Source: Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2,
//! 3", SC'11, and Random123's `threefry.h`; the op suite checks the kernel against Random123's
//! published known-answer vectors (`kat_vectors`).

use std::collections::HashMap;

use crate::dtype::{DType, Scalar};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder};

/// Rotation amounts of Threefry-2x32 (Random123's `R_32x2_*`).
const ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];
/// The key schedule's parity constant (Skein's `SKEIN_KS_PARITY32`).
const PARITY: u32 = 0x1BD1_1BDA;
/// Rounds.
const ROUNDS: u32 = 20;

/// An i32 constant holding the bits of `v`.
pub(super) fn word(p: &mut ProgBuilder, v: u32) -> PRef {
    p.constant(Scalar::Int(v as i32 as i64), DType::I32)
}

/// The builder with each constant made once: a tile kernel keeps every constant node in a
/// register for the whole loop, and Threefry's 40 rotations use only 11 shift amounts.
struct B<'a> {
    p: &'a mut ProgBuilder,
    consts: HashMap<u32, PRef>,
}

impl B<'_> {
    fn k(&mut self, v: u32) -> PRef {
        if let Some(r) = self.consts.get(&v) {
            return *r;
        }
        let r = word(self.p, v);
        self.consts.insert(v, r);
        r
    }

    fn bin(&mut self, op: BinOp, a: PRef, b: PRef) -> PRef {
        self.p.bin(op, a, b, DType::I32)
    }

    fn add(&mut self, a: PRef, b: PRef) -> PRef {
        self.bin(BinOp::Add, a, b)
    }

    fn xor(&mut self, a: PRef, b: PRef) -> PRef {
        self.bin(BinOp::Xor, a, b)
    }

    fn rotl(&mut self, a: PRef, r: u32) -> PRef {
        let (l, rr) = (self.k(r), self.k(32 - r));
        let hi = self.bin(BinOp::Shl, a, l);
        let lo = self.bin(BinOp::Shr, a, rr);
        self.bin(BinOp::Or, hi, lo)
    }

    /// The row-major linear index of the element in an iteration space of `shape` (i32,
    /// wrapping past 2^32 elements).
    fn linear_index(&mut self, shape: &[usize]) -> PRef {
        let mut acc = None;
        let mut stride = 1u64;
        for d in (0..shape.len()).rev() {
            if shape[d] > 1 {
                let i = self.p.index(d as u32);
                let term = if stride == 1 {
                    i
                } else {
                    let s = self.k(stride as u32);
                    self.bin(BinOp::Mul, i, s)
                };
                acc = Some(match acc {
                    None => term,
                    Some(a) => self.add(a, term),
                });
            }
            stride = stride.wrapping_mul(shape[d] as u64);
        }
        acc.unwrap_or_else(|| self.k(0))
    }
}

/// `a >> s` as unsigned 32-bit.
pub(super) fn shr(p: &mut ProgBuilder, a: PRef, s: u32) -> PRef {
    let s = word(p, s);
    p.bin(BinOp::Shr, a, s, DType::I32)
}

/// The key and counter offset of a call: four i32 operands (`seed` low and high words, the
/// first counter's low and high words).
#[derive(Clone, Copy)]
pub(super) struct Stream {
    pub key: [PRef; 2],
    pub offset: [PRef; 2],
}

/// Threefry-2x32-20 of the counter `offset + linear index` under the key, for every element of
/// `shape`: the two output words (i32 bits).
pub(super) fn words(p: &mut ProgBuilder, shape: &[usize], s: Stream) -> [PRef; 2] {
    let mut b = B {
        p,
        consts: HashMap::new(),
    };
    let i = b.linear_index(shape);
    // 64-bit counter: low word wraps, the carry goes to the high word. Unsigned `lo < i` is
    // the signed comparison of both with the sign bit flipped.
    let c0 = b.add(s.offset[0], i);
    let flip = b.k(0x8000_0000);
    let (x, y) = (b.xor(c0, flip), b.xor(i, flip));
    let carry = b.p.cmp(CmpKind::Lt, x, y, DType::I32);
    let carry = b.p.cast(carry, DType::I32);
    let c1 = b.add(s.offset[1], carry);
    let parity = b.k(PARITY);
    let k2 = b.xor(s.key[0], s.key[1]);
    let k2 = b.xor(k2, parity);
    let ks = [s.key[0], s.key[1], k2];
    let mut x0 = b.add(c0, ks[0]);
    let mut x1 = b.add(c1, ks[1]);
    for r in 0..ROUNDS {
        x0 = b.add(x0, x1);
        x1 = b.rotl(x1, ROTATIONS[(r % 8) as usize]);
        x1 = b.xor(x1, x0);
        if r % 4 == 3 {
            let inj = (r + 1) / 4;
            x0 = b.add(x0, ks[(inj % 3) as usize]);
            x1 = b.add(x1, ks[((inj + 1) % 3) as usize]);
            let n = b.k(inj);
            x1 = b.add(x1, n);
        }
    }
    [x0, x1]
}

/// A uniform f32 in `[0, 1)` with `bits` random bits (the top bits of `w`): multiples of
/// `2^-bits`, as PyTorch draws `digits` bits for a dtype of `digits` significand bits.
pub(super) fn unit(p: &mut ProgBuilder, w: PRef, bits: u32) -> PRef {
    let top = shr(p, w, 32 - bits);
    let f = p.cast(top, DType::F32);
    let scale = p.constant(Scalar::Float((-(bits as f64)).exp2()), DType::F32);
    p.bin(BinOp::Mul, f, scale, DType::F32)
}
