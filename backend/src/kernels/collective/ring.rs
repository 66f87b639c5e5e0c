//! Ring stages: all-gather and reduce-scatter over one axis (see [`super::plan`] for the
//! chains, pieces and messages).
//!
//! **All-gather.** Step 0 pushes this chip's own block (both chains, their pieces); each later
//! step forwards what arrived at the step before, as soon as that chunk is in: the chunk is
//! read from the output and pushed to the same place in the neighbour's output, so nothing is
//! staged. A chip waits for a chunk by counting the bytes its chain's receive semaphore has seen,
//! in arrival order (a link delivers in order).
//!
//! **Reduce-scatter.** A chain's message carries a partial sum of one block towards its owner.
//! Step 0 pushes raw blocks straight from HBM. Later messages are *reduce* tasks: the partial
//! that arrived (in the scratch buffer, one place per message) and this chip's own chunk are
//! loaded into a VMEM staging slot, added on the vector unit and pushed on from VMEM. The last
//! arrivals of both chains meet this chip's own block in a *final* task that writes the reduced
//! block to its destination. Tasks are software-pipelined over [`SLOTS`] staging slots: the own
//! chunk of the next task loads while this one waits for its partial, adds and sends, and a
//! slot is reused only once its previous result has left.

use tpuemu_isa::MemRef;

use super::emit::{
    ArgMap, BLK, DST, NEXT, PREV, SCR_OFF, SEM_COPY, SEM_LOAD, SEM_OUT, SEM_SENT, SRC, T1, T2,
    add_imm, block_addr, dma, load_axis, region_base, wait,
};
use super::plan::{Chain, Msg, Plan, RingStage, SLOTS, Slot};
use super::sum::emit_sum;
use crate::codegen::Emitter;
use crate::dtype::DType;

/// Messages of each step, chains interleaved (message `i` of every chain, then `i + 1`, ...).
fn order(st: &RingStage) -> Vec<(usize, usize)> {
    let steps = st
        .chains
        .iter()
        .flat_map(|c| c.msgs.iter().map(|m| m.step + 1))
        .max()
        .unwrap_or(0);
    let mut out = Vec::new();
    for k in 0..steps {
        let per: Vec<Vec<usize>> = st
            .chains
            .iter()
            .map(|c| (0..c.msgs.len()).filter(|&i| c.msgs[i].step == k).collect())
            .collect();
        let most = per.iter().map(Vec::len).max().unwrap_or(0);
        for i in 0..most {
            for (ci, list) in per.iter().enumerate() {
                if let Some(&m) = list.get(i) {
                    out.push((ci, m));
                }
            }
        }
    }
    out
}

fn peer(c: &Chain) -> tpuemu_isa::SReg {
    if c.plus { NEXT } else { PREV }
}

/// Waits until chain `ci` has received everything up to and including `m`.
fn arrive(e: &mut Emitter, c: &Chain, m: &Msg, waited: &mut u64) {
    let end = Chain::end_of(m);
    if end > *waited {
        wait(e, c.recv_sem, end - *waited);
        *waited = end;
    }
}

/// The message that delivered chunk (`piece`, `chunk`) to this chip at step `step`.
fn arrival(c: &Chain, step: u32, piece: usize, chunk: u32) -> &Msg {
    c.find(step, piece, chunk)
        .unwrap_or_else(|| bug("a forwarded chunk has no arrival"))
}

#[cold]
fn bug(what: &str) -> ! {
    panic!("collective plan is inconsistent: {what}")
}

/// Emits an all-gather stage.
pub(crate) fn emit_gather(e: &mut Emitter, args: &ArgMap, st: &RingStage) {
    load_axis(e, args, st.pos);
    region_base(e, args, SRC, &st.src);
    region_base(e, args, DST, &st.dst);
    let from_input = st.dst.slot == Slot::In;
    let out = args.output;
    if from_input {
        block_addr(e, T1, SRC, 0, st.n, st.block);
        dma(
            e,
            MemRef::hbm(out, T1),
            MemRef::hbm(args.input, DST),
            st.block,
            SEM_COPY,
            None,
        );
    }
    let mut waited = vec![0u64; st.chains.len()];
    let mut blk_step = vec![u32::MAX; st.chains.len()];
    for (ci, mi) in order(st) {
        let c = &st.chains[ci];
        let m = &c.msgs[mi];
        if blk_step[ci] != m.step {
            block_addr(e, BLK[ci], SRC, m.shift, st.n, st.block);
            blk_step[ci] = m.step;
        }
        add_imm(e, T2, BLK[ci], m.off);
        let src = if m.step == 0 {
            if from_input {
                add_imm(e, T1, DST, m.off);
                MemRef::hbm(args.input, T1)
            } else {
                MemRef::hbm(out, T2)
            }
        } else {
            let a = arrival(c, m.step - 1, m.piece, m.chunk);
            arrive(e, c, a, &mut waited[ci]);
            MemRef::hbm(out, T2)
        };
        dma(
            e,
            MemRef::hbm(out, T2),
            src,
            m.bytes,
            SEM_SENT[ci],
            Some((peer(c), c.recv_sem)),
        );
    }
    for (ci, c) in st.chains.iter().enumerate() {
        wait(e, c.recv_sem, c.bytes - waited[ci]);
        wait(e, SEM_SENT[ci], c.bytes);
    }
    if from_input {
        wait(e, SEM_COPY, st.block);
    }
}

/// A unit of reduce-scatter work.
#[derive(Clone, Copy)]
enum Task {
    /// A message of chain `.0`: index `.1`.
    Msg(usize, usize),
    /// This chip's own block: piece, chunk, byte offset in the block, elements.
    Final(usize, u32, u64, u64),
}

/// Emits a reduce-scatter stage.
pub(crate) fn emit_scatter(
    e: &mut Emitter,
    args: &ArgMap,
    plan: &Plan,
    st: &RingStage,
    dtype: DType,
) {
    load_axis(e, args, st.pos);
    region_base(e, args, SRC, &st.src);
    region_base(e, args, DST, &st.dst);
    let mut tasks: Vec<Task> = order(st)
        .into_iter()
        .map(|(c, m)| Task::Msg(c, m))
        .collect();
    for (h, &(off, elems)) in st.pieces.iter().enumerate() {
        let chunk = st.chunk_elems;
        let nchunks = elems.div_ceil(chunk);
        for j in 0..nchunks {
            let el = chunk.min(elems - j * chunk);
            tasks.push(Task::Final(h, j as u32, off + j * chunk * plan.esz, el));
        }
    }
    let staged = |t: &Task| match t {
        Task::Msg(c, m) => st.chains[*c].msgs[*m].reduce,
        Task::Final(..) => true,
    };
    // Slot of each staged task.
    let mut slot_of = vec![None; tasks.len()];
    let mut k = 0u32;
    for (i, t) in tasks.iter().enumerate() {
        if staged(t) {
            slot_of[i] = Some(k % SLOTS);
            k += 1;
        }
    }
    let mut g = Gen {
        e,
        args,
        plan,
        st,
        dtype,
        cbytes: (st.chunk_elems * plan.esz).next_multiple_of(4096),
        waited: vec![0; st.chains.len()],
        out_pending: vec![0; SLOTS as usize],
        load_pending: vec![0; SLOTS as usize],
        direct: vec![0; st.chains.len()],
    };
    let staged_idx: Vec<usize> = (0..tasks.len()).filter(|&i| slot_of[i].is_some()).collect();
    // Own chunk of the first staged task.
    if let Some(&first) = staged_idx.first() {
        g.pre(tasks[first], slot_of[first].unwrap_or(0));
    }
    let mut next_staged = 1;
    for (i, t) in tasks.iter().enumerate() {
        if let Some(s) = slot_of[i] {
            if let Some(&j) = staged_idx.get(next_staged) {
                g.pre(tasks[j], slot_of[j].unwrap_or(0));
                next_staged += 1;
            }
            g.main(*t, s);
        } else if let Task::Msg(c, m) = *t {
            g.direct(c, m);
        }
    }
    for s in 0..SLOTS {
        let p = std::mem::take(&mut g.out_pending[s as usize]);
        wait(g.e, SEM_OUT + s as u8, p);
    }
    for (ci, c) in st.chains.iter().enumerate() {
        wait(g.e, SEM_SENT[ci], g.direct[ci]);
        debug_assert_eq!(g.waited[ci], c.bytes, "every arrival is consumed");
    }
}

struct Gen<'a, 'b> {
    e: &'a mut Emitter,
    args: &'b ArgMap,
    plan: &'b Plan,
    st: &'b RingStage,
    dtype: DType,
    cbytes: u64,
    waited: Vec<u64>,
    out_pending: Vec<u64>,
    load_pending: Vec<u64>,
    direct: Vec<u64>,
}

impl Gen<'_, '_> {
    fn vmem(&mut self, slot: u32, buf: u32) -> tpuemu_isa::SReg {
        let addr = (slot as u64 * 3 + buf as u64) * self.cbytes;
        self.e.konst(addr as i32)
    }

    fn vaddr(&self, slot: u32, buf: u32) -> u32 {
        ((slot as u64 * 3 + buf as u64) * self.cbytes) as u32
    }

    fn src_slot(&self) -> tpuemu_isa::ArgSlot {
        self.args.slot(self.st.src.slot)
    }

    fn scratch(&self) -> tpuemu_isa::ArgSlot {
        self.args.slot(Slot::Scratch)
    }

    /// Frees the slot and loads this chip's own chunk of the task into buffer B.
    fn pre(&mut self, t: Task, s: u32) {
        let p = std::mem::take(&mut self.out_pending[s as usize]);
        wait(self.e, SEM_OUT + s as u8, p);
        let (shift, off, bytes) = match t {
            Task::Msg(c, m) => {
                let m = &self.st.chains[c].msgs[m];
                (m.shift, m.off, m.bytes)
            }
            Task::Final(_, _, off, el) => (0, off, el * self.plan.esz),
        };
        block_addr(self.e, T1, SRC, shift, self.st.n, self.st.block);
        add_imm(self.e, T1, T1, off);
        let v = self.vmem(s, 1);
        let src = self.src_slot();
        dma(
            self.e,
            MemRef::vmem(v),
            MemRef::hbm(src, T1),
            bytes,
            SEM_LOAD + s as u8,
            None,
        );
        self.load_pending[s as usize] += bytes;
    }

    /// Waits for the partial that `m` forwards and loads it into buffer `buf` of slot `s`.
    fn load_arrival(&mut self, c: usize, m: &Msg, s: u32, buf: u32) {
        let chain = &self.st.chains[c];
        arrive(self.e, chain, m, &mut self.waited[c]);
        add_imm(self.e, T2, SCR_OFF, chain.recv_base + m.cum);
        let v = self.vmem(s, buf);
        let scr = self.scratch();
        dma(
            self.e,
            MemRef::vmem(v),
            MemRef::hbm(scr, T2),
            m.bytes,
            SEM_LOAD + s as u8,
            None,
        );
        self.load_pending[s as usize] += m.bytes;
    }

    fn main(&mut self, t: Task, s: u32) {
        let st = self.st;
        match t {
            Task::Msg(c, mi) => {
                let chain = &st.chains[c];
                let m = &chain.msgs[mi];
                let a = arrival(chain, m.step - 1, m.piece, m.chunk);
                self.load_arrival(c, a, s, 0);
                let p = std::mem::take(&mut self.load_pending[s as usize]);
                wait(self.e, SEM_LOAD + s as u8, p);
                let (va, vb) = (self.vaddr(s, 0), self.vaddr(s, 1));
                emit_sum(self.e, self.dtype, va, &[va, vb], m.elems);
                add_imm(self.e, T2, SCR_OFF, chain.recv_base + m.cum);
                let v = self.vmem(s, 0);
                let scr = self.scratch();
                dma(
                    self.e,
                    MemRef::hbm(scr, T2),
                    MemRef::vmem(v),
                    m.bytes,
                    SEM_OUT + s as u8,
                    Some((peer(chain), chain.recv_sem)),
                );
                self.out_pending[s as usize] += m.bytes;
            }
            Task::Final(h, j, off, el) => {
                let mut srcs = vec![self.vaddr(s, 0), self.vaddr(s, 1)];
                for c in 0..st.chains.len() {
                    let chain = &st.chains[c];
                    let steps = chain.msgs.iter().map(|m| m.step + 1).max().unwrap_or(0);
                    let a = arrival(chain, steps - 1, h, j);
                    let buf = if c == 0 { 0 } else { 2 };
                    self.load_arrival(c, a, s, buf);
                    if c == 1 {
                        srcs.push(self.vaddr(s, 2));
                    }
                }
                let p = std::mem::take(&mut self.load_pending[s as usize]);
                wait(self.e, SEM_LOAD + s as u8, p);
                let va = self.vaddr(s, 0);
                emit_sum(self.e, self.dtype, va, &srcs, el);
                add_imm(self.e, T2, DST, off);
                let v = self.vmem(s, 0);
                let dst = self.args.slot(st.dst.slot);
                let bytes = el * self.plan.esz;
                dma(
                    self.e,
                    MemRef::hbm(dst, T2),
                    MemRef::vmem(v),
                    bytes,
                    SEM_OUT + s as u8,
                    None,
                );
                self.out_pending[s as usize] += bytes;
            }
        }
    }

    /// A step-0 style message: this chip's own chunk straight from HBM.
    fn direct(&mut self, c: usize, mi: usize) {
        let chain = &self.st.chains[c];
        let m = &chain.msgs[mi];
        block_addr(self.e, T1, SRC, m.shift, self.st.n, self.st.block);
        add_imm(self.e, T1, T1, m.off);
        add_imm(self.e, T2, SCR_OFF, chain.recv_base + m.cum);
        let (src, scr) = (self.src_slot(), self.scratch());
        dma(
            self.e,
            MemRef::hbm(scr, T2),
            MemRef::hbm(src, T1),
            m.bytes,
            SEM_SENT[c],
            Some((peer(chain), chain.recv_sem)),
        );
        self.direct[c] += m.bytes;
    }
}
