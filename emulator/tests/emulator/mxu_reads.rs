//! A matmul reads its LHS from VMEM when it issues: a second matmul over the same bytes sees
//! whatever was written there in between (by a vector store, a DMA or a matrix-unit pop), and
//! one over unchanged bytes gives the same result again.

use tpuemu_emulator::{ArgInit, Emulator, builtin};
use tpuemu_isa::assemble;

/// Runs `between` (instructions) between two identical matmuls of the 8 x 8 bf16 block at VMEM
/// 4096 by 8 x 128 weights of ones; returns the 128 columns of row 0 of both results.
fn two_matmuls(between: &str) -> (Vec<f32>, Vec<f32>) {
    let src = format!(
        ".program reread
.arg out buffer
.arg src buffer
    smov s1, 8
    smov s2, 256
    smov s3, 128
    smov s4, 0
    smov s5, 4096
    smov s6, 8192
    smov s7, 12288
    smov s8, 512
    vmov.f32 v1, 1.0
    vst.bf16 v1, [s4]
    mxu.lw.bf16 mxu0, [s4], rows=s1, cols=s3, stride=s2
    vmov.f32 v2, 3.0
    vst.bf16 v2, [s5]
    mxu.mm.bf16.p1 mxu0, [s5], rows=s1, stride=s2
    mxu.pop mxu0, [s6], rows=s1, stride=s8
{between}
    mxu.mm.bf16.p1 mxu0, [s5], rows=s1, stride=s2
    mxu.pop mxu0, [s7], rows=s1, stride=s8
    smov s9, 8192
    smov s10, 0
    dma hbm.out[s10], vmem[s6], len=s9, sem=sem0
    sem.wait sem0, s9
"
    );
    let p = assemble(&src).unwrap_or_else(|e| panic!("{e}"));
    // 2.5 in bf16, for the DMA case.
    let src_bytes: Vec<u8> = (0..4096).flat_map(|_| 0x4020u16.to_le_bytes()).collect();
    let r = Emulator::new(builtin("v5e").unwrap())
        .unwrap()
        .run_program(
            &p,
            &[ArgInit::Zeroed(8192), ArgInit::Bytes(src_bytes)],
            &[0],
            true,
        )
        .unwrap();
    let f = |at: usize| -> Vec<f32> {
        r.buffers[0][at..at + 512]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    (f(0), f(4096))
}

#[test]
fn unchanged_bytes_give_the_same_product() {
    let (a, b) = two_matmuls("    smov s20, 1");
    // Row 0: eight products 3 * 1.
    assert!(a.iter().all(|x| *x == 24.0), "{a:?}");
    assert_eq!(a, b);
}

#[test]
fn a_vector_store_in_between_is_seen() {
    let (a, b) = two_matmuls("    vmov.f32 v3, 5.0\n    vst.bf16 v3, [s5]");
    assert!(a.iter().all(|x| *x == 24.0));
    assert!(b.iter().all(|x| *x == 40.0), "{b:?}");
}

#[test]
fn a_dma_in_between_is_seen() {
    let between = "    smov s21, 4096\n    smov s22, 0\n    dma vmem[s5], hbm.src[s22], len=s21, sem=sem1\n    sem.wait sem1, s21";
    let (_, b) = two_matmuls(between);
    assert!(b.iter().all(|x| *x == 20.0), "{b:?}");
}

#[test]
fn a_pop_onto_the_block_in_between_is_seen() {
    // The first result (24.0 in f32) popped over the LHS block: its rows now hold f32 bytes.
    let between = "    mxu.mm.bf16.p1 mxu0, [s5], rows=s1, stride=s2\n    mxu.pop mxu0, [s5], rows=s1, stride=s2";
    let (a, b) = two_matmuls(between);
    assert!(a.iter().all(|x| *x == 24.0));
    // Row 0 of the block: bytes of f32 24.0 = 0x41c00000, as bf16 pairs (0x0000, 0x41c0): four
    // zeros and four 24.0s in the first eight bf16 values.
    assert!(b.iter().all(|x| *x == 96.0), "{b:?}");
}
