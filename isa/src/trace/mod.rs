//! The trace schema: what devices and the backend record, and what the visualizer draws.
//!
//! A trace is a list of [`TraceEvent`]s:
//! - [`Span`]: something busy on a [`Track`] from `start_ns` to `end_ns` (device spans also
//!   carry cycles), with the host operator (`op_id`) and fusion group (`group_id`) it belongs to;
//! - [`Flow`]: an arrow from a host operator to the device kernel it launched;
//! - [`Counter`]: a sampled value such as HBM bytes in use.
//!
//! On disk a trace is Chrome trace event JSON (see [`chrome`]), so the same file opens in
//! chrome://tracing, Perfetto and `tpuemu viz`.
//!
//! ## Conventions
//! Producers put these keys in [`Span::args`] so that viewers can compute statistics:
//!
//! | track | name | args |
//! |---|---|---|
//! | `Host { lane: "python" }` | a Python-level call, `torch.nn.Linear.forward` | none needed: the operators inside it in time are its calls |
//! | `Host { lane: "aten" }` | the overload, `aten::mm` | `shapes` (array of shape arrays), `dtypes`, `mode` |
//! | `Host { lane: "queue" }` | `flush` or `fused group N` | flush: `reason`, `ops`; group: `ops` (names), `op_ids`, `kernels` |
//! | `Host { lane: "dispatch" }` | `launch <program>` | `program` |
//! | `Kernel` | program name | `flops`, `hbm_bytes`, `program`, `source_op` |
//! | `Unit { unit: Mxu(_) }` | `mxu.mm` etc. | `flops` |
//! | `Dma` | `dma hbm->vmem` etc. | `bytes` |
//! | `Link` | `rdma` | `bytes`, `to_chip` |
//! | `Link { link: "collective" }` | a collective as one rank saw it, `all_reduce 64.0 MiB axes [1, 0]` | `kind` (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`, `broadcast`, `send`, `recv`, `barrier`, ...), `bytes`, `group` (the group's global ranks), `seq` (the group's collective counter: the same on every member for one call; absent for send/recv), `to` (send) / `from` (recv), `axes`, `slice`, `timed_as`, `ready_ns` (when this rank arrived); `op_id` is the host operator |
//!
//! `op_id` ties device spans to the host operator that caused them; `group_id` to the fused
//! group, whose member operators are the `op_ids` (and `ops`, their names) of the queue's
//! `fused group N` span. Flows go from a host span's end to the kernel span's start. Counters:
//! `hbm_bytes_in_use` per chip, written by the device at every allocation and free. Link spans'
//! `bytes` over their duration is the link's traffic. Viewers draw any host lane (`python`
//! above `aten`) and any counter, so producers may add lanes and counters without a schema
//! change.
//!
//! A distributed run writes one trace per rank (`meta.rank`, `meta.world_size`,
//! `meta.slice`), each of one chip. [`Trace::merge_ranks`] joins them: rank `N`'s device
//! tracks move to chip `N`, its host lanes become `rank{N}/{lane}` (`rank2/aten`; viewers
//! read the part after the slash as the lane and show the lane with chip `N`), its host
//! counters `rank{N}/{name}`; ids are made unique, and `collective` flows join each
//! collective's spans across ranks ([`merge`]).

pub mod chrome;
mod chrome_read;
pub mod merge;

pub use merge::{COLLECTIVE_LINK, MergeError, rank_lane, split_rank_lane};

use std::collections::BTreeMap;

use crate::instr::Unit;

/// Where a span is drawn: one lane of the timeline. Spans on one track never overlap unless
/// they nest.
#[derive(
    Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Track {
    /// A host-side lane: `aten` (operator calls), `queue` (flushes and fused groups), `dispatch`.
    Host {
        /// Lane name.
        lane: String,
    },
    /// Kernels running on a core (one span per launch).
    Kernel {
        /// Chip.
        chip: u32,
        /// Core.
        core: u32,
    },
    /// Profiling regions opened by `mark.begin` on a core (nested spans).
    Marker {
        /// Chip.
        chip: u32,
        /// Core.
        core: u32,
    },
    /// One unit of a core (scalar, vector ALU, loads, stores, cross-lane, EUP, an MXU, DMA
    /// issue, sync).
    Unit {
        /// Chip.
        chip: u32,
        /// Core.
        core: u32,
        /// The unit.
        unit: Unit,
    },
    /// A DMA engine of a chip.
    Dma {
        /// Chip.
        chip: u32,
        /// Engine index.
        engine: u32,
    },
    /// An outgoing ICI link of a chip, named by axis and direction (`x+`, `y-`, ...).
    Link {
        /// Chip.
        chip: u32,
        /// Link name.
        link: String,
    },
}

impl Track {
    /// The chip the track belongs to, or `None` for host tracks.
    pub fn chip(&self) -> Option<u32> {
        match self {
            Track::Host { .. } => None,
            Track::Kernel { chip, .. }
            | Track::Marker { chip, .. }
            | Track::Unit { chip, .. }
            | Track::Dma { chip, .. }
            | Track::Link { chip, .. } => Some(*chip),
        }
    }

    /// A short lane label (`core0 mxu1`, `dma2`, `link x+`, `aten`).
    pub fn label(&self) -> String {
        match self {
            Track::Host { lane } => lane.clone(),
            Track::Kernel { core, .. } => format!("core{core} kernels"),
            Track::Marker { core, .. } => format!("core{core} regions"),
            Track::Unit { core, unit, .. } => format!("core{core} {unit}"),
            Track::Dma { engine, .. } => format!("dma{engine}"),
            Track::Link { link, .. } => format!("link {link}"),
        }
    }
}

/// A value attached to an event (shapes, bytes, FLOPs, reasons).
pub type Args = BTreeMap<String, serde_json::Value>;

/// Something busy on a track for a while.
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Span {
    /// Lane.
    pub track: Track,
    /// Label (instruction mnemonic, kernel name, operator name, ...).
    pub name: String,
    /// Start, ns.
    pub start_ns: f64,
    /// End, ns (at least `start_ns`).
    pub end_ns: f64,
    /// Start and end in the chip's cycles, for device spans.
    pub cycles: Option<(u64, u64)>,
    /// Host operator this belongs to.
    pub op_id: Option<u64>,
    /// Fusion group this belongs to.
    pub group_id: Option<u64>,
    /// Anything else (bytes, flops, shapes, reason).
    pub args: Args,
}

impl Span {
    /// A span with no ids and no args.
    pub fn new(track: Track, name: impl Into<String>, start_ns: f64, end_ns: f64) -> Self {
        Span {
            track,
            name: name.into(),
            start_ns,
            end_ns,
            cycles: None,
            op_id: None,
            group_id: None,
            args: Args::new(),
        }
    }

    /// Duration in ns.
    pub fn duration_ns(&self) -> f64 {
        self.end_ns - self.start_ns
    }
}

/// An arrow from one point of the timeline to another (host operator to device kernel).
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Flow {
    /// Identifier, unique within a trace.
    pub id: u64,
    /// Label.
    pub name: String,
    /// Source lane.
    pub from: Track,
    /// Source time, ns.
    pub from_ns: f64,
    /// Destination lane.
    pub to: Track,
    /// Destination time, ns.
    pub to_ns: f64,
}

/// A sampled value.
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Counter {
    /// Chip, or `None` for host counters.
    pub chip: Option<u32>,
    /// Counter name (`hbm_bytes_in_use`).
    pub name: String,
    /// Time, ns.
    pub ns: f64,
    /// Value.
    pub value: f64,
}

/// One trace event.
#[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceEvent {
    /// A busy span.
    Span(Span),
    /// A flow arrow.
    Flow(Flow),
    /// A counter sample.
    Counter(Counter),
}

/// Facts about the run that produced a trace.
#[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TraceMeta {
    /// What the run was (`strict`, `demo defer`, a program name).
    pub label: String,
    /// Chip generation.
    pub generation: String,
    /// Clock of the chips in Hz.
    pub clock_hz: f64,
    /// Peak bf16 FLOP/s per chip (for MFU).
    pub peak_bf16_flops: f64,
    /// HBM bytes per second per chip.
    pub hbm_bytes_per_s: f64,
    /// Number of chips.
    pub chips: u32,
    /// The rank that wrote it, when one process of a distributed job emulated one chip of a
    /// slice (`tpuemu.distributed`): a run's rank traces merge into one timeline
    /// ([`Trace::merge_ranks`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The job's number of ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// The slice the ranks formed (`v5e:2x2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<String>,
}

/// A whole trace.
#[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Trace {
    /// About the run.
    pub meta: TraceMeta,
    /// The events.
    pub events: Vec<TraceEvent>,
}

impl Trace {
    /// The spans.
    pub fn spans(&self) -> impl Iterator<Item = &Span> {
        self.events.iter().filter_map(|e| match e {
            TraceEvent::Span(s) => Some(s),
            _ => None,
        })
    }

    /// The flows.
    pub fn flows(&self) -> impl Iterator<Item = &Flow> {
        self.events.iter().filter_map(|e| match e {
            TraceEvent::Flow(f) => Some(f),
            _ => None,
        })
    }

    /// The counters.
    pub fn counters(&self) -> impl Iterator<Item = &Counter> {
        self.events.iter().filter_map(|e| match e {
            TraceEvent::Counter(c) => Some(c),
            _ => None,
        })
    }
}
