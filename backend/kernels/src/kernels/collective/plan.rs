//! A collective's plan: which rings run in which order, over which bytes, in which messages,
//! and where received data lands — the types [`super::planner`] fills from the spec and the
//! topology (pure arithmetic); the code generators ([`super::ring`], [`super::a2a`]) only walk
//! the plan.
//!
//! A ring round runs over one mesh axis of `n` chips (see [`super::rounds`] for the parts and
//! rounds). Its data is `n` blocks. On an axis that wraps, two *chains* run at once, one each
//! way round; each row of a block is split into two halves (pieces) and each chain carries a
//! piece at most `reach` hops: `(n-1)/2` both ways when `n` is odd; when `n` is even the block
//! opposite (`n/2` hops away) goes half one way, half the other.
//! Every link then carries half the data, and no message travels more than `n/2` steps. On an
//! axis that does not wrap one chain runs `n-1` steps the `+` way (the ring's closing edge goes
//! back over the `-` links, which nothing else uses).

use std::collections::HashMap;

/// Buffers a region can live in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Slot {
    In,
    Out,
    Scratch,
}

/// A byte range base, known at run time: the slot's argument offset + `off` + the sum of each
/// listed axis rank (index into the spec's axes) times its multiplier.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Region {
    pub slot: Slot,
    pub off: u64,
    pub terms: Vec<(usize, u64)>,
}

impl Region {
    pub fn at(slot: Slot, off: u64) -> Self {
        Region {
            slot,
            off,
            terms: Vec::new(),
        }
    }
}

/// One message of a chain: a chunk of a piece of one row of a block, at a step. Rounds'
/// *final* tasks (reduce-scatter: this chip's own block) are messages too, with `step` unused.
#[derive(Clone, Debug)]
pub struct Msg {
    pub step: u32,
    pub piece: usize,
    pub row: u32,
    pub chunk: u32,
    /// Byte offset of the chunk from its block's start.
    pub off: u64,
    /// Byte offset of the same elements in the round's `own` region.
    pub own: u64,
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
pub struct Chain {
    /// Sends to the next chip (`+`) or the previous one.
    pub plus: bool,
    pub msgs: Vec<Msg>,
    /// Bytes it sends (and each chip receives) in all.
    pub bytes: u64,
    /// Reduce-scatter: where its arrivals land in the scratch buffer.
    pub recv_base: u64,
    pub recv_sem: u8,
    /// Semaphore counting what this chip sends straight from HBM.
    pub sent_sem: u8,
    /// Message index by (step, piece, row, chunk).
    pub index: HashMap<(u32, usize, u32, u32), usize>,
}

impl Chain {
    /// Index of the message of `step` carrying chunk `chunk` of `piece` of row `row`.
    pub fn find_index(&self, step: u32, piece: usize, row: u32, chunk: u32) -> Option<usize> {
        self.index.get(&(step, piece, row, chunk)).copied()
    }

    /// The message after which everything up to `m` has arrived: `m`'s end in arrival order.
    pub fn end_of(m: &Msg) -> u64 {
        m.cum + m.bytes
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RingKind {
    ReduceScatter,
    AllGather,
}

/// A ring over one axis: one round of one part (see the module docs). A block is `rows` runs of
/// `row_elems` elements; block `q` starts `q * bstride` bytes after the `src` region's base.
#[derive(Clone, Debug)]
pub struct RingStage {
    pub kind: RingKind,
    pub part: usize,
    /// Index into the spec's axes (for the rank and neighbour arguments).
    pub pos: usize,
    pub n: u32,
    pub bstride: u64,
    /// Per row: byte offset from the block's start, and from the `own` region's base.
    pub rows: Vec<(u64, u64)>,
    pub row_elems: u64,
    /// Elements per pipelined chunk (a multiple of 1024).
    pub chunk_elems: u64,
    pub chains: Vec<Chain>,
    /// Reduce-scatter: this chip's own block, chunk by chunk, reduced into `own`.
    pub finals: Vec<Msg>,
    /// Base of block 0: reduce-scatter, the blocks read; all-gather, the region gathered into
    /// (always in the output).
    pub src: Region,
    /// Reduce-scatter: where this chip's reduced block goes. All-gather: where this chip's own
    /// block is read from at step 0.
    pub own: Region,
    /// All-gather: the own block is in the input (it is copied into the output first).
    pub own_from_input: bool,
    /// All-gather from the input: the semaphore of that copy.
    pub copy_sem: u8,
}

/// All-to-all over the whole group at once.
#[derive(Clone, Debug)]
pub struct A2aStage {
    pub n: u32,
    pub block: u64,
    /// Chip index offset of each group rank from the group's rank-0 chip.
    pub chip_offsets: Vec<u32>,
    pub recv_sem: u8,
}

#[derive(Clone, Debug)]
pub enum Stage {
    /// The rounds of every part, in each part's order (the generator interleaves the parts).
    Rings(Vec<RingStage>),
    AllToAll(A2aStage),
    /// A group of one chip: the output is the input.
    Copy {
        bytes: u64,
    },
}

/// One axis of the spec as the topology has it.
#[derive(Clone, Copy, Debug)]
pub struct AxisInfo {
    pub axis: usize,
    pub n: u32,
    pub bidir: bool,
    /// The axis joins slices over the data-centre network.
    pub dcn: bool,
}

/// A part of the data (see the module docs): elements `[c0, c0 + s)` of every shard, reduced
/// over the axes in `order` (positions in the spec's axes) and gathered in reverse.
#[derive(Clone, Debug)]
pub struct Part {
    pub c0: u64,
    pub s: u64,
    pub order: Vec<usize>,
}

/// Everything the generators need.
#[derive(Clone, Debug)]
pub struct Plan {
    pub esz: u64,
    pub group: u32,
    pub axes: Vec<AxisInfo>,
    pub parts: Vec<Part>,
    /// The parts take turns on each axis: a round starts once the axis's round before it has
    /// sent everything (see [`super::shares`]).
    pub take_turns: bool,
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
pub const SLOTS: u32 = 32;
/// Largest chunk by default.
const MAX_CHUNK: u64 = 512 << 10;
/// Chunks per block by default (within the sizes below).
const CHUNKS_PER_BLOCK: u64 = 4;
/// Smallest chunk by default.
const MIN_CHUNK: u64 = 32 << 10;
/// Byte offsets and sizes must stay below this (32-bit scalar registers, signed immediates).
pub const MAX_BYTES: u64 = (1 << 31) - 1;
/// Most parts (one per ICI axis of a 3-D torus).
pub const MAX_PARTS: usize = 3;
/// Fewest elements of a part: smaller arrays run in fewer parts.
pub const MIN_PART_ELEMS: u64 = 256;
/// Receive semaphores available to ring chains (see [`super::emit`] for the others).
pub const RECV_SEMS: usize = 47;

impl Plan {
    /// Elements per chunk for blocks of `block` bytes: the spec's size, or an eighth of the
    /// block within 32-512 KiB (and what VMEM allows), in whole (8, 128) tiles of 1024 elements.
    pub fn chunk_elems(&self, block: u64) -> u64 {
        let bytes = self.chunk_bytes.unwrap_or_else(|| {
            (block / CHUNKS_PER_BLOCK)
                .clamp(MIN_CHUNK, MAX_CHUNK)
                .min(self.chunk_cap)
        });
        (bytes / self.esz / 1024).max(1) * 1024
    }
}
