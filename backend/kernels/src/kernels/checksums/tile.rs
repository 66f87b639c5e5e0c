//! Tile kernel cases: dense (broadcasts, casts, coordinates, many tiles with a tail) and rows
//! (sums, maxima, products, arg-reductions, per-row operands, coordinates, a masked tail).

use tpuemu_isa::{ChipInfo, Program};

use crate::dtype::{DType, Scalar};
use crate::ir::{BinOp, CmpKind, Prog, ProgBuilder, RedKind, UnOp};
use crate::kernels::tile;
use crate::layout::Layout;

/// The tile kernel cases.
pub(super) fn cases(v5e: &ChipInfo, v6e: &ChipInfo) -> Vec<(String, Program)> {
    vec![
        ("tile_dense_bias_tanh".into(), dense_bias_tanh(v5e)),
        ("tile_dense_mixed".into(), dense_mixed(v5e)),
        ("tile_dense_tail".into(), dense_tiles_with_tail(v5e)),
        ("tile_rows_softmax".into(), rows_softmax(v5e)),
        ("tile_rows_layernorm".into(), rows_layernorm(v6e)),
        ("tile_rows_arg_prod".into(), rows_arg_prod(v5e)),
        ("tile_rows_index".into(), rows_index(v5e)),
        ("tile_rows_index_2d".into(), rows_index_2d(v5e)),
        ("tile_dense_casts".into(), dense_casts(v5e)),
    ]
}

fn tile_kernel(
    name: &str,
    shape: &[usize],
    row_dims: usize,
    prog: &Prog,
    ins: &[(Layout, DType)],
    outs: &[(Layout, DType)],
    chip: &ChipInfo,
) -> Program {
    let il: Vec<(&Layout, DType)> = ins.iter().map(|(l, d)| (l, *d)).collect();
    let ol: Vec<(&Layout, DType)> = outs.iter().map(|(l, d)| (l, *d)).collect();
    let (spec, _) = tile::lower(shape, row_dims, prog, &il, &ol).unwrap();
    tile::build(&spec, chip, name).unwrap()
}

fn c(shape: &[usize]) -> Layout {
    Layout::contiguous(shape)
}

/// `tanh(x + bias)`, the bias broadcast along rows.
fn dense_bias_tanh(chip: &ChipInfo) -> Program {
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let bias = b.input(1, DType::F32, false);
    let s = b.bin(BinOp::Add, x, bias, DType::F32);
    let t = b.un(UnOp::Tanh, s, DType::F32);
    b.output(t);
    tile_kernel(
        "dense_bias_tanh",
        &[300, 77],
        0,
        &b.finish(),
        &[(c(&[300, 77]), DType::F32), (c(&[77]), DType::F32)],
        &[(c(&[300, 77]), DType::F32)],
        chip,
    )
}

/// Mixed dtypes, a transposed input, coordinates, a compare and a select, a bf16 output.
fn dense_mixed(chip: &ChipInfo) -> Program {
    let shape = [4, 37, 129];
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::BF16, false);
    let y = b.input(1, DType::I32, false);
    let i = b.index(1);
    let j = b.index(2);
    let ij = b.bin(BinOp::Mul, i, j, DType::I32);
    let lt = b.cmp(CmpKind::Lt, ij, y, DType::I32);
    let k = b.constant(Scalar::Float(0.5), DType::F32);
    let xk = b.bin(BinOp::Mul, x, k, DType::F32);
    let yf = b.cast(y, DType::F32);
    let sel = b.select(lt, xk, yf, DType::F32);
    let r = b.round(sel, DType::BF16);
    b.output(r);
    b.output(lt);
    let xt = c(&[4, 129, 37]).transpose(1, 2).unwrap();
    tile_kernel(
        "dense_mixed",
        &shape,
        0,
        &b.finish(),
        &[(xt, DType::BF16), (c(&shape), DType::I32)],
        &[(c(&shape), DType::BF16), (c(&shape), DType::Bool)],
        chip,
    )
}

/// Many tiles, the last one shorter; coordinates count from each tile's first element.
fn dense_tiles_with_tail(chip: &ChipInfo) -> Program {
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let y = b.input(1, DType::F32, false);
    let i = b.index(0);
    let fi = b.cast(i, DType::F32);
    let y = b.bin(BinOp::Mul, y, fi, DType::F32);
    let s = b.bin(BinOp::Sub, x, y, DType::F32);
    let e = b.un(UnOp::Exp, s, DType::F32);
    b.output(e);
    let shape = [3000, 1000];
    tile_kernel(
        "dense_tail",
        &shape,
        0,
        &b.finish(),
        &[(c(&shape), DType::F32), (c(&shape), DType::F32)],
        &[(c(&shape), DType::F32)],
        chip,
    )
}

/// Softmax over rows of 300 (a masked last chunk).
fn rows_softmax(chip: &ChipInfo) -> Program {
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let m = b.reduce(RedKind::Max, x, DType::F32);
    let d = b.bin(BinOp::Sub, x, m, DType::F32);
    let e = b.un(UnOp::Exp, d, DType::F32);
    let s = b.reduce(RedKind::Sum, e, DType::F32);
    let o = b.bin(BinOp::Div, e, s, DType::F32);
    b.output(o);
    tile_kernel(
        "rows_softmax",
        &[64, 300],
        1,
        &b.finish(),
        &[(c(&[64, 300]), DType::F32)],
        &[(c(&[64, 300]), DType::F32)],
        chip,
    )
}

/// Layer norm of bf16 rows, with a per-row output (the mean) and a per-row weight input.
fn rows_layernorm(chip: &ChipInfo) -> Program {
    let (r, n) = (40, 2000);
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::BF16, false);
    let w = b.input(1, DType::BF16, false);
    let shift = b.input(2, DType::F32, true);
    let s = b.reduce(RedKind::Sum, x, DType::F32);
    let inv = b.constant(Scalar::Float(1.0 / n as f64), DType::F32);
    let mean = b.bin(BinOp::Mul, s, inv, DType::F32);
    let d = b.bin(BinOp::Sub, x, mean, DType::F32);
    let d2 = b.bin(BinOp::Mul, d, d, DType::F32);
    let v = b.reduce(RedKind::Sum, d2, DType::F32);
    let var = b.bin(BinOp::Mul, v, inv, DType::F32);
    let eps = b.constant(Scalar::Float(1e-5), DType::F32);
    let ve = b.bin(BinOp::Add, var, eps, DType::F32);
    let rs = b.un(UnOp::Rsqrt, ve, DType::F32);
    let y = b.bin(BinOp::Mul, d, rs, DType::F32);
    let yw = b.bin(BinOp::Mul, y, w, DType::F32);
    let ys = b.bin(BinOp::Add, yw, shift, DType::F32);
    let out = b.round(ys, DType::BF16);
    b.output(out);
    b.output(mean);
    tile_kernel(
        "rows_layernorm",
        &[r, n],
        1,
        &b.finish(),
        &[
            (c(&[r, n]), DType::BF16),
            (c(&[n]), DType::BF16),
            (c(&[r]), DType::F32),
        ],
        &[(c(&[r, n]), DType::BF16), (c(&[r]), DType::F32)],
        chip,
    )
}

/// Arg-max of f32, the product and the minimum of i32 rows.
fn rows_arg_prod(chip: &ChipInfo) -> Program {
    let (r, n) = (16, 1200);
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let y = b.input(1, DType::I32, false);
    let am = b.arg(true, x);
    let an = b.arg(false, y);
    let p = b.reduce(RedKind::Prod, x, DType::F32);
    let mn = b.reduce(RedKind::Min, y, DType::I32);
    b.output(am);
    b.output(an);
    b.output(p);
    b.output(mn);
    tile_kernel(
        "rows_arg_prod",
        &[r, n],
        1,
        &b.finish(),
        &[(c(&[r, n]), DType::F32), (c(&[r, n]), DType::I32)],
        &[
            (c(&[r]), DType::I64),
            (c(&[r]), DType::I64),
            (c(&[r]), DType::F32),
            (c(&[r]), DType::I32),
        ],
        chip,
    )
}

/// Coordinates along the row and of an outer dim in the rows layout (a causal mask).
fn rows_index(chip: &ChipInfo) -> Program {
    let shape = [6, 8, 130];
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let i = b.index(1);
    let j = b.index(2);
    let keep = b.cmp(CmpKind::Le, j, i, DType::I32);
    let ninf = b.constant(Scalar::Float(f64::NEG_INFINITY), DType::F32);
    let masked = b.select(keep, x, ninf, DType::F32);
    let m = b.reduce(RedKind::Max, masked, DType::F32);
    let d = b.bin(BinOp::Sub, masked, m, DType::F32);
    b.output(d);
    tile_kernel(
        "rows_index",
        &shape,
        1,
        &b.finish(),
        &[(c(&shape), DType::F32)],
        &[(c(&shape), DType::F32)],
        chip,
    )
}

/// Coordinates of a two-dim row (divisions and remainders) and of a size-1 outer dim.
fn rows_index_2d(chip: &ChipInfo) -> Program {
    let shape = [1, 4, 3, 50];
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let i0 = b.index(0);
    let i2 = b.index(2);
    let i3 = b.index(3);
    let a = b.bin(BinOp::Add, i0, i2, DType::I32);
    let a = b.bin(BinOp::Mul, a, i3, DType::I32);
    let af = b.cast(a, DType::F32);
    let y = b.bin(BinOp::Add, x, af, DType::F32);
    let s = b.reduce(RedKind::Sum, y, DType::F32);
    let o = b.bin(BinOp::Sub, y, s, DType::F32);
    b.output(o);
    tile_kernel(
        "rows_index_2d",
        &shape,
        2,
        &b.finish(),
        &[(c(&shape), DType::F32)],
        &[(c(&shape), DType::F32)],
        chip,
    )
}

/// Every conversion between float and integer lanes, rounding of integers, and a select on a
/// bool input (no comparison mask at hand).
fn dense_casts(chip: &ChipInfo) -> Program {
    let shape = [33, 65];
    let mut b = ProgBuilder::new();
    let f = b.input(0, DType::F32, false);
    let i = b.input(1, DType::I32, false);
    let h = b.input(2, DType::F16, false);
    let c0 = b.input(3, DType::Bool, false);
    let fl = b.un(UnOp::Floor, i, DType::I32);
    let sel = b.select(c0, f, h, DType::F32);
    let fb = b.cast(f, DType::Bool);
    let outs = [
        b.cast(sel, DType::BF16),
        b.cast(f, DType::F16),
        b.cast(h, DType::I32),
        b.cast(fl, DType::F32),
        b.cast(i, DType::BF16),
        b.cast(i, DType::F16),
        b.cast(fb, DType::I64),
    ];
    for o in outs {
        b.output(o);
    }
    // An i32 value stored as int64: the conversion happens at the store.
    b.output(fl);
    let prog = b.finish();
    let mut dts: Vec<DType> = outs.iter().map(|o| prog.node(*o).dtype).collect();
    dts.push(DType::I64);
    tile_kernel(
        "dense_casts",
        &shape,
        0,
        &prog,
        &[
            (c(&shape), DType::F32),
            (c(&shape), DType::I32),
            (c(&shape), DType::F16),
            (c(&shape), DType::Bool),
        ],
        &dts.iter().map(|d| (c(&shape), *d)).collect::<Vec<_>>(),
        chip,
    )
}
