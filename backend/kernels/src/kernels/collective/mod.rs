//! Collectives over a slice of chips — all-gather, reduce-scatter, all-reduce, all-to-all — as
//! one SPMD ISA program launched on every chip, moving data with remote DMA (push only) and
//! synchronising with semaphores that count the bytes received. Nothing is computed on the host.
//!
//! # Groups, ranks and layouts
//!
//! A collective runs over one or more mesh axes (`axes`). Chips that differ only in their
//! coordinates on those axes form a *group* of `n = prod(mesh[a])` chips; every group runs the
//! same collective at once, independently. A chip's *rank* in its group is its coordinates on
//! the axes, the first listed axis outermost: `rank = ((c[a0] * n1) + c[a1]) * n2 + c[a2]`.
//! `elements` is the size `E` of the whole array (`V = E * dtype size` bytes); it must be a
//! multiple of `n` (shards are equal, as `all_gather_into_tensor` and `reduce_scatter_tensor`
//! require; otherwise [`KernelError::Unsupported`] says by how much to pad).
//!
//! | op | input per chip | output per chip |
//! |---|---|---|
//! | all-gather | shard, `V/n` bytes | `V` bytes: rank `r`'s shard at `r * V/n` |
//! | reduce-scatter | `V` bytes | `V/n` bytes: the sum over the group of everyone's bytes `[r*V/n, (r+1)*V/n)` |
//! | all-reduce | `V` bytes | `V` bytes: the sum over the group |
//! | all-to-all | `V` bytes, `n` blocks | `V` bytes: block `j` is block `r` of rank `j`'s input |
//!
//! Input and output must not overlap. Peers write into each other's output (all-gather,
//! all-reduce, all-to-all), so the output offset must be the same on every chip of a group.
//!
//! # Algorithms
//!
//! - **Rings, axis by axis.** Reduce-scatter runs one ring per axis in the order given, each on
//!   the previous one's result (`V`, `V/n0`, `V/(n0 n1)`, ...); all-gather runs them in reverse,
//!   gathering in place in the output; all-reduce is reduce-scatter then all-gather, the scattered
//!   blocks left where the gather wants them. All-to-all pushes every block directly to its
//!   destination chip, nearest first, and lets the interconnect route it.
//! - **Bidirectional rings where an axis wraps** ([`plan`]): two chains run at once, one each
//!   way round, each carrying half of every block; a block travels at most `n/2` hops, so the
//!   latency floor is `n/2` hops and each link carries `(n-1)/2n * V`. Where an axis does not wrap
//!   (`Topology::wraparound`: v5e/v6e axes shorter than 16, v4/v5p/v7x slices not made of whole
//!   4x4x4 cubes) one chain runs `n-1` steps the `+` way: half the bandwidth.
//! - **Pipelined chunks.** Blocks move in chunks (`chunk_bytes`, by default an eighth of the
//!   stage's block, within 32-512 KiB): a chip forwards (all-gather) or reduces and forwards (reduce-scatter) a chunk as
//!   soon as it has arrived, while later chunks are still on the link, so links stay busy and the
//!   hop latency is paid once per chain, not once per step. Reduce-scatter stages its chunks
//!   through VMEM slots (see [`ring`]) and adds them on the vector unit.
//!
//! # Numerics
//!
//! Sums of f32 are f32 additions in a fixed order: a chain's partial for a piece of block `q`
//! starts at the chip farthest from `q` and adds each chip's value on its way; the owner computes
//! `(partial from the + chain + own) + partial from the - chain`. bf16 and f16 add in f32 and round
//! to the dtype (nearest even) whenever a partial goes on the wire, as the wire carries the
//! dtype: a sum over a 16-chip axis is rounded about eight times. i32 sums wrap. The order is the
//! same on every run and host: results are deterministic, bit for bit.
//!
//! # Errors
//!
//! Bad specs (axes out of range or repeated, indivisible sizes, unsupported dtypes, buffers above
//! 2 GiB) are [`KernelError`]s; bad buffer lists (incomplete groups, overlapping input and
//! output, unequal output offsets) are [`CollectiveError::Buffers`]; a kernel that cannot
//! complete — say chips launched with mismatched arguments — ends with the device's deadlock
//! report (`DeviceError::Deadlock`), never a hang.

mod a2a;
mod emit;
mod launch;
pub mod plan;
mod planner;
mod ring;
mod rounds;
mod shares;
mod sum;

use tpuemu_isa::{Program, Topology};

pub use launch::{BufferSlice, ChipBuffers, CollectiveError, run};

use super::KernelError;
use crate::codegen::Emitter;
use crate::dtype::DType;
use emit::ArgMap;
use plan::{Plan, Stage};

/// One part of a collective's data (see [`Collective::parts`]).
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize)]
pub struct PartInfo {
    /// First element of the part in every shard.
    pub first: u64,
    /// Elements of the part in every shard.
    pub elements: u64,
    /// Mesh axes it reduces over, in order (all-gather: in reverse).
    pub axes: Vec<usize>,
}

/// Which collective.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum CollectiveOp {
    /// Every chip ends with every chip's shard, in rank order.
    AllGather,
    /// Every chip ends with its block of the sum.
    ReduceScatter,
    /// Every chip ends with the sum.
    AllReduce,
    /// Every chip sends block `j` to rank `j`.
    AllToAll,
}

impl CollectiveOp {
    /// Every op.
    pub const ALL: [CollectiveOp; 4] = [
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllReduce,
        CollectiveOp::AllToAll,
    ];

    /// `all-gather`, `reduce-scatter`, `all-reduce`, `all-to-all`.
    pub const fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllGather => "all-gather",
            CollectiveOp::ReduceScatter => "reduce-scatter",
            CollectiveOp::AllReduce => "all-reduce",
            CollectiveOp::AllToAll => "all-to-all",
        }
    }

    /// The op named `name` (as [`CollectiveOp::name`] spells it).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }

    /// PyTorch's functional collective.
    pub const fn source_op(self) -> &'static str {
        match self {
            CollectiveOp::AllGather => "_c10d_functional::all_gather_into_tensor",
            CollectiveOp::ReduceScatter => "_c10d_functional::reduce_scatter_tensor",
            CollectiveOp::AllReduce => "_c10d_functional::all_reduce",
            CollectiveOp::AllToAll => "_c10d_functional::all_to_all_single",
        }
    }

    /// Whether it sums.
    pub const fn reduces(self) -> bool {
        matches!(self, CollectiveOp::ReduceScatter | CollectiveOp::AllReduce)
    }
}

/// Which ring to run on each axis.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize,
)]
pub enum RingChoice {
    /// Bidirectional where the axis wraps, unidirectional where it does not.
    #[default]
    Auto,
    /// One chain the `+` way on every axis.
    Unidirectional,
    /// Two chains on every axis of more than two chips (on a non-wrapping axis the closing hop
    /// goes the long way round).
    Bidirectional,
}

/// What to generate. The mesh (sizes, wraparound) comes from the [`Topology`].
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct CollectiveSpec {
    /// The collective.
    pub op: CollectiveOp,
    /// Element type (sums: f32, bf16, f16, i32; moves: any).
    pub dtype: DType,
    /// Elements of the whole array (see the module docs for each op's layout).
    pub elements: u64,
    /// Mesh axes, first outermost in rank order.
    pub axes: Vec<usize>,
    /// Ring per axis.
    pub ring: RingChoice,
    /// Bytes per pipelined chunk (rounded down to 1024 elements); `None` for the default.
    pub chunk_bytes: Option<u32>,
}

impl CollectiveSpec {
    /// A spec with the default ring choice and chunking.
    pub fn new(op: CollectiveOp, dtype: DType, elements: u64, axes: &[usize]) -> Self {
        CollectiveSpec {
            op,
            dtype,
            elements,
            axes: axes.to_vec(),
            ring: RingChoice::Auto,
            chunk_bytes: None,
        }
    }
}

/// Most instructions a generated collective may have (beyond that, use larger chunks).
const MAX_INSTRS: usize = 4_000_000;

/// A generated collective: the program and what launching it needs.
#[derive(Clone, Debug)]
pub struct Collective {
    spec: CollectiveSpec,
    plan: Plan,
    program: Program,
}

impl Collective {
    /// Plans and generates the program for `spec` on `topo`.
    pub fn new(spec: &CollectiveSpec, topo: &Topology) -> Result<Self, KernelError> {
        let plan = planner::plan(spec, topo)?;
        let axes: Vec<String> = spec.axes.iter().map(|a| a.to_string()).collect();
        let name = format!(
            "{}_{}_axes{}",
            spec.op.name().replace('-', "_"),
            spec.dtype.name(),
            axes.join("_")
        );
        let mut e = Emitter::new(name);
        e.b.source_op(spec.op.source_op());
        let a2a = spec.op == CollectiveOp::AllToAll;
        let args = ArgMap::declare(&mut e, &plan, a2a);
        emit::prologue(&mut e, &args);
        for st in &plan.stages {
            match st {
                Stage::Rings(rounds) => {
                    e.b.mark_begin(&format!("{} in {} parts", spec.op.name(), plan.parts.len()));
                    ring::emit_rounds(&mut e, &args, &plan, rounds, spec.dtype);
                }
                Stage::AllToAll(a) => {
                    e.b.mark_begin("all-to-all");
                    a2a::emit_all_to_all(&mut e, &args, a);
                }
                Stage::Copy { bytes } => {
                    e.b.mark_begin("copy");
                    a2a::emit_copy(&mut e, &args, *bytes);
                }
            }
            e.b.mark_end();
            if e.b.pc() as usize > MAX_INSTRS {
                return Err(KernelError::TooLarge(format!(
                    "{}: more than {MAX_INSTRS} instructions; use larger chunks",
                    spec.op.name()
                )));
            }
        }
        e.halt();
        let program = e.finish()?;
        Ok(Collective {
            spec: spec.clone(),
            plan,
            program,
        })
    }

    /// The spec.
    pub fn spec(&self) -> &CollectiveSpec {
        &self.spec
    }

    /// The SPMD program (load it once, launch it on every chip of the groups).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Chips per group.
    pub fn group_size(&self) -> u32 {
        self.plan.group
    }

    /// Input bytes per chip.
    pub fn input_bytes(&self) -> u64 {
        self.plan.in_bytes
    }

    /// Output bytes per chip.
    pub fn output_bytes(&self) -> u64 {
        self.plan.out_bytes
    }

    /// Scratch bytes per chip (received partials of reduce-scatter stages, intermediate
    /// results); zero for all-gather and all-to-all.
    pub fn scratch_bytes(&self) -> u64 {
        self.plan.scratch_bytes
    }

    /// Bytes per pipelined chunk of each ring round, part by part, each part's rounds in the
    /// order they run.
    pub fn chunk_bytes(&self) -> Vec<u64> {
        self.rounds()
            .iter()
            .map(|r| r.chunk_elems * self.plan.esz)
            .collect()
    }

    /// How the data is split: per part, its elements of every shard and the mesh axes it
    /// reduces over in order (and gathers over in reverse). One part per ICI axis of the spec
    /// (at most three), each starting on a different axis, so that every axis's links are busy
    /// at once.
    pub fn parts(&self) -> Vec<PartInfo> {
        self.plan
            .parts
            .iter()
            .map(|p| PartInfo {
                first: p.c0,
                elements: p.s,
                axes: p.order.iter().map(|&i| self.plan.axes[i].axis).collect(),
            })
            .collect()
    }

    fn rounds(&self) -> &[plan::RingStage] {
        self.plan
            .stages
            .iter()
            .find_map(|s| match s {
                Stage::Rings(r) => Some(r.as_slice()),
                _ => None,
            })
            .unwrap_or(&[])
    }

    /// Whether the ring over each of the spec's axes is bidirectional.
    pub fn bidirectional(&self) -> Vec<bool> {
        self.plan.axes.iter().map(|a| a.bidir).collect()
    }
}

/// Generates the program of `spec` on `topo` (see [`Collective::new`] for everything else a
/// launch needs).
pub fn build(spec: &CollectiveSpec, topo: &Topology) -> Result<Program, KernelError> {
    Ok(Collective::new(spec, topo)?.program)
}
