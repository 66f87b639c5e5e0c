//! Semaphores and barriers.
//!
//! `sem.wait` completes at the first cycle at which the semaphore, counting increments that
//! are already scheduled (DMA completions, signals), reaches the amount — but only if no other
//! core could still signal earlier (`Env::horizon`); otherwise the core blocks and the launcher
//! resumes it when it is safe or reports a deadlock. Barriers block until every core of the
//! launch has arrived; the launcher releases them together.

use tpuemu_isa::{Instr, Unit};

use super::timing::SyncUnit;
use super::{Core, Env, Flow, Outgoing};
use crate::fault::FaultKind;
use crate::recorder::Recorder;

impl Core {
    pub(crate) fn exec_sync(
        &mut self,
        instr: &Instr,
        env: &Env,
        out: &mut Vec<Outgoing>,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        let c = &env.preset.costs;
        match *instr {
            Instr::SemSignal { sem, amount, chip } => {
                let (v, vt) = self.ssrc(amount);
                let ready = vt.max(chip.map_or(0, |r| self.sready(r)));
                if let Some(r) = chip {
                    let to = self.s(r);
                    if env.peers.get(to).is_none() {
                        return Err(FaultKind::Invalid(format!(
                            "semaphore signal to chip {to}, which is not part of this launch"
                        )));
                    }
                }
                let start = self.t.occupy(SyncUnit::Scalar, ready, 1);
                match chip {
                    None => self.sems[sem.index() as usize]
                        .add_at(start + c.sem_latency as u64, v as i64),
                    Some(r) => out.push(Outgoing::Signal {
                        chip: self.s(r),
                        core: env.place.core,
                        sem: sem.index(),
                        amount: v as i64,
                        at: start,
                    }),
                }
                Ok(Flow::Next)
            }
            Instr::SemWait { sem, amount } => {
                let (v, vt) = self.ssrc(amount);
                let need = v as i64;
                let issue = self.t.front.max(vt);
                let s = &mut self.sems[sem.index() as usize];
                match s.ready_at(issue, need) {
                    Some(t) if t <= env.horizon => {
                        s.settle(t);
                        s.value -= need;
                        let start = self.t.occupy(SyncUnit::Scalar, t, 1);
                        rec.unit(Unit::Sync, self.pc, issue, start + 1);
                        Ok(Flow::Next)
                    }
                    _ => Ok(Flow::Block),
                }
            }
            Instr::Barrier => match self.barrier_release.take() {
                Some(release) => {
                    let issue = self.t.front;
                    let start = self.t.occupy(SyncUnit::Scalar, release, 1);
                    rec.unit(Unit::Sync, self.pc, issue, start + 1);
                    self.barriers += 1;
                    self.barrier_arrival = None;
                    Ok(Flow::Next)
                }
                None => {
                    self.barrier_arrival = Some(self.t.front);
                    Ok(Flow::Block)
                }
            },
            _ => unreachable!("exec_sync called with a non-sync instruction"),
        }
    }

    /// When the instruction this blocked core waits on could complete, given what is known now;
    /// `None` if nothing scheduled will let it.
    pub(crate) fn wait_ready(&self, env: &Env) -> Option<u64> {
        match env.program.instrs.get(self.pc as usize)? {
            Instr::SemWait { sem, amount } => {
                let (v, vt) = self.ssrc(*amount);
                self.sems[sem.index() as usize].ready_at(self.t.front.max(vt), v as i64)
            }
            _ => None,
        }
    }
}
