//! The builder's instruction methods against the assembler: one program written both ways must
//! decode to the same instructions, so every method emits the instruction its mnemonic names.

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{
    Axis, CmpOp, CvtOp, IotaKind, MaskOp, MemFmt, MxuFmt, Precision, RedOp, SAluOp, SysReg, VBinOp,
    VType, VUnOp,
};
use tpuemu_isa::{
    Addr, ArgSlot, DmaShape, MReg, MemRef, Mxu, ProgramBuilder, Remote, SReg, Sem, VReg,
};

/// Every builder method against the assembler: the same program written both ways must
/// decode to the same instructions.
#[test]
fn every_method_matches_its_assembly() {
    let s = SReg::n;
    let v = VReg::n;
    let m = MReg::n;
    let mut b = ProgramBuilder::new("all");
    b.buffer("x");
    b.mark_begin("r");
    let top = b.here();
    b.nop()
        .smov(s(1), -7)
        .salu(SAluOp::RemU, s(2), s(1), 3)
        .sadd(s(2), s(2), s(1))
        .ssub(s(3), s(2), 5)
        .smul(s(3), s(3), s(2))
        .scmp(CmpOp::LtU, s(4), s(3), s(1))
        .sld(s(5), Addr::new(s(4), 8))
        .sst(s(5), Addr::abs(256))
        .ssys(s(6), SysReg::DimY)
        .vld(MemFmt::Bf16, v(1), Addr::new(s(1), 64), VAccess::DENSE)
        .vld(
            MemFmt::W32,
            v(2),
            Addr::abs(0),
            VAccess::rows(s(2)).with_lane_stride(SReg::ZERO),
        )
        .vst(
            MemFmt::W32,
            v(2),
            Addr::abs(4096),
            VAccess::masked(Some(m(1))),
        )
        .vst(MemFmt::W32, v(2), Addr::abs(0), VAccess::rows(s(3)))
        .vgather(MemFmt::W32, v(3), Addr::abs(0), v(1), Some(m(2)))
        .vmov(VType::F32, v(4), 0x3f80_0000u32)
        .vmov(VType::I32, v(4), s(3))
        .vbin(VBinOp::Max, VType::F32, v(5), v(4), v(3))
        .vun(VUnOp::Tanh, VType::F32, v(5), v(5))
        .vcmp(CmpOp::Ne, VType::F32, m(3), v(5), v(5))
        .vsel(VType::I32, v(6), m(3), v(1), 7u32)
        .vcvt(CvtOp::F2I, v(6), v(6))
        .viota(IotaKind::Sub, v(7))
        .vmask(v(8), m(3))
        .vred(RedOp::Add, VType::F32, Axis::Lane, v(9), v(8))
        .vrot(Axis::Sub, v(9), v(9), s(1))
        .vrot(Axis::Lane, v(9), v(9), -3)
        .vperm(Axis::Lane, v(10), v(9), v(7))
        .vtrans(v(11), v(10))
        .mlogic(MaskOp::AndNot, m(4), m(3), m(1))
        .mnot(m(5), m(4))
        .mset(m(6), true)
        .mxu_lw(
            Mxu::n(1),
            MxuFmt::Bf16,
            true,
            Addr::abs(0),
            s(1),
            s(2),
            s(3),
        )
        .mxu_mm(
            Mxu::n(1),
            MxuFmt::Bf16,
            false,
            Precision::P1,
            Addr::abs(0),
            s(1),
            s(3),
        )
        .mxu_pop(Mxu::n(1), true, Addr::new(s(4), 16), s(1), s(3))
        .dma(
            MemRef::vmem(s(1)),
            MemRef::hbm(ArgSlot::n(0), s(2)),
            DmaShape::Len(s(3)),
            Sem::n(4),
        )
        .dma_remote(
            MemRef::hbm(ArgSlot::n(0), s(1)),
            MemRef::smem(s(2)),
            DmaShape::Desc(s(3)),
            Sem::n(5),
            Remote {
                chip: s(6),
                recv_sem: Sem::n(7),
            },
        )
        .sem_signal(Sem::n(1), 4)
        .sem_signal_remote(Sem::n(2), s(3), s(4))
        .sem_wait(Sem::n(1), s(5))
        .barrier()
        .mark_end();
    b.brnz(s(1), top).halt();
    let built = b.finish().unwrap();
    let text = "
        .program all
        .arg x buffer
        .marker \"r\"
        mark.begin \"r\"
    top:
        nop
        smov s1, -7
        sremu s2, s1, 3
        sadd s2, s2, s1
        ssub s3, s2, 5
        smul s3, s3, s2
        scmp.ltu s4, s3, s1
        sld s5, [s4 + 8]
        sst s5, [s0 + 256]
        ssys s6, dimy
        vld.bf16 v1, [s1 + 64]
        vld.w32 v2, [s0 + 0], sub=s2, lane=s0
        vst.w32 v2, [s0 + 4096], mask=m1
        vst.w32 v2, [s0 + 0], sub=s3
        vgather.w32 v3, [s0 + 0], v1, mask=m2
        vmov.f32 v4, 1.0
        vmov.i32 v4, s3
        vmax.f32 v5, v4, v3
        vtanh.f32 v5, v5
        vcmp.ne.f32 m3, v5, v5
        vsel.i32 v6, m3, v1, 7
        vcvt.f2i v6, v6
        viota.sub v7
        vmask v8, m3
        vred.add.f32.lane v9, v8
        vrot.sub v9, v9, s1
        vrot.lane v9, v9, -3
        vperm.lane v10, v9, v7
        vtrans v11, v10
        mandn m4, m3, m1
        mnot m5, m4
        mset m6, 1
        mxu.lw.bf16.t mxu1, [s0 + 0], rows=s1, cols=s2, stride=s3
        mxu.mm.bf16.p1 mxu1, [s0 + 0], rows=s1, stride=s3
        mxu.pop.acc mxu1, [s4 + 16], rows=s1, stride=s3
        dma vmem[s1], hbm.a0[s2], len=s3, sem=sem4
        dma hbm.a0[s1], smem[s2], desc=s3, sem=sem5, remote=s6, rsem=sem7
        sem.signal sem1, 4
        sem.signal sem2, s3, chip=s4
        sem.wait sem1, s5
        barrier
        mark.end
        brnz s1, top
        halt
    ";
    let asm = tpuemu_isa::assemble(text).unwrap();
    assert_eq!(built.instrs.len(), asm.instrs.len());
    for (i, (b, a)) in built.instrs.iter().zip(&asm.instrs).enumerate() {
        assert_eq!(b, a, "instruction {i}");
    }
}
