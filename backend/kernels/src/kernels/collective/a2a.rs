//! All-to-all over the whole group in one stage, and the one-chip copy.
//!
//! Every chip pushes block `j` of its input straight to chip `j`'s output (block `rank`), nearest
//! ranks first (`+1, -1, +2, -2, ...`), and copies its own block locally; the interconnect routes
//! each push dimension by dimension, the short way round, so pushes to far chips share links
//! with nearer ones as on the hardware. A peer's chip index is the group's rank-0 chip plus an
//! offset from a table in SMEM (chips are numbered x-fastest).

use tpuemu_isa::ops::SAluOp;
use tpuemu_isa::{Addr, MemRef};

use super::emit::{
    ArgMap, DST, IN_OFF, NEXT, OUT_OFF, RANK, SEM_COPY, SEM_SENT, T1, T2, T3, block_addr, dma,
    load_word, wait,
};
use super::plan::A2aStage;
use crate::codegen::Emitter;

/// The order in which a chip sends to the others: offsets `+1, -1, +2, -2, ...` from its rank.
fn offsets(n: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for d in 1..=n / 2 {
        out.push(d);
        if n - d != d {
            out.push(n - d);
        }
    }
    out
}

/// Emits the all-to-all stage.
pub fn emit_all_to_all(e: &mut Emitter, args: &ArgMap, st: &A2aStage) {
    load_word(e, RANK, args.grank);
    load_word(e, NEXT, args.gbase);
    let table = e.b.smem_data(&st.chip_offsets);
    // Own block: input block `rank` to output block `rank`.
    block_addr(e, T1, IN_OFF, 0, st.n, st.block);
    block_addr(e, DST, OUT_OFF, 0, st.n, st.block);
    dma(
        e,
        MemRef::hbm(args.output, DST),
        MemRef::hbm(args.input, T1),
        st.block,
        SEM_COPY,
        None,
    );
    for d in offsets(st.n) {
        // T3 = peer rank, T1 = its block of the input, T2 = its chip.
        e.sadd(T3, RANK, d as i32);
        e.salu(SAluOp::RemU, T3, T3, st.n as i32);
        e.smul(T1, T3, st.block as i32);
        e.sadd(T1, T1, IN_OFF);
        e.salu(SAluOp::Shl, T2, T3, 2);
        e.sld(T2, Addr::new(T2, table as i32));
        e.sadd(T2, T2, NEXT);
        dma(
            e,
            MemRef::hbm(args.output, DST),
            MemRef::hbm(args.input, T1),
            st.block,
            SEM_SENT[0],
            Some((T2, st.recv_sem)),
        );
    }
    let others = st.block * (st.n as u64 - 1);
    wait(e, st.recv_sem, others);
    wait(e, SEM_SENT[0], others);
    wait(e, SEM_COPY, st.block);
}

/// A group of one: the output is a copy of the input.
pub fn emit_copy(e: &mut Emitter, args: &ArgMap, bytes: u64) {
    dma(
        e,
        MemRef::hbm(args.output, OUT_OFF),
        MemRef::hbm(args.input, IN_OFF),
        bytes,
        SEM_COPY,
        None,
    );
    wait(e, SEM_COPY, bytes);
}

#[cfg(test)]
mod tests {
    use super::offsets;

    #[test]
    fn nearest_ranks_first_each_once() {
        assert_eq!(offsets(4), vec![1, 3, 2]);
        assert_eq!(offsets(5), vec![1, 4, 2, 3]);
        assert_eq!(offsets(2), vec![1]);
    }
}
