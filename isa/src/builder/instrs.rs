//! One [`ProgramBuilder`] method per instruction, named after its assembly mnemonic
//! (`sadd`, `vld`, `mxu_lw`, `sem_wait`, ...), with the operands in assembly order.
//!
//! Operands that the assembly accepts as a register or an immediate take `impl Into<SSrc>`
//! (`SReg` or `i32`) or `impl Into<VSrc>` (`VReg`, `SReg` broadcast, or `u32` bits). The
//! optional operands of vector loads and stores (strides and mask) are a [`VAccess`].

use super::ProgramBuilder;
use crate::instr::{Addr, DmaShape, Instr, MemRef, Remote, SSrc, VSrc};
use crate::ops::{
    Axis, CmpOp, CvtOp, IotaKind, MaskOp, MemFmt, MxuFmt, Precision, RedOp, SAluOp, SysReg, VBinOp,
    VType, VUnOp,
};
use crate::reg::{MReg, Mxu, SReg, Sem, VReg};

/// How a vector load or store walks VMEM: its sublane and lane strides (`None`: dense) and the
/// mask of the elements it touches (`None`: all).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct VAccess {
    /// Register holding the byte stride between sublanes (`sub=`).
    pub sub_stride: Option<SReg>,
    /// Register holding the byte stride between lanes (`lane=`; 0 broadcasts one element).
    pub lane_stride: Option<SReg>,
    /// Only elements whose mask bit is set are read or written (`mask=`).
    pub mask: Option<MReg>,
}

impl VAccess {
    /// A dense (8, 128) tile, every element.
    pub const DENSE: VAccess = VAccess {
        sub_stride: None,
        lane_stride: None,
        mask: None,
    };

    /// A dense tile under `mask` (every element when `None`).
    pub const fn masked(mask: Option<MReg>) -> Self {
        VAccess {
            sub_stride: None,
            lane_stride: None,
            mask,
        }
    }

    /// Sublanes `sub_stride` bytes apart (rows of a wider array), lanes dense.
    pub const fn rows(sub_stride: SReg) -> Self {
        VAccess {
            sub_stride: Some(sub_stride),
            lane_stride: None,
            mask: None,
        }
    }

    /// The same, with lanes `lane_stride` bytes apart (`s0`: one element broadcast along the
    /// lanes).
    pub const fn with_lane_stride(self, lane_stride: SReg) -> Self {
        VAccess {
            lane_stride: Some(lane_stride),
            ..self
        }
    }
}

impl From<VReg> for VSrc {
    fn from(v: VReg) -> Self {
        VSrc::V(v)
    }
}

impl From<SReg> for VSrc {
    fn from(s: SReg) -> Self {
        VSrc::S(s)
    }
}

impl From<u32> for VSrc {
    fn from(bits: u32) -> Self {
        VSrc::Imm(bits)
    }
}

impl ProgramBuilder {
    // ---- control ----

    /// `nop`.
    pub fn nop(&mut self) -> &mut Self {
        self.push(Instr::Nop)
    }

    /// `halt`.
    pub fn halt(&mut self) -> &mut Self {
        self.push(Instr::Halt)
    }

    // ---- scalar unit ----

    /// `smov dst, imm`.
    pub fn smov(&mut self, dst: SReg, imm: i32) -> &mut Self {
        self.push(Instr::SMov { dst, imm })
    }

    /// `sOP dst, a, b`: any scalar ALU operation.
    pub fn salu(&mut self, op: SAluOp, dst: SReg, a: SReg, b: impl Into<SSrc>) -> &mut Self {
        self.push(Instr::SAlu {
            op,
            dst,
            a,
            b: b.into(),
        })
    }

    /// `sadd dst, a, b`.
    pub fn sadd(&mut self, dst: SReg, a: SReg, b: impl Into<SSrc>) -> &mut Self {
        self.salu(SAluOp::Add, dst, a, b)
    }

    /// `ssub dst, a, b`.
    pub fn ssub(&mut self, dst: SReg, a: SReg, b: impl Into<SSrc>) -> &mut Self {
        self.salu(SAluOp::Sub, dst, a, b)
    }

    /// `smul dst, a, b`.
    pub fn smul(&mut self, dst: SReg, a: SReg, b: impl Into<SSrc>) -> &mut Self {
        self.salu(SAluOp::Mul, dst, a, b)
    }

    /// `scmp.OP dst, a, b`: 1 when the comparison holds, else 0.
    pub fn scmp(&mut self, op: CmpOp, dst: SReg, a: SReg, b: impl Into<SSrc>) -> &mut Self {
        self.push(Instr::SCmp {
            op,
            dst,
            a,
            b: b.into(),
        })
    }

    /// `sld dst, [addr]`.
    pub fn sld(&mut self, dst: SReg, addr: Addr) -> &mut Self {
        self.push(Instr::SLoad { dst, addr })
    }

    /// `sst src, [addr]`.
    pub fn sst(&mut self, src: SReg, addr: Addr) -> &mut Self {
        self.push(Instr::SStore { src, addr })
    }

    /// `ssys dst, reg`.
    pub fn ssys(&mut self, dst: SReg, reg: SysReg) -> &mut Self {
        self.push(Instr::SSys { dst, reg })
    }

    // ---- vector unit ----

    /// `vld.FMT dst, [addr], sub=, lane=, mask=`.
    pub fn vld(&mut self, fmt: MemFmt, dst: VReg, addr: Addr, access: VAccess) -> &mut Self {
        self.push(Instr::VLoad {
            fmt,
            dst,
            addr,
            sub_stride: access.sub_stride,
            lane_stride: access.lane_stride,
            mask: access.mask,
        })
    }

    /// `vst.FMT src, [addr], sub=, lane=, mask=`.
    pub fn vst(&mut self, fmt: MemFmt, src: VReg, addr: Addr, access: VAccess) -> &mut Self {
        self.push(Instr::VStore {
            fmt,
            src,
            addr,
            sub_stride: access.sub_stride,
            lane_stride: access.lane_stride,
            mask: access.mask,
        })
    }

    /// `vgather.FMT dst, [addr], index, mask=`.
    pub fn vgather(
        &mut self,
        fmt: MemFmt,
        dst: VReg,
        addr: Addr,
        index: VReg,
        mask: Option<MReg>,
    ) -> &mut Self {
        self.push(Instr::VGather {
            fmt,
            dst,
            addr,
            index,
            mask,
        })
    }

    /// `vmov.T dst, src`.
    pub fn vmov(&mut self, ty: VType, dst: VReg, src: impl Into<VSrc>) -> &mut Self {
        self.push(Instr::VMov {
            ty,
            dst,
            src: src.into(),
        })
    }

    /// `vOP.T dst, a, b`: any binary vector operation.
    pub fn vbin(
        &mut self,
        op: VBinOp,
        ty: VType,
        dst: VReg,
        a: VReg,
        b: impl Into<VSrc>,
    ) -> &mut Self {
        self.push(Instr::VBin {
            op,
            ty,
            dst,
            a,
            b: b.into(),
        })
    }

    /// `vOP.T dst, a`: any unary vector operation.
    pub fn vun(&mut self, op: VUnOp, ty: VType, dst: VReg, a: VReg) -> &mut Self {
        self.push(Instr::VUn { op, ty, dst, a })
    }

    /// `vcmp.OP.T dst, a, b`.
    pub fn vcmp(
        &mut self,
        op: CmpOp,
        ty: VType,
        dst: MReg,
        a: VReg,
        b: impl Into<VSrc>,
    ) -> &mut Self {
        self.push(Instr::VCmp {
            op,
            ty,
            dst,
            a,
            b: b.into(),
        })
    }

    /// `vsel.T dst, mask, a, b`.
    pub fn vsel(
        &mut self,
        ty: VType,
        dst: VReg,
        mask: MReg,
        a: VReg,
        b: impl Into<VSrc>,
    ) -> &mut Self {
        self.push(Instr::VSel {
            ty,
            dst,
            mask,
            a,
            b: b.into(),
        })
    }

    /// `vcvt.OP dst, a`.
    pub fn vcvt(&mut self, op: CvtOp, dst: VReg, a: VReg) -> &mut Self {
        self.push(Instr::VCvt { op, dst, a })
    }

    /// `viota.KIND dst`.
    pub fn viota(&mut self, kind: IotaKind, dst: VReg) -> &mut Self {
        self.push(Instr::VIota { kind, dst })
    }

    /// `vmask dst, mask`.
    pub fn vmask(&mut self, dst: VReg, mask: MReg) -> &mut Self {
        self.push(Instr::VMask { dst, mask })
    }

    /// `vred.OP.T.AXIS dst, a`.
    pub fn vred(&mut self, op: RedOp, ty: VType, axis: Axis, dst: VReg, a: VReg) -> &mut Self {
        self.push(Instr::VRed {
            op,
            ty,
            axis,
            dst,
            a,
        })
    }

    /// `vrot.AXIS dst, a, amount`.
    pub fn vrot(&mut self, axis: Axis, dst: VReg, a: VReg, amount: impl Into<SSrc>) -> &mut Self {
        self.push(Instr::VRot {
            axis,
            dst,
            a,
            amount: amount.into(),
        })
    }

    /// `vperm.AXIS dst, a, index`.
    pub fn vperm(&mut self, axis: Axis, dst: VReg, a: VReg, index: VReg) -> &mut Self {
        self.push(Instr::VPerm {
            axis,
            dst,
            a,
            index,
        })
    }

    /// `vtrans dst, a`.
    pub fn vtrans(&mut self, dst: VReg, a: VReg) -> &mut Self {
        self.push(Instr::VTrans { dst, a })
    }

    /// `mOP dst, a, b`: mask logic.
    pub fn mlogic(&mut self, op: MaskOp, dst: MReg, a: MReg, b: MReg) -> &mut Self {
        self.push(Instr::MLogic { op, dst, a, b })
    }

    /// `mnot dst, a`.
    pub fn mnot(&mut self, dst: MReg, a: MReg) -> &mut Self {
        self.push(Instr::MNot { dst, a })
    }

    /// `mset dst, 0|1`.
    pub fn mset(&mut self, dst: MReg, value: bool) -> &mut Self {
        self.push(Instr::MSet { dst, value })
    }

    // ---- matrix units ----

    /// `mxu.lw.FMT[.t] mxu, [addr], rows=, cols=, stride=`: loads a weight tile.
    #[allow(clippy::too_many_arguments)]
    pub fn mxu_lw(
        &mut self,
        mxu: Mxu,
        fmt: MxuFmt,
        transpose: bool,
        addr: Addr,
        rows: SReg,
        cols: SReg,
        stride: SReg,
    ) -> &mut Self {
        self.push(Instr::MxuLoad {
            mxu,
            fmt,
            transpose,
            addr,
            rows,
            cols,
            stride,
        })
    }

    /// `mxu.mm.FMT.PREC[.t] mxu, [addr], rows=, stride=`: streams LHS rows through the array.
    #[allow(clippy::too_many_arguments)]
    pub fn mxu_mm(
        &mut self,
        mxu: Mxu,
        fmt: MxuFmt,
        transpose: bool,
        prec: Precision,
        addr: Addr,
        rows: SReg,
        stride: SReg,
    ) -> &mut Self {
        self.push(Instr::MxuMatmul {
            mxu,
            fmt,
            transpose,
            prec,
            addr,
            rows,
            stride,
        })
    }

    /// `mxu.pop[.acc] mxu, [addr], rows=, stride=`: writes (or, with `acc`, adds) result rows.
    pub fn mxu_pop(
        &mut self,
        mxu: Mxu,
        acc: bool,
        addr: Addr,
        rows: SReg,
        stride: SReg,
    ) -> &mut Self {
        self.push(Instr::MxuPop {
            mxu,
            acc,
            addr,
            rows,
            stride,
        })
    }

    // ---- DMA and synchronisation ----

    /// `dma dst, src, len=|desc=, sem=`: a copy on this chip.
    pub fn dma(&mut self, dst: MemRef, src: MemRef, shape: DmaShape, sem: Sem) -> &mut Self {
        self.push(Instr::Dma {
            dst,
            src,
            shape,
            sem,
            remote: None,
        })
    }

    /// `dma dst, src, len=|desc=, sem=, remote=, rsem=`: a push to another chip.
    pub fn dma_remote(
        &mut self,
        dst: MemRef,
        src: MemRef,
        shape: DmaShape,
        sem: Sem,
        remote: Remote,
    ) -> &mut Self {
        self.push(Instr::Dma {
            dst,
            src,
            shape,
            sem,
            remote: Some(remote),
        })
    }

    /// `sem.signal sem, amount`.
    pub fn sem_signal(&mut self, sem: Sem, amount: impl Into<SSrc>) -> &mut Self {
        self.push(Instr::SemSignal {
            sem,
            amount: amount.into(),
            chip: None,
        })
    }

    /// `sem.signal sem, amount, chip=`: adds to a semaphore of another chip.
    pub fn sem_signal_remote(
        &mut self,
        sem: Sem,
        amount: impl Into<SSrc>,
        chip: SReg,
    ) -> &mut Self {
        self.push(Instr::SemSignal {
            sem,
            amount: amount.into(),
            chip: Some(chip),
        })
    }

    /// `sem.wait sem, amount`.
    pub fn sem_wait(&mut self, sem: Sem, amount: impl Into<SSrc>) -> &mut Self {
        self.push(Instr::SemWait {
            sem,
            amount: amount.into(),
        })
    }

    /// `barrier`.
    pub fn barrier(&mut self) -> &mut Self {
        self.push(Instr::Barrier)
    }
}
