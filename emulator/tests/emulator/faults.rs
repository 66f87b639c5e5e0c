//! Every kind of fault, each triggered by a small program: the device reports it as a value
//! with the chip, core, pc and instruction, never a host panic.

use tpuemu_emulator::{ArgInit, Emulator, builtin};
use tpuemu_isa::{Device, DeviceError, assemble};

fn emu(chip: &str) -> Emulator {
    Emulator::new(builtin(chip).unwrap()).unwrap()
}

fn run(src: &str, args: &[ArgInit]) -> DeviceError {
    run_on("v5e", src, args)
}

fn run_on(chip: &str, src: &str, args: &[ArgInit]) -> DeviceError {
    let p = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    match emu(chip).run_program(&p, args, &[0], true) {
        Ok(_) => panic!("program ran without a fault"),
        Err(e) => e,
    }
}

fn fault(e: DeviceError) -> tpuemu_isa::Fault {
    match e {
        DeviceError::Fault(f) => *f,
        other => panic!("expected a fault, got {other}"),
    }
}

#[test]
fn vmem_out_of_bounds_names_pc_address_and_region() {
    let f = fault(run(
        ".program oob\n smov s1, 0x7ffff000\n vld.w32 v1, [s1]\n",
        &[],
    ));
    assert_eq!(f.pc, 1);
    assert_eq!(f.instr, "vld.w32 v1, [s1]");
    assert!(
        f.reason.contains("out-of-bounds read of VMEM"),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("2147479552"), "{}", f.reason);
}

#[test]
fn masked_off_elements_are_not_checked() {
    // Only lane 0 of sublane 0 is active: the access stays in bounds.
    let src = ".program edge\n viota.flat v0\n vcmp.lt.i32 m1, v0, 1\n smov s1, 134217724\n vld.w32 v1, [s1], mask=m1\n";
    let p = assemble(src).unwrap();
    emu("v5e").run_program(&p, &[], &[0], true).unwrap();
}

#[test]
fn hbm_dma_out_of_bounds() {
    let src = ".program oob\n.arg x buffer\n smov s1, 4096\n smov s2, 0\n dma vmem[s2], hbm.x[s2], len=s1, sem=sem0\n sem.wait sem0, s1\n";
    let f = fault(run(src, &[ArgInit::Zeroed(1024)]));
    assert_eq!(f.pc, 2);
    assert!(f.reason.contains("HBM argument a0"), "{}", f.reason);
    assert!(f.reason.contains("1024 bytes"), "{}", f.reason);
}

#[test]
fn smem_out_of_bounds_and_misaligned() {
    let f = fault(run(".program s\n smov s1, 0x100000\n sld s2, [s1]\n", &[]));
    assert!(f.reason.contains("SMEM"), "{}", f.reason);
    let f = fault(run(".program s\n sld s2, [6]\n", &[]));
    assert!(f.reason.contains("misaligned"), "{}", f.reason);
}

#[test]
fn hbm_exhausted_is_out_of_memory() {
    let e = emu("v5e");
    let cap = e.topology().chips[0].hbm_bytes;
    let a = e.alloc(0, cap / 2).unwrap();
    match e.alloc(0, cap) {
        Err(DeviceError::OutOfMemory {
            asked,
            free,
            capacity,
            ..
        }) => {
            assert_eq!((asked, capacity), (cap, cap));
            assert!(free <= cap / 2);
        }
        other => panic!("{other:?}"),
    }
    e.free(a).unwrap();
    e.alloc(0, cap).unwrap();
}

#[test]
fn invalid_instructions() {
    // A vector register the chip does not have is refused when the program is loaded.
    let p = assemble(".program v\n vmov.f32 v40, 1.0\n").unwrap();
    match emu("v4").load(&p) {
        Err(DeviceError::InvalidProgram { reason, .. }) => {
            assert!(reason.contains("32 vector registers"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // A matrix unit it does not have.
    let p = assemble(".program m\n mxu.pop mxu9, [0], rows=s1, stride=s2\n").unwrap();
    assert!(matches!(
        emu("v5e").load(&p),
        Err(DeviceError::InvalidProgram { .. })
    ));
    // A matmul with no weights loaded faults at run time.
    let f = fault(run(
        ".program w\n smov s1, 8\n smov s2, 256\n mxu.mm.bf16.p1 mxu0, [0], rows=s1, stride=s2\n",
        &[],
    ));
    assert!(f.reason.contains("no weights"), "{}", f.reason);
    // A weight tile larger than the array.
    let f = fault(run(
        ".program w\n smov s1, 129\n smov s2, 256\n mxu.lw.bf16 mxu0, [0], rows=s1, cols=s1, stride=s2\n",
        &[],
    ));
    assert!(f.reason.contains("does not fit"), "{}", f.reason);
    // A bad DMA descriptor.
    let f = fault(run(
        ".program d\n.smem 256, 9, 4\n smov s1, 256\n dma vmem[s0], vmem[s0], desc=s1, sem=sem0\n",
        &[],
    ));
    assert!(f.reason.contains("dimensions"), "{}", f.reason);
}

#[test]
fn scalar_division_by_zero() {
    let f = fault(run(".program z\n smov s1, 7\n sdiv s2, s1, s3\n", &[]));
    assert_eq!(f.pc, 1);
    assert!(f.reason.contains("division by zero"));
}

#[test]
fn semaphore_deadlock_says_who_waits_on_what() {
    let e = run(".program d\n smov s1, 64\n sem.wait sem3, s1\n", &[]);
    match e {
        DeviceError::Deadlock(r) => {
            let text = r.to_string();
            assert!(text.contains("chip 0 core 0"), "{text}");
            assert!(text.contains("sem3"), "{text}");
            assert!(text.contains("pc 1"), "{text}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn dma_writes_racing_on_overlapping_memory() {
    let src = ".program race\n.arg x buffer\n smov s1, 4096\n smov s2, 0\n smov s3, 2048\n\
               dma vmem[s2], hbm.x[s2], len=s1, sem=sem0\n dma vmem[s3], hbm.x[s2], len=s1, sem=sem1\n\
               sem.wait sem0, s1\n sem.wait sem1, s1\n";
    let f = fault(run(src, &[ArgInit::Zeroed(8192)]));
    assert_eq!(f.pc, 4);
    assert!(
        f.reason.contains("race on VMEM bytes [2048, 4096)"),
        "{}",
        f.reason
    );
}

#[test]
fn reading_before_the_dma_lands_is_a_race() {
    let src = ".program early\n.arg x buffer\n smov s1, 4096\n dma vmem[s0], hbm.x[s0], len=s1, sem=sem0\n\
               vld.w32 v1, [0]\n sem.wait sem0, s1\n";
    let f = fault(run(src, &[ArgInit::Zeroed(4096)]));
    assert_eq!(f.pc, 2);
    assert!(f.reason.contains("wait on its semaphore"), "{}", f.reason);
}

#[test]
fn unwaited_dma_leaves_a_semaphore_count() {
    let src = ".program leak\n.arg x buffer\n smov s1, 4096\n dma vmem[s0], hbm.x[s0], len=s1, sem=sem2\n";
    let f = fault(run(src, &[ArgInit::Zeroed(4096)]));
    assert!(f.reason.contains("sem2"), "{}", f.reason);
    assert!(f.reason.contains("4096"), "{}", f.reason);
}

#[test]
fn faults_are_reported_once_by_wait_and_the_device_goes_on() {
    let e = emu("v5e");
    let bad = e
        .load(&assemble(".program bad\n smov s1, 0x7ffff000\n vld.w32 v1, [s1]\n").unwrap())
        .unwrap();
    let good = e
        .load(&assemble(".program good\n smov s1, 1\n").unwrap())
        .unwrap();
    let launch = |p| {
        e.launch(&tpuemu_isa::Launch {
            program: p,
            targets: vec![tpuemu_isa::LaunchTarget {
                core: tpuemu_isa::CoreRef { chip: 0, core: 0 },
                args: vec![],
            }],
            submit_ns: 0.0,
            op_id: None,
            group_id: None,
        })
        .unwrap()
    };
    let l1 = launch(bad);
    let l2 = launch(good);
    assert!(matches!(e.synchronize(), Err(DeviceError::Fault(_))));
    assert!(e.synchronize().is_ok());
    assert!(e.wait(l1).is_ok(), "already reported");
    assert!(e.wait(l2).is_ok());
}

#[test]
fn bad_requests_are_errors() {
    let e = emu("v5e");
    let b = e.alloc(0, 16).unwrap();
    assert!(matches!(
        e.write(b, 8, &[0; 16], 0.0),
        Err(DeviceError::InvalidRequest(_))
    ));
    assert!(matches!(
        e.alloc(3, 16),
        Err(DeviceError::InvalidRequest(_))
    ));
    e.free(b).unwrap();
    assert!(matches!(e.free(b), Err(DeviceError::InvalidRequest(_))));
    let p = e
        .load(&assemble(".program a\n.arg x buffer\n").unwrap())
        .unwrap();
    let r = e.launch(&tpuemu_isa::Launch {
        program: p,
        targets: vec![tpuemu_isa::LaunchTarget {
            core: tpuemu_isa::CoreRef { chip: 0, core: 0 },
            args: vec![],
        }],
        submit_ns: 0.0,
        op_id: None,
        group_id: None,
    });
    assert!(matches!(r, Err(DeviceError::InvalidRequest(_))));
}
