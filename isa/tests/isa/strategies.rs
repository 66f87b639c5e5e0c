//! Generators: every [`Instr`] variant with valid fields, and whole valid [`Program`]s.

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::{BoxedStrategy, Union};
use tpuemu_isa::ops::*;
use tpuemu_isa::verify::check_instr;
use tpuemu_isa::*;

pub fn sreg() -> impl Strategy<Value = SReg> + Clone {
    (0..SReg::COUNT).prop_map(SReg::n)
}
pub fn vreg() -> impl Strategy<Value = VReg> + Clone {
    (0..VReg::COUNT).prop_map(VReg::n)
}
pub fn mreg() -> impl Strategy<Value = MReg> + Clone {
    (0..MReg::COUNT).prop_map(MReg::n)
}
fn mxu() -> impl Strategy<Value = Mxu> + Clone {
    (0..Mxu::COUNT).prop_map(Mxu::n)
}
fn sem() -> impl Strategy<Value = Sem> + Clone {
    (0..Sem::COUNT).prop_map(Sem::n)
}
fn addr() -> impl Strategy<Value = Addr> + Clone {
    (sreg(), prop_oneof![any::<i32>(), -64..64i32]).prop_map(|(b, o)| Addr::new(b, o))
}
fn ssrc() -> impl Strategy<Value = SSrc> + Clone {
    prop_oneof![sreg().prop_map(SSrc::Reg), any::<i32>().prop_map(SSrc::Imm)]
}
fn f32_bits() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![
        any::<u32>(),
        any::<f32>().prop_map(f32::to_bits),
        select(vec![
            0u32,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            1,
            0x3f80_0000
        ]),
    ]
}
fn vsrc() -> impl Strategy<Value = VSrc> + Clone {
    prop_oneof![
        vreg().prop_map(VSrc::V),
        sreg().prop_map(VSrc::S),
        f32_bits().prop_map(VSrc::Imm)
    ]
}
fn memref() -> impl Strategy<Value = MemRef> + Clone {
    (select(Space::ALL), 0..MAX_ARG, sreg()).prop_map(|(space, slot, addr)| MemRef {
        space,
        slot: (space == Space::Hbm).then(|| ArgSlot::n(slot)),
        addr,
    })
}
const MAX_ARG: u8 = 64;

fn b<S: Strategy<Value = Instr> + 'static>(s: S) -> BoxedStrategy<Instr> {
    s.boxed()
}

/// Every instruction variant, with fields that pass `check_instr`. Branch targets and marker
/// indices are arbitrary; `program()` fixes them up.
pub fn instr() -> impl Strategy<Value = Instr> {
    use Instr::*;
    let arms: Vec<BoxedStrategy<Instr>> = vec![
        Just(Nop).boxed(),
        Just(Halt).boxed(),
        Just(Barrier).boxed(),
        Just(MarkEnd).boxed(),
        b(any::<u32>().prop_map(|target| Br { target })),
        b(
            (select(BrCond::ALL), sreg(), any::<u32>()).prop_map(|(cond, reg, target)| BrIf {
                cond,
                reg,
                target,
            }),
        ),
        b((sreg(), any::<i32>()).prop_map(|(dst, imm)| SMov { dst, imm })),
        b(
            (select(SAluOp::ALL), sreg(), sreg(), ssrc()).prop_map(|(op, dst, a, b)| SAlu {
                op,
                dst,
                a,
                b,
            }),
        ),
        b(
            (select(CmpOp::ALL), sreg(), sreg(), ssrc()).prop_map(|(op, dst, a, b)| SCmp {
                op,
                dst,
                a,
                b,
            }),
        ),
        b((sreg(), addr()).prop_map(|(dst, addr)| SLoad { dst, addr })),
        b((sreg(), addr()).prop_map(|(src, addr)| SStore { src, addr })),
        b((sreg(), select(SysReg::ALL)).prop_map(|(dst, reg)| SSys { dst, reg })),
        b((
            select(MemFmt::ALL),
            vreg(),
            addr(),
            proptest::option::of(sreg()),
            proptest::option::of(sreg()),
            proptest::option::of(mreg()),
        )
            .prop_map(|(fmt, dst, addr, sub_stride, lane_stride, mask)| VLoad {
                fmt,
                dst,
                addr,
                sub_stride,
                lane_stride,
                mask,
            })),
        b((
            select(MemFmt::ALL),
            vreg(),
            addr(),
            proptest::option::of(sreg()),
            proptest::option::of(sreg()),
            proptest::option::of(mreg()),
        )
            .prop_map(|(fmt, src, addr, sub_stride, lane_stride, mask)| VStore {
                fmt,
                src,
                addr,
                sub_stride,
                lane_stride,
                mask,
            })),
        b((
            select(MemFmt::ALL),
            vreg(),
            addr(),
            vreg(),
            proptest::option::of(mreg()),
        )
            .prop_map(|(fmt, dst, addr, index, mask)| VGather {
                fmt,
                dst,
                addr,
                index,
                mask,
            })),
        b((select(VType::ALL), vreg(), vsrc()).prop_map(|(ty, dst, src)| VMov { ty, dst, src })),
        b((
            select(VBinOp::ALL),
            select(VType::ALL),
            vreg(),
            vreg(),
            vsrc(),
        )
            .prop_map(|(op, ty, dst, a, b)| VBin { op, ty, dst, a, b })),
        b((select(VUnOp::ALL), select(VType::ALL), vreg(), vreg())
            .prop_map(|(op, ty, dst, a)| VUn { op, ty, dst, a })),
        b((
            select(CmpOp::ALL),
            select(VType::ALL),
            mreg(),
            vreg(),
            vsrc(),
        )
            .prop_map(|(op, ty, dst, a, b)| VCmp { op, ty, dst, a, b })),
        b(
            (select(VType::ALL), vreg(), mreg(), vreg(), vsrc()).prop_map(
                |(ty, dst, mask, a, b)| VSel {
                    ty,
                    dst,
                    mask,
                    a,
                    b,
                },
            ),
        ),
        b((select(CvtOp::ALL), vreg(), vreg()).prop_map(|(op, dst, a)| VCvt { op, dst, a })),
        b((select(IotaKind::ALL), vreg()).prop_map(|(kind, dst)| VIota { kind, dst })),
        b((vreg(), mreg()).prop_map(|(dst, mask)| VMask { dst, mask })),
        b((
            select(RedOp::ALL),
            select(VType::ALL),
            select(Axis::ALL),
            vreg(),
            vreg(),
        )
            .prop_map(|(op, ty, axis, dst, a)| VRed {
                op,
                ty,
                axis,
                dst,
                a,
            })),
        b(
            (select(Axis::ALL), vreg(), vreg(), ssrc()).prop_map(|(axis, dst, a, amount)| VRot {
                axis,
                dst,
                a,
                amount,
            }),
        ),
        b(
            (select(Axis::ALL), vreg(), vreg(), vreg()).prop_map(|(axis, dst, a, index)| VPerm {
                axis,
                dst,
                a,
                index,
            }),
        ),
        b((vreg(), vreg()).prop_map(|(dst, a)| VTrans { dst, a })),
        b(
            (select(MaskOp::ALL), mreg(), mreg(), mreg()).prop_map(|(op, dst, a, b)| MLogic {
                op,
                dst,
                a,
                b,
            }),
        ),
        b((mreg(), mreg()).prop_map(|(dst, a)| MNot { dst, a })),
        b((mreg(), any::<bool>()).prop_map(|(dst, value)| MSet { dst, value })),
        b((
            mxu(),
            select(MxuFmt::ALL),
            any::<bool>(),
            addr(),
            sreg(),
            sreg(),
            sreg(),
        )
            .prop_map(|(mxu, fmt, transpose, addr, rows, cols, stride)| MxuLoad {
                mxu,
                fmt,
                transpose,
                addr,
                rows,
                cols,
                stride,
            })),
        b((
            mxu(),
            select(MxuFmt::ALL),
            select(Precision::ALL),
            any::<bool>(),
            addr(),
            sreg(),
            sreg(),
        )
            .prop_map(
                |(mxu, fmt, prec, transpose, addr, rows, stride)| MxuMatmul {
                    mxu,
                    fmt,
                    prec,
                    transpose,
                    addr,
                    rows,
                    stride,
                },
            )),
        b((mxu(), any::<bool>(), addr(), sreg(), sreg()).prop_map(
            |(mxu, acc, addr, rows, stride)| MxuPop {
                mxu,
                acc,
                addr,
                rows,
                stride,
            },
        )),
        b((
            memref(),
            memref(),
            any::<bool>(),
            sreg(),
            sem(),
            proptest::option::of((sreg(), sem())),
        )
            .prop_map(|(dst, src, desc, r, sem, remote)| Dma {
                dst,
                src,
                shape: if desc {
                    DmaShape::Desc(r)
                } else {
                    DmaShape::Len(r)
                },
                sem,
                remote: remote.map(|(chip, recv_sem)| Remote { chip, recv_sem }),
            })),
        b((sem(), ssrc(), proptest::option::of(sreg()))
            .prop_map(|(sem, amount, chip)| SemSignal { sem, amount, chip })),
        b((sem(), ssrc()).prop_map(|(sem, amount)| SemWait { sem, amount })),
        b(any::<u16>().prop_map(|name| MarkBegin { name })),
    ];
    Union::new(arms).prop_filter("valid instruction", |i| check_instr(i).is_ok())
}

fn text() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "[a-z_][a-z0-9_]{0,8}",
        "\\PC{0,10}",
        "[\\x00-\\x7f]{0,8}",
        Just("a3".to_string()),
    ]
}

fn unique(mut names: Vec<String>) -> Vec<String> {
    for i in 0..names.len() {
        while names[..i].contains(&names[i]) {
            names[i].push('_');
        }
    }
    names
}

/// A whole program that passes `check_program`.
pub fn program() -> impl Strategy<Value = Program> {
    (
        text(),
        proptest::collection::vec((text(), any::<bool>()), 0..5),
        proptest::collection::vec(text(), 0..4),
        proptest::collection::vec(
            (0u32..4, proptest::collection::vec(any::<u32>(), 1..5)),
            0..3,
        ),
        proptest::option::of(text()),
        proptest::option::of(any::<u64>()),
        proptest::collection::vec(instr(), 0..24),
    )
        .prop_map(
            |(name, args, markers, smem, source_op, fusion_group, instrs)| {
                let names = unique(args.iter().map(|a| a.0.clone()).collect());
                let args: Vec<ArgDecl> = names
                    .into_iter()
                    .zip(&args)
                    .map(|(name, a)| ArgDecl {
                        name,
                        kind: if a.1 {
                            ArgKind::Buffer
                        } else {
                            ArgKind::Scalar
                        },
                    })
                    .collect();
                let markers = unique(markers);
                let mut next = 4 * args.len() as u32;
                let smem_init = smem
                    .into_iter()
                    .map(|(gap, words)| {
                        let addr = next + 4 * gap;
                        next = addr + 4 * words.len() as u32;
                        SmemInit { addr, words }
                    })
                    .collect();
                let buffers: Vec<u8> = (0..args.len())
                    .filter(|i| args[*i].kind == ArgKind::Buffer)
                    .map(|i| i as u8)
                    .collect();
                let len = instrs.len() as u32;
                let instrs = instrs
                    .into_iter()
                    .map(|i| fix_up(i, len, markers.len(), &buffers))
                    .collect();
                Program {
                    name,
                    args,
                    instrs,
                    markers,
                    smem_init,
                    source_op,
                    fusion_group,
                }
            },
        )
}

/// Makes an instruction valid inside a program of `len` instructions, `markers` markers and
/// buffer arguments `buffers`.
pub fn fix_up(i: Instr, len: u32, markers: usize, buffers: &[u8]) -> Instr {
    let i = match i.branch_target() {
        Some(t) => i.with_branch_target(t % (len + 1)),
        None => i,
    };
    let side = |m: MemRef| match (m.slot, buffers.is_empty()) {
        (None, _) => m,
        (Some(_), true) => MemRef::vmem(m.addr),
        (Some(s), false) => MemRef::hbm(
            ArgSlot::n(buffers[s.index() as usize % buffers.len()]),
            m.addr,
        ),
    };
    match i {
        Instr::MarkBegin { name } if markers == 0 => {
            let _ = name;
            Instr::MarkEnd
        }
        Instr::MarkBegin { name } => Instr::MarkBegin {
            name: (name as usize % markers) as u16,
        },
        Instr::Dma {
            dst,
            src,
            shape,
            sem,
            remote,
        } => Instr::Dma {
            dst: side(dst),
            src: side(src),
            shape,
            sem,
            remote,
        },
        i => i,
    }
}
