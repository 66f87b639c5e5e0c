//! The decoded instruction: one enum with named fields.
//!
//! The decoder builds [`Instr`] values; the executor, the disassembler and the cost model all
//! consume this one form. Its [`Display`](std::fmt::Display) is the assembly text (see
//! [`crate::text`]), except that branch targets print as absolute `@pc` and marker names as
//! `#index` when no [`Program`](crate::Program) is at hand to name them.

use crate::ops::*;
use crate::reg::*;

/// A scalar operand: a register or a 32-bit immediate.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum SSrc {
    /// A scalar register.
    Reg(SReg),
    /// A signed 32-bit immediate.
    Imm(i32),
}

/// A vector operand: a vector register, a scalar register broadcast to every element, or a
/// 32-bit immediate broadcast to every element.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum VSrc {
    /// A vector register.
    V(VReg),
    /// A scalar register's 32 bits, broadcast.
    S(SReg),
    /// An immediate's 32 bits (an f32 or an i32, as the instruction's type says), broadcast.
    Imm(u32),
}

/// A VMEM or SMEM byte address: base register plus signed immediate offset (`[s3 + 64]`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Addr {
    /// Base register.
    pub base: SReg,
    /// Byte offset added to the base.
    pub offset: i32,
}

impl Addr {
    /// `[base + offset]`.
    pub const fn new(base: SReg, offset: i32) -> Self {
        Addr { base, offset }
    }

    /// `[s0 + offset]`: an absolute address.
    pub const fn abs(offset: i32) -> Self {
        Addr {
            base: SReg::ZERO,
            offset,
        }
    }
}

/// One side of a DMA: a memory space and a byte address held in a register. HBM addresses are
/// offsets into the buffer bound to an argument slot.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct MemRef {
    /// Which memory.
    pub space: Space,
    /// The argument slot, for HBM only.
    pub slot: Option<ArgSlot>,
    /// Register holding the byte address (VMEM/SMEM) or byte offset into the slot's buffer (HBM).
    pub addr: SReg,
}

impl MemRef {
    /// `vmem[addr]`.
    pub const fn vmem(addr: SReg) -> Self {
        MemRef {
            space: Space::Vmem,
            slot: None,
            addr,
        }
    }
    /// `smem[addr]`.
    pub const fn smem(addr: SReg) -> Self {
        MemRef {
            space: Space::Smem,
            slot: None,
            addr,
        }
    }
    /// `hbm.aN[addr]`.
    pub const fn hbm(slot: ArgSlot, addr: SReg) -> Self {
        MemRef {
            space: Space::Hbm,
            slot: Some(slot),
            addr,
        }
    }
}

/// How much a DMA moves.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum DmaShape {
    /// A contiguous run; the register holds the length in bytes (`len=s5`).
    Len(SReg),
    /// A strided, multi-dimensional copy; the register holds the SMEM byte address of a
    /// descriptor (`desc=s5`, see [`crate::dma::DmaDescriptor`]).
    Desc(SReg),
}

/// The far end of a remote DMA or a remote semaphore signal.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Remote {
    /// Register holding the destination chip's index.
    pub chip: SReg,
    /// Semaphore on the destination chip, incremented by the bytes received.
    pub recv_sem: Sem,
}

/// One decoded instruction.
///
/// Field names follow the assembly operands. Every variant is documented with its syntax in
/// `isa/README.md`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum Instr {
    // ---- control ----
    /// `nop`: does nothing for one issue slot.
    Nop,
    /// `halt`: ends the program on this core.
    Halt,
    /// `br target`: jumps to `target`.
    Br {
        /// Absolute instruction index.
        target: u32,
    },
    /// `brz s1, target` / `brnz s1, target`: conditional jump.
    BrIf {
        /// Condition on `reg`.
        cond: BrCond,
        /// Tested register.
        reg: SReg,
        /// Absolute instruction index.
        target: u32,
    },

    // ---- scalar unit ----
    /// `smov s1, imm`: loads an immediate.
    SMov {
        /// Destination.
        dst: SReg,
        /// Value.
        imm: i32,
    },
    /// `sadd s1, s2, s3|imm` and the other scalar ALU operations.
    SAlu {
        /// Operation.
        op: SAluOp,
        /// Destination.
        dst: SReg,
        /// First operand.
        a: SReg,
        /// Second operand.
        b: SSrc,
    },
    /// `scmp.lt s1, s2, s3|imm`: writes 1 when the comparison holds, else 0.
    SCmp {
        /// Comparison (signed unless `ltu`/`geu`).
        op: CmpOp,
        /// Destination.
        dst: SReg,
        /// First operand.
        a: SReg,
        /// Second operand.
        b: SSrc,
    },
    /// `sld s1, [s2 + imm]`: loads a 32-bit word from SMEM (address aligned to 4).
    SLoad {
        /// Destination.
        dst: SReg,
        /// SMEM byte address.
        addr: Addr,
    },
    /// `sst s1, [s2 + imm]`: stores a 32-bit word to SMEM (address aligned to 4).
    SStore {
        /// Value stored.
        src: SReg,
        /// SMEM byte address.
        addr: Addr,
    },
    /// `ssys s1, chip`: reads where this core runs (chip, core, mesh coordinates and sizes).
    SSys {
        /// Destination.
        dst: SReg,
        /// Which value.
        reg: SysReg,
    },

    // ---- vector unit ----
    /// `vld.bf16 v1, [s2 + imm], sub=s3, lane=s4, mask=m1`: loads an (8,128) tile from VMEM.
    /// Element (s, l) is read at `addr + s*sub + l*lane` (strides in bytes; defaults are dense:
    /// `lane` = element size, `sub` = 128 x element size) and widened to 32 bits. Masked-off
    /// elements are 0.
    VLoad {
        /// Memory format.
        fmt: MemFmt,
        /// Destination.
        dst: VReg,
        /// VMEM byte address of element (0, 0).
        addr: Addr,
        /// Sublane stride in bytes (default dense).
        sub_stride: Option<SReg>,
        /// Lane stride in bytes (default dense; 0 broadcasts one element).
        lane_stride: Option<SReg>,
        /// Only elements whose mask bit is set are read.
        mask: Option<MReg>,
    },
    /// `vst.bf16 v1, [s2 + imm], sub=s3, lane=s4, mask=m1`: stores an (8,128) tile to VMEM,
    /// narrowing each element to the memory format. Masked-off elements are not written.
    VStore {
        /// Memory format.
        fmt: MemFmt,
        /// Value stored.
        src: VReg,
        /// VMEM byte address of element (0, 0).
        addr: Addr,
        /// Sublane stride in bytes (default dense).
        sub_stride: Option<SReg>,
        /// Lane stride in bytes (default dense).
        lane_stride: Option<SReg>,
        /// Only elements whose mask bit is set are written.
        mask: Option<MReg>,
    },
    /// `vgather.w32 v1, [s2 + imm], v3, mask=m1`: element (s, l) is read from VMEM at
    /// `addr + index[s][l] * size` (cross-lane unit).
    VGather {
        /// Memory format.
        fmt: MemFmt,
        /// Destination.
        dst: VReg,
        /// VMEM base byte address.
        addr: Addr,
        /// Element indices (i32).
        index: VReg,
        /// Only elements whose mask bit is set are read; others are 0.
        mask: Option<MReg>,
    },
    /// `vmov.f32 v1, v2|s3|imm`: copies or broadcasts.
    VMov {
        /// How an immediate is written in assembly; no effect on the bits.
        ty: VType,
        /// Destination.
        dst: VReg,
        /// Source.
        src: VSrc,
    },
    /// `vadd.f32 v1, v2, v3|s4|imm` and the other elementwise binary operations.
    VBin {
        /// Operation.
        op: VBinOp,
        /// Element type.
        ty: VType,
        /// Destination.
        dst: VReg,
        /// First operand.
        a: VReg,
        /// Second operand.
        b: VSrc,
    },
    /// `vexp.f32 v1, v2` and the other elementwise unary operations.
    VUn {
        /// Operation.
        op: VUnOp,
        /// Element type.
        ty: VType,
        /// Destination.
        dst: VReg,
        /// Operand.
        a: VReg,
    },
    /// `vcmp.lt.f32 m1, v2, v3|s4|imm`: writes the comparison into a mask register.
    VCmp {
        /// Comparison.
        op: CmpOp,
        /// Element type.
        ty: VType,
        /// Destination mask.
        dst: MReg,
        /// First operand.
        a: VReg,
        /// Second operand.
        b: VSrc,
    },
    /// `vsel.f32 v1, m2, v3, v4|s5|imm`: `dst = mask ? a : b`, element by element.
    VSel {
        /// How an immediate is written in assembly; no effect on the bits.
        ty: VType,
        /// Destination.
        dst: VReg,
        /// Selector.
        mask: MReg,
        /// Chosen where the mask is set.
        a: VReg,
        /// Chosen where the mask is clear.
        b: VSrc,
    },
    /// `vcvt.f2i v1, v2`: converts lane interpretations or rounds to a narrower precision.
    VCvt {
        /// Conversion.
        op: CvtOp,
        /// Destination.
        dst: VReg,
        /// Operand.
        a: VReg,
    },
    /// `viota.lane v1`: writes lane, sublane or flat indices (i32).
    VIota {
        /// Which index.
        kind: IotaKind,
        /// Destination.
        dst: VReg,
    },
    /// `vmask v1, m2`: writes 1 where the mask is set, else 0 (i32).
    VMask {
        /// Destination.
        dst: VReg,
        /// Mask read.
        mask: MReg,
    },
    /// `vred.add.f32.lane v1, v2`: reduces along an axis and broadcasts the result along it
    /// (cross-lane unit). Sums use a pairwise tree.
    VRed {
        /// Reduction.
        op: RedOp,
        /// Element type.
        ty: VType,
        /// Axis reduced.
        axis: Axis,
        /// Destination.
        dst: VReg,
        /// Operand.
        a: VReg,
    },
    /// `vrot.lane v1, v2, s3|imm`: rotates along an axis: `dst[i] = a[(i - amount) mod n]`
    /// (cross-lane unit).
    VRot {
        /// Axis rotated.
        axis: Axis,
        /// Destination.
        dst: VReg,
        /// Operand.
        a: VReg,
        /// Rotation amount.
        amount: SSrc,
    },
    /// `vperm.lane v1, v2, v3`: permutes along an axis: `dst[s][l] = a[s][index[s][l] mod 128]`
    /// for `lane`, `a[index[s][l] mod 8][l]` for `sub` (cross-lane unit).
    VPerm {
        /// Axis permuted.
        axis: Axis,
        /// Destination.
        dst: VReg,
        /// Operand.
        a: VReg,
        /// Source indices (i32).
        index: VReg,
    },
    /// `vtrans v1, v2`: transposes each of the sixteen 8x8 blocks (sublanes x lanes 8g..8g+8)
    /// (cross-lane unit).
    VTrans {
        /// Destination.
        dst: VReg,
        /// Operand.
        a: VReg,
    },

    // ---- mask registers ----
    /// `mand m1, m2, m3` and the other mask operations.
    MLogic {
        /// Operation.
        op: MaskOp,
        /// Destination.
        dst: MReg,
        /// First operand.
        a: MReg,
        /// Second operand.
        b: MReg,
    },
    /// `mnot m1, m2`: inverts a mask.
    MNot {
        /// Destination.
        dst: MReg,
        /// Operand.
        a: MReg,
    },
    /// `mset m1, 0|1`: sets every bit of a mask.
    MSet {
        /// Destination.
        dst: MReg,
        /// Value of every bit.
        value: bool,
    },

    // ---- matrix unit ----
    /// `mxu.lw.bf16 mxu0, [s1 + imm], rows=s2, cols=s3, stride=s4`: loads a weight tile of
    /// `rows` (K) x `cols` (N) elements from VMEM, row `r` at `addr + r*stride`. Rows and
    /// columns beyond the tile read as zero. With `.t` (`mxu.lw.bf16.t`) the tile is stored
    /// transposed: element (k, n) at `addr + n*stride + k*size` (weights given as N x K rows).
    MxuLoad {
        /// Matrix unit.
        mxu: Mxu,
        /// Format of the weights in VMEM.
        fmt: MxuFmt,
        /// The tile is stored transposed (N rows of K elements).
        transpose: bool,
        /// VMEM byte address of element (0, 0).
        addr: Addr,
        /// Register holding K (at most the array's rows).
        rows: SReg,
        /// Register holding N (at most the array's columns).
        cols: SReg,
        /// Register holding the row stride in bytes.
        stride: SReg,
    },
    /// `mxu.mm.f32.p3 mxu0, [s1 + imm], rows=s2, stride=s3`: streams `rows` LHS rows of K
    /// elements through the array; each produces a row of N f32 results, queued for `mxu.pop`.
    /// With `.t` (`mxu.mm.bf16.p1.t`) the LHS block is stored transposed: element k of row i at
    /// `addr + k*stride + i*size` (the transpose unit feeds the array).
    MxuMatmul {
        /// Matrix unit.
        mxu: Mxu,
        /// Format of the LHS in VMEM (and of the weights: they must match).
        fmt: MxuFmt,
        /// The LHS block is stored transposed (K rows of M elements).
        transpose: bool,
        /// bf16 passes (bf16 operands always take one).
        prec: Precision,
        /// VMEM byte address of the first row.
        addr: Addr,
        /// Register holding the number of rows M.
        rows: SReg,
        /// Register holding the row stride in bytes.
        stride: SReg,
    },
    /// `mxu.pop mxu0, [s1 + imm], rows=s2, stride=s3` (or `mxu.pop.acc`, which adds into what
    /// is there): writes `rows` queued result rows as f32 to VMEM.
    MxuPop {
        /// Matrix unit.
        mxu: Mxu,
        /// Add into the f32 values in VMEM instead of overwriting them.
        acc: bool,
        /// VMEM byte address of the first result row.
        addr: Addr,
        /// Register holding the number of rows.
        rows: SReg,
        /// Register holding the row stride in bytes.
        stride: SReg,
    },

    // ---- DMA and synchronisation ----
    /// `dma vmem[s1], hbm.a0[s2], len=s3, sem=sem0`: copies from `src` to `dst` on a DMA
    /// engine, asynchronously; adds the bytes moved to `sem` on completion. With
    /// `remote(s4, sem1)` on the destination it is a push to another chip: `sem` counts bytes
    /// sent, the remote chip's `sem1` counts bytes received.
    Dma {
        /// Destination.
        dst: MemRef,
        /// Source.
        src: MemRef,
        /// Length or descriptor.
        shape: DmaShape,
        /// Local semaphore incremented by the bytes moved (sent, for remote DMA).
        sem: Sem,
        /// Destination chip and its receive semaphore, for remote DMA.
        remote: Option<Remote>,
    },
    /// `sem.signal sem0, s1|imm` (or `..., chip=s2`): adds to a semaphore, here or on another
    /// chip.
    SemSignal {
        /// Semaphore.
        sem: Sem,
        /// Amount added.
        amount: SSrc,
        /// Register holding the chip to signal, when remote.
        chip: Option<SReg>,
    },
    /// `sem.wait sem0, s1|imm`: waits until the semaphore holds at least `amount`, then
    /// subtracts it.
    SemWait {
        /// Semaphore.
        sem: Sem,
        /// Amount awaited.
        amount: SSrc,
    },
    /// `barrier`: waits until every core of the launch reaches a barrier (the n-th barrier of
    /// each core meets the n-th of every other).
    Barrier,

    // ---- profiling ----
    /// `mark.begin "name"`: opens a named region in the trace (costs nothing).
    MarkBegin {
        /// Index into the program's marker names.
        name: u16,
    },
    /// `mark.end`: closes the innermost open region.
    MarkEnd,
}

/// The broad class of an instruction, for documentation and tests.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum InstrClass {
    /// Branches, `nop`, `halt`.
    Control,
    /// Scalar unit.
    Scalar,
    /// Vector unit, masks and cross-lane unit.
    Vector,
    /// Matrix units.
    Matrix,
    /// DMA, semaphores and barriers.
    Dma,
    /// Profiling markers.
    Marker,
}

impl Instr {
    /// The instruction's class.
    pub fn class(&self) -> InstrClass {
        use Instr::*;
        match self {
            Nop | Halt | Br { .. } | BrIf { .. } => InstrClass::Control,
            SMov { .. }
            | SAlu { .. }
            | SCmp { .. }
            | SLoad { .. }
            | SStore { .. }
            | SSys { .. } => InstrClass::Scalar,
            VLoad { .. }
            | VStore { .. }
            | VGather { .. }
            | VMov { .. }
            | VBin { .. }
            | VUn { .. }
            | VCmp { .. }
            | VSel { .. }
            | VCvt { .. }
            | VIota { .. }
            | VMask { .. }
            | VRed { .. }
            | VRot { .. }
            | VPerm { .. }
            | VTrans { .. }
            | MLogic { .. }
            | MNot { .. }
            | MSet { .. } => InstrClass::Vector,
            MxuLoad { .. } | MxuMatmul { .. } | MxuPop { .. } => InstrClass::Matrix,
            Dma { .. } | SemSignal { .. } | SemWait { .. } | Barrier => InstrClass::Dma,
            MarkBegin { .. } | MarkEnd => InstrClass::Marker,
        }
    }

    /// The unit that executes the instruction: the one instruction-to-unit table (the
    /// emulator sends each instruction to its unit's executor and records it under this unit).
    pub fn unit(&self) -> Unit {
        use Instr::*;
        match self {
            Nop
            | Halt
            | Br { .. }
            | BrIf { .. }
            | SMov { .. }
            | SAlu { .. }
            | SCmp { .. }
            | SLoad { .. }
            | SStore { .. }
            | SSys { .. } => Unit::Scalar,
            VLoad { .. } => Unit::VLoad,
            VStore { .. } => Unit::VStore,
            VUn { op, .. } if op.is_transcendental() => Unit::Eup,
            VMov { .. }
            | VBin { .. }
            | VUn { .. }
            | VCmp { .. }
            | VSel { .. }
            | VCvt { .. }
            | VIota { .. }
            | VMask { .. }
            | MLogic { .. }
            | MNot { .. }
            | MSet { .. } => Unit::Valu,
            VGather { .. } | VRed { .. } | VRot { .. } | VPerm { .. } | VTrans { .. } => Unit::Xlu,
            MxuLoad { mxu, .. } | MxuMatmul { mxu, .. } | MxuPop { mxu, .. } => Unit::Mxu(*mxu),
            Dma { .. } => Unit::Dma,
            SemSignal { .. } | SemWait { .. } | Barrier => Unit::Sync,
            MarkBegin { .. } | MarkEnd => Unit::Marker,
        }
    }

    /// The branch target, for branches.
    pub fn branch_target(&self) -> Option<u32> {
        match self {
            Instr::Br { target } | Instr::BrIf { target, .. } => Some(*target),
            _ => None,
        }
    }

    /// Replaces the branch target (used by the assembler when labels resolve).
    pub fn with_branch_target(self, new: u32) -> Self {
        match self {
            Instr::Br { .. } => Instr::Br { target: new },
            Instr::BrIf { cond, reg, .. } => Instr::BrIf {
                cond,
                reg,
                target: new,
            },
            other => other,
        }
    }
}

/// The units of a TensorCore, as the timing model and the trace name them.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Unit {
    /// Scalar unit: scalar ALU, SMEM, branches.
    Scalar,
    /// Vector ALU: elementwise arithmetic, compares, selects, masks.
    Valu,
    /// Vector load slot (VMEM to registers).
    VLoad,
    /// Vector store slot (registers to VMEM).
    VStore,
    /// Cross-lane unit: reductions, rotates, permutes, transposes, gathers.
    Xlu,
    /// Transcendental unit (exp, log, tanh, ...).
    Eup,
    /// A matrix unit.
    Mxu(Mxu),
    /// DMA issue (the copy itself runs on a DMA engine).
    Dma,
    /// Semaphores and barriers.
    Sync,
    /// Profiling markers (free).
    Marker,
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unit::Scalar => f.write_str("scalar"),
            Unit::Valu => f.write_str("valu"),
            Unit::VLoad => f.write_str("vld"),
            Unit::VStore => f.write_str("vst"),
            Unit::Xlu => f.write_str("xlu"),
            Unit::Eup => f.write_str("eup"),
            Unit::Mxu(m) => write!(f, "{m}"),
            Unit::Dma => f.write_str("dma"),
            Unit::Sync => f.write_str("sync"),
            Unit::Marker => f.write_str("marker"),
        }
    }
}
