//! One collective run on every chip of an emulated slice: what `tpuemu bench collective`
//! reports and what the PyTorch bridge's process groups charge for each collective
//! (`python/src/dist.rs`), so that the two agree by construction.
//!
//! The collective is the backend's own ISA program ([`Collective`]), launched on every chip
//! of the slice at once. Timing-only, a program whose every chip does the same thing
//! translated is simulated on one chip standing for all
//! ([`Emulator::launch_symmetric`]); `full` simulates every chip (the same cycles, tested in
//! `tests/cli_bench.rs`).

use std::time::Instant;

use tpuemu_backend::kernels::collective::{BufferSlice, ChipBuffers, Collective, CollectiveSpec};
use tpuemu_emulator::{Emulator, LaunchStats};
use tpuemu_isa::{Completion, Device, DeviceError};

/// What a simulated collective did.
pub struct Simulated {
    /// The generated collective.
    pub collective: Collective,
    /// The launch's statistics (cycles, units, which chip stood for the others).
    pub stats: LaunchStats,
    /// When it ran and what it moved.
    pub completion: Completion,
    /// Host seconds the emulation took.
    pub host_seconds: f64,
}

impl Simulated {
    /// Simulated seconds: the launch's cycles at the chip's clock.
    pub fn seconds(&self, clock_hz: f64) -> f64 {
        self.stats.cycles() as f64 / clock_hz
    }
}

/// Why a collective could not be simulated.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The spec does not fit the slice (axes, sizes, dtype).
    #[error("{0}")]
    Spec(String),
    /// The device refused or faulted.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// Runs `spec` on every chip of `emu` (a slice). `fill(chip, bytes)` gives each chip's input
/// (none: the buffers are left as allocated, as timing-only runs want); `full` simulates every
/// chip even where one would do for all.
pub fn simulate(
    emu: &Emulator,
    spec: &CollectiveSpec,
    fill: Option<&dyn Fn(u32, usize) -> Vec<u8>>,
    full: bool,
) -> Result<Simulated, SimulateError> {
    let topo = emu.topology().clone();
    let c = Collective::new(spec, &topo).map_err(|e| SimulateError::Spec(e.to_string()))?;
    let pid = emu.load(c.program())?;
    let mut bufs = Vec::new();
    let mut owned = Vec::new();
    let result = (|| -> Result<(Completion, LaunchStats, f64), SimulateError> {
        for chip in 0..topo.num_chips() as u32 {
            let input = emu.alloc(chip, c.input_bytes())?;
            owned.push(input);
            let output = emu.alloc(chip, c.output_bytes())?;
            owned.push(output);
            if let Some(f) = fill {
                emu.write(input, 0, &f(chip, c.input_bytes() as usize), 0.0)?;
            }
            bufs.push(ChipBuffers {
                chip,
                input: BufferSlice::whole(input),
                output: BufferSlice::whole(output),
            });
        }
        let submit = emu.synchronize()?.end_ns;
        let symmetric = !full && c.translation_symmetric(&topo);
        let t0 = Instant::now();
        let id = if symmetric {
            c.launch_with(emu, pid, &bufs, submit, &|l| emu.launch_symmetric(l))
        } else {
            c.launch(emu, pid, &bufs, submit)
        }
        .map_err(|e| SimulateError::Spec(e.to_string()))?;
        let completion = emu.wait(id)?;
        let host_seconds = t0.elapsed().as_secs_f64();
        let stats = emu
            .stats(id)
            .ok_or_else(|| SimulateError::Spec("the launch left no statistics".into()))?;
        Ok((completion, stats, host_seconds))
    })();
    // The buffers go back to the chips whether the collective ran or not.
    for b in owned {
        let _ = emu.free(b);
    }
    let (completion, stats, host_seconds) = result?;
    Ok(Simulated {
        collective: c,
        stats,
        completion,
        host_seconds,
    })
}
