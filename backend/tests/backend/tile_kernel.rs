//! The tile kernel generator against host arithmetic, run on the emulator directly.

use tpuemu_backend::dtype::{DType, Scalar};
use tpuemu_backend::ir::{BinOp, ProgBuilder, RedKind, UnOp};
use tpuemu_backend::kernels::tile;
use tpuemu_backend::layout::Layout;
use tpuemu_emulator::{ArgInit, Emulator, builtin};
use tpuemu_isa::Device;

use std::sync::Arc;
use tpuemu_backend::{Runtime, Tensor};

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    crate::inputs::lcg(n, seed)
        .into_iter()
        .map(|x| x as f32)
        .collect()
}

/// Runs a tile kernel with the given input arrays (f32, given layouts) and output sizes.
fn run(
    spec_shape: &[usize],
    row_dims: usize,
    prog: &tpuemu_backend::ir::Prog,
    ins: &[(Vec<f32>, Layout)],
    outs: &[Layout],
) -> Vec<Vec<f32>> {
    let emu = Emulator::new(builtin("v5e").unwrap()).unwrap();
    let chip = emu.topology().chips[0].clone();
    let il: Vec<(&Layout, DType)> = ins.iter().map(|(_, l)| (l, DType::F32)).collect();
    let ol: Vec<(&Layout, DType)> = outs.iter().map(|l| (l, DType::F32)).collect();
    let (spec, offsets) = tile::lower(spec_shape, row_dims, prog, &il, &ol).unwrap();
    let program = tile::build(&spec, &chip, "test").unwrap();
    let mut args: Vec<ArgInit> = ins.iter().map(|(d, _)| ArgInit::Bytes(bytes(d))).collect();
    for o in outs {
        args.push(ArgInit::Zeroed(o.numel() as u64 * 4));
    }
    for off in offsets {
        args.push(ArgInit::Scalar(off as u32));
    }
    let r = emu
        .run_program(&program, &args, &[0], true)
        .unwrap_or_else(|e| panic!("{e}"));
    r.buffers[ins.len()..ins.len() + outs.len()]
        .iter()
        .map(|b| f32s(b))
        .collect()
}

#[test]
fn elementwise_add_with_broadcast_bias() {
    let (m, n) = (300, 77);
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let bias = b.input(1, DType::F32, false);
    let s = b.bin(BinOp::Add, x, bias, DType::F32);
    let t = b.un(UnOp::Tanh, s, DType::F32);
    b.output(t);
    let prog = b.finish();
    let xd = data(m * n, 1);
    let bd = data(n, 2);
    let out = run(
        &[m, n],
        0,
        &prog,
        &[
            (xd.clone(), Layout::contiguous(&[m, n])),
            (bd.clone(), Layout::contiguous(&[n])),
        ],
        &[Layout::contiguous(&[m, n])],
    );
    for i in 0..m {
        for j in 0..n {
            let want = libm::tanhf(xd[i * n + j] + bd[j]);
            assert_eq!(out[0][i * n + j].to_bits(), want.to_bits(), "({i},{j})");
        }
    }
}

#[test]
fn transposed_input_copy() {
    let (m, n) = (130, 70);
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    b.output(x);
    let prog = b.finish();
    let xd = data(m * n, 3);
    // Read x [n, m] transposed as [m, n].
    let xt = Layout::contiguous(&[n, m]).transpose(0, 1).unwrap();
    let out = run(
        &[m, n],
        0,
        &prog,
        &[(xd.clone(), xt)],
        &[Layout::contiguous(&[m, n])],
    );
    for i in 0..m {
        for j in 0..n {
            assert_eq!(out[0][i * n + j], xd[j * m + i]);
        }
    }
}

/// Softmax over rows of several lengths: one chunk, whole chunks, a masked last chunk, and
/// rows long enough (4,000 and 8,192) that the chunk loop of the sums of exponentials and of
/// the outputs is software-pipelined over many trips, with chunks left over after the loop.
#[test]
fn softmax_rows() {
    for (rows, len) in [
        (5usize, 10usize),
        (37, 128),
        (16, 300),
        (3, 1000),
        (9, 4000),
        (8, 8192),
    ] {
        let mut b = ProgBuilder::new();
        let x = b.input(0, DType::F32, false);
        let m = b.reduce(RedKind::Max, x, DType::F32);
        let d = b.bin(BinOp::Sub, x, m, DType::F32);
        let e = b.un(UnOp::Exp, d, DType::F32);
        let s = b.reduce(RedKind::Sum, e, DType::F32);
        let r = b.un(UnOp::Rcp, s, DType::F32);
        let y = b.bin(BinOp::Mul, e, r, DType::F32);
        b.output(y);
        b.output(s);
        let prog = b.finish();
        let xd = data(rows * len, 4);
        let out = run(
            &[rows, len],
            1,
            &prog,
            &[(xd.clone(), Layout::contiguous(&[rows, len]))],
            &[
                Layout::contiguous(&[rows, len]),
                Layout::contiguous(&[rows]),
            ],
        );
        for i in 0..rows {
            let row = &xd[i * len..(i + 1) * len];
            let mx = row.iter().cloned().fold(f32::MIN, f32::max);
            let sum: f64 = row.iter().map(|v| ((v - mx) as f64).exp()).sum();
            assert!(
                (out[1][i] as f64 - sum).abs() < 1e-4 * sum,
                "rows {rows} len {len} row {i}: sum {} vs {sum}",
                out[1][i]
            );
            for j in 0..len {
                let want = ((row[j] - mx) as f64).exp() / sum;
                assert!(
                    (out[0][i * len + j] as f64 - want).abs() < 1e-6,
                    "rows {rows} len {len} ({i},{j})"
                );
            }
        }
    }
}

#[test]
fn argmax_and_sum_over_rows() {
    let (rows, len) = (20, 333);
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let a = b.arg(true, x);
    let a = b.cast(a, DType::F32);
    b.output(a);
    let c = b.constant(Scalar::Float(2.0), DType::F32);
    let y = b.bin(BinOp::Mul, x, c, DType::F32);
    let s = b.reduce(RedKind::Sum, y, DType::F32);
    b.output(s);
    let prog = b.finish();
    let mut xd = data(rows * len, 5);
    xd[3 * len + 300] = 50.0;
    xd[4 * len + 7] = 50.0;
    xd[4 * len + 200] = 50.0;
    let out = run(
        &[rows, len],
        1,
        &prog,
        &[(xd.clone(), Layout::contiguous(&[rows, len]))],
        &[Layout::contiguous(&[rows]), Layout::contiguous(&[rows])],
    );
    for i in 0..rows {
        let row = &xd[i * len..(i + 1) * len];
        let mut best = 0;
        for j in 0..len {
            if row[j] > row[best] {
                best = j;
            }
        }
        assert_eq!(out[0][i] as usize, best, "row {i}");
        let sum: f32 = row.iter().map(|v| v * 2.0).sum();
        assert!((out[1][i] - sum).abs() < 1e-3, "row {i}");
    }
}

#[test]
fn iota_index_nodes() {
    let (m, n) = (9, 1500);
    let mut b = ProgBuilder::new();
    let i = b.index(0);
    let j = b.index(1);
    let k = b.constant(Scalar::Int(10_000), DType::I32);
    let t = b.bin(BinOp::Mul, i, k, DType::I32);
    let v = b.bin(BinOp::Add, t, j, DType::I32);
    let f = b.cast(v, DType::F32);
    b.output(f);
    let prog = b.finish();
    let out = run(&[m, n], 0, &prog, &[], &[Layout::contiguous(&[m, n])]);
    for a in 0..m {
        for c in 0..n {
            assert_eq!(out[0][a * n + c], (a * 10_000 + c) as f32);
        }
    }
}

#[test]
fn a_long_chain_of_per_row_values_fits_the_registers() {
    // 80 per-row values, each read only by the next (v <- v * 0.5 + 1), then y = x * v: more
    // values than the 64 vector registers, but only two are ever needed at once; a kernel
    // that held every per-row value to the row block's end could not be built.
    let (rows, len, steps) = (16usize, 300usize, 40usize);
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let p = b.input(1, DType::F32, true);
    let half = b.constant(Scalar::Float(0.5), DType::F32);
    let one = b.constant(Scalar::Float(1.0), DType::F32);
    let mut v = p;
    for _ in 0..steps {
        let h = b.bin(BinOp::Mul, v, half, DType::F32);
        v = b.bin(BinOp::Add, h, one, DType::F32);
    }
    let y = b.bin(BinOp::Mul, x, v, DType::F32);
    b.output(y);
    let prog = b.finish();
    let (xd, pd) = (data(rows * len, 11), data(rows, 12));
    let out = run(
        &[rows, len],
        1,
        &prog,
        &[
            (xd.clone(), Layout::contiguous(&[rows, len])),
            (pd.clone(), Layout::contiguous(&[rows])),
        ],
        &[Layout::contiguous(&[rows, len])],
    );
    for i in 0..rows {
        // Each step in f32, as the kernel rounds it (exact: halving and adding 1 to values of
        // magnitude below 4 keep 24 bits).
        let mut v = pd[i];
        for _ in 0..steps {
            v = v * 0.5 + 1.0;
        }
        for j in 0..len {
            assert_eq!(out[0][i * len + j], xd[i * len + j] * v, "({i},{j})");
        }
    }
}

#[test]
fn large_elementwise_kernel_is_hbm_bound() {
    // The roofline check for elementwise work: within 10% of bytes / bandwidth.
    let emu = Emulator::new(builtin("v5e").unwrap()).unwrap();
    emu.set_timing_only(true);
    let chip = emu.topology().chips[0].clone();
    let n = 16usize << 20;
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let y = b.input(1, DType::F32, false);
    let s = b.bin(BinOp::Add, x, y, DType::F32);
    b.output(s);
    let prog = b.finish();
    let l = Layout::contiguous(&[n]);
    let (spec, _) = tile::lower(
        &[n],
        0,
        &prog,
        &[(&l, DType::F32), (&l, DType::F32)],
        &[(&l, DType::F32)],
    )
    .unwrap();
    let program = tile::build(&spec, &chip, "add").unwrap();
    let z = (n * 4) as u64;
    let args = [
        ArgInit::Zeroed(z),
        ArgInit::Zeroed(z),
        ArgInit::Zeroed(z),
        ArgInit::Scalar(0),
        ArgInit::Scalar(0),
        ArgInit::Scalar(0),
    ];
    let r = emu.run_program(&program, &args, &[0], false).unwrap();
    let ideal = 3.0 * z as f64 / chip.hbm_bytes_per_s;
    let ratio = r.seconds / ideal;
    assert!(
        (1.0..1.1).contains(&ratio),
        "{:.3} ms vs bytes/bandwidth {:.3} ms",
        r.seconds * 1e3,
        ideal * 1e3
    );
}

/// Index-add with a table larger than VMEM: the kernel walks the table in blocks and the
/// indices in chunks; duplicates accumulate in index order in every block.
#[test]
fn index_add_walks_a_table_bigger_than_vmem() {
    use tpuemu_backend::ops;
    let mut preset = builtin("v5e").unwrap();
    preset.set("vmem_bytes", "262144").unwrap();
    let rt = Runtime::new(Arc::new(Emulator::new(preset).unwrap())).unwrap();
    let (rows, d, count) = (100usize, 1000usize, 50usize);
    let idx: Vec<i64> = (0..count)
        .map(|i| ((i * 37) % rows) as i64 % 60 + (i % 3) as i64)
        .collect();
    let grad: Vec<f32> = (0..count * d)
        .map(|i| ((i * 7919) % 1000) as f32 / 250.0 - 2.0)
        .collect();
    let g = Tensor::from_slice(&rt, &grad, &[count, d]).unwrap();
    let ix = Tensor::from_slice(&rt, &idx, &[count]).unwrap();
    let out = ops::backward::embedding_dense_backward(&g, &ix, rows as i64, -1, false).unwrap();
    let got = out.to_vec::<f32>().unwrap();
    let mut want = vec![0f32; rows * d];
    for (i, &r) in idx.iter().enumerate() {
        for c in 0..d {
            want[r as usize * d + c] += grad[i * d + c];
        }
    }
    assert_eq!(got, want);
}

/// Index-add into a zero table touching few of its rows (16 indices, 3 repeated, into 64 rows
/// of 512 bytes): DeferAndFuse zeroes the table on chip and writes back only the touched rows
/// after zeros over the whole table; every row, touched or not, matches the sums in index order.
#[test]
fn index_add_into_a_sparse_zero_table() {
    use tpuemu_backend::{Mode, ops};
    let (rows, d) = (64usize, 128usize);
    let idx: Vec<i64> = vec![5, 63, 0, 5, 17, 40, 5, 0, 9, 10, 11, 12, 63, 33, 34, 1];
    let count = idx.len();
    let grad: Vec<f32> = (0..count * d)
        .map(|i| ((i * 7919) % 1000) as f32 / 250.0 - 2.0)
        .collect();
    let mut want = vec![0f32; rows * d];
    for (i, &r) in idx.iter().enumerate() {
        for c in 0..d {
            want[r as usize * d + c] += grad[i * d + c];
        }
    }
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let rt = Runtime::new(Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap())).unwrap();
        rt.set_mode(mode).unwrap();
        let g = Tensor::from_slice(&rt, &grad, &[count, d]).unwrap();
        let ix = Tensor::from_slice(&rt, &idx, &[count]).unwrap();
        let out = ops::backward::embedding_dense_backward(&g, &ix, rows as i64, -1, false).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), want, "{mode:?}");
    }
}

/// Pipelined chunk loops whose `exp` stage shares a comparison with the late stage: as a
/// select's condition feeding the `exp` and summed as a float (`sum(exp(x > 0 ? x : 0))`,
/// `sum(x > 0)`), and cast to i32 for a count beside a cast to f32 feeding the `exp`. Each trip
/// must use its own comparison (found by review: a remembered mask of the first trip, and a
/// register overwritten before the count read it). Against sums computed here.
#[test]
fn pipelined_rows_share_a_comparison_across_stages() {
    use tpuemu_backend::ir::CmpKind;
    for with_select in [true, false] {
        for (rows, len) in [(8usize, 4096usize), (8, 1024 * 3)] {
            let mut b = ProgBuilder::new();
            let x = b.input(0, DType::F32, false);
            let zero = b.constant(Scalar::Float(0.0), DType::F32);
            let c = b.cmp(CmpKind::Gt, x, zero, DType::F32);
            let (s1, s2) = if with_select {
                let sel = b.select(c, x, zero, DType::F32);
                let e = b.un(UnOp::Exp, sel, DType::F32);
                let cf = b.cast(c, DType::F32);
                (
                    b.reduce(RedKind::Sum, e, DType::F32),
                    b.reduce(RedKind::Sum, cf, DType::F32),
                )
            } else {
                let cf = b.cast(c, DType::F32);
                let e = b.un(UnOp::Exp, cf, DType::F32);
                let ci = b.cast(c, DType::I32);
                (
                    b.reduce(RedKind::Sum, e, DType::F32),
                    b.reduce(RedKind::Sum, ci, DType::I32),
                )
            };
            b.output(s1);
            b.output(s2);
            let prog = b.finish();
            let xd = data(rows * len, 7);
            let out = run(
                &[rows, len],
                1,
                &prog,
                &[(xd.clone(), Layout::contiguous(&[rows, len]))],
                &[Layout::contiguous(&[rows]), Layout::contiguous(&[rows])],
            );
            for i in 0..rows {
                let row = &xd[i * len..(i + 1) * len];
                let count = row.iter().filter(|v| **v > 0.0).count() as f64;
                let sum: f64 = if with_select {
                    row.iter().map(|v| (v.max(0.0) as f64).exp()).sum()
                } else {
                    count * std::f64::consts::E + (len as f64 - count)
                };
                let what = format!("select {with_select} len {len} row {i}");
                assert!(
                    (out[1][i] as f64 - count).abs() < 0.5,
                    "{what}: count {}",
                    out[1][i]
                );
                assert!(
                    (out[0][i] as f64 - sum).abs() < 1e-4 * sum,
                    "{what}: sum {}",
                    out[0][i]
                );
            }
        }
    }
}
