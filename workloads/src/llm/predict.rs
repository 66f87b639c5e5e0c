//! The prediction of a training step on a slice: one chip's step simulated on a meta runtime
//! (one chip stands for its symmetric peers), every distinct collective timed on the slice,
//! and the two placed on one chip's timeline with collectives overlapped where the schedule
//! allows.
//!
//! ## The schedule
//!
//! The chip has a compute stream (the kernels, in program order, each segment as long as the
//! meta runtime measured it) and one collective stream (first in, first out). A collective
//! the next kernel needs ([`When::Now`]: tensor-parallel activations) starts when both streams
//! are free and the compute waits for it. FSDP's parameter gathers ([`When::Prefetch`]) are
//! issued one layer ahead: a gather may start once the previous gather's layer has started
//! computing, and the compute waits only for what is left. Gradient reductions
//! ([`When::Background`]) start when issued and nothing waits for them until the optimizer
//! ([`Event::WaitAll`]). A tensor-parallel all-reduce of a matrix product's output
//! ([`When::Overlapped`]) runs as a collective matmul: it may start once the first of the
//! product's `tp` chunks is computed, ends no earlier than one chunk's share after the
//! product, and the compute after it waits for its end. The product is taken to be the whole
//! compute segment before the collective (the segment's other work, a norm or a copy before
//! the product, is counted as part of it: an approximation). Without
//! overlap every collective runs in place, as the full simulation
//! ([`super::comm::PeerComm`]) runs them.

use tpuemu_backend::error::Result;
use tpuemu_backend::runtime::Runtime;
use tpuemu_isa::ChipInfo;
use tpuemu_isa::trace::{Span, Trace, TraceEvent, TraceMeta, Track};

use super::comm::{CommTimer, SoloComm};
use super::ctx::{Counted, Ctx, Event, When};
use super::spec::{Remat, StepSpec};
use super::step::{self, StepFacts};

/// An event placed on the timeline.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Slot {
    /// Compute (`false`) or collective (`true`).
    pub comm: bool,
    /// What.
    pub label: String,
    /// Start, ns.
    pub start_ns: f64,
    /// End, ns.
    pub end_ns: f64,
}

/// The timeline of one chip's step.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Timeline {
    /// Step time, ns.
    pub step_ns: f64,
    /// Time the compute waited for collectives, ns.
    pub exposed_comm_ns: f64,
    /// Sum of the collectives' times, ns.
    pub comm_ns: f64,
    /// Sum of the compute segments' times, ns.
    pub compute_ns: f64,
    /// The events in place (compute segments repeated `n` times are one slot of `n` times
    /// the length).
    pub slots: Vec<Slot>,
}

/// Places `events` (with `comm_ns[i]` the time of event `i` if it is a collective).
pub fn schedule(events: &[Counted], comm_ns: &[f64], overlap: bool) -> Timeline {
    let (mut tc, mut tm, mut last_use) = (0.0f64, 0.0f64, 0.0f64);
    // The last compute segment: start and length.
    let mut last_seg = (0.0f64, 0.0f64);
    let mut t = Timeline::default();
    for (e, d) in events.iter().zip(comm_ns) {
        match &e.event {
            Event::Compute { label, ns, .. } => {
                let len = ns * e.times as f64;
                last_seg = (tc, len);
                t.slots.push(Slot {
                    comm: false,
                    label: label.clone(),
                    start_ns: tc,
                    end_ns: tc + len,
                });
                tc += len;
                t.compute_ns += len;
            }
            Event::Comm { coll, .. } => {
                let d = d * e.times as f64;
                t.comm_ns += d;
                let when = if overlap { coll.when } else { When::Now };
                let start = match when {
                    When::Now | When::Background => tc.max(tm),
                    When::Prefetch => tm.max(last_use),
                    When::Overlapped { chunks } => {
                        let first = last_seg.0 + last_seg.1 / chunks.max(1) as f64;
                        tm.max(first)
                    }
                };
                // A collective matmul still sends its last chunk after the product ends.
                let end = match when {
                    When::Overlapped { chunks } => {
                        let last = last_seg.0 + last_seg.1 + d / chunks.max(1) as f64;
                        (start + d).max(last)
                    }
                    _ => start + d,
                };
                tm = end;
                if when != When::Background {
                    t.exposed_comm_ns += (end - tc).max(0.0);
                    tc = tc.max(end);
                }
                if when == When::Prefetch {
                    last_use = tc;
                }
                t.slots.push(Slot {
                    comm: true,
                    label: format!("{} {}", coll.kind.name(), coll.label),
                    start_ns: start,
                    end_ns: end,
                });
            }
            Event::WaitAll => {
                t.exposed_comm_ns += (tm - tc).max(0.0);
                tc = tc.max(tm);
            }
        }
    }
    t.step_ns = tc.max(tm);
    t
}

/// Per-chip HBM footprint, bytes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Footprint {
    /// f32 master parameters, Adam's two moments, the bf16 gradient shard and the bf16
    /// parameter copy the gathers send: 16 bytes per parameter on the chip.
    pub state: u64,
    /// Gathered bf16 parameters in flight (the layer in use and the one prefetched) and the
    /// unsharded gradient of the layer being reduced.
    pub gathered: u64,
    /// Activations kept for the backward, every layer.
    pub activations: u64,
    /// The largest temporaries (MLP gradients of a layer, a loss chunk's logits).
    pub transient: u64,
    /// The sum.
    pub total: u64,
    /// The chip's HBM.
    pub capacity: u64,
}

/// Everything predicted.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Prediction {
    /// What was predicted.
    pub spec: StepSpec,
    /// Slice generation.
    pub generation: String,
    /// Chips.
    pub chips: usize,
    /// Step time, s.
    pub step_s: f64,
    /// Tokens per second per chip.
    pub tokens_per_s_per_chip: f64,
    /// Model FLOPs of the step (all chips), causal attention counted in full (PaLM's
    /// convention, [`super::ModelConfig::model_flops`]).
    pub model_flops: f64,
    /// Model FLOPs utilisation over the slice's peak, causal attention counted in full.
    pub mfu: f64,
    /// Model FLOPs of the step with causal attention halved (MaxText's convention, the work
    /// the kernels do: [`super::ModelConfig::model_flops_causal`]).
    pub model_flops_causal: f64,
    /// Model FLOPs utilisation with causal attention halved.
    pub mfu_causal: f64,
    /// Matrix-unit FLOPs the chip's kernels did (rematerialisation included).
    pub mxu_flops_per_chip: f64,
    /// Breakdown of the step, s: matrix units busy (FLOPs at peak rate).
    pub mxu_busy_s: f64,
    /// Kernel time beyond the matrix units' (HBM-bound and vector work).
    pub hbm_vector_s: f64,
    /// Compute waiting for collectives.
    pub exposed_comm_s: f64,
    /// The rest (host dispatch and launch gaps, the tail of the last collectives).
    pub idle_s: f64,
    /// All collectives' time (overlapped or not).
    pub comm_s: f64,
    /// Distinct collectives timed on the slice.
    pub collectives_timed: usize,
    /// HBM per chip.
    pub hbm: Footprint,
    /// Whether it fits.
    pub fits: bool,
    /// What to change when it does not fit.
    pub suggestion: Option<String>,
    /// The shortcuts taken.
    pub shortcuts: Vec<String>,
    /// The schedule.
    pub overlap: bool,
    /// One chip's timeline.
    #[serde(skip)]
    pub timeline: Timeline,
}

/// Simulates one chip's step on `rt` (a meta runtime of one chip) standing for every chip of
/// a mesh of `mesh_shape`: the events, and the facts the footprint needs.
pub fn simulate_chip(
    spec: &StepSpec,
    rt: Runtime,
    mesh_shape: Vec<usize>,
    shortcut: bool,
) -> Result<(Vec<Counted>, StepFacts)> {
    let mut solo = SoloComm { mesh_shape };
    let mut ctx = Ctx::new(rt, &mut solo, shortcut)?;
    let facts = step::run(&mut ctx, spec)?;
    Ok((ctx.events, facts))
}

/// Times every collective event on the slice.
pub fn time_collectives(events: &[Counted], timer: &mut CommTimer) -> Result<Vec<f64>> {
    events
        .iter()
        .map(|e| match &e.event {
            Event::Comm {
                coll, bytes, ns, ..
            } => match ns {
                Some(ns) => Ok(*ns),
                None => timer.time(coll.kind, &coll.dims, *bytes, tpuemu_backend::DType::BF16),
            },
            _ => Ok(0.0),
        })
        .collect()
}

fn footprint(spec: &StepSpec, facts: &StepFacts, capacity: u64) -> Footprint {
    let m = &spec.model;
    let p = &spec.par;
    let state = 16 * spec.local_params().ceil() as u64;
    let gathered = spec.gathered_bytes();
    // What the backward holds besides the kept activations: a layer's recomputed forward
    // (full) or MLP (mlp).
    let activations = m.layers as u64 * facts.saved_per_layer
        + match spec.remat {
            Remat::Full => facts.layer_working,
            Remat::Mlp => facts.mlp_working,
            Remat::None | Remat::Attention => 0,
        };
    // A micro-batch's MLP products at a time (`StepSpec::micro_batches`).
    let n = (spec.local_tokens() / spec.micro_batches()) as u64;
    let mlp = 4 * n * (m.ffn / p.tp) as u64 * 2;
    let chunk = spec.loss_chunk.min(spec.local_tokens()) as u64;
    let logits = 3 * chunk * (m.vocab / p.tp) as u64 * 4;
    let transient = mlp.max(logits);
    let total = state + gathered + activations + transient;
    Footprint {
        state,
        gathered,
        activations,
        transient,
        total,
        capacity,
    }
}

fn suggestion(spec: &StepSpec, hbm: &Footprint) -> Option<String> {
    if hbm.total <= hbm.capacity {
        return None;
    }
    // In the unit the vendor states the chip's HBM in (v5e: 16 GB, v4: 32 GiB).
    let u = tpuemu_isa::units::ByteUnit::of(hbm.capacity);
    let gib = |b: u64| u.of_bytes(b);
    let n = u.name;
    let mut s = format!(
        "needs {:.1} {n} of {:.1} {n} per chip: ",
        gib(hbm.total),
        gib(hbm.capacity)
    );
    let fixed = hbm.state + hbm.gathered;
    if fixed > hbm.capacity {
        s += &format!(
            "parameters and optimizer state alone take {:.1} {n}; shard them over more chips (a larger slice, or fsdp over more of it instead of dp)",
            gib(fixed)
        );
    } else if spec.remat != Remat::Full {
        s += "activations take ";
        s += &format!(
            "{:.1} {n}; try --remat full, or a smaller --batch-per-chip or --seq",
            gib(hbm.activations)
        );
    } else {
        s += &format!(
            "activations take {:.1} {n} even with --remat full; lower --batch-per-chip or --seq, or add tensor parallelism (--tp)",
            gib(hbm.activations)
        );
    }
    Some(s)
}

/// Predicts the step of `spec`: `rt` is a meta runtime on a one-chip device standing for the
/// slice's chips, `timer` times collectives on the slice, `chip` is the slice's chip (peak,
/// HBM). `overlap` selects the schedule; `shortcut` the repetition of identical layers and
/// attention chunks.
pub fn predict(
    spec: &StepSpec,
    rt: Runtime,
    timer: &mut CommTimer,
    chip: &ChipInfo,
    generation: &str,
    overlap: bool,
    shortcut: bool,
) -> Result<Prediction> {
    let shape: Vec<usize> = spec.mesh_dims().iter().map(|(_, s)| *s).collect();
    let (events, facts) = simulate_chip(spec, rt, shape, shortcut)?;
    let comm = time_collectives(&events, timer)?;
    let tl = schedule(&events, &comm, overlap);
    let (mut busy, mut flops) = (0.0, 0.0);
    for e in &events {
        if let Event::Compute {
            busy_ns, mxu_flops, ..
        } = &e.event
        {
            busy += busy_ns * e.times as f64;
            flops += *mxu_flops as f64 * e.times as f64;
        }
    }
    let step_s = tl.step_ns * 1e-9;
    let mxu_busy_s = flops / chip.peak_bf16_flops;
    let hbm_vector_s = (busy * 1e-9 - mxu_busy_s).max(0.0);
    let exposed_comm_s = tl.exposed_comm_ns * 1e-9;
    let chips = spec.chips();
    let model_flops = spec
        .model
        .model_flops(spec.global_tokens(), spec.seq as u64);
    let model_flops_causal = spec
        .model
        .model_flops_causal(spec.global_tokens(), spec.seq as u64);
    let peak_flops = chips as f64 * chip.peak_bf16_flops * step_s;
    let hbm = footprint(spec, &facts, chip.hbm_bytes);
    let mut shortcuts = vec![format!(
        "one chip stands for its {} symmetric peers: its kernels are simulated once, each distinct collective is run once ({} of {} on one chip standing for all: rings that close in one hop; the others on every chip of the slice)",
        chips - 1,
        timer.runs_on_one_chip(),
        timer.runs()
    )];
    if shortcut {
        shortcuts.push(format!(
            "identical work simulated once and repeated: {} layers, {} attention (sequence, key/value head) pairs per layer (a chunk each, or two to a chunk on a two-core chip), {} loss chunks, {} experts per chip",
            spec.model.layers,
            spec.local_batch() * spec.model.kv_heads / spec.par.tp,
            spec.local_tokens() / spec.loss_chunk.min(spec.local_tokens()),
            spec.local_experts()
        ));
    }
    if spec.model.experts > 1 {
        shortcuts.push("mixture of experts: balanced routing assumed (every expert gets tokens x top_k / experts)".into());
    }
    Ok(Prediction {
        generation: generation.into(),
        chips,
        step_s,
        tokens_per_s_per_chip: spec.global_tokens() as f64 / chips as f64 / step_s,
        model_flops,
        mfu: model_flops / peak_flops,
        model_flops_causal,
        mfu_causal: model_flops_causal / peak_flops,
        mxu_flops_per_chip: flops,
        mxu_busy_s,
        hbm_vector_s,
        exposed_comm_s,
        idle_s: (step_s - mxu_busy_s - hbm_vector_s - exposed_comm_s).max(0.0),
        comm_s: tl.comm_ns * 1e-9,
        collectives_timed: timer.runs(),
        fits: hbm.total <= hbm.capacity,
        suggestion: suggestion(spec, &hbm),
        hbm,
        shortcuts,
        overlap,
        timeline: tl,
        spec: spec.clone(),
    })
}

impl Prediction {
    /// One chip's step as a trace (compute segments on the chip's kernel track, collectives
    /// on a link track).
    pub fn trace(&self, chip: &ChipInfo) -> Trace {
        let events = self
            .timeline
            .slots
            .iter()
            .map(|s| {
                let track = if s.comm {
                    Track::Link {
                        chip: 0,
                        link: "collectives".into(),
                    }
                } else {
                    Track::Kernel { chip: 0, core: 0 }
                };
                TraceEvent::Span(Span::new(track, s.label.clone(), s.start_ns, s.end_ns))
            })
            .collect();
        Trace {
            meta: TraceMeta {
                label: format!("predict {} on {}", self.spec.model.name, self.generation),
                generation: self.generation.clone(),
                clock_hz: chip.core.clock_hz,
                peak_bf16_flops: chip.peak_bf16_flops,
                hbm_bytes_per_s: chip.hbm_bytes_per_s,
                chips: self.chips as u32,
                ..Default::default()
            },
            events,
        }
    }
}
