//! `tpuemu._rust`: the native half of the PyTorch bridge (the Python package is `python/tpuemu`).
//!
//! It owns the emulated chip behind device "tpu" ([`device`]), exports the C ABI the C++ shim
//! calls per operator ([`abi`], [`call`]), compiles ATen graphs ([`graph`]), and gives Python the
//! runtime's controls: chip, mode, matmul precision, synchronisation, metrics and traces.

mod abi;
mod call;
mod cli;
mod device;
mod dist;
mod dist_time;
mod graph;
mod results;
mod sigint;
mod wide;

use std::sync::atomic::Ordering;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tpuemu_backend::{MatmulPrecision, Mode, Runtime, TpuError};

/// mimalloc for the Rust side of the extension: the eager host path allocates small objects per
/// operator, and glibc's malloc took a third of it. Rust frees what Rust allocated (a storage
/// handle PyTorch holds is dropped by calling back into Rust), so the two allocators never mix.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub(crate) fn err(e: TpuError) -> PyErr {
    if let TpuError::Interrupted(m) = &e {
        // Told to the user now: runs go on again.
        tpuemu_emulator::interrupt::clear();
        return Python::attach(|py| sigint::keyboard_interrupt(py, m.clone()));
    }
    PyRuntimeError::new_err(e.to_string())
}

fn rt() -> PyResult<Runtime> {
    device::runtime().map_err(err)
}

/// The address of the C ABI table the shim calls, and its version.
#[pyfunction]
fn vtable() -> (usize, u64) {
    (
        &abi::VTABLE as *const abi::VTable as usize,
        abi::ABI_VERSION,
    )
}

/// Chooses the chip (a preset name or a preset TOML file) before the device is first used.
#[pyfunction]
fn set_chip(name: &str) -> PyResult<()> {
    device::set_chip(name).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The chip in use (or that will be used).
#[pyfunction]
fn chip() -> String {
    device::chip_name()
}

/// Whether the device has been created.
#[pyfunction]
fn started() -> bool {
    device::started()
}

/// The chip's generation and headline figures, as JSON.
#[pyfunction]
fn chip_info() -> PyResult<String> {
    let rt = rt()?;
    let info = rt.chip_info();
    Ok(serde_json::json!({
        "chip": device::chip_name(),
        "generation": rt.device().topology().generation,
        "clock_hz": info.core.clock_hz,
        "peak_bf16_flops": info.peak_bf16_flops,
        "hbm_bytes_per_s": info.hbm_bytes_per_s,
    })
    .to_string())
}

/// Runs everything recorded and waits for the device (`torch.tpu.synchronize()`).
#[pyfunction]
fn sync(py: Python<'_>) -> PyResult<()> {
    let _watch = sigint::watch();
    let rt = rt()?;
    py.detach(|| rt.sync()).map_err(err)
}

/// The execution mode: "strict", "debug" or "defer".
#[pyfunction]
fn mode() -> PyResult<String> {
    Ok(rt()?.mode().name().to_string())
}

/// Sets the execution mode ("strict", "debug", "defer"); leaving "defer" runs what was recorded.
#[pyfunction]
fn set_mode(py: Python<'_>, mode: &str) -> PyResult<()> {
    let m = match mode {
        "strict" => Mode::Strict,
        "debug" => Mode::Debug,
        "defer" | "defer_and_fuse" => Mode::DeferAndFuse,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown mode {other:?}: expected \"strict\", \"debug\" or \"defer\""
            )));
        }
    };
    let _watch = sigint::watch();
    let rt = rt()?;
    py.detach(|| rt.set_mode(m)).map_err(err)
}

/// Prints every DeferAndFuse flush (`TORCH_TPU_DEBUG=1`).
#[pyfunction]
fn set_debug(on: bool) -> PyResult<()> {
    rt()?.set_debug(on);
    Ok(())
}

/// The matrix units' precision for float32 products: "default" (one bf16 pass), "high",
/// "highest".
#[pyfunction]
fn set_matmul_precision(p: &str) -> PyResult<()> {
    let p = match p {
        "default" => MatmulPrecision::Default,
        "high" => MatmulPrecision::High,
        "highest" => MatmulPrecision::Highest,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown precision {other:?}: expected \"default\", \"high\" or \"highest\""
            )));
        }
    };
    rt()?.set_precision(p);
    Ok(())
}

/// The float32 matmul precision.
#[pyfunction]
fn matmul_precision() -> PyResult<String> {
    Ok(match rt()?.precision() {
        MatmulPrecision::Default => "default",
        MatmulPrecision::High => "high",
        MatmulPrecision::Highest => "highest",
    }
    .into())
}

/// The runtime's metrics, the CPU fallbacks and the device's memory, as JSON.
#[pyfunction]
fn metrics_json() -> PyResult<String> {
    let rt = rt()?;
    let m = rt.metrics();
    let mut v = serde_json::to_value(&m).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let fb = device::fallbacks();
    v["cpu_fallbacks"] = serde_json::json!(
        fb.iter()
            .map(|(k, (n, _))| (k.clone(), *n))
            .collect::<std::collections::BTreeMap<_, _>>()
    );
    v["cpu_fallback_calls"] = serde_json::json!(fb.values().map(|(n, _)| n).sum::<u64>());
    v["hbm_bytes_in_use"] = serde_json::json!(rt.hbm_in_use());
    v["simulated_time_ns"] = serde_json::json!(rt.host_time_ns());
    v["chip"] = serde_json::json!(device::chip_name());
    v["mode"] = serde_json::json!(rt.mode().name());
    Ok(v.to_string())
}

/// The runtime's metrics report (PyTorch/XLA style) with the CPU fallbacks.
#[pyfunction]
fn metrics_report() -> PyResult<String> {
    let rt = rt()?;
    let mut s = rt.metrics().report();
    let fb = device::fallbacks();
    s.push_str(&format!(
        "Metric: CpuFallbacks\n  TotalSamples: {}\n",
        fb.values().map(|(n, _)| n).sum::<u64>()
    ));
    for (k, (n, ns)) in fb {
        s.push_str(&format!("  {k}: {n} ({:.3} ms on the host)\n", ns / 1e6));
    }
    Ok(s)
}

/// Clears the metrics and the fallback counters.
#[pyfunction]
fn reset_metrics() -> PyResult<()> {
    rt()?.reset_metrics();
    device::reset_fallbacks();
    Ok(())
}

/// Starts (or stops) recording trace events.
#[pyfunction]
fn set_profiling(on: bool) -> PyResult<()> {
    rt()?.set_profiling(on);
    Ok(())
}

/// The events recorded so far as Chrome trace JSON (what `tpuemu viz` opens); takes them.
/// A rank of a distributed job says which (`rank`, `world_size`, `slice`), so that
/// `tpuemu viz` merges a run's rank traces into one timeline.
#[pyfunction]
#[pyo3(signature = (label, rank=None, world_size=None, slice=None))]
fn take_trace(
    py: Python<'_>,
    label: &str,
    rank: Option<u32>,
    world_size: Option<u32>,
    slice: Option<String>,
) -> PyResult<String> {
    let rt = rt()?;
    Ok(py.detach(|| {
        let mut t = rt.take_trace(label);
        t.meta.rank = rank;
        t.meta.world_size = world_size;
        t.meta.slice = slice;
        tpuemu_isa::trace::chrome::to_chrome_json(&t)
    }))
}

/// The simulated host clock, ns.
#[pyfunction]
fn host_time_ns() -> PyResult<f64> {
    Ok(rt()?.host_time_ns())
}

/// Checks tpuemu's environment variables (`ValueError` for a value with no meaning, naming the
/// variable and the accepted values); `import tpuemu` calls it.
#[pyfunction]
fn check_env() -> PyResult<()> {
    tpuemu_backend::runtime::check_env()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// `(HBM bytes in use, the most in use since the last reset, capacity, bytes live tensors
/// reserve)` of this process's chip.
#[pyfunction]
fn memory() -> PyResult<(u64, u64, u64, u64)> {
    device::memory().map_err(err)
}

/// Starts the HBM peak over from what is in use now.
#[pyfunction]
fn reset_peak_memory() -> PyResult<()> {
    device::reset_peak().map_err(err)
}

/// Records a span on a host lane of the trace (Python-level calls).
#[pyfunction]
fn record_span(lane: &str, name: &str, start_ns: f64, end_ns: f64) -> PyResult<()> {
    rt()?.record_host_span(lane, name, start_ns, end_ns);
    Ok(())
}

/// Every registered operator: (overload, implementation kind, and for a derived in-place or
/// `out=` form its functional overload, where each of that overload's arguments comes from —
/// a position, -1 for `None`, -2 for the first output's dtype — and the written arguments).
#[pyfunction]
fn registry() -> Vec<RegistryRow> {
    use tpuemu_backend::ops::OpImpl;
    tpuemu_backend::ops::registry()
        .values()
        .map(|d| {
            let k = match d.implementation {
                OpImpl::Kernel => "kernel",
                OpImpl::Decomposition => "decomposition",
                OpImpl::View => "view",
                OpImpl::InPlace => "inplace",
                OpImpl::Out => "out",
            };
            let (functional, fargs, writes) = d.derivation().map_or_else(Default::default, |h| {
                (
                    h.functional.to_string(),
                    h.args.iter().map(|a| a.code()).collect(),
                    h.writes.iter().map(|&w| w as i64).collect(),
                )
            });
            (d.name.to_string(), k.to_string(), functional, fargs, writes)
        })
        .collect()
}

/// A row of [`registry`].
type RegistryRow = (String, String, String, Vec<i64>, Vec<i64>);

/// Lowers a serialised `pallas_call` (`tpuemu.pallas`) for this process's chip and registers it
/// as an operator: its name and its outputs' shapes and dtypes.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn pallas_register(spec: &str) -> PyResult<(String, Vec<(Vec<usize>, String)>)> {
    let rt = rt()?;
    let (name, outs) = tpuemu_backend::ops::pallas::register(&rt, spec).map_err(err)?;
    Ok((
        name,
        outs.into_iter()
            .map(|(s, d)| (s, d.name().to_string()))
            .collect(),
    ))
}

/// The assembly a serialised `pallas_call` lowers to on this process's chip.
#[pyfunction]
fn pallas_assembly(spec: &str) -> PyResult<String> {
    let rt = rt()?;
    tpuemu_backend::ops::pallas::assembly(&rt, spec).map_err(err)
}

/// Registers a serialised ATen graph for whole-graph compilation; its id.
#[pyfunction]
fn compile_graph(spec: &str) -> PyResult<i64> {
    graph::add_graph(spec).map_err(err)
}

/// (operator calls, ns inside the backend's operators, ns inside the emulator) since the last
/// reset: the bridge's own per-operator cost is the rest.
#[pyfunction]
fn timing() -> (u64, u64, u64) {
    (
        call::BACKEND_CALLS.load(Ordering::Relaxed),
        call::BACKEND_NS.load(Ordering::Relaxed),
        device::DEVICE_NS.load(Ordering::Relaxed),
    )
}

/// Resets [`timing`].
#[pyfunction]
fn reset_timing() {
    call::BACKEND_CALLS.store(0, Ordering::Relaxed);
    call::BACKEND_NS.store(0, Ordering::Relaxed);
    device::DEVICE_NS.store(0, Ordering::Relaxed);
}

/// The native half of tpuemu's PyTorch bridge.
/// The innermost line of Python outside torch and tpuemu on this thread's stack (`file:line`):
/// where the user called the operator being run, for errors raised later (device-side checks).
fn python_call_site() -> Option<String> {
    Python::attach(|py| {
        let sys = py.import("sys").ok()?;
        let mut frame = sys.call_method1("_getframe", (0,)).ok()?;
        loop {
            if frame.is_none() {
                return None;
            }
            let file: String = frame
                .getattr("f_code")
                .and_then(|c| c.getattr("co_filename"))
                .and_then(|f| f.extract())
                .ok()?;
            let inside = ["/torch/", "/tpuemu/", "<frozen "]
                .iter()
                .any(|p| file.contains(p));
            if !inside {
                let line: u32 = frame.getattr("f_lineno").and_then(|l| l.extract()).ok()?;
                return Some(format!("{file}:{line}"));
            }
            frame = frame.getattr("f_back").ok()?;
        }
    })
}

#[pymodule(name = "_rust")]
mod rust_module {
    #[pymodule_export]
    use super::cli::cli_main;
    #[pymodule_export]
    use super::dist::{begin_collective, device_time_ns, end_collective, slice_info, wait_until};
    #[pymodule_export]
    use super::dist_time::{collective_ns, send_ns};
    #[pymodule_export]
    use super::{
        check_env, chip, chip_info, compile_graph, host_time_ns, matmul_precision, memory,
        metrics_json, metrics_report, mode, pallas_assembly, pallas_register, record_span,
        registry, reset_metrics, reset_peak_memory, reset_timing, set_chip, set_debug,
        set_matmul_precision, set_mode, set_profiling, started, sync, take_trace, timing, vtable,
    };

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        tpuemu_backend::ops::set_call_site(super::python_call_site);
        super::sigint::install(m.py())
    }
}
