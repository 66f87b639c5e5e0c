//! Planning a collective: which rings run in which order, over which bytes, in which messages,
//! and where received data lands. Pure arithmetic on the spec and the topology; the code
//! generators ([`super::ring`], [`super::a2a`]) only walk the plan.
//!
//! A ring stage runs over one mesh axis of `n` chips. Its data is `n` blocks. On an axis that
//! wraps, two *chains* run at once, one each way round; each block is split into two halves
//! (pieces) and each chain carries a piece at most `reach` hops: `(n-1)/2` both ways when `n` is
//! odd; when `n` is even the block opposite (`n/2` hops away) goes half one way, half the other.
//! Every link then carries half the data, and no message travels more than `n/2` steps. On an
//! axis that does not wrap one chain runs `n-1` steps the `+` way (the ring's closing edge goes
//! back over the `-` links, which nothing else uses).

use tpuemu_isa::Topology;

use super::{CollectiveOp, CollectiveSpec, RingChoice};
use crate::kernels::KernelError;

/// Buffers a region can live in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Slot {
    In,
    Out,
    Scratch,
}

/// A byte range base, known at run time: the slot's argument offset + `off` + the sum of each
/// listed axis rank (index into the spec's axes) times its multiplier.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Region {
    pub slot: Slot,
    pub off: u64,
    pub terms: Vec<(usize, u64)>,
}

impl Region {
    fn at(slot: Slot, off: u64) -> Self {
        Region {
            slot,
            off,
            terms: Vec::new(),
        }
    }
}

/// One message of a chain: a chunk of a piece of a block, at a step.
#[derive(Clone, Debug)]
pub(crate) struct Msg {
    pub step: u32,
    pub piece: usize,
    pub chunk: u32,
    /// Byte offset of the chunk inside its block.
    pub off: u64,
    pub elems: u64,
    pub bytes: u64,
    /// The block, relative to this chip's rank: `(rank + shift) mod n`.
    pub shift: i64,
    /// Reduce-scatter: the chip adds the partial received at the previous step.
    pub reduce: bool,
    /// Bytes of the chain's messages before this one (its place in the receiver's scratch and in
    /// the arrival order).
    pub cum: u64,
}

/// One direction round the ring.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    /// Sends to the next chip (`+`) or the previous one.
    pub plus: bool,
    pub msgs: Vec<Msg>,
    /// Bytes it sends (and each chip receives) in all.
    pub bytes: u64,
    /// Reduce-scatter: where its arrivals land in the scratch buffer.
    pub recv_base: u64,
    pub recv_sem: u8,
}

impl Chain {
    /// The message of `step` carrying chunk `chunk` of `piece`.
    pub fn find(&self, step: u32, piece: usize, chunk: u32) -> Option<&Msg> {
        self.msgs
            .iter()
            .find(|m| m.step == step && m.piece == piece && m.chunk == chunk)
    }

    /// The message after which everything up to `m` has arrived: `m`'s end in arrival order.
    pub fn end_of(m: &Msg) -> u64 {
        m.cum + m.bytes
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RingKind {
    ReduceScatter,
    AllGather,
}

/// A ring over one axis.
#[derive(Clone, Debug)]
pub(crate) struct RingStage {
    pub kind: RingKind,
    /// Index into the spec's axes (for the rank and neighbour arguments).
    pub pos: usize,
    pub n: u32,
    pub block: u64,
    /// (byte offset in the block, elements) of each piece.
    pub pieces: [(u64, u64); 2],
    /// Elements per pipelined chunk (a multiple of 1024).
    pub chunk_elems: u64,
    pub chains: Vec<Chain>,
    /// Reduce-scatter: the `n` blocks read. All-gather: the region gathered into (always in
    /// the output).
    pub src: Region,
    /// Reduce-scatter: where this chip's reduced block goes. All-gather: where this chip's own
    /// block is read from at step 0 (the input, or the output when an earlier stage left it
    /// there).
    pub dst: Region,
}

/// All-to-all over the whole group at once.
#[derive(Clone, Debug)]
pub(crate) struct A2aStage {
    pub n: u32,
    pub block: u64,
    /// Chip index offset of each group rank from the group's rank-0 chip.
    pub chip_offsets: Vec<u32>,
    pub recv_sem: u8,
}

#[derive(Clone, Debug)]
pub(crate) enum Stage {
    Ring(RingStage),
    AllToAll(A2aStage),
    /// A group of one chip: the output is the input.
    Copy {
        bytes: u64,
    },
}

/// One axis of the spec as the topology has it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AxisInfo {
    pub axis: usize,
    pub n: u32,
    pub bidir: bool,
}

/// Everything the generators need.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub esz: u64,
    pub group: u32,
    pub axes: Vec<AxisInfo>,
    pub stages: Vec<Stage>,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub scratch_bytes: u64,
    /// Chunk size the spec asks for, in bytes.
    pub chunk_bytes: Option<u64>,
    /// Largest chunk the VMEM staging slots hold, in bytes.
    pub chunk_cap: u64,
}

/// VMEM staging slots of a reduce-scatter (each holds three chunk buffers).
pub(crate) const SLOTS: u32 = 4;
/// Largest chunk by default.
const MAX_CHUNK: u64 = 512 << 10;
/// Smallest chunk by default.
const MIN_CHUNK: u64 = 32 << 10;
/// Byte offsets and sizes must stay below this (32-bit scalar registers, signed immediates).
pub(crate) const MAX_BYTES: u64 = (1 << 31) - 1;

fn unsupported(msg: String) -> KernelError {
    KernelError::Unsupported(msg)
}

/// Checks the spec against the topology and plans the stages.
pub(crate) fn plan(spec: &CollectiveSpec, topo: &Topology) -> Result<Plan, KernelError> {
    let name = spec.op.name();
    if spec.axes.is_empty() {
        return Err(unsupported(format!("{name}: no mesh axes given")));
    }
    let mut axes = Vec::new();
    for (i, &a) in spec.axes.iter().enumerate() {
        if a >= topo.mesh.len() {
            return Err(unsupported(format!(
                "{name}: axis {a} does not exist (the mesh {:?} has {} axes)",
                topo.mesh,
                topo.mesh.len()
            )));
        }
        if spec.axes[..i].contains(&a) {
            return Err(unsupported(format!("{name}: axis {a} is listed twice")));
        }
        let n = topo.mesh[a];
        let wrap = topo.wraparound.get(a).copied().unwrap_or(false);
        let bidir = n > 2
            && match spec.ring {
                RingChoice::Auto => wrap,
                RingChoice::Unidirectional => false,
                RingChoice::Bidirectional => true,
            };
        axes.push(AxisInfo { axis: a, n, bidir });
    }
    let group: u64 = axes.iter().map(|a| a.n as u64).product();
    if spec.op == CollectiveOp::AllToAll || spec.axes.len() > 1 {
        check_numbering(topo)?;
    }
    let esz = spec.dtype.size() as u64;
    if spec.op.reduces()
        && !matches!(
            spec.dtype.name(),
            "float32" | "bfloat16" | "float16" | "int32"
        )
    {
        return Err(unsupported(format!(
            "{name}: sums of {} are not supported (float32, bfloat16, float16 and int32 are)",
            spec.dtype.name()
        )));
    }
    if spec.elements == 0 || !spec.elements.is_multiple_of(group) {
        return Err(unsupported(format!(
            "{name}: {} elements do not split into {group} equal shards (the group of axes {:?}); pad the array to a multiple of {group}",
            spec.elements, spec.axes
        )));
    }
    let total = spec.elements * esz;
    if total > MAX_BYTES {
        return Err(KernelError::TooLarge(format!(
            "{name}: {total} bytes per chip; collectives address at most {MAX_BYTES} bytes per buffer"
        )));
    }
    let shard = total / group;
    let (in_bytes, out_bytes) = match spec.op {
        CollectiveOp::AllGather => (shard, total),
        CollectiveOp::ReduceScatter => (total, shard),
        CollectiveOp::AllReduce | CollectiveOp::AllToAll => (total, total),
    };
    let chunk_cap = chunk_cap(spec, topo, esz)?;
    let mut p = Plan {
        esz,
        group: group as u32,
        axes,
        stages: Vec::new(),
        in_bytes,
        out_bytes,
        scratch_bytes: 0,
        chunk_bytes: spec.chunk_bytes.map(u64::from),
        chunk_cap,
    };
    if group == 1 {
        p.stages.push(Stage::Copy { bytes: in_bytes });
        return Ok(p);
    }
    match spec.op {
        CollectiveOp::AllToAll => plan_a2a(&mut p, topo, total),
        CollectiveOp::AllGather => plan_gather(&mut p, total, true),
        CollectiveOp::ReduceScatter => plan_scatter(&mut p, total, false),
        CollectiveOp::AllReduce => {
            plan_scatter(&mut p, total, true);
            plan_gather(&mut p, total, false);
        }
    }
    Ok(p)
}

/// Chip ids must be `x + dimx * (y + dimy * z)` for the in-program peer arithmetic.
fn check_numbering(topo: &Topology) -> Result<(), KernelError> {
    for c in &topo.chips {
        let mut id = 0u64;
        for (k, &x) in c.coords.iter().enumerate().rev() {
            id = id * topo.mesh[k] as u64 + x as u64;
        }
        if id != c.id as u64 {
            return Err(unsupported(format!(
                "chip {} at {:?}: collectives need chips numbered x-fastest over the mesh {:?}",
                c.id, c.coords, topo.mesh
            )));
        }
    }
    Ok(())
}

/// The largest chunk VMEM allows (reduce-scatter stages stage [`SLOTS`] x 3 chunks in half of
/// VMEM), checked against the spec's chunk size.
fn chunk_cap(spec: &CollectiveSpec, topo: &Topology, esz: u64) -> Result<u64, KernelError> {
    let vmem = topo.chips.first().map_or(0, |c| c.core.vmem_bytes);
    let cap = vmem / 2 / (3 * SLOTS as u64);
    if let Some(b) = spec.chunk_bytes {
        let bytes = (b as u64 / esz / 1024).max(1) * 1024 * esz;
        if spec.op.reduces() && bytes > cap {
            return Err(KernelError::TooLarge(format!(
                "{}: chunks of {bytes} bytes; the staging buffers allow at most {cap} bytes of VMEM per chunk",
                spec.op.name()
            )));
        }
    }
    Ok(cap)
}

impl Plan {
    /// Elements per chunk for blocks of `block` bytes: the spec's size, or an eighth of the
    /// block within 32-512 KiB (and what VMEM allows), in whole (8, 128) tiles of 1024 elements.
    fn chunk_elems(&self, block: u64) -> u64 {
        let bytes = self
            .chunk_bytes
            .unwrap_or_else(|| (block / 8).clamp(MIN_CHUNK, MAX_CHUNK).min(self.chunk_cap));
        (bytes / self.esz / 1024).max(1) * 1024
    }
}

/// Chain reach per piece: how many hops each chain carries each half of a block.
fn reaches(n: u32, bidir: bool) -> Vec<(bool, [u32; 2])> {
    if !bidir {
        return vec![(true, [n - 1, 0])];
    }
    if n % 2 == 1 {
        let r = (n - 1) / 2;
        vec![(true, [r, r]), (false, [r, r])]
    } else {
        let h = n / 2;
        vec![(true, [h, h - 1]), (false, [h - 1, h])]
    }
}

fn pieces(block_elems: u64, bidir: bool, esz: u64) -> [(u64, u64); 2] {
    if bidir {
        let h0 = block_elems / 2;
        [(0, h0), (h0 * esz, block_elems - h0)]
    } else {
        [(0, block_elems), (block_elems * esz, 0)]
    }
}

/// Builds the chains of a ring stage; returns the scratch bytes their arrivals need.
#[allow(clippy::too_many_arguments)]
fn ring(
    p: &Plan,
    kind: RingKind,
    pos: usize,
    len: u64,
    src: Region,
    dst: Region,
    recv_base: u64,
    sem_base: u8,
) -> (RingStage, u64) {
    let ax = p.axes[pos];
    let n = ax.n;
    let block = len / n as u64;
    let pieces = pieces(block / p.esz, ax.bidir, p.esz);
    let chunk = p.chunk_elems(block);
    let mut chains = Vec::new();
    let mut base = recv_base;
    for (ci, (plus, reach)) in reaches(n, ax.bidir).into_iter().enumerate() {
        let steps = reach[0].max(reach[1]);
        let mut msgs = Vec::new();
        let mut cum = 0;
        for k in 0..steps {
            // All-gather: step k delivers blocks k+1 hops from their owner. Reduce-scatter: the
            // sender is d = steps - k hops from the block's owner.
            let d = match kind {
                RingKind::AllGather => k + 1,
                RingKind::ReduceScatter => steps - k,
            };
            let rel = match kind {
                RingKind::AllGather => -(k as i64),
                RingKind::ReduceScatter => d as i64,
            };
            let shift = if plus { rel } else { -rel };
            for (h, &(off, elems)) in pieces.iter().enumerate() {
                if elems == 0 || reach[h] < d {
                    continue;
                }
                let nchunks = elems.div_ceil(chunk);
                for j in 0..nchunks {
                    let e = chunk.min(elems - j * chunk);
                    let bytes = e * p.esz;
                    msgs.push(Msg {
                        step: k,
                        piece: h,
                        chunk: j as u32,
                        off: off + j * chunk * p.esz,
                        elems: e,
                        bytes,
                        shift: shift.rem_euclid(n as i64),
                        reduce: kind == RingKind::ReduceScatter && reach[h] > d,
                        cum,
                    });
                    cum += bytes;
                }
            }
        }
        chains.push(Chain {
            plus,
            msgs,
            bytes: cum,
            recv_base: base,
            recv_sem: sem_base + ci as u8,
        });
        if kind == RingKind::ReduceScatter {
            base += cum;
        }
    }
    let stage = RingStage {
        kind,
        pos,
        n,
        block,
        pieces,
        chunk_elems: chunk,
        chains,
        src,
        dst,
    };
    (stage, base - recv_base)
}

/// The block of the output at which axes `0..upto` put this chip (first axis outermost).
fn out_prefix(p: &Plan, total: u64, upto: usize) -> Region {
    let mut r = Region::at(Slot::Out, 0);
    let mut len = total;
    for pos in 0..upto {
        len /= p.axes[pos].n as u64;
        r.terms.push((pos, len));
    }
    r
}

fn next_sems(p: &Plan) -> u8 {
    2 * p.stages.len() as u8
}

/// Reduce-scatter stages, axis by axis in the order given. For an all-reduce each stage leaves
/// its block where the all-gather will want it, in the output.
fn plan_scatter(p: &mut Plan, total: u64, for_all_reduce: bool) {
    let m = p.axes.len();
    let mut len = total;
    let mut src = Region::at(Slot::In, 0);
    let mut scratch = 0u64;
    // Intermediate results of a plain reduce-scatter go after every stage's arrivals.
    let mut staged = Vec::new();
    for pos in 0..m {
        let n = p.axes[pos].n as u64;
        let out_len = len / n;
        let dst = if for_all_reduce {
            out_prefix(p, total, pos + 1)
        } else if pos + 1 == m {
            Region::at(Slot::Out, 0)
        } else {
            staged.push((p.stages.len(), out_len));
            Region::at(Slot::Scratch, 0)
        };
        let sems = next_sems(p);
        let (stage, used) = ring(
            p,
            RingKind::ReduceScatter,
            pos,
            len,
            src,
            dst.clone(),
            scratch,
            sems,
        );
        scratch += used;
        p.stages.push(Stage::Ring(stage));
        src = dst;
        len = out_len;
    }
    // Place the intermediates.
    for (stage, bytes) in &staged {
        let off = scratch;
        scratch += bytes;
        if let Stage::Ring(s) = &mut p.stages[*stage] {
            s.dst.off = off;
        }
        if let Some(Stage::Ring(next)) = p.stages.get_mut(stage + 1) {
            next.src.off = off;
        }
    }
    p.scratch_bytes = p.scratch_bytes.max(scratch);
}

/// All-gather stages, innermost axis first, each gathering into the output in place.
fn plan_gather(p: &mut Plan, total: u64, from_input: bool) {
    let m = p.axes.len();
    for pos in (0..m).rev() {
        let region = out_prefix(p, total, pos);
        let len = total / p.axes[..pos].iter().map(|a| a.n as u64).product::<u64>();
        let own = if from_input && pos + 1 == m {
            Region::at(Slot::In, 0)
        } else {
            out_prefix(p, total, pos + 1)
        };
        let sems = next_sems(p);
        let (stage, _) = ring(p, RingKind::AllGather, pos, len, region, own, 0, sems);
        p.stages.push(Stage::Ring(stage));
    }
}

fn plan_a2a(p: &mut Plan, topo: &Topology, total: u64) {
    // Chip index strides of the mesh axes.
    let mut stride = vec![1u32; topo.mesh.len()];
    for k in 1..topo.mesh.len() {
        stride[k] = stride[k - 1] * topo.mesh[k - 1];
    }
    let n = p.group;
    let chip_offsets = (0..n)
        .map(|rank| {
            // First axis outermost.
            let mut rest = rank;
            let mut off = 0;
            for ax in p.axes.iter().rev() {
                off += (rest % ax.n) * stride[ax.axis];
                rest /= ax.n;
            }
            off
        })
        .collect();
    p.stages.push(Stage::AllToAll(A2aStage {
        n,
        block: total / n as u64,
        chip_offsets,
        recv_sem: 0,
    }));
}
