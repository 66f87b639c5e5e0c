//! Matrix-unit, gather, index-add and collective cases.

use tpuemu_isa::ops::{MxuFmt, Precision};
use tpuemu_isa::{ChipInfo, Program, Topology};

use super::slice;
use crate::dtype::DType;
use crate::ir::{BinOp, ProgBuilder, UnOp};
use crate::kernels::collective::{self, CollectiveOp, CollectiveSpec, RingChoice};
use crate::kernels::gather::GatherSpec;
use crate::kernels::gemm::{self, GemmSpec};
use crate::kernels::matmul::{self, MatOperand, MatPlan, MatSpec};

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
        extra_outs: Vec::new(),
        twin: None,
        rows: None,
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
        extra_outs: Vec::new(),
        twin: None,
        rows: None,
        epilogue: None,
    }
}

fn gather_spec(add: bool, dtype: DType, index: DType, row_len: u32, count: u32) -> GatherSpec {
    GatherSpec {
        add,
        combine: crate::ir::Combine::Add,
        dtype,
        index,
        row_len,
        table_row_stride: row_len + 3,
        rows_stride: row_len,
        count,
        table_rows: 4000,
        check_rows: None,
        zero_table: false,
    }
}

/// GEMMs (streamed and resident), batched matmuls with an epilogue under several plans,
/// transposed and gathered operands.
pub(super) fn matmul_cases(v5e: &ChipInfo, ws: &ChipInfo, out: &mut Vec<(String, Program)>) {
    let g = GemmSpec {
        m: 512,
        n: 384,
        k: 640,
        fmt: MxuFmt::Bf16,
        prec: Precision::P1,
    };
    for (name, chip, resident) in [
        ("gemm_v5e", v5e, false),
        ("gemm_v5e_resident", v5e, true),
        ("gemm_ws_resident", ws, true),
    ] {
        let plan = gemm::plan(&g, chip, resident).unwrap();
        out.push((name.into(), gemm::build(&g, &plan, chip).unwrap()));
    }
    let ep = epilogue_spec();
    let auto = matmul::plan(&ep, v5e, false).unwrap();
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
        out.push((name.into(), matmul::build(&ep, &plan, v5e, name).unwrap()));
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
        matmul::build(&odd, &plan, v5e, "odd").unwrap(),
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
        matmul::build(&wt, &plan, v5e, "wt").unwrap(),
    ));
}

/// Gathers and index-adds, with and without bounds checks, in chunks and in table blocks.
pub(super) fn gather_cases(v5e: &ChipInfo, out: &mut Vec<(String, Program)>) {
    let mut checked = gather_spec(false, DType::F32, DType::I64, 512, 1000);
    checked.check_rows = Some(4000);
    let plain = gather_spec(false, DType::BF16, DType::I32, 100, 5000);
    let mut add = gather_spec(true, DType::F32, DType::I64, 300, 700);
    add.check_rows = Some(4000);
    let add_bool = gather_spec(true, DType::Bool, DType::I32, 77, 64);
    let add_blocks = gather_spec(true, DType::F32, DType::I32, 1030, 100);
    let mut small_vmem = v5e.clone();
    small_vmem.core.vmem_bytes = 1 << 20;
    // A zero table touched by few indices: written back sparsely.
    let mut add_sparse = gather_spec(true, DType::BF16, DType::I64, 512, 600);
    add_sparse.zero_table = true;
    for (name, spec, chip) in [
        ("gather_checked_i64", &checked, v5e),
        ("gather_bf16_chunks", &plain, v5e),
        ("index_add_checked", &add, v5e),
        ("index_add_bool", &add_bool, v5e),
        ("index_add_blocks", &add_blocks, &small_vmem),
        ("index_add_sparse_zero_table", &add_sparse, v5e),
    ] {
        out.push((name.into(), crate::kernels::rows(spec, chip, name).unwrap()));
    }
}

/// Every collective over small slices: both ring directions, several axes, chunk tails, a
/// group of one.
pub(super) fn collective_cases(out: &mut Vec<(String, Program)>) {
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
}

fn build_coll(spec: &CollectiveSpec, topo: &Topology) -> Program {
    collective::build(spec, topo).unwrap()
}
