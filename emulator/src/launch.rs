//! Running one launch: one program on one or more cores, possibly on many chips.
//!
//! The cores are advanced in simulated-time order, so results never depend on the host: the
//! core whose next event is earliest (ties: lowest index) runs until it passes the next
//! core's time, blocks or ends. A blocked core's next event is the cycle its semaphore wait
//! could complete or its barrier opens; it resumes only when that is the earliest event of
//! all, which guarantees no other core can still signal it earlier (every cross-core effect
//! takes at least one cycle). When every unfinished core is blocked with nothing scheduled to
//! wake it, the launch deadlocks and the report says where each core stands.

//!
//! A launch can also be *folded* onto one chip ([`crate::fold`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tpuemu_isa::trace::{Span, Track};
use tpuemu_isa::{DeadlockReport, Instr, Program};

use crate::core::dma::deliver;
use crate::core::timing::Inflight;
use crate::core::{ArgVal, ChipShared, Core, Env, Outgoing, Placement, Status};
use crate::fault::FaultKind;
use crate::ici::Ici;
use crate::limits::{Budget, RunLimits};
use crate::preset::ChipPreset;
use crate::recorder::Recorder;
use crate::stats::LaunchStats;

mod lists;
mod peers;
mod report;
use lists::{Lookup, Queue, refill};
pub(crate) use peers::{Peers, peer_index};
use report::{collect_stats, deadlock_report};

/// One chip's state during a run: shared HBM and its cores.
pub(crate) struct ChipState {
    pub shared: ChipShared,
    pub cores: Vec<Core>,
}

/// One instance of the launch.
pub(crate) struct Target {
    pub chip: u32,
    pub core: u32,
    pub args: Vec<ArgVal>,
}

/// How a launch ended.
pub(crate) enum Ending {
    Ok,
    Fault {
        target: usize,
        pc: u32,
        kind: FaultKind,
    },
    Deadlock(DeadlockReport),
    /// A folded launch sent a message over more than one hop.
    Unfoldable,
}

/// Everything a launch produced.
pub(crate) struct Outcome {
    pub ending: Ending,
    pub end_cycle: u64,
    pub stats: LaunchStats,
    /// Spans in cycles-converted ns (filled when profiling).
    pub spans: Vec<Span>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    Blocked,
    Done,
}

/// Runs `program` on `targets` starting at cycle `start`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    chips: &mut [ChipState],
    ici: &mut Ici,
    preset: &ChipPreset,
    mesh: &[u32],
    program: &Program,
    targets: &[Target],
    start: u64,
    functional: bool,
    profiling: bool,
    limits: &RunLimits,
    scratch: &mut Scratch,
) -> Outcome {
    let first = peer_index(targets, chips.len(), program);
    let io = Io {
        program,
        preset,
        mesh,
        peers: Peers {
            targets,
            first: &first,
        },
        functional,
        profiling,
        limits,
        fold: None,
    };
    simulate(chips, ici, &io, targets, start, scratch)
}

/// What a simulation reads.
pub(crate) struct Io<'a> {
    pub program: &'a Program,
    pub preset: &'a ChipPreset,
    pub mesh: &'a [u32],
    pub peers: Peers<'a>,
    pub functional: bool,
    pub profiling: bool,
    /// The run limits (see [`crate::limits`]).
    pub limits: &'a RunLimits,
    /// Folded onto this chip (see [`crate::fold`]).
    pub fold: Option<u32>,
}

/// The launcher's working lists, kept from launch to launch so that a small launch allocates
/// none of them (each is cleared and refilled; only its capacity carries over).
#[derive(Default)]
pub(crate) struct Scratch {
    places: Vec<Placement>,
    phase: Vec<Phase>,
    next: Vec<u64>,
    dirty: Vec<bool>,
    dirty_list: Vec<usize>,
    out: Vec<Outgoing>,
    touched: Vec<usize>,
    lookup: Vec<u32>,
    heap: BinaryHeap<Reverse<(u64, usize, u64)>>,
    version: Vec<u64>,
    recs: Vec<Recorder>,
}

/// The event loop over `targets`.
pub(crate) fn simulate(
    chips: &mut [ChipState],
    ici: &mut Ici,
    io: &Io,
    targets: &[Target],
    start: u64,
    scratch: &mut Scratch,
) -> Outcome {
    let Io {
        program,
        preset,
        mesh,
        peers,
        functional,
        profiling,
        limits,
        fold,
    } = *io;
    let n = targets.len();
    let budget = limits.budget(start);
    let mut recs = std::mem::take(&mut scratch.recs);
    recs.clear();
    recs.extend(
        targets
            .iter()
            .map(|t| Recorder::new(profiling, t.chip, t.core, program)),
    );
    for t in targets {
        let core = &mut chips[t.chip as usize].cores[t.core as usize];
        core.reset_for_launch(preset, start);
        setup_smem(core, program, &t.args);
    }
    let Scratch {
        places,
        phase,
        next,
        dirty,
        dirty_list,
        out,
        touched,
        lookup,
        heap,
        version,
        recs: recs_slot,
    } = scratch;
    places.clear();
    places.extend(
        targets
            .iter()
            .map(|t| placement(t, ici, mesh, chips.len(), preset)),
    );
    let cross = (preset.costs.sem_latency as u64)
        .min(ici.hop_cycles())
        .max(1);
    refill(phase, n, Phase::Running);
    out.clear();
    touched.clear();
    // What deliveries did: link occupancy (kept only when profiling) and the cores they touched.
    let mut effects = Effects {
        link_spans: profiling.then(Vec::new),
        touched: std::mem::take(touched),
    };
    let mut ending = Ending::Ok;
    let run_ahead = !program.instrs.iter().any(writes_remote_local_memory);
    // A barrier's release depends on every core, so with barriers every core's next event is
    // recomputed each turn; without, only the cores whose state changed.
    let barriers = program.instrs.iter().any(|i| matches!(i, Instr::Barrier));
    refill(next, n, u64::MAX);
    // The cores whose next event must be recomputed (a list, so a turn costs what changed).
    refill(dirty, n, true);
    dirty_list.clear();
    dirty_list.extend(0..n);
    let lookup = Lookup::new(lookup, targets, chips.len(), preset.cores_per_chip);
    let mut unfinished = n;
    let mut queue = Queue::new(heap, version, n);
    let mut ran: Option<usize> = None;
    let mut turns: u64 = 0;

    loop {
        // Next event of every unfinished core whose state changed.
        if barriers {
            dirty_list.clear();
            dirty_list.extend(0..n);
        }
        for &i in dirty_list.iter() {
            dirty[i] = false;
            let t = next_event(chips, targets, phase, i, io, &places[i], budget);
            if t != next[i] || ran == Some(i) {
                next[i] = t;
                queue.set(i, t, phase[i] == Phase::Done);
            }
        }
        dirty_list.clear();
        if unfinished == 0 {
            break;
        }
        // The earliest unfinished core (ties: lowest index) and the earliest of the others.
        let i = queue.pop().expect("an unfinished core");
        let others = queue.peek();
        ran = Some(i);
        if next[i] == u64::MAX {
            ending = Ending::Deadlock(deadlock_report(chips, targets, phase, program));
            break;
        }
        // No core sends before the earliest next event: the links may forget older bookings.
        turns += 1;
        if turns.is_multiple_of(RETIRE_EVERY) {
            ici.retire_before(next[i]);
        }
        let until = others.unwrap_or(u64::MAX);
        let horizon = others.map_or(u64::MAX, |o| o.saturating_add(cross));
        let t = &targets[i];
        if phase[i] == Phase::Blocked
            && chips[t.chip as usize].cores[t.core as usize]
                .barrier_arrival
                .is_some()
        {
            release_barrier(chips, targets, phase, next[i]);
        }
        let mut env = env_for(
            program, t, preset, &places[i], peers, functional, horizon, budget,
        );
        env.run_ahead = run_ahead;
        let status = {
            let chip = &mut chips[t.chip as usize];
            let (cores, shared) = (&mut chip.cores, &mut chip.shared);
            cores[t.core as usize].run(&env, shared, out, &mut recs[i], until)
        };
        mark_dirty(dirty, dirty_list, i);
        phase[i] = match status {
            Status::Running => Phase::Running,
            Status::Blocked => Phase::Blocked,
            Status::Done => {
                unfinished -= 1;
                Phase::Done
            }
            Status::Fault { pc, kind } => {
                ending = Ending::Fault {
                    target: i,
                    pc,
                    kind,
                };
                break;
            }
        };
        let delivered = deliver_all(
            out,
            chips,
            targets,
            &lookup,
            ici,
            preset,
            i,
            fold,
            &mut effects,
        );
        for j in effects.touched.drain(..) {
            mark_dirty(dirty, dirty_list, j);
        }
        if let Err(stop) = delivered {
            ending = match stop {
                Stop::Fault(pc, kind) => Ending::Fault {
                    target: i,
                    pc,
                    kind,
                },
                Stop::Unfoldable => Ending::Unfoldable,
            };
            break;
        }
    }

    *touched = std::mem::take(&mut effects.touched);
    let out = outcome(chips, targets, preset, start, ending, &mut recs, effects);
    *recs_slot = recs;
    out
}

/// Puts core `i` on the list of cores whose next event is recomputed (once).
fn mark_dirty(dirty: &mut [bool], dirty_list: &mut Vec<usize>, i: usize) {
    if !dirty[i] {
        dirty[i] = true;
        dirty_list.push(i);
    }
}

/// When core `i` can next do something: its front when running, its barrier's release or the
/// moment what it waits for is ready when blocked, never when done.
fn next_event(
    chips: &[ChipState],
    targets: &[Target],
    phase: &[Phase],
    i: usize,
    io: &Io,
    place: &Placement,
    budget: Budget,
) -> u64 {
    let core = &chips[targets[i].chip as usize].cores[targets[i].core as usize];
    match phase[i] {
        Phase::Done => u64::MAX,
        Phase::Running => core.t.front,
        Phase::Blocked => {
            if let Some(r) = core.barrier_release {
                r
            } else if core.barrier_arrival.is_some() {
                barrier_release(chips, targets, phase, io.preset).unwrap_or(u64::MAX)
            } else {
                let env = env_for(
                    io.program,
                    &targets[i],
                    io.preset,
                    place,
                    io.peers,
                    io.functional,
                    0,
                    budget,
                );
                core.wait_ready(&env).unwrap_or(u64::MAX)
            }
        }
    }
}

/// Releases every blocked core that has arrived at the barrier at cycle `release`.
fn release_barrier(chips: &mut [ChipState], targets: &[Target], phase: &[Phase], release: u64) {
    for (j, tj) in targets.iter().enumerate() {
        if phase[j] == Phase::Blocked {
            let c = &mut chips[tj.chip as usize].cores[tj.core as usize];
            if c.barrier_arrival.is_some() {
                c.barrier_release = Some(release);
            }
        }
    }
}

/// The launch's outcome: its last cycle, statistics, and the recorded spans (cores' and links').
fn outcome(
    chips: &[ChipState],
    targets: &[Target],
    preset: &ChipPreset,
    start: u64,
    ending: Ending,
    recs: &mut Vec<Recorder>,
    effects: Effects,
) -> Outcome {
    let stats = collect_stats(chips, targets, start);
    let end_cycle = stats.end_cycle;
    let to_ns = |c: u64| preset.cycles_to_ns(c);
    // Recorders record nothing unless profiling.
    let mut spans: Vec<Span> = if recs.first().is_some_and(Recorder::enabled) {
        recs.drain(..)
            .flat_map(|r| r.finish(to_ns, None, None))
            .collect()
    } else {
        recs.clear();
        Vec::new()
    };
    for LinkSpan {
        chip,
        link,
        start: s,
        end: e,
        bytes,
    } in effects.link_spans.unwrap_or_default()
    {
        let mut span = Span::new(Track::Link { chip, link }, "rdma", to_ns(s), to_ns(e));
        span.cycles = Some((s, e));
        span.args.insert("bytes".into(), bytes.into());
        spans.push(span);
    }
    Outcome {
        ending,
        end_cycle,
        stats,
        spans,
    }
}

#[allow(clippy::too_many_arguments)]
fn env_for<'a>(
    program: &'a Program,
    t: &'a Target,
    preset: &'a ChipPreset,
    place: &Placement,
    peers: Peers<'a>,
    functional: bool,
    horizon: u64,
    budget: Budget,
) -> Env<'a> {
    Env {
        program,
        args: &t.args,
        preset,
        place: place.clone(),
        peers,
        functional,
        horizon,
        run_ahead: false,
        budget,
    }
}

/// How many turns of the launcher pass between two prunings of the links' bookings.
const RETIRE_EVERY: u64 = 256;

/// A remote DMA into VMEM or SMEM: another core's local memory changes under it.
fn writes_remote_local_memory(i: &Instr) -> bool {
    matches!(i, Instr::Dma { dst, remote: Some(_), .. } if dst.space != tpuemu_isa::ops::Space::Hbm)
}

fn placement(
    t: &Target,
    ici: &Ici,
    mesh: &[u32],
    num_chips: usize,
    preset: &ChipPreset,
) -> Placement {
    let coords = ici.coords(t.chip);
    let mut c = [0u32; 3];
    let mut d = [1u32; 3];
    for (k, v) in coords.iter().enumerate().take(3) {
        c[k] = *v;
    }
    for (k, v) in mesh.iter().enumerate().take(3) {
        d[k] = *v;
    }
    Placement {
        chip: t.chip,
        core: t.core,
        num_chips: num_chips as u32,
        num_cores: preset.cores_per_chip,
        coords: c,
        dims: d,
    }
}

/// SMEM at launch: argument words, then the program's preloads.
fn setup_smem(core: &mut Core, program: &Program, args: &[ArgVal]) {
    core.smem.clear();
    for (i, a) in args.iter().enumerate() {
        let v = match a {
            ArgVal::Scalar(v) => *v,
            ArgVal::Buffer { size, .. } => *size as u32,
        };
        if v != 0 {
            core.smem.write_u32(4 * i, v);
        }
    }
    for init in &program.smem_init {
        for (k, w) in init.words.iter().enumerate() {
            core.smem.write_u32(init.addr as usize + 4 * k, *w);
        }
    }
}

/// When the barrier the blocked cores wait at opens, if every unfinished core has arrived.
fn barrier_release(
    chips: &[ChipState],
    targets: &[Target],
    phase: &[Phase],
    preset: &ChipPreset,
) -> Option<u64> {
    let mut latest = 0;
    for (t, p) in targets.iter().zip(phase) {
        let c = &chips[t.chip as usize].cores[t.core as usize];
        match (p, c.barrier_arrival) {
            (Phase::Blocked, Some(a)) => latest = latest.max(a),
            _ => return None,
        }
    }
    Some(latest + preset.costs.barrier_latency as u64)
}

/// One remote DMA's occupancy of one link (cycles).
struct LinkSpan {
    chip: u32,
    link: String,
    start: u64,
    end: u64,
    bytes: u64,
}

/// What delivering a core's outgoing effects did besides changing memory and semaphores.
struct Effects {
    /// Link occupancy, when profiling.
    link_spans: Option<Vec<LinkSpan>>,
    /// The cores whose semaphores or memory changed.
    touched: Vec<usize>,
}

/// Why delivering stopped a launch.
enum Stop {
    Fault(u32, FaultKind),
    /// A folded launch sent a message over more than one hop.
    Unfoldable,
}

/// Delivers the effects core `from` produced on other cores; `fold`: the launch is folded onto
/// that chip, whose cores receive what is sent to the same cores of any chip.
#[allow(clippy::too_many_arguments)]
fn deliver_all(
    out: &mut Vec<Outgoing>,
    chips: &mut [ChipState],
    targets: &[Target],
    lookup: &Lookup,
    ici: &mut Ici,
    preset: &ChipPreset,
    from: usize,
    fold: Option<u32>,
    effects: &mut Effects,
) -> Result<(), Stop> {
    let src_chip = targets[from].chip;
    // The receiving target of a message to `chip`; a folded launch checks the route first.
    let receiver = |ici: &Ici, chip: u32, core: u32| -> Result<Option<usize>, Stop> {
        match fold {
            None => Ok(lookup.find(chip, core)),
            Some(rep) => {
                if chip != src_chip && ici.route(src_chip, chip).len() != 1 {
                    return Err(Stop::Unfoldable);
                }
                Ok(lookup.find(rep, core))
            }
        }
    };
    for o in out.drain(..) {
        match o {
            Outgoing::Signal {
                chip,
                core,
                sem,
                amount,
                at,
            } => {
                let Some(j) = receiver(ici, chip, core)? else {
                    continue;
                };
                let arrive = if chip == src_chip {
                    at + preset.costs.sem_latency as u64
                } else {
                    ici.send(src_chip, chip, at, 0).arrived
                };
                let t = &targets[j];
                chips[t.chip as usize].cores[t.core as usize].sems[sem as usize]
                    .add_at(arrive, amount);
                effects.touched.push(j);
            }
            Outgoing::Write(w) => {
                let Some(j) = receiver(ici, w.to_chip, w.core)? else {
                    return Err(Stop::Fault(
                        w.pc,
                        FaultKind::Invalid(format!(
                            "remote DMA to chip {} core {}, which is not part of this launch",
                            w.to_chip, w.core
                        )),
                    ));
                };
                let d = ici.send(w.from_chip, w.to_chip, w.start, w.bytes);
                if let Some(spans) = effects.link_spans.as_mut() {
                    for h in &d.hops {
                        spans.push(LinkSpan {
                            chip: h.link.chip,
                            link: ici.link_name(&h.link),
                            start: h.start,
                            end: h.end,
                            bytes: w.bytes,
                        });
                    }
                }
                let sender = &targets[from];
                {
                    let s = &mut chips[sender.chip as usize].cores[sender.core as usize];
                    s.sems[w.send_sem as usize].add_at(d.sent, w.bytes as i64);
                    s.t.async_end = s.t.async_end.max(d.sent);
                }
                effects.touched.push(j);
                let t = &targets[j];
                let chip = &mut chips[t.chip as usize];
                let core = &mut chip.cores[t.core as usize];
                core.sems[w.recv_sem as usize].add_at(d.arrived, w.bytes as i64);
                if fold.is_none() {
                    deliver(&w, &mut core.vmem, &mut core.smem, &mut chip.shared);
                    core.t.add_inflight(Inflight {
                        pc: w.pc,
                        src: w.dst_range,
                        dst: w.dst_range,
                        complete: d.arrived,
                    });
                }
            }
        }
    }
    Ok(())
}
