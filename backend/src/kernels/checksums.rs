//! Regression guard for the kernel generators: a checksum of the disassembly of a fixed set of
//! generated programs.
//!
//! Each case builds one program — tile kernels (dense, with broadcasts, casts, coordinates and
//! several tiles with a tail; rows with sums, maxima, products, arg-reductions and a masked
//! tail), matrix-unit kernels (plain, resident, f32 with passes, batched with an epilogue under
//! several plans, transposed and gathered operands), gathers, index-adds, every collective
//! over small slices — and hashes its assembly text (FNV-1a,
//! 64 bits: instructions, arguments, SMEM preloads, marker names). A change to how a kernel is
//! emitted that is meant to be a pure refactor must leave every value here as it is (the
//! linker's tests pin a whole-graph program linked from these cases the same way).
//!
//! The pinned values were computed from the generators before the emission vocabulary of
//! [`crate::codegen`] replaced their hand-written instruction literals. When a change is meant
//! to alter generated code, run `cargo test -p tpuemu-backend kernels::checksums -- --nocapture`
//! and replace the table with the one it prints (and say why in the commit).

use tpuemu_emulator::{ChipPreset, Emulator, builtin};
use tpuemu_isa::ops::{MxuFmt, Precision};
use tpuemu_isa::{ChipInfo, Device, Program, Topology};

use super::collective::{self, CollectiveOp, CollectiveSpec, RingChoice};
use super::gather::{self, GatherSpec};
use super::gemm::{self, GemmSpec};
use super::matmul::{self, MatOperand, MatPlan, MatSpec};
use super::tile;
use crate::dtype::{DType, Scalar};
use crate::ir::{BinOp, CmpKind, Prog, ProgBuilder, RedKind, UnOp};
use crate::layout::Layout;

/// FNV-1a, 64 bits: stable across Rust releases and platforms (unlike `DefaultHasher`).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn chip(preset: &str) -> ChipInfo {
    let emu = Emulator::new(builtin(preset).unwrap()).unwrap();
    emu.topology().chips[0].clone()
}

fn slice(preset: &str, dims: &[u32]) -> Topology {
    let p: ChipPreset = builtin(preset).unwrap();
    Emulator::slice(p, dims).unwrap().topology().clone()
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

/// `bf16(tanh(A @ W + bias) + residual)`, batched.
fn epilogue_spec() -> MatSpec {
    let (batch, m, n, k) = (2, 200, 300, 260);
    let mut b = ProgBuilder::new();
    let p = b.input(0, DType::F32, false);
    let bias = b.input(1, DType::F32, false);
    let res = b.input(2, DType::BF16, false);
    let s = b.bin(BinOp::Add, p, bias, DType::F32);
    let t = b.un(UnOp::Tanh, s, DType::F32);
    let r = b.bin(BinOp::Add, t, res, DType::F32);
    let o = b.round(r, DType::BF16);
    b.output(o);
    MatSpec {
        batch,
        m,
        n,
        k,
        fmt: MxuFmt::Bf16,
        prec: Precision::P1,
        a: MatOperand::contiguous(DType::BF16, m, k),
        w: MatOperand::contiguous(DType::BF16, k, n),
        extras: vec![
            MatOperand {
                dtype: DType::F32,
                strides: [0, 0, 1],
            },
            MatOperand::contiguous(DType::BF16, m, n),
        ],
        out: MatOperand::contiguous(DType::BF16, m, n),
        epilogue: Some(b.finish()),
    }
}

/// f32 with three passes, A stored transposed, W gathered element by element.
fn odd_access_spec() -> MatSpec {
    let (m, n, k) = (96, 160, 200);
    MatSpec {
        batch: 1,
        m,
        n,
        k,
        fmt: MxuFmt::F32,
        prec: Precision::P3,
        a: MatOperand {
            dtype: DType::F32,
            strides: [0, 1, m as isize],
        },
        w: MatOperand {
            dtype: DType::F32,
            strides: [0, 2 * n as isize, 2],
        },
        extras: Vec::new(),
        out: MatOperand::contiguous(DType::F32, m, n),
        epilogue: None,
    }
}

fn gather_spec(add: bool, dtype: DType, index: DType, row_len: u32, count: u32) -> GatherSpec {
    GatherSpec {
        add,
        dtype,
        index,
        row_len,
        table_row_stride: row_len + 3,
        rows_stride: row_len,
        count,
        table_rows: 4000,
        check_rows: None,
    }
}

/// Every case: a name and its program.
pub(crate) fn cases() -> Vec<(String, Program)> {
    let v5e = chip("v5e");
    let v6e = chip("v6e");
    let ws = chip("scalesim-ws-128");
    let mut out: Vec<(String, Program)> = vec![
        ("tile_dense_bias_tanh".into(), dense_bias_tanh(&v5e)),
        ("tile_dense_mixed".into(), dense_mixed(&v5e)),
        ("tile_dense_tail".into(), dense_tiles_with_tail(&v5e)),
        ("tile_rows_softmax".into(), rows_softmax(&v5e)),
        ("tile_rows_layernorm".into(), rows_layernorm(&v6e)),
        ("tile_rows_arg_prod".into(), rows_arg_prod(&v5e)),
        ("tile_rows_index".into(), rows_index(&v5e)),
        ("tile_rows_index_2d".into(), rows_index_2d(&v5e)),
        ("tile_dense_casts".into(), dense_casts(&v5e)),
    ];
    // Matrix units.
    let g = GemmSpec {
        m: 512,
        n: 384,
        k: 640,
        fmt: MxuFmt::Bf16,
        prec: Precision::P1,
    };
    for (name, chip, resident) in [
        ("gemm_v5e", &v5e, false),
        ("gemm_v5e_resident", &v5e, true),
        ("gemm_ws_resident", &ws, true),
    ] {
        let plan = gemm::plan(&g, chip, resident).unwrap();
        out.push((name.into(), gemm::build(&g, &plan, chip).unwrap()));
    }
    let ep = epilogue_spec();
    let auto = matmul::plan(&ep, &v5e, false).unwrap();
    for (name, plan) in [
        ("matmul_epilogue_auto", auto),
        (
            "matmul_epilogue_64x128x128",
            MatPlan {
                tm: 64,
                tn: 128,
                tk: 128,
                resident: false,
            },
        ),
        (
            "matmul_epilogue_128x256x512",
            MatPlan {
                tm: 128,
                tn: 256,
                tk: 512,
                resident: false,
            },
        ),
    ] {
        out.push((name.into(), matmul::build(&ep, &plan, &v5e, name).unwrap()));
    }
    let odd = odd_access_spec();
    let plan = MatPlan {
        tm: 64,
        tn: 128,
        tk: 128,
        resident: false,
    };
    out.push((
        "matmul_transposed_gathered_f32".into(),
        matmul::build(&odd, &plan, &v5e, "odd").unwrap(),
    ));
    let wt = MatSpec {
        w: MatOperand {
            dtype: DType::F32,
            strides: [0, 1, odd.k as isize],
        },
        a: MatOperand::contiguous(DType::F32, odd.m, odd.k),
        ..odd.clone()
    };
    out.push((
        "matmul_w_transposed_f32".into(),
        matmul::build(&wt, &plan, &v5e, "wt").unwrap(),
    ));
    // Gathers and index-adds.
    let mut checked = gather_spec(false, DType::F32, DType::I64, 512, 1000);
    checked.check_rows = Some(4000);
    let plain = gather_spec(false, DType::BF16, DType::I32, 100, 5000);
    let mut add = gather_spec(true, DType::F32, DType::I64, 300, 700);
    add.check_rows = Some(4000);
    let add_bool = gather_spec(true, DType::Bool, DType::I32, 77, 64);
    let add_blocks = gather_spec(true, DType::F32, DType::I32, 1030, 100);
    let mut small_vmem = v5e.clone();
    small_vmem.core.vmem_bytes = 1 << 20;
    for (name, spec, chip) in [
        ("gather_checked_i64", &checked, &v5e),
        ("gather_bf16_chunks", &plain, &v5e),
        ("index_add_checked", &add, &v5e),
        ("index_add_bool", &add_bool, &v5e),
        ("index_add_blocks", &add_blocks, &small_vmem),
    ] {
        out.push((name.into(), gather::build(spec, chip, name).unwrap()));
    }
    // Collectives.
    let s44 = slice("v5e", &[4, 4]);
    let s16 = slice("v5e", &[16]);
    let s41 = slice("v5e", &[4, 1]);
    let e = 16 * 4096;
    for op in CollectiveOp::ALL {
        let spec = CollectiveSpec::new(op, DType::F32, e, &[0]);
        out.push((
            format!("coll_{}_4x4_axis0", op.name()),
            build_coll(&spec, &s44),
        ));
    }
    let more = [
        (
            "coll_all_reduce_bf16_2d",
            CollectiveSpec::new(CollectiveOp::AllReduce, DType::BF16, e, &[0, 1]),
            &s44,
        ),
        (
            "coll_all_to_all_2d",
            CollectiveSpec::new(CollectiveOp::AllToAll, DType::F32, e, &[1, 0]),
            &s44,
        ),
        (
            "coll_reduce_scatter_ring16_chunks",
            CollectiveSpec {
                chunk_bytes: Some(8192),
                ..CollectiveSpec::new(CollectiveOp::ReduceScatter, DType::F32, e, &[0])
            },
            &s16,
        ),
        (
            "coll_all_gather_i32_bidir",
            CollectiveSpec {
                ring: RingChoice::Bidirectional,
                ..CollectiveSpec::new(CollectiveOp::AllGather, DType::I32, e, &[1])
            },
            &s44,
        ),
        (
            "coll_all_reduce_unidir_16",
            CollectiveSpec {
                ring: RingChoice::Unidirectional,
                ..CollectiveSpec::new(CollectiveOp::AllReduce, DType::F32, e, &[0])
            },
            &s16,
        ),
        (
            "coll_reduce_scatter_long_chunks_tail",
            CollectiveSpec {
                chunk_bytes: Some(110_592),
                ..CollectiveSpec::new(
                    CollectiveOp::ReduceScatter,
                    DType::F32,
                    4 * (65536 + 500),
                    &[0],
                )
            },
            &s44,
        ),
        (
            "coll_copy_group_of_one",
            CollectiveSpec::new(CollectiveOp::AllReduce, DType::F32, e, &[1]),
            &s41,
        ),
    ];
    for (name, spec, topo) in more {
        out.push((name.into(), build_coll(&spec, topo)));
    }
    out
}

fn build_coll(spec: &CollectiveSpec, topo: &Topology) -> Program {
    collective::build(spec, topo).unwrap()
}

/// (case, instructions, FNV-1a of the disassembly), from the generators before the emission
/// vocabulary replaced their instruction literals.
const PINNED: &[(&str, usize, u64)] = &[
    ("tile_dense_bias_tanh", 209, 0x6312abd8d4ddc4a2),
    ("tile_dense_mixed", 440, 0x20c70cde50bdbee9),
    ("tile_dense_tail", 284, 0xe4dcc9103e7bbd89),
    ("tile_rows_softmax", 256, 0xeb21236b7375b59f),
    ("tile_rows_layernorm", 598, 0xe455df5c501e271c),
    ("tile_rows_arg_prod", 504, 0xaf6663a5b476bd42),
    ("tile_rows_index", 254, 0x0fb4625e36f0b7ff),
    ("tile_rows_index_2d", 270, 0xbc13702815996113),
    ("tile_dense_casts", 398, 0x5dd0f4521f3a9d1b),
    ("gemm_v5e", 146, 0xc208818159e2229a),
    ("gemm_v5e_resident", 76, 0x2783e3a61fa13018),
    ("gemm_ws_resident", 76, 0x2fed1aac72b8e877),
    ("matmul_epilogue_auto", 490, 0xd762f9161233d91c),
    ("matmul_epilogue_64x128x128", 2863, 0x00c1be815337f3c9),
    ("matmul_epilogue_128x256x512", 1487, 0x3e8268f3fbf62ae4),
    ("matmul_transposed_gathered_f32", 118, 0xf1b63ace31f52118),
    ("matmul_w_transposed_f32", 108, 0x78eac60cf0cc8595),
    ("gather_checked_i64", 42, 0x2671fea8d1d6211f),
    ("gather_bf16_chunks", 39, 0x5e0a731936db2b3e),
    ("index_add_checked", 76, 0x0fcf815651bcbf20),
    ("index_add_bool", 40, 0x2f0607df694078e3),
    ("index_add_blocks", 7497, 0x1952367176652419),
    ("coll_all-gather_4x4_axis0", 47, 0x963c5f2eb48c08e8),
    ("coll_reduce-scatter_4x4_axis0", 323, 0xc9840f90a22b43ed),
    ("coll_all-reduce_4x4_axis0", 364, 0xd96a2566c4abda8a),
    ("coll_all-to-all_4x4_axis0", 41, 0x2eab775a2ca61add),
    ("coll_all_reduce_bf16_2d", 359, 0x5af3739d091e92ba),
    ("coll_all_to_all_2d", 137, 0x03f159a1069450ee),
    ("coll_reduce_scatter_ring16_chunks", 676, 0x00f64e223e2359c1),
    ("coll_all_gather_i32_bidir", 51, 0x48c67699db319f18),
    ("coll_all_reduce_unidir_16", 592, 0x1be494058597f092),
    (
        "coll_reduce_scatter_long_chunks_tail",
        613,
        0xd8660ca74385fb8a,
    ),
    ("coll_copy_group_of_one", 9, 0x26dbc477fff5e070),
];

#[test]
fn generated_kernels_are_unchanged() {
    let mut table = String::new();
    let mut bad = Vec::new();
    let got: Vec<(String, usize, u64)> = cases()
        .into_iter()
        .map(|(name, p)| {
            let text = tpuemu_isa::disassemble(&p);
            (name, p.instrs.len(), fnv1a(text.as_bytes()))
        })
        .collect();
    for (name, n, h) in &got {
        table.push_str(&format!("    (\"{name}\", {n}, 0x{h:016x}),\n"));
        match PINNED.iter().find(|p| p.0 == name) {
            Some(&(_, pn, ph)) if (pn, ph) == (*n, *h) => {}
            Some(&(_, pn, ph)) => bad.push(format!(
                "{name}: {n} instructions, 0x{h:016x} (pinned {pn}, 0x{ph:016x})"
            )),
            None => bad.push(format!("{name}: not pinned")),
        }
    }
    for (name, _, _) in PINNED {
        if !got.iter().any(|g| g.0 == *name) {
            bad.push(format!("{name}: pinned but no longer generated"));
        }
    }
    println!("const PINNED: &[(&str, usize, u64)] = &[\n{table}];");
    assert!(
        bad.is_empty(),
        "generated kernels changed:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_hash_is_fnv1a() {
    // Published FNV-1a 64 test vectors (Fowler, Noll, Vo: http://www.isthe.com/chongo/tech/comp/fnv/).
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
}
