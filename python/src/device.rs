//! The emulated chip behind device "tpu": one process-wide runtime, created at first use on the
//! chip chosen by `tpuemu.set_chip(..)`, else `TPUEMU_CHIP`, else v5e.
//!
//! The emulator is wrapped in [`TimedDevice`], which measures the host time spent emulating
//! (launches, waits, transfers) so that benchmarks can subtract it from the bridge's per-operator
//! cost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tpuemu_backend::{Runtime, TpuError};
use tpuemu_emulator::{ChipPreset, Emulator, builtin, builtin_names};
use tpuemu_isa::trace::TraceEvent;
use tpuemu_isa::{
    BufferId, ChipId, Completion, Device, DeviceError, Launch, LaunchId, Program, ProgramId,
    Topology,
};

/// The chip chosen before first use (a preset name or a TOML file).
static CHIP: Mutex<Option<String>> = Mutex::new(None);
/// The runtime, once created.
static RT: OnceLock<Runtime> = OnceLock::new();
/// Host time spent inside the emulator, ns.
pub static DEVICE_NS: AtomicU64 = AtomicU64::new(0);
/// The most HBM in use at once since the start or [`reset_peak`], bytes.
static PEAK: AtomicU64 = AtomicU64::new(0);

/// HBM in use now, at most since the last reset (`torch.tpu.max_memory_allocated`), the chip's
/// capacity, and the bytes live tensors reserve (what a new tensor must fit beside).
pub fn memory() -> Result<(u64, u64, u64, u64), TpuError> {
    let rt = runtime()?;
    let now = rt.hbm_in_use();
    let peak = PEAK.fetch_max(now, Ordering::Relaxed).max(now);
    Ok((
        now,
        peak,
        rt.device().topology().chips[rt.chip() as usize].hbm_bytes,
        rt.memory_reserved(),
    ))
}

/// Starts the peak over from what is in use now.
pub fn reset_peak() -> Result<(), TpuError> {
    let now = runtime()?.hbm_in_use();
    PEAK.store(now, Ordering::Relaxed);
    Ok(())
}

/// Operators run on the CPU, by overload: (count, host ns).
static FALLBACKS: Mutex<BTreeMap<String, (u64, f64)>> = Mutex::new(BTreeMap::new());

/// The runtime, created on first use.
pub fn runtime() -> Result<Runtime, TpuError> {
    if let Some(rt) = RT.get() {
        return Ok(rt.clone());
    }
    let mut chip = CHIP.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rt) = RT.get() {
        return Ok(rt.clone());
    }
    let name = chip
        .clone()
        .or_else(|| std::env::var("TPUEMU_CHIP").ok())
        .unwrap_or_else(|| "v5e".into());
    let preset = load_preset(&name)?;
    let emu = Emulator::new(preset).map_err(|e| TpuError::Device(e.to_string()))?;
    let device = Arc::new(TimedDevice { inner: emu });
    let rt = Runtime::new(device)?;
    *chip = Some(name);
    Ok(RT.get_or_init(|| rt).clone())
}

/// Chooses the chip; an error once the runtime exists (with another chip).
pub fn set_chip(name: &str) -> Result<(), TpuError> {
    load_preset(name)?;
    let mut chip = CHIP.lock().unwrap_or_else(|e| e.into_inner());
    if RT.get().is_some() {
        if chip.as_deref() == Some(name) {
            return Ok(());
        }
        return Err(TpuError::BadArgs(format!(
            "tpuemu.set_chip({name:?}): the tpu device already runs on {}; choose the chip before \
             the first tensor is created",
            chip.as_deref().unwrap_or("?")
        )));
    }
    *chip = Some(name.to_string());
    Ok(())
}

/// The chip in use or chosen ("v5e" when nothing chose one yet).
pub fn chip_name() -> String {
    CHIP.lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .or_else(|| std::env::var("TPUEMU_CHIP").ok())
        .unwrap_or_else(|| "v5e".into())
}

/// Whether the runtime exists.
pub fn started() -> bool {
    RT.get().is_some()
}

/// A built-in preset by name, or a preset TOML file.
pub(crate) fn load_preset(name: &str) -> Result<ChipPreset, TpuError> {
    if let Some(p) = builtin(name) {
        return Ok(p);
    }
    if name.ends_with(".toml") || std::path::Path::new(name).is_file() {
        let text = std::fs::read_to_string(name)
            .map_err(|e| TpuError::BadArgs(format!("chip file {name}: {e}")))?;
        return ChipPreset::from_toml(&text)
            .map_err(|e| TpuError::BadArgs(format!("chip file {name}: {e}")));
    }
    Err(TpuError::BadArgs(format!(
        "unknown chip {name:?}: expected one of {} or a preset TOML file",
        builtin_names().join(", ")
    )))
}

/// Counts an operator run on the CPU and records its span in the trace.
pub fn note_fallback(name: &str, ns: f64) {
    {
        let mut f = FALLBACKS.lock().unwrap_or_else(|e| e.into_inner());
        let e = f.entry(name.to_string()).or_default();
        e.0 += 1;
        e.1 += ns;
    }
    // The simulated host clock is charged a modelled operator dispatch (not the measured
    // time, which would make simulated time depend on the machine); the copies to and from the
    // host are charged by the transfers themselves.
    if let Some(rt) = RT.get() {
        let start = rt.host_time_ns();
        rt.charge_host_ns("cpu fallback", rt.costs().op_dispatch_ns);
        rt.record_host_span("cpu fallback", name, start, rt.host_time_ns());
    }
}

/// The CPU fallbacks so far: overload -> (count, host ns).
pub fn fallbacks() -> BTreeMap<String, (u64, f64)> {
    FALLBACKS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Clears the fallback counters.
pub fn reset_fallbacks() {
    FALLBACKS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The emulator, timing the host work it does.
struct TimedDevice {
    inner: Emulator,
}

fn timed<T>(f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    DEVICE_NS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

impl Device for TimedDevice {
    fn topology(&self) -> &Topology {
        self.inner.topology()
    }
    fn alloc(&self, chip: ChipId, bytes: u64) -> Result<BufferId, DeviceError> {
        let b = self.inner.alloc(chip, bytes)?;
        PEAK.fetch_max(self.inner.hbm_in_use(chip), Ordering::Relaxed);
        Ok(b)
    }
    fn free(&self, buffer: BufferId) -> Result<(), DeviceError> {
        self.inner.free(buffer)
    }
    fn hbm_in_use(&self, chip: ChipId) -> u64 {
        self.inner.hbm_in_use(chip)
    }
    fn write(
        &self,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError> {
        timed(|| self.inner.write(buffer, offset, data, submit_ns))
    }
    fn read(
        &self,
        buffer: BufferId,
        offset: u64,
        out: &mut [u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError> {
        timed(|| self.inner.read(buffer, offset, out, submit_ns))
    }
    fn deliver(&self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        timed(|| self.inner.deliver(buffer, offset, data))
    }
    fn peek(&self, buffer: BufferId, offset: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        timed(|| self.inner.peek(buffer, offset, out))
    }
    fn load(&self, program: &Program) -> Result<ProgramId, DeviceError> {
        self.inner.load(program)
    }
    fn launch(&self, launch: &Launch) -> Result<LaunchId, DeviceError> {
        timed(|| self.inner.launch(launch))
    }
    fn wait(&self, launch: LaunchId) -> Result<Completion, DeviceError> {
        timed(|| self.inner.wait(launch))
    }
    fn synchronize(&self) -> Result<Completion, DeviceError> {
        timed(|| self.inner.synchronize())
    }
    fn set_profiling(&self, on: bool) {
        self.inner.set_profiling(on)
    }
    fn drain_events(&self) -> Vec<TraceEvent> {
        self.inner.drain_events()
    }
}
