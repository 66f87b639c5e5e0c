//! Hand-written programs, one per instruction class, the `examples/*.s` programs, and the
//! assembler's error messages.

use tpuemu_isa::text::AsmErrorKind;
use tpuemu_isa::*;

/// Assembles, encodes, decodes, disassembles and re-assembles; returns the program.
fn full_trip(src: &str) -> Program {
    let p = assemble(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let bytes = encode_program(&p);
    let back = decode_program(&bytes).expect("decodes");
    assert_eq!(back, p);
    let text = disassemble(&back);
    assert_eq!(assemble(&text).as_ref(), Ok(&p), "{text}");
    p
}

#[test]
fn control() {
    let p = full_trip(
        "
        .program control
        start: nop
            brz s1, done      ; forward label
            brnz s2, start    # backward label
            br @4
        done:
            halt
        ",
    );
    assert_eq!(p.instrs.len(), 5);
    assert_eq!(p.instrs[1].branch_target(), Some(4));
    assert_eq!(p.instrs[2].branch_target(), Some(0));
    assert!(p.instrs.iter().all(|i| i.class() == InstrClass::Control));
}

#[test]
fn scalar() {
    let p = full_trip(
        "
        smov s1, -5
        smov s2, 0xffffffff
        sadd s3, s1, s2
        sdivu s3, s3, 7
        scmp.ltu s4, s3, s1
        sld s5, [s0 + 8]
        sst s5, [s2 - 8]
        sld s6, [16]
        ssys s7, nchips
        ",
    );
    assert_eq!(
        p.instrs[1],
        Instr::SMov {
            dst: SReg::n(2),
            imm: -1
        }
    );
    assert_eq!(
        p.instrs[5],
        Instr::SLoad {
            dst: SReg::n(5),
            addr: Addr::abs(8)
        }
    );
    assert_eq!(
        p.instrs[6],
        Instr::SStore {
            src: SReg::n(5),
            addr: Addr::new(SReg::n(2), -8)
        }
    );
    assert!(p.instrs.iter().all(|i| i.class() == InstrClass::Scalar));
}

#[test]
fn vector() {
    let p = full_trip(
        "
        vld.bf16 v1, [s2 + 256], mask=m1, sub=s3
        vst.w32 v1, [s2], lane=s4
        vgather.w32 v2, [s1], v3, mask=m2
        vmov.f32 v4, -inf
        vmov.f32 v5, 0x7fc00001
        vmov.i32 v6, 0xffffffff
        vadd.f32 v1, v2, 1.5e-3
        vand.i32 v1, v2, s3
        vexp.f32 v1, v1
        vcmp.geu.i32 m1, v1, 3
        vsel.f32 v1, m1, v2, 0.5
        vcvt.f2i v2, v1
        viota.flat v3
        vmask v4, m1
        vred.add.f32.lane v5, v4
        vrot.sub v6, v5, -1
        vperm.lane v7, v6, v3
        vtrans v8, v7
        mandn m2, m1, m3
        mnot m3, m2
        mset m4, 1
        ",
    );
    assert_eq!(
        p.instrs[4],
        Instr::VMov {
            ty: ops::VType::F32,
            dst: VReg::n(5),
            src: VSrc::Imm(0x7fc0_0001)
        }
    );
    assert_eq!(
        p.instrs[5],
        Instr::VMov {
            ty: ops::VType::I32,
            dst: VReg::n(6),
            src: VSrc::Imm(u32::MAX)
        }
    );
    assert!(p.instrs.iter().all(|i| i.class() == InstrClass::Vector));
}

#[test]
fn matrix() {
    let p = full_trip(
        "
        mxu.lw.bf16 mxu0, [s1], stride=s4, rows=s2, cols=s3   ; keywords in any order
        mxu.mm.f32.p6 mxu1, [s5 + 64], rows=s6, stride=s7
        mxu.pop mxu0, [s8], rows=s6, stride=s7
        mxu.pop.acc mxu1, [s8 + 4096], rows=s6, stride=s7
        ",
    );
    assert!(p.instrs.iter().all(|i| i.class() == InstrClass::Matrix));
}

#[test]
fn dma_and_sync() {
    let p = full_trip(
        "
        .arg x buffer
        .arg n scalar
        .arg out buffer
        .smem 256, 1, 4, 8, -64, 4
        dma vmem[s1], hbm.x[s2], len=s3, sem=sem0
        dma hbm.a2[s2], vmem[s1], desc=s4, sem=sem1, remote=s5, rsem=sem2
        sem.wait sem0, s3
        sem.signal sem3, 1, chip=s5
        barrier
        ",
    );
    let Instr::Dma { src, .. } = p.instrs[0] else {
        panic!()
    };
    assert_eq!(src.slot, Some(ArgSlot::n(0)));
    assert_eq!(p.smem_init[0].words[3], (-64i32) as u32);
    assert!(p.instrs.iter().all(|i| i.class() == InstrClass::Dma));
}

#[test]
fn markers() {
    let p = full_trip(
        r#"
        .marker "declared first"
        mark.begin "load"
        mark.end
        mark.begin "declared first"
        mark.begin #1
        mark.end
        mark.end
        "#,
    );
    assert_eq!(p.markers, ["declared first", "load"]);
    assert_eq!(p.instrs[2], Instr::MarkBegin { name: 0 });
    assert_eq!(p.instrs[3], Instr::MarkBegin { name: 1 });
}

#[test]
fn metadata() {
    let p = full_trip(
        r#"
        .program "my kernel"
        .source_op "aten::mm"
        .fusion_group 0x10
        halt
        "#,
    );
    assert_eq!(p.name, "my kernel");
    assert_eq!(p.source_op.as_deref(), Some("aten::mm"));
    assert_eq!(p.fusion_group, Some(16));
}

#[test]
fn examples_assemble_and_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "s") {
            let src = std::fs::read_to_string(&path).expect("readable");
            full_trip(&src);
            n += 1;
        }
    }
    assert!(n >= 2, "expected example programs in {}", dir.display());
}

fn err(src: &str) -> AsmError {
    assemble(src).expect_err("should not assemble")
}

#[test]
fn errors_say_where_and_what() {
    let e = err("nop\nvadd.f32 v1, s1, v2\n");
    assert_eq!((e.line, e.col, e.token.as_str()), (2, 14, "s1"));
    assert_eq!(
        e.message(),
        "expected a vector register like v3, found `s1`"
    );

    let e = err("vadd.f32 v1, v2,\nfoo bar\n");
    assert_eq!((e.line, e.col), (1, 17));
    assert!(e.message().contains("end of line"), "{e}");

    let e = err("vadd.f23 v1, v2, v3");
    assert!(e.message().contains("`.f32`"), "{e}");
    let e = err("hlat");
    assert!(e.message().contains("did you mean `halt`"), "{e}");

    let e = err("vand.f32 v1, v2, v3");
    assert!(e.message().contains("not defined for f32"), "{e}");
    let e = err("vcmp.ltu.f32 m1, v2, v3");
    assert!(e.message().contains("unsigned"), "{e}");
    let e = err("mxu.mm.bf16.p3 mxu0, [s1], rows=s2, stride=s3");
    assert!(e.message().contains("one pass"), "{e}");
    let e = err("mxu.lw.bf16 mxu0, [s1], rows=s2, cols=s3");
    assert!(e.message().contains("stride="), "{e}");

    let e = err("br nowhere");
    assert_eq!(
        e.kind,
        AsmErrorKind::Undefined {
            what: "label",
            name: "nowhere".into()
        }
    );
    let e = err("nop\nbr @3");
    assert_eq!(e.line, 2);
    let e = err("mark.begin #0");
    assert!(e.message().contains("marker"), "{e}");
    let e = err("dma vmem[s1], hbm.x[s2], len=s3, sem=sem0");
    assert_eq!(
        e.kind,
        AsmErrorKind::Undefined {
            what: "argument",
            name: "x".into()
        }
    );
    let e = err(".arg n scalar\ndma vmem[s1], hbm.n[s2], len=s3, sem=sem0");
    assert!(e.message().contains("scalar argument"), "{e}");
    let e = err(".arg x buffer\n.arg y buffer\n.smem 4, 1");
    assert!(e.message().contains("argument words"), "{e}");
    let e = err(".smem 258, 1");
    assert!(e.message().contains("multiple of 4"), "{e}");
    let e = err("smov s1, 4294967296");
    assert!(e.message().contains("out of range"), "{e}");
    let e = err("vmov.f32 v1, 1e39");
    assert!(e.message().contains("overflows"), "{e}");
    let e = err("smov s32, 1");
    assert!(e.message().contains("does not exist"), "{e}");
    let e = err("l: nop\nl: nop");
    assert!(
        matches!(e.kind, AsmErrorKind::Duplicate { what: "label", .. }),
        "{e}"
    );
    let e = err(".bogus 1");
    assert!(
        matches!(e.kind, AsmErrorKind::UnknownDirective { .. }),
        "{e}"
    );
    let e = err("dma vmem[s1], vmem[s2], len=s3, desc=s4, sem=sem0");
    assert!(e.message().contains("not both"), "{e}");
    let e = err("dma vmem[s1], vmem[s2], len=s3, sem=sem0, remote=s4");
    assert!(e.message().contains("rsem="), "{e}");
}

#[test]
fn readme_example_assembles() {
    let readme = include_str!("../../README.md");
    let example = readme
        .split("## Example")
        .nth(1)
        .expect("an Example section");
    let code = example.split("```").nth(1).expect("a code block");
    let p = full_trip(code);
    assert_eq!(p.name, "sum_to_n");
}
