//! Printing what a launch did: cycles, simulated time, busy time and utilisation per unit.

use std::path::Path;

use serde_json::{Value, json};
use tpuemu_emulator::{ChipPreset, Emulator, LaunchStats};
use tpuemu_isa::Device;
use tpuemu_isa::trace::{Trace, TraceMeta};

use super::CliError;

/// Writes the events the emulator recorded as a Chrome trace at `path`, labelled `label`.
pub fn write_trace(
    path: &Path,
    emu: &Emulator,
    preset: &ChipPreset,
    chips: u32,
    label: String,
) -> Result<(), CliError> {
    let trace = Trace {
        meta: TraceMeta {
            label,
            generation: preset.name.clone(),
            clock_hz: preset.clock_hz,
            peak_bf16_flops: preset.peak_bf16_flops(),
            hbm_bytes_per_s: preset.hbm_bytes_per_s,
            chips,
            ..Default::default()
        },
        events: emu.drain_events(),
    };
    std::fs::write(path, tpuemu_isa::trace::chrome::to_chrome_json(&trace)).map_err(|source| {
        CliError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The launch as JSON: `cycles`, `seconds_simulated`, `units` (busy cycles, seconds and
/// utilisation per unit), `flops`, `hbm_bytes`, `instructions`, `host_seconds`.
pub fn launch_summary(stats: &LaunchStats, preset: &ChipPreset, host_seconds: f64) -> Value {
    let cycles = stats.cycles();
    let secs = cycles as f64 / preset.clock_hz;
    let units: serde_json::Map<String, Value> = stats
        .unit_busy()
        .into_iter()
        .map(|(name, busy)| {
            let util = if cycles == 0 { 0.0 } else { busy as f64 / cycles as f64 / stats.cores.len().max(1) as f64 };
            (name, json!({"busy_cycles": busy, "busy_seconds": busy as f64 / preset.clock_hz, "utilization": util}))
        })
        .collect();
    let flops = stats.flops() as f64;
    let peak = preset.peak_bf16_flops_per_core() * stats.cores.len() as f64;
    json!({
        "cycles": cycles,
        "seconds_simulated": secs,
        "instructions": stats.instructions(),
        "flops": stats.flops(),
        "flops_per_second": if secs > 0.0 { flops / secs } else { 0.0 },
        "mxu_utilization": if secs > 0.0 { flops / secs / peak } else { 0.0 },
        "hbm_bytes": stats.hbm_bytes(),
        "hbm_bytes_per_second": if secs > 0.0 { stats.hbm_bytes() as f64 / secs } else { 0.0 },
        "units": units,
        "host_seconds": host_seconds,
        "simulated_cycles_per_host_second": if host_seconds > 0.0 { cycles as f64 / host_seconds } else { 0.0 },
    })
}

/// Human-readable form of [`launch_summary`].
pub fn launch_table(stats: &LaunchStats, preset: &ChipPreset, host_seconds: f64) -> String {
    let s = launch_summary(stats, preset, host_seconds);
    let mut out = format!(
        "cycles           {}\nsimulated time   {}\ninstructions     {}\nMXU FLOPs        {} ({:.1}% of peak)\nHBM traffic      {} bytes ({:.1}% of bandwidth)\nhost time        {:.3} s ({:.3e} simulated cycles/s)\n\nunit      busy cycles   busy time   utilisation\n",
        s["cycles"],
        seconds(s["seconds_simulated"].as_f64().unwrap_or(0.0)),
        s["instructions"],
        s["flops"],
        100.0 * s["mxu_utilization"].as_f64().unwrap_or(0.0),
        s["hbm_bytes"],
        100.0 * s["hbm_bytes_per_second"].as_f64().unwrap_or(0.0) / preset.hbm_bytes_per_s,
        host_seconds,
        s["simulated_cycles_per_host_second"]
            .as_f64()
            .unwrap_or(0.0),
    );
    if let Some(units) = s["units"].as_object() {
        for (name, u) in units {
            let busy = u["busy_cycles"].as_u64().unwrap_or(0);
            if busy == 0 {
                continue;
            }
            out += &format!(
                "{:<9} {:>11}   {:>9}   {:>10.1}%\n",
                name,
                busy,
                seconds(u["busy_seconds"].as_f64().unwrap_or(0.0)),
                100.0 * u["utilization"].as_f64().unwrap_or(0.0)
            );
        }
    }
    out
}

/// `1.234 ms`, `56.7 us`, ...
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.3} us", s * 1e6)
    } else {
        format!("{:.1} ns", s * 1e9)
    }
}
