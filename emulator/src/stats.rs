//! What a launch did: cycles, busy time per unit, FLOPs and HBM traffic.

use serde::Serialize;

use crate::core::timing::SYNC_UNITS;

/// Names of the synchronous units, in `unit_busy` order.
pub const SYNC_UNIT_NAMES: [&str; SYNC_UNITS] = ["scalar", "valu", "vld", "vst", "xlu", "eup"];

/// One core's part of a launch.
#[derive(Clone, Debug, Serialize)]
pub struct CoreStats {
    /// Chip.
    pub chip: u32,
    /// Core.
    pub core: u32,
    /// Cycle at which this core finished.
    pub end_cycle: u64,
    /// Instructions executed.
    pub instructions: u64,
    /// Busy cycles of scalar, vector ALU, load, store, cross-lane and transcendental units.
    pub unit_busy: [u64; SYNC_UNITS],
    /// Busy (streaming) cycles of each matrix unit.
    pub mxu_busy: Vec<u64>,
    /// Busy cycles of each DMA engine.
    pub dma_busy: Vec<u64>,
    /// Useful FLOPs of matrix-unit work (2 x M x K x N per matmul, passes not counted).
    pub flops: u64,
    /// HBM bytes moved by DMA (burst-rounded).
    pub hbm_bytes: u64,
    /// Bytes this core sent to other chips by remote DMA.
    pub ici_bytes: u64,
    /// First cycle of matrix-unit work (a weight load or a matmul).
    pub mxu_first: Option<u64>,
    /// Last cycle a matrix-unit result left the array.
    pub mxu_last: u64,
}

/// A whole launch.
#[derive(Clone, Debug, Serialize)]
pub struct LaunchStats {
    /// Cycle the launch started.
    pub start_cycle: u64,
    /// Cycle the last core finished.
    pub end_cycle: u64,
    /// Per core.
    pub cores: Vec<CoreStats>,
    /// The chip the launch was simulated on alone, when every chip ran a translation of its
    /// run ([`crate::Emulator::launch_symmetric`]): the other chips' statistics are its own.
    pub represented_by: Option<u32>,
}

impl LaunchStats {
    /// Cycles from start to end.
    pub fn cycles(&self) -> u64 {
        self.end_cycle - self.start_cycle
    }

    /// FLOPs of all cores.
    pub fn flops(&self) -> u64 {
        self.cores.iter().map(|c| c.flops).sum()
    }

    /// HBM bytes of all cores.
    pub fn hbm_bytes(&self) -> u64 {
        self.cores.iter().map(|c| c.hbm_bytes).sum()
    }

    /// Bytes all cores sent over ICI.
    pub fn ici_bytes(&self) -> u64 {
        self.cores.iter().map(|c| c.ici_bytes).sum()
    }

    /// Instructions of all cores.
    pub fn instructions(&self) -> u64 {
        self.cores.iter().map(|c| c.instructions).sum()
    }

    /// Cycles from the first matrix-unit work to the last result out, over all cores (the
    /// SCALE-Sim "compute cycles").
    pub fn mxu_cycles(&self) -> u64 {
        let first = self.cores.iter().filter_map(|c| c.mxu_first).min();
        let last = self.cores.iter().map(|c| c.mxu_last).max().unwrap_or(0);
        first.map_or(0, |f| last.saturating_sub(f))
    }

    /// Busy cycles per unit, summed over cores, named (`scalar`, ..., `mxu0`, `dma0`).
    pub fn unit_busy(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = SYNC_UNIT_NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.to_string(),
                    self.cores.iter().map(|c| c.unit_busy[i]).sum(),
                )
            })
            .collect();
        let nm = self
            .cores
            .iter()
            .map(|c| c.mxu_busy.len())
            .max()
            .unwrap_or(0);
        for m in 0..nm {
            out.push((
                format!("mxu{m}"),
                self.cores
                    .iter()
                    .map(|c| c.mxu_busy.get(m).copied().unwrap_or(0))
                    .sum(),
            ));
        }
        let nd = self
            .cores
            .iter()
            .map(|c| c.dma_busy.len())
            .max()
            .unwrap_or(0);
        for d in 0..nd {
            out.push((
                format!("dma{d}"),
                self.cores
                    .iter()
                    .map(|c| c.dma_busy.get(d).copied().unwrap_or(0))
                    .sum(),
            ));
        }
        out
    }
}
