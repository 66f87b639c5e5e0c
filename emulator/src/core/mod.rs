//! One TensorCore: its architectural state and the executor that runs a program on it.
//!
//! The executor walks the decoded instructions in order. For every instruction it does the
//! functional work (unless the launch is timing-only) and the timing work: when the instruction
//! can issue (in-order front end, register scoreboard), which unit it occupies and for how long,
//! and when its results are ready. Asynchronous engines — DMA, the matrix units' weight loads,
//! streaming and result path — run alongside the front end and are synchronised by semaphores
//! and memory hazards.
//!
//! Submodules by instruction class: [`scalar`], [`vector`], [`mxu`], [`dma`], [`sync`].

pub(crate) mod deferred;
pub(crate) mod dma;
pub(crate) mod dma_copy;
pub(crate) mod fifo;
pub(crate) mod mxu;
pub(crate) mod mxu_jobs;
pub(crate) mod mxu_values;
pub(crate) mod pending;
pub(crate) mod range;
pub(crate) mod scalar;
pub(crate) mod state;
pub(crate) mod sync;
pub(crate) mod timing;
pub(crate) mod vector;
pub(crate) mod vmem;

use tpuemu_isa::{Instr, Program, Unit};

use crate::fault::FaultKind;
use crate::memory::Hbm;
use crate::preset::ChipPreset;
use crate::recorder::Recorder;

pub(crate) use state::Core;

/// What a core knows about where it runs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Placement {
    pub chip: u32,
    pub core: u32,
    pub num_chips: u32,
    pub num_cores: u32,
    pub coords: [u32; 3],
    pub dims: [u32; 3],
}

/// An argument as the executor sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ArgVal {
    /// A buffer of the chip's HBM, by id, and its size.
    Buffer { id: u64, size: u64 },
    /// A scalar.
    Scalar(u32),
}

/// Everything read-only a core needs during one launch.
pub(crate) struct Env<'a> {
    pub program: &'a Program,
    pub args: &'a [ArgVal],
    pub preset: &'a ChipPreset,
    pub place: Placement,
    /// Argument values of every chip in the launch, by chip index (`None`: not in the launch).
    pub peers: crate::launch::Peers<'a>,
    /// Do the data work (false: timing only).
    pub functional: bool,
    /// Core-local instructions may run past the launcher's `until` (see [`Core::run`]): true
    /// when no core of the launch can write another core's VMEM or SMEM.
    pub run_ahead: bool,
    /// A semaphore wait may only complete at or before this cycle (other cores could still
    /// signal earlier); `u64::MAX` when no other core can signal.
    pub horizon: u64,
    /// The launch's run limits.
    pub budget: crate::limits::Budget,
}

/// Chip-wide state shared by the chip's cores.
#[derive(Debug)]
pub(crate) struct ChipShared {
    pub hbm: Hbm,
    /// When HBM finishes the transfers queued so far (a shared FIFO server).
    pub hbm_free: u64,
}

/// An effect on another core, produced by remote DMA or a remote semaphore signal.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// Add to a semaphore of `(chip, core)` at cycle `at` (of the sender's clock).
    Signal {
        chip: u32,
        core: u32,
        sem: u8,
        amount: i64,
        at: u64,
    },
    /// Write `data` into the destination memory and signal the receive semaphore.
    Write(Box<dma::RemoteWrite>),
}

/// Why a core stopped running.
#[derive(Debug)]
pub(crate) enum Status {
    /// Reached `until`; more to run.
    Running,
    /// Waiting on a semaphore or a barrier.
    Blocked,
    /// Finished (halt or end of program).
    Done,
    /// Faulted at `pc`.
    Fault { pc: u32, kind: FaultKind },
}

/// Whether an instruction touches only its own core's state (registers, VMEM, SMEM, matrix
/// units, markers, control flow within the program).
fn is_local(i: &Instr) -> bool {
    !matches!(i.class(), tpuemu_isa::InstrClass::Dma) && !matches!(i, Instr::Halt)
}

/// How one instruction ended.
pub(crate) enum Flow {
    Next,
    Jump(u32),
    Halt,
    Block,
}

impl Core {
    /// Runs from the current pc until the front end passes `until`, the core blocks, finishes
    /// or faults. With `env.run_ahead`, instructions that only touch this core's own state
    /// (everything but DMA, semaphores, barriers and the end of the program) run on past
    /// `until`: no other core can observe or change what they do, so running them early gives
    /// the same results and cycles, in far fewer turns of the launcher.
    pub(crate) fn run(
        &mut self,
        env: &Env,
        chip: &mut ChipShared,
        out: &mut Vec<Outgoing>,
        rec: &mut Recorder,
        until: u64,
    ) -> Status {
        let instrs = &env.program.instrs;
        loop {
            let pc = self.pc;
            let next = instrs.get(pc as usize);
            if self.t.front > until && !(env.run_ahead && next.is_some_and(is_local)) {
                return Status::Running;
            }
            let Some(instr) = next else {
                return self.finish(env, rec);
            };
            // Every executed instruction passes here once (the single place to check a run
            // budget of instructions or cycles before it executes).
            self.stats.instructions += 1;
            self.stats.work += 1;
            self.t.prune(self.t.front);
            let open = self.markers.len();
            if let Some(kind) = env
                .budget
                .exceeded(instr, self.stats.work, self.t.front, open)
            {
                return Status::Fault { pc, kind };
            }
            if crate::interrupt::pending() {
                return Status::Fault {
                    pc,
                    kind: FaultKind::Interrupted,
                };
            }
            let flow = match self.exec(instr, env, chip, out, rec) {
                Ok(f) => f,
                Err(kind) => return Status::Fault { pc, kind },
            };
            match flow {
                Flow::Next => self.pc += 1,
                Flow::Jump(target) => {
                    self.pc = target;
                    self.t.front += env.preset.costs.branch_taken as u64;
                }
                Flow::Halt => return self.finish(env, rec),
                Flow::Block => {
                    self.stats.instructions -= 1;
                    self.stats.work -= 1;
                    return Status::Blocked;
                }
            }
        }
    }

    fn exec(
        &mut self,
        instr: &Instr,
        env: &Env,
        chip: &mut ChipShared,
        out: &mut Vec<Outgoing>,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        // One table says which unit runs what: the instruction set's `Instr::unit`.
        match instr.unit() {
            Unit::Scalar => self.exec_scalar(instr, env, rec),
            Unit::VLoad | Unit::VStore => self.exec_vmem(instr, env, rec),
            Unit::Valu | Unit::Eup | Unit::Xlu => self.exec_vector(instr, env, rec),
            Unit::Mxu(_) => self.exec_mxu(instr, env, rec),
            Unit::Dma => self.exec_dma(instr, env, chip, out, rec),
            Unit::Sync => self.exec_sync(instr, env, out, rec),
            Unit::Marker => self.exec_marker(instr, env, rec),
        }
    }

    /// `mark.begin` and `mark.end`: open and close profiling regions (they cost nothing).
    fn exec_marker(
        &mut self,
        instr: &Instr,
        env: &Env,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        match *instr {
            Instr::MarkBegin { name } => {
                self.markers.push((name, self.t.front));
                Ok(Flow::Next)
            }
            Instr::MarkEnd => {
                if let Some((name, start)) = self.markers.pop() {
                    let label = env
                        .program
                        .markers
                        .get(name as usize)
                        .cloned()
                        .unwrap_or_default();
                    rec.region(label, start, self.t.front, self.markers.len());
                }
                Ok(Flow::Next)
            }
            _ => unreachable!("exec_marker called with a non-marker instruction"),
        }
    }

    /// Checks the exit conditions and settles the end time.
    fn finish(&mut self, env: &Env, rec: &mut Recorder) -> Status {
        let end = self.t.end_time();
        while let Some((name, start)) = self.markers.pop() {
            let label = env
                .program
                .markers
                .get(name as usize)
                .cloned()
                .unwrap_or_default();
            rec.region(label, start, end, self.markers.len());
        }
        self.t.front = end;
        if let Some(kind) = self.leftover_semaphore() {
            return Status::Fault { pc: self.pc, kind };
        }
        Status::Done
    }
}
