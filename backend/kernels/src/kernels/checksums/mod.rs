//! Regression guard for the kernel generators: a checksum of the disassembly of a fixed set of
//! generated programs.
//!
//! Each case builds one program — tile kernels (dense, with broadcasts, casts, coordinates and
//! several tiles with a tail; rows with sums, maxima, products, arg-reductions and a masked
//! tail), matrix-unit kernels (plain, resident, f32 with passes, batched with an epilogue under
//! several plans, transposed and gathered operands), gathers, index-adds, every collective
//! over small slices ([`tile`], [`other`]) — and hashes its assembly text (FNV-1a, 64 bits:
//! instructions, arguments, SMEM preloads, marker names). A change to how a kernel is
//! emitted that is meant to be a pure refactor must leave every value here as it is (the
//! linker's tests pin a whole-graph program linked from these cases the same way).
//!
//! The pinned values were computed from the generators before the emission vocabulary of
//! [`crate::codegen`] replaced their hand-written instruction literals (the collectives' since
//! re-pinned, see [`PINNED`]). When a change is meant
//! to alter generated code, run `cargo test -p tpuemu-kernels kernels::checksums -- --nocapture`
//! and replace the table with the one it prints (and say why in the commit).

use tpuemu_emulator::{ChipPreset, Emulator, builtin};
use tpuemu_isa::{ChipInfo, Device, Program, Topology};

mod other;
mod tile;

/// FNV-1a, 64 bits: stable across Rust releases and platforms (unlike `DefaultHasher`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
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

pub(super) fn slice(preset: &str, dims: &[u32]) -> Topology {
    let p: ChipPreset = builtin(preset).unwrap();
    Emulator::slice(p, dims).unwrap().topology().clone()
}

/// Every case: a name and its program.
pub fn cases() -> Vec<(String, Program)> {
    let v5e = chip("v5e");
    let v6e = chip("v6e");
    let ws = chip("scalesim-ws-128");
    let mut out = tile::cases(&v5e, &v6e);
    other::matmul_cases(&v5e, &ws, &mut out);
    other::gather_cases(&v5e, &mut out);
    other::collective_cases(&mut out);
    out
}

/// (case, instructions, FNV-1a of the disassembly), from the generators before the emission
/// vocabulary replaced their instruction literals; the collectives (`coll_*`) re-pinned when
/// they became parts running over several axes at once (new schedule and semaphore layout);
/// `tile_rows_index` re-pinned when comparisons read only by selects stopped writing their
/// mask to a vector register (8 `vmask` fewer); the `tile_rows_*` cases re-pinned when row
/// kernels freed per-row values after their last reader, counted unroll registers anew and
/// interleaved the unrolled copies (same values, golden suite unchanged); the single-tile
/// cases (`tile_dense_bias_tanh`, `_mixed`, `_casts`, `tile_rows_index_2d`) re-pinned when a
/// kernel of one tile became straight-line code without the tile loop (`tile/single.rs`; same
/// values, golden suite unchanged).
const PINNED: &[(&str, usize, u64)] = &[
    ("tile_dense_bias_tanh", 59, 0x2559b006cd1ab796),
    ("tile_dense_mixed", 175, 0x3da1add0d90f7042),
    ("tile_dense_tail", 284, 0xe4dcc9103e7bbd89),
    ("tile_rows_softmax", 281, 0x739efa8b218f5508),
    ("tile_rows_layernorm", 771, 0x838caddebe54cf6d),
    ("tile_rows_arg_prod", 646, 0x009e8bc9991a6347),
    ("tile_rows_index", 277, 0xcf4b65ffcd12d7b6),
    ("tile_rows_index_2d", 89, 0xf4b59536567d5bbf),
    ("tile_dense_casts", 140, 0x8d5c713601c026c1),
    ("gemm_v5e", 146, 0xc208818159e2229a),
    ("gemm_v5e_resident", 76, 0x2783e3a61fa13018),
    ("gemm_ws_resident", 76, 0x2fed1aac72b8e877),
    ("matmul_epilogue_auto", 490, 0xd762f9161233d91c),
    ("matmul_epilogue_64x128x128", 2863, 0x00c1be815337f3c9),
    ("matmul_epilogue_128x256x512", 1487, 0x3e8268f3fbf62ae4),
    ("matmul_transposed_gathered_f32", 118, 0xf1b63ace31f52118),
    ("matmul_w_transposed_f32", 108, 0x78eac60cf0cc8595),
    ("gather_checked_i64", 56, 0xa420cbcc5d5132df),
    ("gather_bf16_chunks", 82, 0x7c4591bcfe0ce9b0),
    ("index_add_checked", 76, 0x0fcf815651bcbf20),
    ("index_add_bool", 40, 0x2f0607df694078e3),
    ("index_add_blocks", 7497, 0x1952367176652419),
    ("index_add_sparse_zero_table", 127, 0x9553adf46bda5cb8),
    ("coll_all-gather_4x4_axis0", 65, 0xfa6bff296b32a411),
    ("coll_reduce-scatter_4x4_axis0", 336, 0xf5f6bc0c7b811063),
    ("coll_all-reduce_4x4_axis0", 391, 0xa1d6621f7ba7fb01),
    ("coll_all-to-all_4x4_axis0", 41, 0x35278bb5d9f6491f),
    ("coll_all_reduce_bf16_2d", 1147, 0x98edd47ada9aee51),
    ("coll_all_to_all_2d", 137, 0xa29e1ce6cf765fbe),
    ("coll_reduce_scatter_ring16_chunks", 755, 0x998fba7e9038ddce),
    ("coll_all_gather_i32_bidir", 63, 0xf94353cd9ec4c0ba),
    ("coll_all_reduce_unidir_16", 627, 0x7e4563c7be3076fa),
    (
        "coll_reduce_scatter_long_chunks_tail",
        629,
        0xc44713b28c025be8,
    ),
    ("coll_copy_group_of_one", 9, 0xd9369eee92499fa6),
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
