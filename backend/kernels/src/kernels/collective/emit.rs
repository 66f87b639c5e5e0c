//! What every collective generator shares: the argument layout, the register roles, and small
//! emitters (argument loads, region bases, block addresses, DMAs, semaphore waits).
//!
//! Arguments, in slot order: `in`, `out`, `scratch` (buffers; `scratch` only when the plan
//! needs one), then the scalars `in_off`, `out_off`, `scr_off` (byte offsets into the buffers),
//! then for each axis of the spec `rank`, `next`, `prev` (this chip's coordinate on the axis and
//! its neighbours' chip indices), then for all-to-all `grank`, `gbase` (rank in the group and
//! the chip index of the group's rank 0).

use tpuemu_isa::ops::SAluOp;
use tpuemu_isa::{Addr, ArgSlot, DmaShape, MemRef, Remote, SReg, SSrc, Sem};

use super::plan::{Plan, Region, Slot};
use crate::codegen::Emitter;

/// Byte offset of the input region in its buffer.
pub const IN_OFF: SReg = SReg::n(1);
/// Byte offset of the output region.
pub const OUT_OFF: SReg = SReg::n(2);
/// Byte offset of the scratch region.
pub const SCR_OFF: SReg = SReg::n(3);
/// All-to-all: the rank in the group. (Ring rounds use `s4`..`s9` for the parts' region
/// bases, see [`base`].)
pub const RANK: SReg = SReg::n(4);
/// All-to-all: the chip index of the group's rank-0 chip.
pub const NEXT: SReg = SReg::n(5);
/// All-to-all: the address of the block being sent.
pub const DST: SReg = SReg::n(8);
/// Temporaries.
pub const T1: SReg = SReg::n(11);
pub const T2: SReg = SReg::n(12);
pub const T3: SReg = SReg::n(15);
/// The vector loop's byte cursor and comparison.
pub const LOOP_I: SReg = SReg::n(13);
pub const LOOP_CMP: SReg = SReg::n(14);

/// Semaphores: ring chains' receive semaphores from 0 (at most [`super::plan::RECV_SEMS`]);
/// the local copies of each part's own shard (all-gather) from `SEM_COPY`; per part, per round
/// parity and per chain, the bytes a chain has sent, from `SEM_SENT[0]`; the staging slots'
/// loads `SEM_LOAD` and the final results written `SEM_FINAL`. A chain's sends leave in the
/// order they were issued, and HBM transfers complete in that order, so a count of bytes on one
/// semaphore says which of them are done.
///
/// The local copy of an all-gather's own shard or an all-to-all's own block (part 0).
pub const SEM_COPY: u8 = 47;
/// Bytes sent by part 0's chains (all-to-all: the one chain).
pub const SEM_SENT: [u8; 2] = [50, 51];
/// Staging slots: loads into VMEM.
pub const SEM_LOAD: u8 = 62;
/// Reduce-scatter results written from the staging slots to HBM.
pub const SEM_FINAL: u8 = 63;

/// The copy semaphore of part `p`.
pub fn sem_copy(p: usize) -> u8 {
    SEM_COPY + p as u8
}

/// The semaphore counting what chain `c` of part `p` sends in rounds of `parity`.
pub fn sem_sent(p: usize, parity: usize, c: usize) -> u8 {
    SEM_SENT[0] + 4 * p as u8 + 2 * parity as u8 + c as u8
}

/// Region bases of part `p`'s current round: its blocks (`0`) and its own region (`1`).
pub fn base(p: usize, which: usize) -> SReg {
    SReg::n(4 + 2 * p as u8 + which as u8)
}

/// The program's argument slots and the SMEM words of its scalars.
#[derive(Clone, Debug)]
pub struct ArgMap {
    pub input: ArgSlot,
    pub output: ArgSlot,
    pub scratch: Option<ArgSlot>,
    pub in_off: u32,
    pub out_off: u32,
    pub scr_off: u32,
    /// Word of `rank` for each spec axis (`next` and `prev` follow).
    pub axis: Vec<u32>,
    pub grank: u32,
    pub gbase: u32,
}

impl ArgMap {
    /// Declares the arguments.
    pub fn declare(e: &mut Emitter, plan: &Plan, a2a: bool) -> Self {
        let input = e.b.buffer("in");
        let output = e.b.buffer("out");
        let scratch = (plan.scratch_bytes > 0).then(|| e.b.buffer("scratch"));
        let word = |s: ArgSlot| s.index() as u32;
        let in_off = word(e.b.scalar("in_off"));
        let out_off = word(e.b.scalar("out_off"));
        let scr_off = word(e.b.scalar("scr_off"));
        let axis = (0..plan.axes.len())
            .map(|i| {
                let r = word(e.b.scalar(format!("rank{i}")));
                e.b.scalar(format!("next{i}"));
                e.b.scalar(format!("prev{i}"));
                r
            })
            .collect();
        let (grank, gbase) = if a2a {
            (word(e.b.scalar("grank")), word(e.b.scalar("gbase")))
        } else {
            (0, 0)
        };
        ArgMap {
            input,
            output,
            scratch,
            in_off,
            out_off,
            scr_off,
            axis,
            grank,
            gbase,
        }
    }

    /// The buffer slot of a region.
    pub fn slot(&self, s: Slot) -> ArgSlot {
        match s {
            Slot::In => self.input,
            Slot::Out => self.output,
            Slot::Scratch => self.scratch.expect("the plan has scratch"),
        }
    }
}

/// `dst = SMEM word`.
pub fn load_word(e: &mut Emitter, dst: SReg, word: u32) {
    e.sld(dst, Addr::abs(4 * word as i32));
}

/// `dst = a + imm`.
pub fn add_imm(e: &mut Emitter, dst: SReg, a: SReg, imm: u64) {
    e.sadd(dst, a, imm as i32);
}

fn alu(e: &mut Emitter, op: SAluOp, dst: SReg, a: SReg, b: SSrc) {
    e.salu(op, dst, a, b);
}

/// `dst` = the region's base byte offset in its buffer.
pub fn region_base(e: &mut Emitter, args: &ArgMap, dst: SReg, r: &Region) {
    let off = match r.slot {
        Slot::In => IN_OFF,
        Slot::Out => OUT_OFF,
        Slot::Scratch => SCR_OFF,
    };
    add_imm(e, dst, off, r.off);
    for &(pos, mult) in &r.terms {
        load_word(e, T3, args.axis[pos]);
        alu(e, SAluOp::Mul, T3, T3, SSrc::Imm(mult as i32));
        alu(e, SAluOp::Add, dst, dst, SSrc::Reg(T3));
    }
}

/// `dst = ((RANK + shift) mod n) * block + base`.
pub fn block_addr(e: &mut Emitter, dst: SReg, base: SReg, shift: i64, n: u32, block: u64) {
    if shift == 0 {
        alu(e, SAluOp::Mul, dst, RANK, SSrc::Imm(block as i32));
    } else {
        alu(e, SAluOp::Add, dst, RANK, SSrc::Imm(shift as i32));
        alu(e, SAluOp::RemU, dst, dst, SSrc::Imm(n as i32));
        alu(e, SAluOp::Mul, dst, dst, SSrc::Imm(block as i32));
    }
    alu(e, SAluOp::Add, dst, dst, SSrc::Reg(base));
}

/// A DMA of `bytes` contiguous bytes; `remote` = (chip register, receive semaphore).
pub fn dma(
    e: &mut Emitter,
    dst: MemRef,
    src: MemRef,
    bytes: u64,
    sem: u8,
    remote: Option<(SReg, u8)>,
) {
    let (len, sem) = (DmaShape::Len(e.konst(bytes as i32)), Sem::n(sem));
    let remote = remote.map(|(chip, rs)| Remote {
        chip,
        recv_sem: Sem::n(rs),
    });
    match remote {
        Some(r) => e.dma_remote(dst, src, len, sem, r),
        None => e.dma(dst, src, len, sem),
    };
}

/// Waits until `sem` has counted `amount` more bytes (split into waits the ISA can express).
pub fn wait(e: &mut Emitter, sem: u8, amount: u64) {
    e.wait_bytes(Sem::n(sem), amount);
}

/// Loads the offsets every stage uses.
pub fn prologue(e: &mut Emitter, args: &ArgMap) {
    load_word(e, IN_OFF, args.in_off);
    load_word(e, OUT_OFF, args.out_off);
    load_word(e, SCR_OFF, args.scr_off);
}
