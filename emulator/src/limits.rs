//! Run limits: how much one launch may do before the emulator stops it.
//!
//! A program that never halts (a branch to itself, a counter that never reaches its bound) would
//! otherwise run forever, in functional and in timing-only mode alike. Every instruction a core
//! executes passes one check in the dispatch loop: if the core's *work* in this launch is more
//! than [`RunLimits::max_instructions`], or its front end is more than
//! [`RunLimits::max_cycles`] cycles past the launch's start, the core faults at that pc with
//! [`FaultKind::RunLimit`], which the device reports with the pc and the instruction, as any
//! other fault.
//!
//! Work counts what the host spends, deterministically: one per instruction, and in a
//! functional run one more per [`DMA_BYTES_PER_UNIT`] bytes a DMA copies — a loop of 4 KiB DMAs
//! costs the host some 20 times a loop of branches per instruction (measured: `tpuemu run` of
//! `dma vmem[s1], hbm.buf[s1], len=s3, sem=sem0; sem.wait sem0, s3; br loop` with `len` 4096
//! took 58 s of CPU for 2^30 instructions, a `br loop` 7.8 s, release build, 2-core development
//! machine, 2026-12-05), so counting instructions alone let it run 1.5 minutes.
//!
//! The defaults are far above what any generated kernel does (the largest, a 16384-cube GEMM on
//! v5e, executes about 1.2 million instructions per core and 3.6e7 cycles; the demo's compiled
//! transformer step 3.6 million instructions) and low enough that a runaway loop stops within
//! seconds of host time (2^28 units: about 2 s of CPU for either loop above).
//! `tpuemu ... --max-instructions N --max-cycles N` and [`crate::Emulator::set_run_limits`]
//! change them.

use tpuemu_isa::Instr;

use crate::fault::FaultKind;

/// The default work limit per core and launch: 2^28 units (about 2.7e8: some 75 times the
/// largest generated kernel's instructions, and about 2 s of host CPU for a runaway loop).
pub const DEFAULT_MAX_INSTRUCTIONS: u64 = 1 << 28;

/// Bytes a DMA of a functional run copies per unit of work (4 KiB: 16 units, about what the
/// copy and its bookkeeping cost the host against one branch).
pub const DMA_BYTES_PER_UNIT: u64 = 256;

/// The default cycle limit per launch: 2^44 cycles (about 3.2 hours of simulated time at 1.5 GHz).
pub const DEFAULT_MAX_CYCLES: u64 = 1 << 44;

/// Largest accepted limit (instructions or cycles): 2^62, so that a cycle count never overflows
/// while it is compared.
pub const MAX_LIMIT: u64 = 1 << 62;

/// Profiling regions (`mark.begin`) one core may have open at once.
pub const MAX_OPEN_REGIONS: usize = 1024;

/// How far one launch may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// Work one core may do in one launch (1 to [`MAX_LIMIT`]): one unit per instruction, and
    /// in a functional run one more per [`DMA_BYTES_PER_UNIT`] bytes a DMA copies.
    pub max_instructions: u64,
    /// Cycles a core's front end may advance past the launch's start (1 to [`MAX_LIMIT`]).
    pub max_cycles: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_instructions: DEFAULT_MAX_INSTRUCTIONS,
            max_cycles: DEFAULT_MAX_CYCLES,
        }
    }
}

/// A limit outside `1..=MAX_LIMIT`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {value}; expected 1 to {MAX_LIMIT}")]
pub struct LimitError {
    /// `max_instructions` or `max_cycles`.
    pub field: &'static str,
    /// The value given.
    pub value: u64,
}

impl RunLimits {
    /// Limits with both figures checked against `1..=MAX_LIMIT`.
    pub fn new(max_instructions: u64, max_cycles: u64) -> Result<Self, LimitError> {
        for (field, value) in [
            ("max_instructions", max_instructions),
            ("max_cycles", max_cycles),
        ] {
            if !(1..=MAX_LIMIT).contains(&value) {
                return Err(LimitError { field, value });
            }
        }
        Ok(RunLimits {
            max_instructions,
            max_cycles,
        })
    }

    /// The limits of a launch that starts at cycle `start`.
    pub(crate) fn budget(&self, start: u64) -> Budget {
        Budget {
            max_instructions: self.max_instructions,
            max_cycles: self.max_cycles,
            until: start.saturating_add(self.max_cycles),
        }
    }
}

/// The limits of one launch, as the dispatch loop checks them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    max_instructions: u64,
    max_cycles: u64,
    /// The cycle the front end may not pass.
    until: u64,
}

impl Budget {
    /// The fault when a core about to execute `instr`, having done `instructions` units of work
    /// (this instruction included), with its front end at cycle `front` and `open_regions`
    /// profiling regions open, is over the budget.
    #[inline]
    pub(crate) fn exceeded(
        &self,
        instr: &Instr,
        instructions: u64,
        front: u64,
        open_regions: usize,
    ) -> Option<FaultKind> {
        if open_regions >= MAX_OPEN_REGIONS && matches!(instr, Instr::MarkBegin { .. }) {
            Some(FaultKind::Invalid(format!(
                "mark.begin would open more than {MAX_OPEN_REGIONS} nested regions (is a mark.end missing in a loop?)"
            )))
        } else if instructions > self.max_instructions {
            Some(FaultKind::RunLimit {
                what: "units of work (one per instruction, one more per 256 bytes a DMA copies)",
                limit: self.max_instructions,
                flag: "--max-instructions",
            })
        } else if front > self.until {
            Some(FaultKind::RunLimit {
                what: "cycles",
                limit: self.max_cycles,
                flag: "--max-cycles",
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_where_they_enter() {
        assert!(RunLimits::new(0, 1).is_err());
        assert!(RunLimits::new(1, 0).is_err());
        assert!(RunLimits::new(1, MAX_LIMIT + 1).is_err());
        let e = RunLimits::new(5, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("max_cycles is 0; expected 1 to {MAX_LIMIT}")
        );
        assert!(RunLimits::new(MAX_LIMIT, MAX_LIMIT).is_ok());
    }

    #[test]
    fn the_budget_counts_from_the_launch_start() {
        let nop = Instr::Nop;
        let b = RunLimits::new(10, 100).unwrap().budget(1000);
        assert!(b.exceeded(&nop, 10, 1100, 0).is_none());
        assert!(matches!(
            b.exceeded(&nop, 11, 1000, 0),
            Some(FaultKind::RunLimit {
                what: "units of work (one per instruction, one more per 256 bytes a DMA copies)",
                limit: 10,
                ..
            })
        ));
        assert!(matches!(
            b.exceeded(&nop, 1, 1101, 0),
            Some(FaultKind::RunLimit {
                what: "cycles",
                limit: 100,
                ..
            })
        ));
        // A start near the end of time does not wrap.
        let late = RunLimits::default().budget(u64::MAX - 1);
        assert!(late.exceeded(&nop, 1, u64::MAX, 0).is_none());
    }

    #[test]
    fn regions_nest_at_most_the_limit() {
        let b = RunLimits::default().budget(0);
        let begin = Instr::MarkBegin { name: 0 };
        assert!(b.exceeded(&begin, 1, 0, MAX_OPEN_REGIONS - 1).is_none());
        assert!(
            b.exceeded(&Instr::MarkEnd, 1, 0, MAX_OPEN_REGIONS)
                .is_none()
        );
        let e = b.exceeded(&begin, 1, 0, MAX_OPEN_REGIONS).unwrap();
        assert!(e.to_string().contains("nested regions"), "{e}");
    }
}
