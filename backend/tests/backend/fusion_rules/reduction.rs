//! The reduction rule (`fusion::rules::reduction`): prologues, epilogues, softmax, norms and
//! losses join a row reduction, against hand-counted kernels and HBM bytes.

use super::testing::{data, run_both};
use tpuemu_backend::Tensor;

/// A target per row, `(i * 131) % c`, rows 3, 10, 17, ... ignored (-100).
fn targets(rows: usize, c: usize) -> Vec<i64> {
    (0..rows as i64)
        .map(|i| {
            if i % 7 == 3 {
                -100
            } else {
                (i * 131) % c as i64
            }
        })
        .collect()
}

/// The gradient of the logits from the mean cross-entropy's seed gradient, as autograd
/// records it: `nll_loss_backward`, then `_log_softmax_backward_data` (bf16).
fn cross_entropy_backward(
    seed: &Tensor,
    logp: &Tensor,
    targets: &Tensor,
    total: &Tensor,
) -> Tensor {
    use tpuemu_backend::dtype::DType;
    use tpuemu_backend::ops::{self, Value};
    let g = ops::call(
        logp.runtime(),
        "aten::nll_loss_backward",
        vec![
            Value::Tensor(seed.clone()),
            Value::Tensor(logp.clone()),
            Value::Tensor(targets.clone()),
            Value::None,
            Value::Int(1),
            Value::Int(-100),
            Value::Tensor(total.clone()),
        ],
    )
    .unwrap();
    let Value::Tensor(g) = &g[0] else {
        unreachable!("nll_loss_backward returns a tensor")
    };
    ops::backward::log_softmax_backward_data(g, logp, -1, DType::BF16).unwrap()
}

#[test]
fn rms_norm_by_hand_is_one_row_kernel() {
    let (rows, d) = (64, 512);
    let (x0, g0) = (data(rows * d, 2), data(d, 3));
    let r = run_both(
        |rt| {
            vec![
                Tensor::from_slice(rt, &x0, &[rows, d]).unwrap(),
                Tensor::from_slice(rt, &g0, &[d]).unwrap(),
            ]
        },
        |t| {
            let (x, g) = (&t[0], &t[1]);
            let ms = x.mul(x).unwrap().mean(&[-1], true).unwrap();
            let rstd = ms.add_scalar(1e-6).unwrap().rsqrt().unwrap();
            vec![x.mul(&rstd).unwrap().mul(g).unwrap()]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand: x*x starts a group over [rows, d] (reading x once); the mean over the row
    // joins it (the reduction rule); + eps and rsqrt run on [rows, 1], per row; x * rstd
    // and * g are over [rows, d] again and join the reducing group (the reduction rule).
    // One kernel that reads x once and writes the result once, in four tiles of 16 rows
    // (32 KiB of x each: the planner splits rows into at least four tiles, none below 32
    // KiB), each reading g; nothing else.
    assert_eq!(r.kernels, 1);
    assert_eq!(r.joins(), [("per-row", 2), ("reduction", 3)]);
    assert_eq!(r.hbm_bytes, 4 * (2 * rows * d + 4 * d) as u64);
}

#[test]
fn cross_entropy_backward_is_one_pass_over_the_logits() {
    use tpuemu_backend::dtype::DType;
    // 64 rows of 1000 classes (not a multiple of 128), bf16 log-probabilities; rows 3, 10,
    // 17, ... ignored (-100).
    let (rows, c) = (64usize, 1000usize);
    let x0 = data(rows * c, 5);
    let tg = targets(rows, c);
    let kept = tg.iter().filter(|t| **t >= 0).count() as f32;
    let r = run_both(
        |rt| {
            let x = Tensor::from_slice(rt, &x0, &[rows, c]).unwrap();
            vec![
                x.log_softmax(-1).unwrap().to_dtype(DType::BF16).unwrap(),
                Tensor::from_slice(rt, &tg, &[rows]).unwrap(),
                Tensor::from_slice(rt, &[kept], &[])
                    .unwrap()
                    .to_dtype(DType::BF16)
                    .unwrap(),
                Tensor::from_slice(rt, &[1.0f32], &[])
                    .unwrap()
                    .to_dtype(DType::BF16)
                    .unwrap(),
            ]
        },
        |t| vec![cross_entropy_backward(&t[3], &t[0], &t[1], &t[2])],
    );
    // The row sum of the one-hot gradient is its one value (adding zeros is exact), so the
    // fused kernel, which never sums the row, gives Strict's bits.
    assert_eq!(r.strict, r.fused);
    // By hand: one kernel reading the log-probabilities once (bf16), the targets (8 bytes
    // a row) and two scalars, writing the gradient once (bf16). Strict writes and reads
    // the nll gradient in between: 2 kernels, 2 x rows x c x 2 bytes more.
    let once = (2 * rows * c * 2 + rows * 8) as u64;
    assert_eq!(r.kernels, 1);
    assert!(
        r.hbm_bytes >= once && r.hbm_bytes <= once + 1024,
        "{}",
        r.hbm_bytes
    );
    assert_eq!(r.strict_kernels, 2);
    assert!(r.strict_hbm_bytes >= once + (2 * rows * c * 2) as u64);
}

#[test]
fn cross_entropy_forward_and_backward_read_the_logits_once() {
    use tpuemu_backend::dtype::{DType, Scalar};
    use tpuemu_backend::ops::{self, Value, creation};
    // 64 rows of 1024 classes, bf16 logits; rows 3, 10, 17, ... ignored (-100).
    let (rows, c) = (64usize, 1024usize);
    let x0 = data(rows * c, 7);
    let tg = targets(rows, c);
    let tensor = |v: &Value| match v {
        Value::Tensor(t) => t.clone(),
        _ => unreachable!("a tensor"),
    };
    let r = run_both(
        |rt| {
            let x = Tensor::from_slice(rt, &x0, &[rows, c]).unwrap();
            vec![
                x.to_dtype(DType::BF16).unwrap(),
                Tensor::from_slice(rt, &tg, &[rows]).unwrap(),
            ]
        },
        |t| {
            let (logits, targets) = (&t[0], &t[1]);
            let rt = logits.runtime();
            // The transformer workload's loss and its gradient, as autograd records them.
            let logp = logits.log_softmax(-1).unwrap();
            let nll = ops::call(
                rt,
                "aten::nll_loss_forward",
                vec![
                    Value::Tensor(logp.clone()),
                    Value::Tensor(targets.clone()),
                    Value::None,
                    Value::Int(1),
                    Value::Int(-100),
                ],
            )
            .unwrap();
            let (loss, total) = (tensor(&nll[0]), tensor(&nll[1]));
            let one = creation::scalar_tensor(rt, Scalar::Float(1.0), loss.dtype()).unwrap();
            let g_logits = cross_entropy_backward(&one, &logp, targets, &total);
            vec![loss, g_logits]
        },
    );
    assert_eq!(r.strict, r.fused);
    // By hand. The backward needs the total weight, a sum over all rows, before its first
    // row; a tile kernel has no barrier between its row blocks, so the total is summed
    // from the targets in a kernel before, and the sum of the losses over the rows in a
    // kernel after: three kernels. The middle one reads the logits once (bf16) and the
    // targets once (8 bytes a row: the loss reads them per row, the gradient broadcast
    // along the row, one operand) and the total (a bf16 scalar), and writes the
    // gradient once (bf16) and the per-row losses (f32): the log-probabilities and the
    // nll gradient never touch HBM, and the seed gradient `one` is a constant. The first
    // reads the targets and writes the total (f32 and bf16); the last reads the losses
    // and the f32 total and writes the loss (bf16).
    // The device-side check of the targets (in `[0, c)` or ignored: `ops::checks`) joins
    // one of the kernels: it reads the targets once more and writes its flag (one int32).
    // A DMA moves at least one 32-byte burst: each scalar transfer counts one, and each
    // kernel may round its last row block up by one more.
    let burst = 32;
    let big = 2 * rows * c * 2 + rows * 8 + burst + rows * 4;
    let first = rows * 8 + 2 * burst;
    let last = rows * 4 + 2 * burst;
    let check = rows * 8 + burst;
    let most = (big + first + last + check + 3 * burst) as u64;
    assert_eq!(r.kernels, 3);
    assert!(r.hbm_bytes <= most, "{} > {most}", r.hbm_bytes);
    assert!(r.hbm_bytes >= (2 * rows * c * 2) as u64);
    // Strict writes the log-probabilities, reads them twice and writes and reads the nll
    // gradient: 4 x rows x c x 2 bytes more.
    assert!(r.strict_hbm_bytes >= r.hbm_bytes + (4 * rows * c * 2) as u64);
}
