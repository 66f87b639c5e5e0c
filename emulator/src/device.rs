//! [`Emulator`]: the `Device` implementation — one chip or a slice of chips of one generation.
//!
//! Launches execute when they are submitted (on the caller's thread), on a simulated timeline:
//! a kernel starts at the later of its submission time and the end of the previous kernel on
//! its cores; host transfers take the host link's bandwidth and follow the kernels submitted
//! before them. A fault is kept with its launch and reported by `wait`, `synchronize` or a
//! `read`, as an asynchronous device would.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::json;
use tpuemu_isa::trace::{Counter, Span, TraceEvent, Track};
use tpuemu_isa::{
    BufferId, ChipId, ChipInfo, Completion, Counters, Device, DeviceError, Fault, KernelArg,
    Launch, LaunchId, Program, ProgramId, Topology,
};

use crate::core::{ArgVal, ChipShared, Core};
use crate::ici::Ici;
use crate::launch::{self, ChipState, Ending, Target};
use crate::launches::{LaunchLog, LaunchRecord};
use crate::memory::Hbm;
use crate::preset::{ChipPreset, MAX_DEVICE_CHIPS, PresetError};
use crate::stats::LaunchStats;

struct State {
    chips: Vec<ChipState>,
    ici: Ici,
    buffers: HashMap<u64, ChipId>,
    next_buffer: u64,
    programs: Vec<std::sync::Arc<Program>>,
    launches: LaunchLog,
    /// Per chip, per core: cycle at which the last kernel ended.
    core_free: Vec<Vec<u64>>,
    /// Per chip: cycle at which the host link is free.
    host_link_free: Vec<u64>,
    profiling: bool,
    functional: bool,
    limits: crate::RunLimits,
    events: crate::recorder::EventLog,
    /// The launcher's working lists, reused by every launch.
    scratch: launch::Scratch,
}

/// An emulated TPU: one chip or a slice of chips.
pub struct Emulator {
    preset: ChipPreset,
    topology: Topology,
    state: Mutex<State>,
}

/// Wraparound of each axis of a slice: a 2D generation wraps a full axis; a 3D one wraps when
/// the slice is made of whole cubes.
fn wraparound(preset: &ChipPreset, mesh: &[u32]) -> Vec<bool> {
    let m = preset.ici_wrap_multiple;
    let whole = mesh.iter().all(|d| d % m == 0);
    mesh.iter()
        .map(|d| *d > 2 && d % m == 0 && (preset.ici_dims < 3 || whole))
        .collect()
}

impl Emulator {
    /// One chip of `preset`.
    pub fn new(preset: ChipPreset) -> Result<Self, PresetError> {
        Self::slice(preset, &[1])
    }

    /// A slice of chips of `preset` with mesh `dims` (`[4, 4]`, `[2, 2, 2]`), at most the
    /// generation's largest slice ([`ChipPreset::check_slice`]).
    pub fn slice(preset: ChipPreset, dims: &[u32]) -> Result<Self, PresetError> {
        Self::build(preset, dims, 1)
    }

    /// `slices` slices of mesh `dims` joined by the data-centre network: the mesh gets one more
    /// axis, last, whose coordinate is the slice ([`Topology::dcn_axis`]); a chip reaches the
    /// chip at the same place in another slice in one hop of `preset.dcn_bytes_per_s` and
    /// `preset.dcn_latency_ns` (see [`crate::ici`]).
    pub fn multi_slice(preset: ChipPreset, slices: u32, dims: &[u32]) -> Result<Self, PresetError> {
        if slices == 0 {
            return Err(PresetError::Invalid {
                preset: preset.name.clone(),
                why: "a device needs at least one slice".into(),
            });
        }
        Self::build(preset, dims, slices)
    }

    fn build(preset: ChipPreset, dims: &[u32], slices: u32) -> Result<Self, PresetError> {
        preset.validate()?;
        let invalid = |why: String| PresetError::Invalid {
            preset: preset.name.clone(),
            why,
        };
        if dims.is_empty() || dims.len() > 3 || dims.contains(&0) {
            return Err(invalid(format!(
                "slice {dims:?}: expected 1 to 3 non-zero axes"
            )));
        }
        if dims.len() as u32 > preset.ici_dims
            && dims.iter().skip(preset.ici_dims as usize).any(|d| *d > 1)
        {
            return Err(invalid(format!(
                "{} slices have at most {} axes",
                preset.name, preset.ici_dims
            )));
        }
        preset.check_slice(dims)?;
        let n: u64 = dims.iter().map(|d| *d as u64).product::<u64>() * slices as u64;
        if n > MAX_DEVICE_CHIPS {
            return Err(invalid(format!(
                "{n} chips; the emulator holds at most {MAX_DEVICE_CHIPS}"
            )));
        }
        let mut wrap = wraparound(&preset, dims);
        let mut mesh = dims.to_vec();
        let ici_cycles = preset.ns_to_cycles(preset.ici_hop_latency_ns);
        let ici = if slices > 1 {
            mesh.push(slices);
            wrap.push(slices > 2);
            let mut ici = Ici::new(
                mesh.clone(),
                wrap.clone(),
                preset.ici_link_bytes_per_s / preset.clock_hz,
                ici_cycles,
            );
            ici.set_dcn_axis(
                dims.len(),
                preset.dcn_bytes_per_s / preset.clock_hz,
                preset.ns_to_cycles(preset.dcn_latency_ns),
            );
            ici
        } else {
            Ici::new(
                mesh.clone(),
                wrap.clone(),
                preset.ici_link_bytes_per_s / preset.clock_hz,
                ici_cycles,
            )
        };
        let dims = &mesh[..];
        let dcn_axis = ici.dcn_axis();
        let chips_info = (0..n as u32)
            .map(|id| ChipInfo {
                id,
                coords: ici.coords(id),
                cores: preset.cores_per_chip,
                hbm_bytes: preset.hbm_bytes,
                hbm_bytes_per_s: preset.hbm_bytes_per_s,
                hbm_latency_ns: preset.hbm_latency_ns,
                peak_bf16_flops: preset.peak_bf16_flops(),
                core: preset.core_info(),
            })
            .collect();
        let topology = Topology {
            generation: preset.name.clone(),
            mesh: dims.to_vec(),
            wraparound: wrap,
            dcn_axis,
            chips: chips_info,
        };
        let chips = (0..n)
            .map(|_| ChipState {
                shared: ChipShared {
                    hbm: Hbm::new(preset.hbm_bytes),
                    hbm_free: 0,
                },
                cores: (0..preset.cores_per_chip)
                    .map(|_| Core::new(&preset))
                    .collect(),
            })
            .collect();
        let state = State {
            chips,
            ici,
            buffers: HashMap::new(),
            next_buffer: 1,
            programs: Vec::new(),
            launches: LaunchLog::default(),
            core_free: vec![vec![0; preset.cores_per_chip as usize]; n as usize],
            host_link_free: vec![0; n as usize],
            profiling: false,
            functional: true,
            limits: crate::RunLimits::default(),
            events: Default::default(),
            scratch: Default::default(),
        };
        Ok(Emulator {
            preset,
            topology,
            state: Mutex::new(state),
        })
    }

    /// The preset every chip uses.
    pub fn preset(&self) -> &ChipPreset {
        &self.preset
    }

    /// Timing only: programs run for their cycles without computing data (HBM contents are
    /// neither stored nor read; reads give zeros).
    pub fn set_timing_only(&self, on: bool) {
        self.lock().functional = !on;
    }

    /// The run limits of later launches (see [`crate::limits`]).
    pub fn set_run_limits(&self, limits: crate::RunLimits) {
        self.lock().limits = limits;
    }

    /// What a launch did (for the last [`crate::KEEP_LAUNCHES`] launches and any not yet
    /// reported).
    pub fn stats(&self, id: LaunchId) -> Option<LaunchStats> {
        self.lock().launches.get(id).map(|l| l.stats.clone())
    }

    /// Host bytes held by every chip's HBM (what the lazily allocated memory costs).
    pub fn resident_hbm_bytes(&self) -> u64 {
        self.lock()
            .chips
            .iter()
            .map(|c| c.shared.hbm.resident_bytes())
            .sum()
    }

    /// Launches `l`, which the caller vouches is *translation-symmetric*: every chip runs the
    /// same program on the same cores with arguments that differ only by the chip's position
    /// (its coordinates, its neighbours' indices, buffers of equal sizes), sending to the chips
    /// at the same offsets from itself. A timing-only launch over every chip is then simulated
    /// on chip 0 alone and the other chips get its timeline (exact while every message goes one
    /// hop, which is checked; see [`crate::fold`]); otherwise — functional mode, chips left
    /// out, a longer route — the launch is simulated in full, as [`Device::launch`] does.
    /// [`LaunchStats::represented_by`] says which happened.
    pub fn launch_symmetric(&self, l: &Launch) -> Result<LaunchId, DeviceError> {
        self.launch_impl(l, true)
    }

    /// Whether a launch may be folded onto chip 0: timing-only, every chip targeted, on the
    /// same cores.
    fn foldable(s: &State, targets: &[Target]) -> bool {
        if s.functional {
            return false;
        }
        let mut cores: Vec<Vec<u32>> = vec![Vec::new(); s.chips.len()];
        for t in targets {
            cores[t.chip as usize].push(t.core);
        }
        for c in &mut cores {
            c.sort_unstable();
        }
        !cores[0].is_empty() && cores.iter().all(|c| *c == cores[0])
    }

    fn launch_impl(&self, l: &Launch, symmetric: bool) -> Result<LaunchId, DeviceError> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let program = s
            .programs
            .get(l.program.0 as usize)
            .ok_or_else(|| {
                DeviceError::InvalidRequest(format!("program {} was never loaded", l.program.0))
            })?
            .clone();
        if l.targets.is_empty() {
            return Err(DeviceError::InvalidRequest(
                "a launch needs at least one target core".into(),
            ));
        }
        let targets = self.bind_targets(s, &program, l)?;
        let start = targets
            .iter()
            .map(|t| s.core_free[t.chip as usize][t.core as usize])
            .max()
            .unwrap_or(0)
            .max(self.preset.ns_to_cycles(l.submit_ns));
        let folded = if symmetric && Self::foldable(s, &targets) {
            crate::fold::run_folded(
                &mut s.chips,
                &mut s.ici,
                &self.preset,
                &self.topology.mesh,
                &program,
                &targets,
                start,
                s.profiling,
                &s.limits,
                0,
                &mut s.scratch,
            )
        } else {
            None
        };
        let out = match folded {
            Some(out) => out,
            None => launch::run(
                &mut s.chips,
                &mut s.ici,
                &self.preset,
                &self.topology.mesh,
                &program,
                &targets,
                start,
                s.functional,
                s.profiling,
                &s.limits,
                &mut s.scratch,
            ),
        };
        for (t, cs) in targets.iter().zip(&out.stats.cores) {
            s.core_free[t.chip as usize][t.core as usize] = cs.end_cycle.max(start);
        }
        let error = match out.ending {
            Ending::Ok => None,
            Ending::Fault {
                kind: crate::FaultKind::Interrupted,
                ..
            } => Some(DeviceError::Interrupted {
                program: program.name.clone(),
            }),
            Ending::Fault { target, pc, kind } => Some(DeviceError::Fault(Box::new(Fault {
                program: program.name.clone(),
                chip: targets[target].chip,
                core: targets[target].core,
                pc,
                instr: program.instr_text(pc as usize),
                region: program.region_at(pc as usize).map(str::to_string),
                reason: kind.to_string(),
            }))),
            Ending::Deadlock(report) => Some(DeviceError::Deadlock(Box::new(report))),
            Ending::Unfoldable => unreachable!("an unfoldable launch is simulated in full"),
        };
        let end_ns = self.preset.cycles_to_ns(out.end_cycle);
        if s.profiling {
            for mut span in out.spans {
                span.op_id = l.op_id;
                span.group_id = l.group_id;
                s.events.push(TraceEvent::Span(span));
            }
            for (t, cs) in targets.iter().zip(&out.stats.cores) {
                let mut k = Span::new(
                    Track::Kernel {
                        chip: t.chip,
                        core: t.core,
                    },
                    program.name.clone(),
                    self.preset.cycles_to_ns(start),
                    self.preset.cycles_to_ns(cs.end_cycle.max(start)),
                );
                k.cycles = Some((start, cs.end_cycle.max(start)));
                k.op_id = l.op_id;
                k.group_id = l.group_id;
                k.args.insert("program".into(), json!(program.name));
                k.args.insert("flops".into(), json!(cs.flops));
                k.args.insert("hbm_bytes".into(), json!(cs.hbm_bytes));
                k.args.insert("instructions".into(), json!(cs.instructions));
                if let Some(op) = &program.source_op {
                    k.args.insert("source_op".into(), json!(op));
                }
                if let Some(e) = &error {
                    k.args.insert("error".into(), json!(e.to_string()));
                }
                s.events.push(TraceEvent::Span(k));
            }
        }
        Ok(s.launches.push(LaunchRecord {
            start_ns: self.preset.cycles_to_ns(start),
            end_ns,
            error,
            reported: false,
            stats: out.stats,
        }))
    }

    /// The launch's targets checked against the chip (cores exist, none twice) and bound to the
    /// program's arguments (each buffer on the target's chip, each kind as declared).
    fn bind_targets(
        &self,
        s: &State,
        program: &Program,
        l: &Launch,
    ) -> Result<Vec<Target>, DeviceError> {
        let mut targets = Vec::with_capacity(l.targets.len());
        for t in &l.targets {
            let (chip, core) = (t.core.chip, t.core.core);
            if chip as usize >= s.chips.len() || core >= self.preset.cores_per_chip {
                return Err(DeviceError::InvalidRequest(format!(
                    "chip {chip} core {core} does not exist"
                )));
            }
            if targets
                .iter()
                .any(|x: &Target| x.chip == chip && x.core == core)
            {
                return Err(DeviceError::InvalidRequest(format!(
                    "chip {chip} core {core} is targeted twice"
                )));
            }
            if t.args.len() != program.args.len() {
                return Err(DeviceError::InvalidRequest(format!(
                    "program `{}` takes {} arguments, the launch gives {}",
                    program.name,
                    program.args.len(),
                    t.args.len()
                )));
            }
            let mut args = Vec::with_capacity(t.args.len());
            for (i, (a, decl)) in t.args.iter().zip(&program.args).enumerate() {
                args.push(match (a, decl.kind) {
                    (KernelArg::Buffer(b), tpuemu_isa::ArgKind::Buffer) => {
                        let bc = Self::buffer_chip(s, *b)?;
                        if bc != chip {
                            return Err(DeviceError::InvalidRequest(format!(
                                "argument {i} (`{}`) is buffer {} on chip {bc}, but the kernel runs on chip {chip}",
                                decl.name, b.0
                            )));
                        }
                        let size = s.chips[chip as usize].shared.hbm.buffer(b.0).map_or(0, |x| x.size());
                        ArgVal::Buffer { id: b.0, size }
                    }
                    (KernelArg::Scalar(v), tpuemu_isa::ArgKind::Scalar) => ArgVal::Scalar(*v),
                    _ => {
                        return Err(DeviceError::InvalidRequest(format!(
                            "argument {i} (`{}`) must be a {}",
                            decl.name,
                            decl.kind.name()
                        )));
                    }
                });
            }
            targets.push(Target { chip, core, args });
        }
        Ok(targets)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; the state is still usable for reporting.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn chip_now(s: &State, chip: usize) -> u64 {
        s.core_free[chip].iter().copied().max().unwrap_or(0)
    }

    fn counter(&self, s: &mut State, chip: ChipId) {
        if s.profiling {
            let ns = self.preset.cycles_to_ns(Self::chip_now(s, chip as usize));
            let value = s.chips[chip as usize].shared.hbm.used() as f64;
            s.events.push(TraceEvent::Counter(Counter {
                chip: Some(chip),
                name: "hbm_bytes_in_use".into(),
                ns,
                value,
            }));
        }
    }

    fn buffer_chip(s: &State, b: BufferId) -> Result<ChipId, DeviceError> {
        s.buffers.get(&b.0).copied().ok_or_else(|| {
            DeviceError::InvalidRequest(format!("buffer {} does not exist (freed?)", b.0))
        })
    }

    fn check_range(s: &State, b: BufferId, offset: u64, len: u64) -> Result<ChipId, DeviceError> {
        let chip = Self::buffer_chip(s, b)?;
        let size = s.chips[chip as usize]
            .shared
            .hbm
            .buffer(b.0)
            .map_or(0, |x| x.size());
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(DeviceError::InvalidRequest(format!(
                "bytes [{offset}, {}) are outside buffer {} of {size} bytes",
                offset.saturating_add(len),
                b.0
            )));
        }
        Ok(chip)
    }

    fn take_unreported(s: &mut State) -> Option<DeviceError> {
        s.launches.take_unreported()
    }

    /// Host bytes into a buffer (kept only when computing values); the buffer's chip.
    fn store(
        s: &mut State,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<ChipId, DeviceError> {
        let chip = Self::check_range(s, buffer, offset, data.len() as u64)?;
        if s.functional {
            let b = s.chips[chip as usize]
                .shared
                .hbm
                .buffer_mut(buffer.0)
                .expect("checked above");
            b.write(offset, data);
        }
        Ok(chip)
    }

    /// A buffer's bytes to the host, after reporting a fault not yet reported; its chip.
    fn fetch(
        s: &mut State,
        buffer: BufferId,
        offset: u64,
        out: &mut [u8],
    ) -> Result<ChipId, DeviceError> {
        let chip = Self::check_range(s, buffer, offset, out.len() as u64)?;
        if let Some(e) = Self::take_unreported(s) {
            return Err(e);
        }
        s.chips[chip as usize]
            .shared
            .hbm
            .buffer(buffer.0)
            .expect("checked above")
            .read(offset, out);
        Ok(chip)
    }

    fn transfer(&self, s: &mut State, chip: ChipId, bytes: u64, submit_ns: f64) -> Completion {
        let c = chip as usize;
        let start = self
            .preset
            .ns_to_cycles(submit_ns)
            .max(s.host_link_free[c])
            .max(Self::chip_now(s, c));
        let dur =
            (bytes as f64 / self.preset.host_link_bytes_per_s * self.preset.clock_hz).ceil() as u64;
        s.host_link_free[c] = start + dur;
        Completion {
            start_ns: self.preset.cycles_to_ns(start),
            end_ns: self.preset.cycles_to_ns(start + dur),
            counters: Counters::default(),
        }
    }
}

impl Device for Emulator {
    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn alloc(&self, chip: ChipId, bytes: u64) -> Result<BufferId, DeviceError> {
        let mut s = self.lock();
        let id = s.next_buffer;
        let Some(c) = s.chips.get_mut(chip as usize) else {
            return Err(DeviceError::InvalidRequest(format!(
                "chip {chip} does not exist ({} chips)",
                self.topology.chips.len()
            )));
        };
        let hbm = &mut c.shared.hbm;
        hbm.alloc(id, bytes)
            .map_err(|free| DeviceError::OutOfMemory {
                chip,
                asked: bytes,
                free,
                capacity: hbm.capacity(),
            })?;
        s.next_buffer += 1;
        s.buffers.insert(id, chip);
        self.counter(&mut s, chip);
        Ok(BufferId(id))
    }

    fn free(&self, buffer: BufferId) -> Result<(), DeviceError> {
        let mut s = self.lock();
        let chip = Self::buffer_chip(&s, buffer)?;
        s.chips[chip as usize].shared.hbm.free(buffer.0);
        s.buffers.remove(&buffer.0);
        self.counter(&mut s, chip);
        Ok(())
    }

    fn hbm_in_use(&self, chip: ChipId) -> u64 {
        self.lock()
            .chips
            .get(chip as usize)
            .map_or(0, |c| c.shared.hbm.used())
    }

    fn write(
        &self,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError> {
        let mut s = self.lock();
        let chip = Self::store(&mut s, buffer, offset, data)?;
        Ok(self.transfer(&mut s, chip, data.len() as u64, submit_ns))
    }

    fn deliver(&self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        Self::store(&mut self.lock(), buffer, offset, data).map(|_| ())
    }

    fn peek(&self, buffer: BufferId, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        Self::fetch(&mut self.lock(), buffer, offset, out).map(|_| ())
    }

    fn read(
        &self,
        buffer: BufferId,
        offset: u64,
        out: &mut [u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError> {
        let mut s = self.lock();
        let chip = Self::fetch(&mut s, buffer, offset, out)?;
        Ok(self.transfer(&mut s, chip, out.len() as u64, submit_ns))
    }

    fn load(&self, program: &Program) -> Result<ProgramId, DeviceError> {
        crate::validate::validate(program, &self.preset).map_err(|reason| {
            DeviceError::InvalidProgram {
                program: program.name.clone(),
                reason,
            }
        })?;
        let mut s = self.lock();
        s.programs.push(std::sync::Arc::new(program.clone()));
        Ok(ProgramId(s.programs.len() as u64 - 1))
    }

    fn launch(&self, l: &Launch) -> Result<LaunchId, DeviceError> {
        self.launch_impl(l, false)
    }

    fn wait(&self, id: LaunchId) -> Result<Completion, DeviceError> {
        let mut s = self.lock();
        let l = s.launches.get_mut(id)?;
        if !l.reported {
            l.reported = true;
            if let Some(e) = &l.error {
                return Err(e.clone());
            }
        }
        Ok(Completion {
            start_ns: l.start_ns,
            end_ns: l.end_ns,
            counters: Counters {
                hbm_bytes: l.stats.hbm_bytes(),
                mxu_flops: l.stats.flops(),
                ici_bytes: l.stats.ici_bytes(),
            },
        })
    }

    fn synchronize(&self) -> Result<Completion, DeviceError> {
        let mut s = self.lock();
        if let Some(e) = Self::take_unreported(&mut s) {
            return Err(e);
        }
        let end = (0..s.chips.len())
            .map(|c| Self::chip_now(&s, c).max(s.host_link_free[c]))
            .max()
            .unwrap_or(0);
        let end_ns = self.preset.cycles_to_ns(end);
        Ok(Completion {
            start_ns: end_ns,
            end_ns,
            counters: Counters::default(),
        })
    }

    fn set_profiling(&self, on: bool) {
        self.lock().profiling = on;
    }

    fn set_timing_only(&self, on: bool) -> Result<(), DeviceError> {
        Emulator::set_timing_only(self, on);
        Ok(())
    }

    fn drain_events(&self) -> Vec<TraceEvent> {
        self.lock().events.drain()
    }
}
