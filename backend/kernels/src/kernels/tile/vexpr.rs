//! Evaluating a program's nodes on vector registers: one node becomes a few vector
//! instructions, with PyTorch's conversion rules, on registers handed out by a small allocator.

use tpuemu_isa::ops::{CmpOp, CvtOp, VBinOp, VType, VUnOp};
use tpuemu_isa::{MReg, VReg, VSrc};

use crate::codegen::Emitter;
use crate::dtype::{DType, Scalar};
use crate::ir::{BinOp, CmpKind, UnOp};
use crate::kernels::KernelError;

/// Hands out vector and mask registers.
#[derive(Debug, Clone)]
pub struct VAlloc {
    free: Vec<u8>,
    mfree: Vec<u8>,
    /// Bool registers whose comparison mask is still held (vreg, mask): a select on them uses
    /// the mask instead of comparing again.
    masks: Vec<(u8, u8)>,
}

impl VAlloc {
    /// Registers `first..count` are available (lower ones are reserved by the caller).
    pub fn new(first: u8, count: u32) -> Self {
        VAlloc {
            free: (first..count.min(64) as u8).rev().collect(),
            mfree: (2..16).rev().collect(),
            masks: Vec::new(),
        }
    }

    pub fn take(&mut self) -> Result<VReg, KernelError> {
        self.free.pop().map(VReg::n).ok_or_else(|| {
            KernelError::Unsupported("too many live values for the vector registers".into())
        })
    }

    /// Registers not taken.
    pub fn free_count(&self) -> u32 {
        self.free.len() as u32
    }

    pub fn give(&mut self, v: VReg) {
        debug_assert!(!self.free.contains(&v.index()));
        if let Some(i) = self.masks.iter().position(|(r, _)| *r == v.index()) {
            let (_, m) = self.masks.swap_remove(i);
            self.mfree.push(m);
        }
        self.free.push(v.index());
    }

    /// Keeps mask `m` as the comparison behind bool register `v` while masks are plentiful
    /// (otherwise frees it).
    fn remember_mask(&mut self, v: VReg, m: MReg) {
        if self.mfree.len() >= 4 {
            self.masks.push((v.index(), m.index()));
        } else {
            self.mfree.push(m.index());
        }
    }

    /// The mask held for bool register `v`, if any.
    fn mask_of(&self, v: VReg) -> Option<MReg> {
        self.masks
            .iter()
            .find(|(r, _)| *r == v.index())
            .map(|(_, m)| MReg::n(*m))
    }

    pub fn take_mask(&mut self) -> Result<MReg, KernelError> {
        self.mfree
            .pop()
            .map(MReg::n)
            .ok_or_else(|| KernelError::Unsupported("too many live masks".into()))
    }

    pub fn give_mask(&mut self, m: MReg) {
        self.mfree.push(m.index());
    }

    /// Frees every remembered mask (the bool registers stay; a select on one compares again).
    pub fn forget_masks(&mut self) {
        self.mfree.extend(self.masks.drain(..).map(|(_, m)| m));
    }
}

fn lane(d: DType) -> VType {
    d.lane()
}

pub fn vbin(op: BinOp) -> VBinOp {
    match op {
        BinOp::Add => VBinOp::Add,
        BinOp::Sub => VBinOp::Sub,
        BinOp::Mul => VBinOp::Mul,
        BinOp::Div => VBinOp::Div,
        BinOp::Min => VBinOp::Min,
        BinOp::Max => VBinOp::Max,
        BinOp::Pow => VBinOp::Pow,
        BinOp::Rem => VBinOp::Rem,
        BinOp::And => VBinOp::And,
        BinOp::Or => VBinOp::Or,
        BinOp::Xor => VBinOp::Xor,
        BinOp::Shl => VBinOp::Shl,
        BinOp::Shr => VBinOp::Shr,
        BinOp::Sra => VBinOp::Sra,
    }
}

fn vun(op: UnOp) -> VUnOp {
    match op {
        UnOp::Neg => VUnOp::Neg,
        UnOp::Abs => VUnOp::Abs,
        UnOp::Sign => VUnOp::Sign,
        UnOp::Exp => VUnOp::Exp,
        UnOp::Log => VUnOp::Log,
        UnOp::Log1p => VUnOp::Log1p,
        UnOp::Expm1 => VUnOp::Expm1,
        UnOp::Sqrt => VUnOp::Sqrt,
        UnOp::Rsqrt => VUnOp::Rsqrt,
        UnOp::Rcp => VUnOp::Rcp,
        UnOp::Sin => VUnOp::Sin,
        UnOp::Cos => VUnOp::Cos,
        UnOp::Tanh => VUnOp::Tanh,
        UnOp::Erf => VUnOp::Erf,
        UnOp::Sigmoid => VUnOp::Sigmoid,
        UnOp::Floor => VUnOp::Floor,
        UnOp::Ceil => VUnOp::Ceil,
        UnOp::Round => VUnOp::Round,
        UnOp::Trunc => VUnOp::Trunc,
        UnOp::Not => VUnOp::Not,
        UnOp::Bitcast => unreachable!("a bitcast is a register move"),
    }
}

fn vcmp(op: CmpKind) -> CmpOp {
    match op {
        CmpKind::Eq => CmpOp::Eq,
        CmpKind::Ne => CmpOp::Ne,
        CmpKind::Lt => CmpOp::Lt,
        CmpKind::Le => CmpOp::Le,
        CmpKind::Gt => CmpOp::Gt,
        CmpKind::Ge => CmpOp::Ge,
    }
}

/// `dst = a op b` on lanes of type `ty`.
pub fn emit_bin(e: &mut Emitter, op: BinOp, ty: DType, dst: VReg, a: VReg, b: VSrc) {
    // Bitwise ops on floats never occur (the builder computes them on ints).
    e.vbin(vbin(op), lane(ty), dst, a, b);
}

/// `dst = op a`.
pub fn emit_un(e: &mut Emitter, op: UnOp, ty: DType, dst: VReg, a: VReg) {
    let vt = lane(ty);
    match (op, vt) {
        // Rounding ops are the identity on integers.
        (UnOp::Floor | UnOp::Ceil | UnOp::Round | UnOp::Trunc, VType::I32) | (UnOp::Bitcast, _) => {
            e.vmov(VType::I32, dst, a);
        }
        (o, _) => {
            e.vun(vun(o), vt, dst, a);
        }
    }
}

/// `dst = (a cmp b) ? 1 : 0` (bool lanes). `mask_only`: only selects read the result, so
/// while masks are plentiful it stays in a mask held until `dst` is given back, and `dst` is
/// never written.
#[allow(clippy::too_many_arguments)]
pub fn emit_cmp(
    e: &mut Emitter,
    va: &mut VAlloc,
    op: CmpKind,
    ty: DType,
    dst: VReg,
    a: VReg,
    b: VSrc,
    mask_only: bool,
) -> Result<(), KernelError> {
    let m = va.take_mask()?;
    e.vcmp(vcmp(op), lane(ty), m, a, b);
    if mask_only && va.mfree.len() >= 6 {
        va.masks.push((dst.index(), m.index()));
        return Ok(());
    }
    e.vmask(dst, m);
    va.remember_mask(dst, m);
    Ok(())
}

/// `dst = c ? a : b` with `c` bool lanes.
pub fn emit_select(
    e: &mut Emitter,
    va: &mut VAlloc,
    ty: DType,
    dst: VReg,
    c: VReg,
    a: VReg,
    b: VReg,
) -> Result<(), KernelError> {
    if let Some(m) = va.mask_of(c) {
        e.vsel(lane(ty), dst, m, a, b);
        return Ok(());
    }
    let m = va.take_mask()?;
    e.vcmp(CmpOp::Ne, VType::I32, m, c, 0u32);
    e.vsel(lane(ty), dst, m, a, b);
    va.give_mask(m);
    Ok(())
}

/// Whether casting `from` to `to` leaves the lanes as they are (floats held as f32 to f32,
/// integers and bools to 32/64-bit integers).
pub fn cast_is_move(from: DType, to: DType) -> bool {
    matches!(
        (from.is_float(), to),
        (true, DType::F32) | (false, DType::I32 | DType::I64)
    )
}

/// `dst = cast(a)` from `from` to `to`, with PyTorch's conversion rules.
pub fn emit_cast(
    e: &mut Emitter,
    va: &mut VAlloc,
    from: DType,
    to: DType,
    dst: VReg,
    a: VReg,
) -> Result<(), KernelError> {
    match (from.is_float(), to) {
        (_, DType::Bool) => {
            let m = va.take_mask()?;
            e.vcmp(CmpOp::Ne, lane(from), m, a, 0u32).vmask(dst, m);
            va.remember_mask(dst, m);
        }
        (true, DType::F32) | (false, DType::I32 | DType::I64) => {
            e.vmov(VType::I32, dst, a);
        }
        (true, DType::BF16) => {
            e.vcvt(CvtOp::Bf16, dst, a);
        }
        (true, DType::F16) => {
            e.vcvt(CvtOp::F16, dst, a);
        }
        (true, DType::I32 | DType::I64) => {
            e.vcvt(CvtOp::F2I, dst, a);
        }
        (false, DType::F32) => {
            e.vcvt(CvtOp::I2F, dst, a);
        }
        (false, DType::BF16) => {
            e.vcvt(CvtOp::I2F, dst, a).vcvt(CvtOp::Bf16, dst, dst);
        }
        (false, DType::F16) => {
            e.vcvt(CvtOp::I2F, dst, a).vcvt(CvtOp::F16, dst, dst);
        }
        // uint8 wraps modulo 256 (floats truncate toward zero first), as PyTorch's conversions.
        (true, DType::U8) => {
            e.vcvt(CvtOp::F2I, dst, a)
                .vbin(VBinOp::And, VType::I32, dst, dst, 0xffu32);
        }
        (false, DType::U8) => {
            e.vbin(VBinOp::And, VType::I32, dst, a, 0xffu32);
        }
        // int8 wraps to [-128, 127]: the low byte, sign-extended.
        (true, DType::I8) => {
            e.vcvt(CvtOp::F2I, dst, a);
            sign_extend_byte(e, dst, dst);
        }
        (false, DType::I8) => {
            sign_extend_byte(e, dst, a);
        }
    }
    Ok(())
}

/// `dst` = the low byte of `a` as a signed value: `((a & 0xff) ^ 0x80) - 0x80`.
fn sign_extend_byte(e: &mut Emitter, dst: VReg, a: VReg) {
    e.vbin(VBinOp::And, VType::I32, dst, a, 0xffu32)
        .vbin(VBinOp::Xor, VType::I32, dst, dst, 0x80u32)
        .vbin(VBinOp::Sub, VType::I32, dst, dst, 0x80u32);
}

/// After a vector load of `dtype` (bytes zero-extend): int8 lanes sign-extended.
pub fn after_load(e: &mut Emitter, dtype: DType, v: VReg) {
    if dtype == DType::I8 {
        e.vbin(VBinOp::Xor, VType::I32, v, v, 0x80u32)
            .vbin(VBinOp::Sub, VType::I32, v, v, 0x80u32);
    }
}

/// The lane bits of a constant: floats keep f32 precision (PyTorch computes bf16/f16 operators
/// with the scalar in float, its "opmath" type), integers wrap to 32 bits.
pub fn const_bits(v: Scalar, dtype: DType) -> u32 {
    if dtype.is_float() {
        (v.to_f64() as f32).to_bits()
    } else {
        v.lane_bits(dtype)
    }
}

/// `dst = constant` broadcast.
pub fn emit_const(e: &mut Emitter, v: Scalar, dtype: DType, dst: VReg) {
    e.vmov(lane(dtype), dst, const_bits(v, dtype));
}
