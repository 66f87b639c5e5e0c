//! Row epilogues (`fusion::row_epilogue`): a product that only a reduction along its rows reads
//! runs that reduction on each output tile, and the cases where it must not.

use super::testing::{data, run_both, run_both_on};
use tpuemu_backend::Tensor;
use tpuemu_backend::dtype::DType;

/// The name the planner counts a row-epilogue merge under in `fusion_joins`
/// (`fusion::row_epilogue::RULE`).
const RULE: &str = "row epilogue";

/// `x [m, k]`, `w [k, n]` in bf16.
fn operands(rt: &tpuemu_backend::Runtime, m: usize, k: usize, n: usize) -> Vec<Tensor> {
    let t = |len: usize, seed: u32, shape: &[usize]| {
        Tensor::from_slice(rt, &data(len, seed), shape)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    vec![t(m * k, 41, &[m, k]), t(k * n, 42, &[k, n])]
}

/// Logits and the log-softmax and row maximum of them, as a language-model head's loss
/// reads them; the logits are not kept.
fn head(t: &[Tensor]) -> Vec<Tensor> {
    let logits = t[0].mm(&t[1]).unwrap();
    vec![
        logits.log_softmax(-1).unwrap(),
        logits.amax(&[-1], false).unwrap(),
    ]
}

#[test]
fn a_head_and_its_softmax_never_write_the_logits() {
    // Rows of 1,000 (not a multiple of 128: the last vector chunk masked), 200 rows (the
    // last group of 8 partial).
    let (m, k, n) = (200usize, 256usize, 1000usize);
    let r = run_both(|rt| operands(rt, m, k, n), head);
    // The same product, the same row program on the same values: the same bits.
    assert_eq!(r.strict, r.fused);
    // By hand: one kernel reading x and w once and writing the log-softmax (bf16) and
    // one maximum a row (bf16); Strict also writes the logits and reads them back.
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins.get(RULE), Some(&1));
    let min = 2 * (m * k + k * n + m * n + m) as u64;
    assert!(
        r.hbm_bytes >= min && r.hbm_bytes <= min + min / 16,
        "{} bytes for a minimum of {min}",
        r.hbm_bytes
    );
    assert!(r.strict_hbm_bytes >= min + 2 * 2 * (m * n) as u64);
}

#[test]
fn a_chip_without_room_for_whole_rows_runs_the_two_apart() {
    // 2 MiB of VMEM holds the row program's tiles but not the matmul's tiles of whole
    // rows 8,192 wide (W's slices alone are 4 MiB): the product and the row program run
    // as two kernels, with the same bits.
    let (m, k, n) = (64usize, 128usize, 8192usize);
    let mut small = tpuemu_emulator::builtin("v5e").unwrap();
    small.vmem_bytes = 2 << 20;
    let r = run_both_on(small, |rt| operands(rt, m, k, n), head);
    assert_eq!(r.strict, r.fused);
    assert_eq!(r.kernels, 2);
}

/// `t(rt, shape, seed, dtype)`: deterministic values.
fn t(rt: &tpuemu_backend::Runtime, shape: &[usize], seed: u32, dtype: DType) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_slice(rt, &data(n, seed), shape)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

#[test]
fn a_reduction_writing_what_the_product_reads_stays_apart() {
    // The row maximum copied over the bias the product's epilogue adds (found by review:
    // merged, tile 0's row outputs were stored while later tiles still loaded the bias).
    let (m, k, n) = (512usize, 128usize, 512usize);
    let mut chip = tpuemu_emulator::builtin("v5e").unwrap();
    chip.vmem_bytes = 1 << 20;
    let r = run_both_on(
        chip,
        |rt| {
            vec![
                t(rt, &[m, k], 1, DType::F32),
                t(rt, &[k, n], 2, DType::F32),
                t(rt, &[n], 3, DType::F32),
            ]
        },
        |t| {
            let logits = t[0].mm(&t[1]).unwrap().add(&t[2]).unwrap();
            let mx = logits.amax(&[-1], false).unwrap();
            tpuemu_backend::ops::creation::copy_(&t[2], &mx).unwrap();
            vec![t[2].clone()]
        },
    );
    assert_eq!(r.strict, r.fused);
    assert!(!r.joins.contains_key(RULE));
}

#[test]
fn a_product_without_a_kernel_still_runs_its_operators() {
    // `tril` in the product's epilogue has no kernel there (found by review: merged, the
    // group's fallback ran the product part alone and failed again).
    let (m, k, n) = (256usize, 128usize, 256usize);
    let r = run_both(
        |rt| {
            vec![
                t(rt, &[m, k], 1, DType::BF16),
                t(rt, &[k, n], 2, DType::BF16),
            ]
        },
        |t| {
            let logits = t[0].mm(&t[1]).unwrap().tril(0).unwrap();
            vec![logits.log_softmax(-1).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
}

#[test]
fn logits_kept_for_later_are_written_as_before() {
    // The logits themselves are a result: they stay the product's output, written, and
    // the softmax reads them in a kernel of its own.
    let (m, k, n) = (64usize, 128usize, 512usize);
    let r = run_both(
        |rt| operands(rt, m, k, n),
        |t| {
            let logits = t[0].mm(&t[1]).unwrap();
            vec![logits.log_softmax(-1).unwrap(), logits]
        },
    );
    assert_eq!(r.strict, r.fused);
    assert_eq!(r.kernels, 2);
    assert!(!r.joins.contains_key(RULE));
}
