//! The chip's side of `torch.distributed` on "tpu" (`tpuemu.distributed`): the slice the ranks
//! form, each collective's simulated duration, and the runtime's bookkeeping of a collective
//! whose bytes gloo moves between the rank processes.
//!
//! A slice is `GENERATION:AxBxC` (`v5e:2x2`, or a preset TOML file: `my.toml:4x4`), as
//! `tpuemu bench collective --slice` reads it, optionally `SxGENERATION:AxB` for S slices
//! joined by the data-centre network. Rank `r` is chip `r` of the slice, at coordinates
//! `c` with `r = c0 + d0 * (c1 + d1 * c2)` (axis 0 fastest, the emulator's numbering).
//!
//! Each collective's duration comes from [`crate::dist_time`].

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::json;
use tpuemu_backend::runtime::{CollectiveEntry, CollectiveRecord};
use tpuemu_emulator::{ChipPreset, Emulator};
use tpuemu_isa::Device;

use crate::device::{load_preset, runtime};

/// A parsed slice.
pub(crate) struct Slice {
    /// The chip (preset name or file) as written.
    chip: String,
    pub(crate) preset: ChipPreset,
    dims: Vec<u32>,
    slices: u32,
}

impl Slice {
    pub(crate) fn device(&self) -> Result<Emulator, String> {
        if self.slices > 1 {
            Emulator::multi_slice(self.preset.clone(), self.slices, &self.dims)
        } else {
            Emulator::slice(self.preset.clone(), &self.dims)
        }
        .map_err(|e| e.to_string())
    }

    fn chips(&self) -> u64 {
        self.dims.iter().map(|d| *d as u64).product::<u64>() * self.slices as u64
    }
}

/// The most nearly square shape of `n` chips with at most `axes` axes, largest axis last
/// (`4` -> `2x2`, `8` -> `2x4`, `8` on a 3D torus -> `2x2x2`, `6` -> `2x3`, `7` -> `7`).
fn default_dims(n: u32, axes: u32) -> Vec<u32> {
    let mut dims = Vec::new();
    let mut rest = n;
    for k in (1..=axes).rev() {
        if k == 1 {
            dims.push(rest);
            break;
        }
        // The largest divisor of `rest` not above its k-th root.
        let root = (rest as f64).powf(1.0 / k as f64).round() as u32 + 1;
        let d = (1..=root.min(rest))
            .rev()
            .find(|d| rest.is_multiple_of(*d) && (*d as u64).pow(k) <= rest as u64)
            .unwrap_or(1);
        if d > 1 {
            dims.push(d);
            rest /= d;
        }
    }
    dims.retain(|d| *d > 1);
    if dims.is_empty() {
        dims.push(1);
    }
    dims.sort_unstable();
    dims
}

/// Parses `[Sx]CHIP:AxBxC`, or `CHIP` alone with `world` chips in the default shape.
pub(crate) fn parse_slice(text: &str, world: Option<u32>) -> Result<Slice, String> {
    let err = |m: String| format!("slice {text:?}: {m}");
    let (head, dims) = match text.rsplit_once(':') {
        Some((h, d)) if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit() || b == b'x') => {
            (h, Some(d))
        }
        _ => (text, None),
    };
    let (slices, chip) = match head.split_once('x') {
        Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            match n.parse::<u32>() {
                Ok(v) if v > 0 => (v, rest),
                _ => return Err(err(format!("`{n}` is not a number of slices"))),
            }
        }
        _ => (1, head),
    };
    let preset = load_preset(chip).map_err(|e| err(e.to_string()))?;
    let dims = match dims {
        Some(d) => d
            .split('x')
            .map(|x| match x.parse::<u32>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(err(format!(
                    "`{x}` is not a chip count; expected e.g. v5e:2x2"
                ))),
            })
            .collect::<Result<Vec<u32>, _>>()?,
        None => {
            let n = world.ok_or_else(|| {
                err("expected GENERATION:AxB, e.g. v5e:2x2 (or a world size to shape it)".into())
            })?;
            if n == 0 || !n.is_multiple_of(slices) {
                return Err(err(format!("{n} chips do not make {slices} equal slices")));
            }
            default_dims(n / slices, preset.ici_dims)
        }
    };
    if dims.len() > preset.ici_dims as usize {
        return Err(err(format!(
            "{} slices have at most {} axes, {} given",
            preset.name,
            preset.ici_dims,
            dims.len()
        )));
    }
    preset.check_slice(&dims).map_err(|e| err(e.to_string()))?;
    Ok(Slice {
        chip: chip.to_string(),
        preset,
        dims,
        slices,
    })
}

/// The slice `text` names (with `world` chips where it gives only a chip), as JSON: `spec`
/// (canonical), `chip`, `generation`, `dims` (one slice), `slices`, `mesh` (all axes, the DCN
/// one last), `wraparound`, `dcn_axis`, `chips`, `coords` (per chip, i.e. per rank).
#[pyfunction]
#[pyo3(signature = (text, world=None))]
pub fn slice_info(text: &str, world: Option<u32>) -> PyResult<String> {
    let s = parse_slice(text, world).map_err(PyValueError::new_err)?;
    if s.chips() > 4096 {
        return Err(PyValueError::new_err(format!(
            "slice {text:?}: {} chips; one process per chip allows at most 4096",
            s.chips()
        )));
    }
    let emu = s.device().map_err(PyValueError::new_err)?;
    let topo = emu.topology();
    let dims: Vec<String> = s.dims.iter().map(|d| d.to_string()).collect();
    let prefix = if s.slices > 1 {
        format!("{}x", s.slices)
    } else {
        String::new()
    };
    Ok(json!({
        "spec": format!("{prefix}{}:{}", s.chip, dims.join("x")),
        "chip": s.chip,
        "generation": topo.generation,
        "dims": s.dims,
        "slices": s.slices,
        "mesh": topo.mesh,
        "wraparound": topo.wraparound,
        "dcn_axis": topo.dcn_axis,
        "chips": topo.num_chips(),
        "coords": topo.chips.iter().map(|c| c.coords.clone()).collect::<Vec<_>>(),
        "clock_hz": s.preset.clock_hz,
        "ici_link_bytes_per_s": s.preset.ici_link_bytes_per_s,
    })
    .to_string())
}

/// The chip reaches a collective: `(op id, call ns, issued ns, device ns)`
/// (`Runtime::begin_collective`).
#[pyfunction]
pub fn begin_collective(
    py: Python<'_>,
    name: &str,
    shapes: &str,
) -> PyResult<(u64, f64, f64, f64)> {
    let _watch = crate::sigint::watch();
    let rt = runtime().map_err(crate::err)?;
    let e = py
        .detach(|| rt.begin_collective(name, shapes.to_string()))
        .map_err(crate::err)?;
    Ok((e.op_id, e.call_ns, e.issued_ns, e.device_ns))
}

/// A collective is over (`Runtime::end_collective`); `args` is a JSON object for the trace.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
pub fn end_collective(
    entry: (u64, f64, f64, f64),
    kind: &str,
    label: &str,
    bytes: u64,
    start_ns: f64,
    end_ns: f64,
    args: &str,
) -> PyResult<()> {
    let rt = runtime().map_err(crate::err)?;
    let args: serde_json::Map<String, serde_json::Value> = serde_json::from_str(args)
        .map_err(|e| PyValueError::new_err(format!("collective args: {e}")))?;
    rt.end_collective(CollectiveRecord {
        entry: CollectiveEntry {
            op_id: entry.0,
            call_ns: entry.1,
            issued_ns: entry.2,
            device_ns: entry.3,
        },
        kind: kind.to_string(),
        label: label.to_string(),
        bytes,
        start_ns,
        end_ns,
        args: args.into_iter().collect(),
    });
    Ok(())
}

/// When the chip finishes the work issued so far (`torch.tpu.Event.record`), ns of simulated
/// time; the host clock does not move.
#[pyfunction]
pub fn device_time_ns(py: Python<'_>) -> PyResult<f64> {
    let _watch = crate::sigint::watch();
    let rt = runtime().map_err(crate::err)?;
    py.detach(|| rt.device_time_ns()).map_err(crate::err)
}

/// Launches made from now on start at `ns` or later (`Work.wait()`).
#[pyfunction]
pub fn wait_until(ns: f64) -> PyResult<()> {
    runtime().map_err(crate::err)?.wait_until(ns);
    Ok(())
}
