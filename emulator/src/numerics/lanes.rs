//! The vector unit's math over whole registers (1024 lanes at once), in loops the compiler turns
//! into SIMD instructions.
//!
//! Every function here computes, lane by lane, exactly what the one-lane definitions of
//! [`super::vmath`] compute (tested bit for bit against them): each operation is chosen once per
//! register instead of once per lane, and the lane loop has no branches left, so it runs on the
//! host's vector units. IEEE arithmetic gives the same bits in SIMD and scalar form;
//! transcendentals still call `libm` lane by lane.

use tpuemu_isa::ops::{Axis, CmpOp, CvtOp, RedOp, VBinOp, VType, VUnOp};
use tpuemu_isa::reg::{LANES, SUBLANES, VREG_ELEMS};

use super::expf::expf;
use super::float::{f32_to_bf16_bits, round_f16};
use super::vmath;

/// A register's lanes (32-bit patterns).
pub type Lanes = [u32; VREG_ELEMS];
/// A mask register's lanes.
pub type MaskLanes = [bool; VREG_ELEMS];

/// The second operand of a vector instruction: a register, or one value in every lane.
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    /// A register.
    Reg(&'a Lanes),
    /// A scalar register or an immediate, broadcast.
    Splat(u32),
}

impl Operand<'_> {
    /// Lane `i`.
    #[inline(always)]
    pub fn get(&self, i: usize) -> u32 {
        match self {
            Operand::Reg(r) => r[i],
            Operand::Splat(v) => *v,
        }
    }
}

/// Defines a function three times, for the baseline target, AVX2 and AVX-512, and calls the
/// widest one the host has (x86-64): the same IEEE operations on more lanes per instruction.
#[macro_export]
#[doc(hidden)]
macro_rules! simd_variants {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn imp($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
                fn avx512($($arg: $ty),*) {
                    imp($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) {
                    imp($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU has the features `avx512` is compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, the one feature `avx2` is compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            imp($($arg),*)
        }
    };
}

#[inline(always)]
fn f(x: u32) -> f32 {
    f32::from_bits(x)
}

/// `out[i] = op(a[i], b[i])`, with the operand's kind chosen once.
#[inline(always)]
fn zip(a: &Lanes, b: Operand, out: &mut Lanes, op: impl Fn(u32, u32) -> u32) {
    match b {
        Operand::Reg(b) => {
            for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
                *o = op(*x, *y);
            }
        }
        Operand::Splat(y) => {
            for (o, x) in out.iter_mut().zip(a) {
                *o = op(*x, y);
            }
        }
    }
}

/// `out[i] = op(a[i])`.
#[inline(always)]
fn map(a: &Lanes, out: &mut Lanes, op: impl Fn(u32) -> u32) {
    for (o, x) in out.iter_mut().zip(a) {
        *o = op(*x);
    }
}

/// NaN-propagating minimum, as [`vmath::f32_bin`] defines it, without branches.
#[inline(always)]
fn fmin(a: f32, b: f32) -> f32 {
    let m = if b < a { b } else { a };
    if a.is_nan() | b.is_nan() { f32::NAN } else { m }
}

#[inline(always)]
fn fmax(a: f32, b: f32) -> f32 {
    let m = if b > a { b } else { a };
    if a.is_nan() | b.is_nan() { f32::NAN } else { m }
}

simd_variants! {
/// A binary operation on every lane: `out[i] = a[i] op b[i]`.
pub fn bin(op: VBinOp, ty: VType, a: &Lanes, b: Operand, out: &mut Lanes) {
    use VBinOp::*;
    match ty {
        VType::F32 => match op {
            Add => zip(a, b, out, |x, y| (f(x) + f(y)).to_bits()),
            Sub => zip(a, b, out, |x, y| (f(x) - f(y)).to_bits()),
            Mul => zip(a, b, out, |x, y| (f(x) * f(y)).to_bits()),
            Div => zip(a, b, out, |x, y| (f(x) / f(y)).to_bits()),
            Min => zip(a, b, out, |x, y| fmin(f(x), f(y)).to_bits()),
            Max => zip(a, b, out, |x, y| fmax(f(x), f(y)).to_bits()),
            _ => zip(a, b, out, |x, y| vmath::f32_bin(op, f(x), f(y)).to_bits()),
        },
        VType::I32 => match op {
            Add => zip(a, b, out, |x, y| x.wrapping_add(y)),
            Sub => zip(a, b, out, |x, y| x.wrapping_sub(y)),
            Mul => zip(a, b, out, |x, y| x.wrapping_mul(y)),
            Min => zip(a, b, out, |x, y| (x as i32).min(y as i32) as u32),
            Max => zip(a, b, out, |x, y| (x as i32).max(y as i32) as u32),
            And => zip(a, b, out, |x, y| x & y),
            Or => zip(a, b, out, |x, y| x | y),
            Xor => zip(a, b, out, |x, y| x ^ y),
            Shl => zip(a, b, out, |x, y| x << (y & 31)),
            Sra => zip(a, b, out, |x, y| ((x as i32) >> (y & 31)) as u32),
            Shr => zip(a, b, out, |x, y| x >> (y & 31)),
            _ => zip(a, b, out, |x, y| {
                vmath::i32_bin(op, x as i32, y as i32) as u32
            }),
        },
    }
}
}

simd_variants! {
/// A unary operation on every lane.
pub fn un(op: VUnOp, ty: VType, a: &Lanes, out: &mut Lanes) {
    use VUnOp::*;
    match ty {
        VType::F32 => match op {
            Neg => map(a, out, |x| (-f(x)).to_bits()),
            Abs => map(a, out, |x| f(x).abs().to_bits()),
            Rcp => map(a, out, |x| (1.0 / f(x)).to_bits()),
            Exp => map(a, out, |x| expf(f(x)).to_bits()),
            Sigmoid => map(a, out, |x| (1.0 / (1.0 + expf(-f(x)))).to_bits()),
            _ => map(a, out, |x| vmath::f32_un(op, f(x)).to_bits()),
        },
        VType::I32 => match op {
            Neg => map(a, out, |x| (x as i32).wrapping_neg() as u32),
            Abs => map(a, out, |x| (x as i32).wrapping_abs() as u32),
            Not => map(a, out, |x| !x),
            _ => map(a, out, |x| vmath::i32_un(op, x as i32) as u32),
        },
    }
}
}

/// `out[i] = op(a[i], b[i])` into a mask.
#[inline(always)]
fn zip_mask(a: &Lanes, b: Operand, out: &mut MaskLanes, op: impl Fn(u32, u32) -> bool) {
    match b {
        Operand::Reg(b) => {
            for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
                *o = op(*x, *y);
            }
        }
        Operand::Splat(y) => {
            for (o, x) in out.iter_mut().zip(a) {
                *o = op(*x, y);
            }
        }
    }
}

simd_variants! {
/// A comparison on every lane, into a mask.
pub fn cmp(op: CmpOp, ty: VType, a: &Lanes, b: Operand, out: &mut MaskLanes) {
    use CmpOp::*;
    match ty {
        VType::F32 => match op {
            Eq => zip_mask(a, b, out, |x, y| f(x) == f(y)),
            Ne => zip_mask(a, b, out, |x, y| f(x) != f(y)),
            Lt | LtU => zip_mask(a, b, out, |x, y| f(x) < f(y)),
            Le => zip_mask(a, b, out, |x, y| f(x) <= f(y)),
            Gt => zip_mask(a, b, out, |x, y| f(x) > f(y)),
            Ge | GeU => zip_mask(a, b, out, |x, y| f(x) >= f(y)),
        },
        VType::I32 => match op {
            Eq => zip_mask(a, b, out, |x, y| x == y),
            Ne => zip_mask(a, b, out, |x, y| x != y),
            Lt => zip_mask(a, b, out, |x, y| (x as i32) < (y as i32)),
            Le => zip_mask(a, b, out, |x, y| (x as i32) <= (y as i32)),
            Gt => zip_mask(a, b, out, |x, y| (x as i32) > (y as i32)),
            Ge => zip_mask(a, b, out, |x, y| (x as i32) >= (y as i32)),
            LtU => zip_mask(a, b, out, |x, y| x < y),
            GeU => zip_mask(a, b, out, |x, y| x >= y),
        },
    }
}
}

simd_variants! {
/// `out[i] = m[i] ? a[i] : b[i]`.
pub fn select(m: &MaskLanes, a: &Lanes, b: Operand, out: &mut Lanes) {
    match b {
        Operand::Reg(b) => {
            for (((o, k), x), y) in out.iter_mut().zip(m).zip(a).zip(b) {
                *o = if *k { *x } else { *y };
            }
        }
        Operand::Splat(y) => {
            for ((o, k), x) in out.iter_mut().zip(m).zip(a) {
                *o = if *k { *x } else { y };
            }
        }
    }
}
}

/// Rounds an f32 to bf16 precision, as [`super::float::round_bf16`], without branches.
#[inline(always)]
pub fn round_bf16_bits(b: u32) -> u32 {
    let lsb = (b >> 16) & 1;
    let rounded = b.wrapping_add(0x7fff + lsb) & 0xffff_0000;
    let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
    if nan {
        (b & 0xffff_0000) | 0x0040_0000
    } else {
        rounded
    }
}

simd_variants! {
/// A conversion on every lane.
pub fn cvt(op: CvtOp, a: &Lanes, out: &mut Lanes) {
    match op {
        CvtOp::F2I => map(a, out, |x| (f(x) as i32) as u32),
        CvtOp::I2F => map(a, out, |x| (x as i32 as f32).to_bits()),
        CvtOp::Bf16 => map(a, out, round_bf16_bits),
        CvtOp::F16 => map(a, out, |x| round_f16(f(x)).to_bits()),
    }
}
}

simd_variants! {
/// A reduction along `axis` as a pairwise tree ([`vmath::tree_reduce`]'s order), its result in
/// every lane of the row (lane axis) or column (sublane axis).
pub fn reduce(op: RedOp, ty: VType, axis: Axis, a: &Lanes, out: &mut Lanes) {
    match (ty, op) {
        (VType::F32, RedOp::Add) => reduce_with(axis, a, out, |x, y| (f(x) + f(y)).to_bits()),
        (VType::F32, RedOp::Max) => reduce_with(axis, a, out, |x, y| fmax(f(x), f(y)).to_bits()),
        (VType::F32, RedOp::Min) => reduce_with(axis, a, out, |x, y| fmin(f(x), f(y)).to_bits()),
        (VType::I32, RedOp::Add) => reduce_with(axis, a, out, u32::wrapping_add),
        (VType::I32, RedOp::Max) => {
            reduce_with(axis, a, out, |x, y| (x as i32).max(y as i32) as u32)
        }
        (VType::I32, RedOp::Min) => {
            reduce_with(axis, a, out, |x, y| (x as i32).min(y as i32) as u32)
        }
    }
}
}

#[inline(always)]
fn reduce_with(axis: Axis, a: &Lanes, out: &mut Lanes, op: impl Fn(u32, u32) -> u32) {
    match axis {
        Axis::Lane => {
            for (src, dst) in a.chunks_exact(LANES).zip(out.chunks_exact_mut(LANES)) {
                let mut row: [u32; LANES] = src.try_into().expect("a row");
                let mut n = LANES;
                while n > 1 {
                    n /= 2;
                    let (lo, hi) = row.split_at_mut(n);
                    for (x, y) in lo.iter_mut().zip(&hi[..n]) {
                        *x = op(*x, *y);
                    }
                }
                dst.fill(row[0]);
            }
        }
        Axis::Sub => {
            // Element s of a column combines with s + n: whole rows at once.
            out.copy_from_slice(a);
            let mut n = SUBLANES;
            while n > 1 {
                n /= 2;
                let (lo, hi) = out.split_at_mut(n * LANES);
                for (x, y) in lo.iter_mut().zip(&hi[..n * LANES]) {
                    *x = op(*x, *y);
                }
            }
            let (first, rest) = out.split_at_mut(LANES);
            for row in rest.chunks_exact_mut(LANES) {
                row.copy_from_slice(first);
            }
        }
    }
}

/// Rotates along `axis` by `k` places: `out[.., l] = a[.., (l - k) mod 128]` (lane axis) or
/// `out[s, ..] = a[(s - k) mod 8, ..]` (sublane axis).
pub fn rotate(axis: Axis, k: i64, a: &Lanes, out: &mut Lanes) {
    match axis {
        Axis::Lane => {
            let r = k.rem_euclid(LANES as i64) as usize;
            for (src, dst) in a.chunks_exact(LANES).zip(out.chunks_exact_mut(LANES)) {
                dst[r..].copy_from_slice(&src[..LANES - r]);
                dst[..r].copy_from_slice(&src[LANES - r..]);
            }
        }
        Axis::Sub => {
            let r = k.rem_euclid(SUBLANES as i64) as usize;
            for s in 0..SUBLANES {
                let from = (s + SUBLANES - r) % SUBLANES;
                out[s * LANES..(s + 1) * LANES]
                    .copy_from_slice(&a[from * LANES..(from + 1) * LANES]);
            }
        }
    }
}

/// Widens a row of little-endian bf16 values to f32 lanes.
#[inline]
pub fn load_bf16_row(src: &[u8], out: &mut [u32]) {
    for (o, b) in out.iter_mut().zip(src.as_chunks::<2>().0) {
        *o = (u16::from_le_bytes(*b) as u32) << 16;
    }
}

/// Rounds a row of f32 lanes to little-endian bf16.
#[inline]
pub fn store_bf16_row(vals: &[u32], dst: &mut [u8]) {
    for (v, d) in vals.iter().zip(dst.as_chunks_mut::<2>().0) {
        *d = ((round_bf16_bits(*v) >> 16) as u16).to_le_bytes();
    }
}

/// Copies a row of little-endian 32-bit words into lanes.
#[inline]
pub fn load_w32_row(src: &[u8], out: &mut [u32]) {
    for (o, b) in out.iter_mut().zip(src.as_chunks::<4>().0) {
        *o = u32::from_le_bytes(*b);
    }
}

/// Copies lanes into a row of little-endian 32-bit words.
#[inline]
pub fn store_w32_row(vals: &[u32], dst: &mut [u8]) {
    for (v, d) in vals.iter().zip(dst.as_chunks_mut::<4>().0) {
        *d = v.to_le_bytes();
    }
}

/// The bf16 bits of an f32 lane, as [`f32_to_bf16_bits`] gives them.
#[inline(always)]
pub fn bf16_bits(v: u32) -> u16 {
    debug_assert_eq!(
        (round_bf16_bits(v) >> 16) as u16,
        f32_to_bf16_bits(f32::from_bits(v))
    );
    (round_bf16_bits(v) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::float::round_bf16;

    /// Values that exercise every branch: zeros, subnormals, infinities, NaNs, rounding ties,
    /// integers near the i32 limits, and random bit patterns.
    fn samples(seed: u32) -> Lanes {
        let special = [
            0u32,
            0x8000_0000,
            1,
            0x807f_ffff,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0xffc1_2345,
            0x7f80_0001,
            0x3f80_8000,
            0x3f81_8000,
            0x3f80_7fff,
            0x7f7f_ffff,
            0x4f00_0000,
            0xcf00_0000,
            0x8000_0001,
            0x7fff_ffff,
            31,
            32,
            33,
            0xffff_ffff,
        ];
        let mut x = seed;
        std::array::from_fn(|i| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            if i % 3 == 0 {
                special[(x >> 7) as usize % special.len()]
            } else if i % 3 == 1 {
                // Ordinary floats of moderate size.
                f32::to_bits(((x >> 8) as f32 / (1u32 << 24) as f32) * 8.0 - 4.0)
            } else {
                x
            }
        })
    }

    /// The same lane value: equal bits, or two NaNs (IEEE and Rust leave a NaN's payload to the
    /// host when two NaNs meet, in scalar and SIMD code alike).
    fn same(x: u32, y: u32) -> bool {
        x == y || (f32::from_bits(x).is_nan() && f32::from_bits(y).is_nan())
    }

    fn same_lanes(x: &[u32], y: &[u32], ty: VType) -> bool {
        x.len() == y.len()
            && x.iter().zip(y).all(|(a, b)| match ty {
                VType::F32 => same(*a, *b),
                VType::I32 => a == b,
            })
    }

    fn operands(b: &Lanes) -> [Operand<'_>; 3] {
        [
            Operand::Reg(b),
            Operand::Splat(0x3f80_0000),
            Operand::Splat(0x7fc0_0000),
        ]
    }

    #[test]
    fn binary_operations_match_the_lane_definitions() {
        let (a, b) = (samples(1), samples(2));
        for ty in [VType::F32, VType::I32] {
            for op in VBinOp::ALL.iter().copied().filter(|o| o.supports(ty)) {
                for bo in operands(&b) {
                    let mut out = [0; VREG_ELEMS];
                    bin(op, ty, &a, bo, &mut out);
                    let want: Vec<u32> = (0..VREG_ELEMS)
                        .map(|i| {
                            let mut one = [0u32; 1];
                            vmath::bin(op, ty, &a[i..i + 1], |_| bo.get(i), &mut one);
                            one[0]
                        })
                        .collect();
                    assert!(same_lanes(&out, &want, ty), "{op:?} {ty:?}");
                }
            }
        }
    }

    #[test]
    fn unary_comparisons_selects_and_conversions_match() {
        let (a, b) = (samples(3), samples(4));
        for ty in [VType::F32, VType::I32] {
            for op in VUnOp::ALL.iter().copied().filter(|o| o.supports(ty)) {
                let mut out = [0; VREG_ELEMS];
                un(op, ty, &a, &mut out);
                let mut want = [0; VREG_ELEMS];
                vmath::un(op, ty, &a, &mut want);
                assert!(same_lanes(&out, &want, ty), "{op:?} {ty:?}");
            }
            for op in CmpOp::ALL.iter().copied() {
                for bo in operands(&b) {
                    let mut out = [false; VREG_ELEMS];
                    cmp(op, ty, &a, bo, &mut out);
                    for i in 0..VREG_ELEMS {
                        assert_eq!(out[i], vmath::cmp(op, ty, a[i], bo.get(i)), "{op:?}");
                    }
                }
            }
        }
        let m: MaskLanes = std::array::from_fn(|i| b[i] % 3 == 0);
        for bo in operands(&b) {
            let mut out = [0; VREG_ELEMS];
            select(&m, &a, bo, &mut out);
            for i in 0..VREG_ELEMS {
                assert_eq!(out[i], if m[i] { a[i] } else { bo.get(i) });
            }
        }
        for op in CvtOp::ALL.iter().copied() {
            let mut out = [0; VREG_ELEMS];
            cvt(op, &a, &mut out);
            for i in 0..VREG_ELEMS {
                assert_eq!(out[i], vmath::cvt(op, a[i]), "{op:?} {:#x}", a[i]);
            }
        }
    }

    #[test]
    fn reductions_and_rotations_match_the_lane_definitions() {
        let a = samples(6);
        for ty in [VType::F32, VType::I32] {
            for op in RedOp::ALL.iter().copied() {
                let mut out = [0; VREG_ELEMS];
                reduce(op, ty, Axis::Lane, &a, &mut out);
                for s in 0..SUBLANES {
                    let mut row = a[s * LANES..(s + 1) * LANES].to_vec();
                    let r = vmath::tree_reduce(op, ty, &mut row);
                    let row = &out[s * LANES..(s + 1) * LANES];
                    assert!(
                        row.iter().all(|x| same_lanes(&[*x], &[r], ty)),
                        "{op:?} {ty:?}"
                    );
                }
                reduce(op, ty, Axis::Sub, &a, &mut out);
                for l in 0..LANES {
                    let mut col: Vec<u32> = (0..SUBLANES).map(|s| a[s * LANES + l]).collect();
                    let r = vmath::tree_reduce(op, ty, &mut col);
                    let ok = (0..SUBLANES).all(|s| same_lanes(&[out[s * LANES + l]], &[r], ty));
                    assert!(ok, "{op:?} {ty:?}");
                }
            }
        }
        for k in [-300i64, -9, -1, 0, 1, 5, 8, 127, 128, 129, 1000] {
            let mut out = [0; VREG_ELEMS];
            rotate(Axis::Lane, k, &a, &mut out);
            for s in 0..SUBLANES {
                for l in 0..LANES {
                    let from = (l as i64 - k).rem_euclid(LANES as i64) as usize;
                    assert_eq!(out[s * LANES + l], a[s * LANES + from]);
                }
            }
            rotate(Axis::Sub, k, &a, &mut out);
            for s in 0..SUBLANES {
                for l in 0..LANES {
                    let from = (s as i64 - k).rem_euclid(SUBLANES as i64) as usize;
                    assert_eq!(out[s * LANES + l], a[from * LANES + l]);
                }
            }
        }
    }

    #[test]
    fn bf16_rows_round_trip_as_the_scalar_conversions() {
        let a = samples(5);
        let mut bytes = vec![0u8; 2 * VREG_ELEMS];
        store_bf16_row(&a, &mut bytes);
        for (i, v) in a.iter().enumerate() {
            let h = u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]);
            assert_eq!(h, f32_to_bf16_bits(f32::from_bits(*v)), "{v:#x}");
        }
        let mut back = [0u32; VREG_ELEMS];
        load_bf16_row(&bytes, &mut back);
        for (i, v) in a.iter().enumerate() {
            let r = round_bf16(f32::from_bits(*v));
            assert!(back[i] == r.to_bits() || (r.is_nan() && f32::from_bits(back[i]).is_nan()));
        }
    }
}
