//! Running one launch: one program on one or more cores, possibly on many chips.
//!
//! The cores are advanced in simulated-time order, so results never depend on the host: the
//! core whose next event is earliest (ties: lowest index) runs until it passes the next
//! core's time, blocks or ends. A blocked core's next event is the cycle its semaphore wait
//! could complete or its barrier opens; it resumes only when that is the earliest event of
//! all, which guarantees no other core can still signal it earlier (every cross-core effect
//! takes at least one cycle). When every unfinished core is blocked with nothing scheduled to
//! wake it, the launch deadlocks and the report says where each core stands.

use tpuemu_isa::trace::{Span, Track};
use tpuemu_isa::{DeadlockReport, Instr, Program};

use crate::core::dma::deliver;
use crate::core::timing::{Inflight, SYNC_UNITS};
use crate::core::{ArgVal, ChipShared, Core, Env, Outgoing, Placement, Status};
use crate::fault::FaultKind;
use crate::ici::Ici;
use crate::preset::ChipPreset;
use crate::recorder::Recorder;
use crate::stats::{CoreStats, LaunchStats};

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
) -> Outcome {
    let n = targets.len();
    let mut peers: Vec<Option<Vec<ArgVal>>> = vec![None; chips.len()];
    for t in targets {
        peers[t.chip as usize].get_or_insert_with(|| t.args.clone());
    }
    let mut recs: Vec<Recorder> = targets
        .iter()
        .map(|t| Recorder::new(profiling, t.chip, t.core, program))
        .collect();
    for t in targets {
        let core = &mut chips[t.chip as usize].cores[t.core as usize];
        core.reset_for_launch(preset, start);
        setup_smem(core, program, &t.args);
    }
    let places: Vec<Placement> = targets
        .iter()
        .map(|t| placement(t, ici, mesh, chips.len(), preset))
        .collect();
    let cross = (preset.costs.sem_latency as u64)
        .min(ici.hop_cycles())
        .max(1);
    let mut phase = vec![Phase::Running; n];
    let mut out = Vec::new();
    let mut link_spans: Vec<(u32, String, u64, u64, u64)> = Vec::new();
    let mut ending = Ending::Ok;

    loop {
        // Next event of every unfinished core.
        let next: Vec<u64> = (0..n)
            .map(|i| {
                let core = &chips[targets[i].chip as usize].cores[targets[i].core as usize];
                match phase[i] {
                    Phase::Done => u64::MAX,
                    Phase::Running => core.t.front,
                    Phase::Blocked => {
                        if let Some(r) = core.barrier_release {
                            r
                        } else if core.barrier_arrival.is_some() {
                            barrier_release(chips, targets, &phase, preset).unwrap_or(u64::MAX)
                        } else {
                            let env = env_for(
                                program,
                                &targets[i],
                                preset,
                                &places[i],
                                &peers,
                                functional,
                                0,
                            );
                            core.wait_ready(&env).unwrap_or(u64::MAX)
                        }
                    }
                }
            })
            .collect();
        if phase.iter().all(|p| *p == Phase::Done) {
            break;
        }
        let i = (0..n)
            .filter(|&i| phase[i] != Phase::Done)
            .min_by_key(|&i| (next[i], i))
            .expect("an unfinished core");
        if next[i] == u64::MAX {
            ending = Ending::Deadlock(deadlock_report(chips, targets, &phase, program));
            break;
        }
        let others = (0..n)
            .filter(|&j| j != i && phase[j] != Phase::Done)
            .map(|j| next[j])
            .min();
        let until = others.unwrap_or(u64::MAX);
        let horizon = others.map_or(u64::MAX, |o| o.saturating_add(cross));
        let t = &targets[i];
        if phase[i] == Phase::Blocked
            && chips[t.chip as usize].cores[t.core as usize]
                .barrier_arrival
                .is_some()
        {
            let release = next[i];
            for (j, tj) in targets.iter().enumerate() {
                if phase[j] == Phase::Blocked {
                    let c = &mut chips[tj.chip as usize].cores[tj.core as usize];
                    if c.barrier_arrival.is_some() {
                        c.barrier_release = Some(release);
                    }
                }
            }
        }
        let env = env_for(program, t, preset, &places[i], &peers, functional, horizon);
        let status = {
            let chip = &mut chips[t.chip as usize];
            let (cores, shared) = (&mut chip.cores, &mut chip.shared);
            cores[t.core as usize].run(&env, shared, &mut out, &mut recs[i], until)
        };
        phase[i] = match status {
            Status::Running => Phase::Running,
            Status::Blocked => Phase::Blocked,
            Status::Done => Phase::Done,
            Status::Fault { pc, kind } => {
                ending = Ending::Fault {
                    target: i,
                    pc,
                    kind,
                };
                break;
            }
        };
        if let Err((pc, kind)) =
            deliver_all(&mut out, chips, targets, ici, preset, &mut link_spans, i)
        {
            ending = Ending::Fault {
                target: i,
                pc,
                kind,
            };
            break;
        }
    }

    let end_cycle = targets
        .iter()
        .map(|t| chips[t.chip as usize].cores[t.core as usize].t.end_time())
        .max()
        .unwrap_or(start);
    let stats = collect_stats(chips, targets, start, end_cycle);
    let to_ns = |c: u64| preset.cycles_to_ns(c);
    let mut spans: Vec<Span> = recs
        .into_iter()
        .flat_map(|r| r.finish(to_ns, None, None))
        .collect();
    for (chip, link, s, e, bytes) in link_spans {
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
    peers: &'a [Option<Vec<ArgVal>>],
    functional: bool,
    horizon: u64,
) -> Env<'a> {
    Env {
        program,
        args: &t.args,
        preset,
        place: place.clone(),
        peers,
        functional,
        horizon,
    }
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

fn find(targets: &[Target], chip: u32, core: u32) -> Option<usize> {
    targets
        .iter()
        .position(|t| t.chip == chip && t.core == core)
}

/// Delivers the effects core `from` produced on other cores.
fn deliver_all(
    out: &mut Vec<Outgoing>,
    chips: &mut [ChipState],
    targets: &[Target],
    ici: &mut Ici,
    preset: &ChipPreset,
    link_spans: &mut Vec<(u32, String, u64, u64, u64)>,
    from: usize,
) -> Result<(), (u32, FaultKind)> {
    for o in out.drain(..) {
        match o {
            Outgoing::Signal {
                chip,
                core,
                sem,
                amount,
                at,
            } => {
                let Some(j) = find(targets, chip, core) else {
                    continue;
                };
                let src_chip = targets[from].chip;
                let arrive = if chip == src_chip {
                    at + preset.costs.sem_latency as u64
                } else {
                    ici.send(src_chip, chip, at, 0).arrived
                };
                let t = &targets[j];
                chips[t.chip as usize].cores[t.core as usize].sems[sem as usize]
                    .add_at(arrive, amount);
            }
            Outgoing::Write(w) => {
                let Some(j) = find(targets, w.to_chip, w.core) else {
                    return Err((
                        w.pc,
                        FaultKind::Invalid(format!(
                            "remote DMA to chip {} core {}, which is not part of this launch",
                            w.to_chip, w.core
                        )),
                    ));
                };
                let d = ici.send(w.from_chip, w.to_chip, w.start, w.bytes);
                for h in &d.hops {
                    link_spans.push((h.link.chip, h.link.name(), h.start, h.end, w.bytes));
                }
                let sender = &targets[from];
                {
                    let s = &mut chips[sender.chip as usize].cores[sender.core as usize];
                    s.sems[w.send_sem as usize].add_at(d.sent, w.bytes as i64);
                    s.t.async_end = s.t.async_end.max(d.sent);
                }
                let t = &targets[j];
                let chip = &mut chips[t.chip as usize];
                let core = &mut chip.cores[t.core as usize];
                deliver(&w, &mut core.vmem, &mut core.smem, &mut chip.shared);
                core.sems[w.recv_sem as usize].add_at(d.arrived, w.bytes as i64);
                core.t.add_inflight(Inflight {
                    pc: w.pc,
                    src: w.dst_range,
                    dst: w.dst_range,
                    complete: d.arrived,
                });
            }
        }
    }
    Ok(())
}

fn deadlock_report(
    chips: &[ChipState],
    targets: &[Target],
    phase: &[Phase],
    program: &Program,
) -> DeadlockReport {
    let cores = targets
        .iter()
        .zip(phase)
        .map(|(t, p)| {
            let c = &chips[t.chip as usize].cores[t.core as usize];
            let at = format!("chip {} core {}", t.chip, t.core);
            match p {
                Phase::Done => format!("{at}: finished"),
                Phase::Running => format!("{at}: running at pc {}", c.pc),
                Phase::Blocked => {
                    let text = program.instr_text(c.pc as usize);
                    match program.instrs.get(c.pc as usize) {
                        Some(Instr::SemWait { sem, amount }) => {
                            let (need, _) = c.ssrc(*amount);
                            let s = &c.sems[sem.index() as usize];
                            let coming: i64 = s.pending.iter().map(|(_, a)| a).sum();
                            format!(
                                "{at}: waits at pc {} (`{text}`) for {sem} to reach {}; it holds {} and {} more is scheduled to arrive",
                                c.pc, need as i32, s.value, coming
                            )
                        }
                        _ => format!("{at}: waits at barrier #{} (pc {}, `{text}`)", c.barriers + 1, c.pc),
                    }
                }
            }
        })
        .collect();
    DeadlockReport {
        program: program.name.clone(),
        cores,
    }
}

fn collect_stats(chips: &[ChipState], targets: &[Target], start: u64, end: u64) -> LaunchStats {
    let cores = targets
        .iter()
        .map(|t| {
            let c = &chips[t.chip as usize].cores[t.core as usize];
            let mut unit_busy = [0u64; SYNC_UNITS];
            unit_busy.copy_from_slice(&c.t.busy);
            CoreStats {
                chip: t.chip,
                core: t.core,
                end_cycle: c.t.end_time(),
                instructions: c.stats.instructions,
                unit_busy,
                mxu_busy: c.t.mxu.iter().map(|m| m.busy).collect(),
                dma_busy: c.t.dma_busy.clone(),
                flops: c.stats.flops,
                hbm_bytes: c.stats.hbm_bytes,
                ici_bytes: c.stats.ici_bytes,
                mxu_first: c.stats.mxu_first,
                mxu_last: c.stats.mxu_last,
            }
        })
        .collect();
    LaunchStats {
        start_cycle: start,
        end_cycle: end,
        cores,
    }
}
