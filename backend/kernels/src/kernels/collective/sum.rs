//! The vector unit's part of a reduction: `dst = (src0 + src1) + src2` over a chunk in VMEM.
//!
//! Elements are loaded as 32-bit lanes (bf16 and f16 widen exactly), added in f32 (or wrapping
//! i32) left to right, and stored once in the dtype (bf16 and f16 round to nearest even). The
//! loop moves eight vector registers of every source per iteration — loads, then adds, then
//! stores, so that each waits for nothing but the previous group — and a masked last register
//! handles a chunk that is not a whole number of (8, 128) tiles.

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{CmpOp, IotaKind, VBinOp};
use tpuemu_isa::{Addr, MReg, VReg};

use super::emit::{LOOP_CMP, LOOP_I};
use crate::codegen::Emitter;
use crate::dtype::DType;

/// Vector registers per source moved per loop iteration.
const UNROLL: u64 = 8;
/// Elements in a vector register.
const VREG: u64 = 1024;

/// Emits `dst[i] = sum(srcs[k][i])` for `elems` elements at the VMEM byte addresses given.
pub fn emit_sum(e: &mut Emitter, dtype: DType, dst: u32, srcs: &[u32], elems: u64) {
    let vb = VREG * dtype.size() as u64;
    let full = elems / VREG;
    let tail = elems % VREG;
    let iters = full / UNROLL;
    let rem = full % UNROLL;
    e.b.smov(LOOP_I, 0);
    if iters > 0 {
        e.forget_constants();
        let top = e.b.here();
        body(e, dtype, dst, srcs, UNROLL, 0, None);
        e.sadd(LOOP_I, LOOP_I, (UNROLL * vb) as i32);
        if iters > 1 {
            e.scmp(CmpOp::Lt, LOOP_CMP, LOOP_I, (iters * UNROLL * vb) as i32);
            e.b.brnz(LOOP_CMP, top);
        }
    }
    if rem > 0 {
        body(e, dtype, dst, srcs, rem, 0, None);
    }
    if tail > 0 {
        let mask = MReg::n(1);
        e.mask_below(mask, VReg::n(0), IotaKind::Flat, tail as u32);
        body(e, dtype, dst, srcs, 1, (rem * vb) as i32, Some(mask));
    }
}

/// `count` registers' worth, at `LOOP_I + extra`.
fn body(
    e: &mut Emitter,
    dtype: DType,
    dst: u32,
    srcs: &[u32],
    count: u64,
    extra: i32,
    mask: Option<MReg>,
) {
    let fmt = dtype.mem();
    let ty = dtype.lane();
    let vb = (VREG * dtype.size() as u64) as i32;
    let k = srcs.len() as u64;
    let reg = |u: u64, s: u64| VReg::n((1 + u * k + s) as u8);
    let at = |base: u32, u: u64| Addr::new(LOOP_I, base as i32 + extra + u as i32 * vb);
    for u in 0..count {
        for (s, &src) in srcs.iter().enumerate() {
            e.vld(fmt, reg(u, s as u64), at(src, u), VAccess::masked(mask));
        }
    }
    for s in 1..k {
        for u in 0..count {
            e.vbin(VBinOp::Add, ty, reg(u, 0), reg(u, 0), reg(u, s));
        }
    }
    for u in 0..count {
        e.vst(fmt, reg(u, 0), at(dst, u), VAccess::masked(mask));
    }
}
