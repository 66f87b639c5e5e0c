//! Ring rounds: all-gather and reduce-scatter over one axis, for every part at once (see
//! [`super::plan`] for the parts, rounds, chains, pieces and messages).
//!
//! **One instruction stream, every part.** The rounds of all parts run concurrently, each on its
//! own axis, so their messages are interleaved in one program: each message is placed at its
//! chain's byte position (the bytes the chain sent before it, which is when its link gets to it)
//! after the end of its part's previous rounds, ties in part, round and chain order. A part's
//! round starts after its previous round has finished on this chip (everything received, sent
//! and written).
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
//! block to its destination. Tasks are software-pipelined over [`SLOTS`] staging slots shared by
//! the parts: the own chunk of the next task loads while this one waits for its partial, adds
//! and sends, and a slot is reused only once its previous result has left.

use tpuemu_isa::ops::SAluOp;
use tpuemu_isa::{MemRef, SReg, SSrc};

use super::emit::{
    ArgMap, SCR_OFF, SEM_FINAL, SEM_LOAD, T1, T2, T3, add_imm, base, dma, load_word, region_base,
    wait,
};
use super::plan::{Chain, Msg, Plan, RingKind, RingStage, SLOTS, Slot};
use super::sum::emit_sum;
use crate::codegen::Emitter;
use crate::dtype::DType;

/// A unit of work in program order.
#[derive(Clone, Copy, Debug)]
enum Item {
    /// Message `m` of chain `c` of round `r`.
    Msg { r: usize, c: usize, m: usize },
    /// Final task `f` of round `r` (reduce-scatter).
    Final { r: usize, f: usize },
}

impl Item {
    fn round(self) -> usize {
        match self {
            Item::Msg { r, .. } | Item::Final { r, .. } => r,
        }
    }
}

/// How far ahead step (A) runs: the tasks after the current one while their bytes add up to
/// at most `LOOKAHEAD_BYTES` (at least one), and never more than [`LOOKAHEAD`], so that a slot
/// is taken over from a task at least `SLOTS - LOOKAHEAD` before the current one, whose result
/// has had time to leave. Small tasks look further ahead: their loads' latency is the same.
const LOOKAHEAD: usize = 16;
const LOOKAHEAD_BYTES: u64 = 2 << 20;

/// When a task may wait for its partials ahead of its turn: a hop after they should have
/// left, in bytes of link time.
const HOP_BYTES: u64 = 128 << 10;

/// Program-order key: (byte time, part, round, chain, index).
type Key = (u64, usize, usize, usize, usize);

/// What a task that waits for a message is placed after, besides that message itself, in bytes
/// of link time: a hop, staging and adding, and slack for a neighbour running late (6-12 us of
/// a 45-90 GB/s link; of 96 KiB to 1 MiB, the best on v5p 4x4x4 and v5e 16x16 reduce-scatters
/// of 64 and 256 MiB). Only the speed depends on it.
const LATENCY_BYTES: u64 = 512 << 10;

/// Per round, chain and message: its byte time.
type Times = Vec<Vec<Vec<u64>>>;

/// Every round's messages and final tasks in program order (see the module docs), with their
/// keys, and every message's byte time. Where the parts take turns on the axes (`turns`), a
/// round also starts no earlier than the last byte time of the round before it on its axis;
/// the rounds are placed in order of their start (ties: the lower part), as the plan assumed
/// (an all-reduce's all-gather rounds after its reduce-scatter rounds).
fn schedule(rounds: &[RingStage], turns: bool) -> (Vec<(Key, Item)>, Times) {
    let mut keyed = Vec::new();
    let parts = rounds.iter().map(|r| r.part + 1).max().unwrap_or(0);
    let axes = rounds.iter().map(|r| r.pos + 1).max().unwrap_or(0);
    let mut part_end = vec![0u64; parts];
    let mut axis_end = vec![0u64; axes];
    let mut todo: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); parts];
    for (r, st) in rounds.iter().enumerate() {
        todo[st.part].push_back(r);
    }
    // Taking turns in an all-reduce, every part's all-gather rounds go after every part's
    // reduce-scatter rounds have sent everything (as if the two were collectives of their own):
    // otherwise the parts' short middle rounds meet and leave the links idle.
    let reduces = rounds.iter().any(|r| r.kind == RingKind::ReduceScatter);
    let phase = |r: usize| turns && reduces && rounds[r].kind == RingKind::AllGather;
    let mut scattered = 0u64;
    let mut times: Times = vec![Vec::new(); rounds.len()];
    while let Some((_, start, _, r)) = (0..parts)
        .filter_map(|p| {
            let &r = todo[p].front()?;
            let axis = if turns { axis_end[rounds[r].pos] } else { 0 };
            let after = if phase(r) { scattered } else { 0 };
            Some((phase(r), part_end[p].max(axis).max(after), p, r))
        })
        .min()
    {
        let st = &rounds[r];
        todo[st.part].pop_front();
        let mut end = start;
        let mut sent = start;
        let mut round_times = Vec::new();
        for (c, chain) in st.chains.iter().enumerate() {
            // A message goes at its place on its link, but not before what it forwards has
            // come in (that message's time, its bytes and the latency), nor before the chain's
            // message before it (a chain's messages go in order: the receiver counts bytes).
            let mut t: Vec<u64> = Vec::with_capacity(chain.msgs.len());
            for (m, msg) in chain.msgs.iter().enumerate() {
                let mut at = (start + msg.cum).max(t.last().copied().unwrap_or(0));
                if msg.step > 0 && (msg.reduce || st.kind == RingKind::AllGather) {
                    let a = arrival_index(chain, msg.step - 1, msg);
                    at = at.max(t[a] + chain.msgs[a].bytes + LATENCY_BYTES);
                }
                t.push(at);
                end = end.max(at + msg.bytes);
                sent = sent.max(at + msg.bytes);
                keyed.push(((at, st.part, r, c, m), Item::Msg { r, c, m }));
            }
            round_times.push(t);
        }
        // A final task goes when its last partial has come in.
        let n = st.chains.len();
        for (f, fin) in st.finals.iter().enumerate() {
            let at = st
                .chains
                .iter()
                .enumerate()
                .map(|(c, chain)| {
                    let a = arrival_index(chain, last_step(chain), fin);
                    round_times[c][a] + chain.msgs[a].bytes + LATENCY_BYTES
                })
                .max()
                .unwrap_or(start);
            end = end.max(at + fin.bytes);
            keyed.push(((at, st.part, r, n, f), Item::Final { r, f }));
        }
        times[r] = round_times;
        part_end[st.part] = end;
        axis_end[st.pos] = sent;
        if st.kind == RingKind::ReduceScatter {
            scattered = scattered.max(sent);
        }
    }
    keyed.sort_unstable_by_key(|(k, _)| *k);
    (keyed, times)
}

/// Emits the rounds of every part.
///
/// A staged task goes in three steps: (A) free its slot and load this chip's own chunk, (B)
/// wait for the partial(s) it adds and load them, (C) add and send (or write). (A) runs a few
/// tasks ahead ([`LOOKAHEAD`]) and (B) too where the partials waited for come before the
/// current task in program order and should be in by then (so that no chip can wait on
/// another chip's later work: a task only ever waits for messages its neighbours sent earlier
/// in their program), each within its part's current round; so the HBM latency of the loads
/// overlaps with the additions.
pub fn emit_rounds(
    e: &mut Emitter,
    args: &ArgMap,
    plan: &Plan,
    rounds: &[RingStage],
    dtype: DType,
) {
    let (items, times) = schedule(rounds, plan.take_turns);
    let key_of =
        |r: usize, c: usize, m: usize| -> Key { (times[r][c][m], rounds[r].part, r, c, m) };
    // Every reduce-scatter message goes through a staging slot, so that a chain's messages all
    // leave from VMEM, in the order they were issued (one leaving from HBM could be overtaken
    // by a later one that waits for no HBM transfer, and the receiver counts bytes in order).
    let staged_items: Vec<usize> = (0..items.len())
        .filter(|&i| match items[i].1 {
            Item::Msg { r, .. } => rounds[r].kind == RingKind::ReduceScatter,
            Item::Final { .. } => true,
        })
        .collect();
    // The latest key among the partials each staged task waits for, and the byte time by which
    // they should have come in.
    let deps: Vec<(Key, u64)> = staged_items
        .iter()
        .map(|&i| {
            let arrivals: Vec<(usize, usize, usize)> = match items[i].1 {
                Item::Msg { r, c, m } => {
                    let msg = &rounds[r].chains[c].msgs[m];
                    if !msg.reduce {
                        return ((0, 0, 0, 0, 0), 0);
                    }
                    vec![(r, c, arrival_index(&rounds[r].chains[c], msg.step - 1, msg))]
                }
                Item::Final { r, f } => {
                    let msg = &rounds[r].finals[f];
                    (0..rounds[r].chains.len())
                        .map(|c| {
                            (
                                r,
                                c,
                                arrival_index(
                                    &rounds[r].chains[c],
                                    last_step(&rounds[r].chains[c]),
                                    msg,
                                ),
                            )
                        })
                        .collect()
                }
            };
            let key = arrivals.iter().map(|&(r, c, m)| key_of(r, c, m)).max();
            let ready = arrivals
                .iter()
                .map(|&(r, c, m)| times[r][c][m] + rounds[r].chains[c].msgs[m].bytes + HOP_BYTES)
                .max();
            (key.unwrap_or((0, 0, 0, 0, 0)), ready.unwrap_or(0))
        })
        .collect();
    let cbytes = rounds
        .iter()
        .map(|r| r.chunk_elems * plan.esz)
        .max()
        .unwrap_or(0)
        .next_multiple_of(4096);
    let parts = plan.parts.len();
    let mut g = Gen {
        e,
        args,
        plan,
        rounds,
        dtype,
        cbytes,
        issued: [0; 64],
        done: [0; 64],
        slot_free: vec![None; SLOTS as usize],
        load_need: vec![0; SLOTS as usize],
        current: vec![None; parts],
    };
    let slot = |q: usize| q as u32 % SLOTS;
    // Per staged task: whether steps (A) and (B) were emitted.
    let mut a_done = vec![false; staged_items.len()];
    let mut b_done = vec![false; staged_items.len()];
    let mut q = 0usize;
    for (i, &(key, it)) in items.iter().enumerate() {
        g.enter(it.round());
        if staged_items.get(q) != Some(&i) {
            let Item::Msg { r, c, m } = it else {
                unreachable!("final tasks are staged")
            };
            g.gather_msg(r, c, m);
            continue;
        }
        let mut end = q + 1;
        let mut ahead = 0;
        while end < staged_items.len() && end <= q + LOOKAHEAD {
            ahead += g.task(items[staged_items[end]].1).1.bytes;
            if ahead > LOOKAHEAD_BYTES && end > q + 1 {
                break;
            }
            end += 1;
        }
        for j in q..end {
            let r = items[staged_items[j]].1.round();
            let current = g.current[rounds[r].part] == Some(r);
            if !a_done[j] && (j == q || current) {
                g.pre(items[staged_items[j]].1, slot(j));
                a_done[j] = true;
            }
            // Waiting early for a partial that may not be in yet would hold up this task.
            let early = current && deps[j].0 < key && deps[j].1 <= key.0;
            if a_done[j] && !b_done[j] && (j == q || early) {
                g.partials(items[staged_items[j]].1, slot(j));
                b_done[j] = true;
            }
        }
        g.main(it, slot(q));
        q += 1;
    }
    for p in 0..parts {
        g.finish(p);
    }
    for sem in 0..64u8 {
        g.upto(sem, g.issued[sem as usize]);
    }
}

/// The last step of a chain.
fn last_step(c: &Chain) -> u32 {
    c.msgs.iter().map(|m| m.step).max().unwrap_or(0)
}

/// Index of the message of chain `c` that delivered `m`'s chunk at `step`.
fn arrival_index(c: &Chain, step: u32, m: &Msg) -> usize {
    c.find_index(step, m.piece, m.row, m.chunk)
        .unwrap_or_else(|| panic!("collective plan is inconsistent: no arrival to forward"))
}

struct Gen<'a, 'b> {
    e: &'a mut Emitter,
    args: &'b ArgMap,
    plan: &'b Plan,
    rounds: &'b [RingStage],
    dtype: DType,
    cbytes: u64,
    /// Per semaphore: bytes it will count in all (issued, or expected to arrive) and bytes
    /// waited for so far (see [`super::emit::SEM_COPY`] on why a count says what is done).
    issued: [u64; 64],
    done: [u64; 64],
    /// Per slot: the semaphore and count at which its last result has left (it is free).
    slot_free: Vec<Option<(u8, u64)>>,
    /// Per slot: the count of `SEM_LOAD` at which its loads are in.
    load_need: Vec<u64>,
    /// The round each part is in.
    current: Vec<Option<usize>>,
}

impl Gen<'_, '_> {
    /// Waits until `sem` has counted `need` bytes in all.
    fn upto(&mut self, sem: u8, need: u64) {
        let d = &mut self.done[sem as usize];
        if need > *d {
            wait(self.e, sem, need - *d);
            *d = need;
        }
    }

    /// Makes round `r` its part's current round: finishes the part's previous round, loads the
    /// round's region bases and (all-gather from the input) copies the own block into place.
    fn enter(&mut self, r: usize) {
        let st = &self.rounds[r];
        let p = st.part;
        if self.current[p] == Some(r) {
            return;
        }
        self.finish(p);
        // The round's send semaphores were last used two rounds before: all of that has left.
        for c in &st.chains {
            self.upto(c.sent_sem, self.issued[c.sent_sem as usize]);
        }
        self.current[p] = Some(r);
        region_base(self.e, self.args, base(p, 0), &st.src);
        region_base(self.e, self.args, base(p, 1), &st.own);
        if st.own_from_input {
            for &(roff, rown) in &st.rows {
                self.block_addr(r, T1, 0, roff);
                add_imm(self.e, T2, base(p, 1), rown);
                dma(
                    self.e,
                    MemRef::hbm(self.args.output, T1),
                    MemRef::hbm(self.args.input, T2),
                    st.row_elems * self.plan.esz,
                    st.copy_sem,
                    None,
                );
                self.issued[st.copy_sem as usize] += st.row_elems * self.plan.esz;
            }
        }
    }

    /// Waits until part `p`'s current round is over on this chip for what its next round
    /// reads: everything received, results written, the own block copied.
    fn finish(&mut self, p: usize) {
        let Some(r) = self.current[p].take() else {
            return;
        };
        let st = &self.rounds[r];
        for chain in &st.chains {
            self.issued[chain.recv_sem as usize] = chain.bytes;
            self.upto(chain.recv_sem, chain.bytes);
        }
        if st.kind == RingKind::ReduceScatter {
            self.upto(SEM_FINAL, self.issued[SEM_FINAL as usize]);
        }
        if st.own_from_input {
            self.upto(st.copy_sem, self.issued[st.copy_sem as usize]);
        }
    }

    /// `dst = ((rank + shift) mod n) * bstride + (round r's block base) + off`.
    fn block_addr(&mut self, r: usize, dst: SReg, shift: i64, off: u64) {
        let st = &self.rounds[r];
        load_word(self.e, dst, self.args.axis[st.pos]);
        let alu = |e: &mut Emitter, op, b: SSrc| {
            e.salu(op, dst, dst, b);
        };
        if shift != 0 {
            alu(self.e, SAluOp::Add, SSrc::Imm(shift as i32));
            alu(self.e, SAluOp::RemU, SSrc::Imm(st.n as i32));
        }
        alu(self.e, SAluOp::Mul, SSrc::Imm(st.bstride as i32));
        alu(self.e, SAluOp::Add, SSrc::Reg(base(st.part, 0)));
        if off != 0 {
            add_imm(self.e, dst, dst, off);
        }
    }

    /// `T3` = the chip index of chain `c`'s next chip.
    fn peer(&mut self, r: usize, c: usize) {
        let st = &self.rounds[r];
        let w = self.args.axis[st.pos] + if st.chains[c].plus { 1 } else { 2 };
        load_word(self.e, T3, w);
    }

    /// Waits until chain `c` of round `r` has received everything up to and including `m`.
    fn arrive(&mut self, r: usize, c: usize, m: &Msg) {
        self.upto(self.rounds[r].chains[c].recv_sem, Chain::end_of(m));
    }

    /// The message of chain `c` that delivered (`piece`, `row`, `chunk`) at `step`.
    fn arrival(&self, r: usize, c: usize, step: u32, m: &Msg) -> Msg {
        let chain = &self.rounds[r].chains[c];
        chain.msgs[arrival_index(chain, step, m)].clone()
    }

    /// An all-gather message: this chip's own chunk at step 0, else the chunk that arrived at
    /// the step before, pushed to the same place in the next chip's output.
    fn gather_msg(&mut self, r: usize, c: usize, mi: usize) {
        let st = &self.rounds[r];
        let m = st.chains[c].msgs[mi].clone();
        let out = self.args.output;
        self.block_addr(r, T1, m.shift, m.off);
        let src = if m.step == 0 && st.own_from_input {
            add_imm(self.e, T2, base(st.part, 1), m.own);
            MemRef::hbm(self.args.input, T2)
        } else {
            if m.step > 0 {
                let a = self.arrival(r, c, m.step - 1, &m);
                self.arrive(r, c, &a);
            }
            MemRef::hbm(out, T1)
        };
        self.peer(r, c);
        let chain = &st.chains[c];
        dma(
            self.e,
            MemRef::hbm(out, T1),
            src,
            m.bytes,
            chain.sent_sem,
            Some((T3, chain.recv_sem)),
        );
        self.issued[chain.sent_sem as usize] += m.bytes;
    }

    fn vmem(&mut self, slot: u32, buf: u32) -> SReg {
        let addr = (slot as u64 * 3 + buf as u64) * self.cbytes;
        self.e.konst(addr as i32)
    }

    fn vaddr(&self, slot: u32, buf: u32) -> u32 {
        ((slot as u64 * 3 + buf as u64) * self.cbytes) as u32
    }

    /// The message a staged item works on.
    fn task(&self, it: Item) -> (usize, Msg) {
        match it {
            Item::Msg { r, c, m } => (r, self.rounds[r].chains[c].msgs[m].clone()),
            Item::Final { r, f } => (r, self.rounds[r].finals[f].clone()),
        }
    }

    /// Frees the slot and loads this chip's own chunk of the task into buffer 1.
    fn pre(&mut self, it: Item, s: u32) {
        if let Some((sem, need)) = self.slot_free[s as usize].take() {
            self.upto(sem, need);
        }
        let (r, m) = self.task(it);
        self.block_addr(r, T1, m.shift, m.off);
        let src = self.args.slot(self.rounds[r].src.slot);
        self.load(s, 1, MemRef::hbm(src, T1), m.bytes);
    }

    /// Loads `bytes` from `from` into buffer `buf` of slot `s`, which waits for them before it
    /// is read.
    fn load(&mut self, s: u32, buf: u32, from: MemRef, bytes: u64) {
        let v = self.vmem(s, buf);
        dma(self.e, MemRef::vmem(v), from, bytes, SEM_LOAD, None);
        self.issued[SEM_LOAD as usize] += bytes;
        self.load_need[s as usize] = self.issued[SEM_LOAD as usize];
    }

    /// Waits for the partial `a` of chain `c` and loads it into buffer `buf` of slot `s`.
    fn load_arrival(&mut self, r: usize, c: usize, a: &Msg, s: u32, buf: u32) {
        self.arrive(r, c, a);
        add_imm(
            self.e,
            T2,
            SCR_OFF,
            self.rounds[r].chains[c].recv_base + a.cum,
        );
        let scr = self.args.slot(Slot::Scratch);
        self.load(s, buf, MemRef::hbm(scr, T2), a.bytes);
    }

    /// Waits for the partials the task adds and loads them: buffer 0 (the message's chain, or a
    /// final task's first chain) and 2 (a final task's second chain).
    fn partials(&mut self, it: Item, s: u32) {
        let (r, m) = self.task(it);
        let st = &self.rounds[r];
        match it {
            Item::Msg { .. } if !m.reduce => {}
            Item::Msg { c, .. } => {
                let a = self.arrival(r, c, m.step - 1, &m);
                self.load_arrival(r, c, &a, s, 0);
            }
            Item::Final { .. } => {
                for c in 0..st.chains.len() {
                    let a = self.arrival(r, c, last_step(&st.chains[c]), &m);
                    self.load_arrival(r, c, &a, s, if c == 0 { 0 } else { 2 });
                }
            }
        }
    }

    /// Adds the task's buffers and sends the sum on (or writes a final one); a message that
    /// adds nothing sends this chip's own chunk.
    fn main(&mut self, it: Item, s: u32) {
        let (r, m) = self.task(it);
        let st = &self.rounds[r];
        let mut srcs = vec![self.vaddr(s, 0), self.vaddr(s, 1)];
        if matches!(it, Item::Final { .. }) && st.chains.len() > 1 {
            srcs.push(self.vaddr(s, 2));
        }
        self.upto(SEM_LOAD, self.load_need[s as usize]);
        let raw = matches!(it, Item::Msg { .. }) && !m.reduce;
        if !raw {
            let va = self.vaddr(s, 0);
            emit_sum(self.e, self.dtype, va, &srcs, m.elems);
        }
        let v = self.vmem(s, if raw { 1 } else { 0 });
        match it {
            Item::Msg { c, .. } => {
                let chain = &st.chains[c];
                add_imm(self.e, T2, SCR_OFF, chain.recv_base + m.cum);
                self.peer(r, c);
                let scr = self.args.slot(Slot::Scratch);
                dma(
                    self.e,
                    MemRef::hbm(scr, T2),
                    MemRef::vmem(v),
                    m.bytes,
                    chain.sent_sem,
                    Some((T3, chain.recv_sem)),
                );
                self.issued[chain.sent_sem as usize] += m.bytes;
                self.slot_free[s as usize] =
                    Some((chain.sent_sem, self.issued[chain.sent_sem as usize]));
            }
            Item::Final { .. } => {
                add_imm(self.e, T2, base(st.part, 1), m.own);
                let dst = self.args.slot(st.own.slot);
                dma(
                    self.e,
                    MemRef::hbm(dst, T2),
                    MemRef::vmem(v),
                    m.bytes,
                    SEM_FINAL,
                    None,
                );
                self.issued[SEM_FINAL as usize] += m.bytes;
                self.slot_free[s as usize] = Some((SEM_FINAL, self.issued[SEM_FINAL as usize]));
            }
        }
    }
}
