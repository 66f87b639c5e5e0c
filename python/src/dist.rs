//! The chip's side of `torch.distributed` on "tpu" (`tpuemu.distributed`): the slice the ranks
//! form, each collective's simulated duration, and the runtime's bookkeeping of a collective
//! whose bytes gloo moves between the rank processes.
//!
//! A slice is `GENERATION:AxBxC` (`v5e:2x2`, or a preset TOML file: `my.toml:4x4`), as
//! `tpuemu bench collective --slice` reads it, optionally `SxGENERATION:AxB` for S slices
//! joined by the data-centre network. Rank `r` is chip `r` of the slice, at coordinates
//! `c` with `r = c0 + d0 * (c1 + d1 * c2)` (axis 0 fastest, the emulator's numbering).
//!
//! A collective's duration is the backend's collective program run timing-only on every chip
//! of the slice ([`tpuemu_workloads::collective::simulate`], what `tpuemu bench collective`
//! reports), once per distinct (slice, op, dtype, elements, axes) in this process.

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::json;
use tpuemu_backend::DType;
use tpuemu_backend::kernels::collective::{CollectiveOp, CollectiveSpec};
use tpuemu_backend::runtime::{CollectiveEntry, CollectiveRecord};
use tpuemu_emulator::{ChipPreset, Emulator};
use tpuemu_isa::{CoreRef, Device, KernelArg, Launch, LaunchTarget};

use crate::device::{load_preset, runtime};

/// A parsed slice.
struct Slice {
    /// The chip (preset name or file) as written.
    chip: String,
    preset: ChipPreset,
    dims: Vec<u32>,
    slices: u32,
}

impl Slice {
    fn device(&self) -> Result<Emulator, String> {
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
fn parse_slice(text: &str, world: Option<u32>) -> Result<Slice, String> {
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

/// Largest collective simulated at once; larger ones are timed in equal pieces of at most this
/// many bytes, one after another (the collective programs address at most 2 GiB per buffer).
const PIECE_BYTES: u64 = 1 << 30;

/// The spec that times `bytes` of `dtype` for `op` over a group of `group` chips: the dtype
/// where the collective programs support it (sums: float32, bfloat16, float16, int32; moves:
/// any 1-, 2- or 4-byte type), else float32 elements of the same bytes; elements rounded up
/// to a multiple of the group (the programs split arrays into equal shards).
fn timing_spec(
    op: CollectiveOp,
    dtype: &str,
    bytes: u64,
    group: u64,
    axes: &[usize],
) -> CollectiveSpec {
    let native = DType::from_name(dtype).filter(|d| {
        if op.reduces() {
            matches!(d, DType::F32 | DType::BF16 | DType::F16 | DType::I32)
        } else {
            d.size() <= 4
        }
    });
    let d = native.unwrap_or(DType::F32);
    let esz = d.size() as u64;
    let elements = bytes.div_ceil(esz).max(1).div_ceil(group) * group;
    CollectiveSpec::new(op, d, elements, axes)
}

type TimeKey = (String, CollectiveOp, String, u64, Vec<usize>);

/// Simulated durations by (slice, op, dtype, bytes, axes), and the slices' emulators.
static TIMES: Mutex<Option<HashMap<TimeKey, f64>>> = Mutex::new(None);

/// Simulated ns of `op` (`all-gather`, `reduce-scatter`, `all-reduce`, `all-to-all`) over
/// `axes` (first outermost) of `slice`, for an array of `bytes` of `dtype` (the sizes
/// `tpuemu bench collective --bytes` means: gathered, scattered, reduced, or held by each chip).
#[pyfunction]
pub fn collective_ns(
    py: Python<'_>,
    slice: &str,
    op: &str,
    dtype: &str,
    bytes: u64,
    axes: Vec<usize>,
) -> PyResult<f64> {
    let op = CollectiveOp::from_name(op).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown collective {op:?}: expected all-gather, reduce-scatter, all-reduce or all-to-all"
        ))
    })?;
    let key: TimeKey = (
        slice.to_string(),
        op,
        dtype.to_string(),
        bytes,
        axes.clone(),
    );
    if let Some(ns) = TIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&key))
    {
        return Ok(*ns);
    }
    let s = parse_slice(slice, None).map_err(PyValueError::new_err)?;
    let ns = py.detach(|| -> Result<f64, String> {
        let emu = s.device()?;
        emu.set_timing_only(true);
        let mesh = emu.topology().mesh.clone();
        if let Some(a) = axes.iter().find(|a| **a >= mesh.len()) {
            return Err(format!("axis {a} is not an axis of the mesh {mesh:?}"));
        }
        let group: u64 = axes.iter().map(|a| mesh[*a] as u64).product();
        let pieces = bytes.div_ceil(PIECE_BYTES).max(1);
        let piece = bytes.div_ceil(pieces);
        let spec = timing_spec(op, dtype, piece, group, &axes);
        let sim = tpuemu_workloads::collective::simulate(&emu, &spec, None, false)
            .map_err(|e| e.to_string())?;
        Ok(sim.seconds(s.preset.clock_hz) * 1e9 * pieces as f64)
    });
    let ns = ns.map_err(|e| PyRuntimeError::new_err(format!("timing {}: {e}", op.name())))?;
    TIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, ns);
    Ok(ns)
}

/// A push of `len` bytes from chip `src` to chip `dst` of a slice: one remote DMA, routed by the
/// interconnect dimension by dimension, the short way round (what `send`/`recv` cost).
const P2P: &str = "
.program send_recv
.arg x buffer
.arg y buffer
.arg src scalar
.arg dst scalar
.arg len scalar
    ssys s1, chip
    sld s2, [8]
    sld s3, [12]
    sld s4, [16]
    smov s0, 0
    scmp.eq s5, s1, s2
    brz s5, receive
    mark.begin \"send\"
    dma hbm.y[s0], hbm.x[s0], len=s4, sem=sem0, remote=s3, rsem=sem1
    sem.wait sem0, s4
    mark.end
    halt
receive:
    sem.wait sem1, s4
    halt
";

type P2pKey = (String, u32, u32, u64);

static P2P_TIMES: Mutex<Option<HashMap<P2pKey, f64>>> = Mutex::new(None);

/// Simulated ns of sending `bytes` from rank (chip) `src` to rank `dst` of `slice`.
#[pyfunction]
pub fn send_ns(py: Python<'_>, slice: &str, src: u32, dst: u32, bytes: u64) -> PyResult<f64> {
    let key: P2pKey = (slice.to_string(), src, dst, bytes);
    if let Some(ns) = P2P_TIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&key))
    {
        return Ok(*ns);
    }
    let s = parse_slice(slice, None).map_err(PyValueError::new_err)?;
    let ns = py.detach(|| -> Result<f64, String> {
        let emu = s.device()?;
        emu.set_timing_only(true);
        let chips = emu.topology().num_chips() as u32;
        if src >= chips || dst >= chips || src == dst {
            return Err(format!("ranks {src} -> {dst} are not two chips of {chips}"));
        }
        let program = tpuemu_isa::text::assemble(P2P).map_err(|e| e.to_string())?;
        let pid = emu.load(&program).map_err(|e| e.to_string())?;
        let dev = |e: tpuemu_isa::DeviceError| e.to_string();
        let pieces = bytes.div_ceil(PIECE_BYTES).max(1);
        let piece = bytes.div_ceil(pieces).max(1);
        let mut targets = Vec::new();
        let mut owned = Vec::new();
        for chip in [src, dst] {
            let x = emu.alloc(chip, piece).map_err(dev)?;
            let y = emu.alloc(chip, piece).map_err(dev)?;
            owned.extend([x, y]);
            targets.push(LaunchTarget {
                core: CoreRef { chip, core: 0 },
                args: vec![
                    KernelArg::Buffer(x),
                    KernelArg::Buffer(y),
                    KernelArg::Scalar(src),
                    KernelArg::Scalar(dst),
                    KernelArg::Scalar(piece as u32),
                ],
            });
        }
        let submit = emu.synchronize().map_err(dev)?.end_ns;
        let run = emu
            .launch(&Launch {
                program: pid,
                targets,
                submit_ns: submit,
                op_id: None,
                group_id: None,
            })
            .and_then(|id| emu.wait(id));
        for b in owned {
            let _ = emu.free(b);
        }
        let done = run.map_err(dev)?;
        Ok((done.end_ns - done.start_ns) * pieces as f64)
    });
    let ns = ns.map_err(|e| PyRuntimeError::new_err(format!("timing send: {e}")))?;
    P2P_TIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, ns);
    Ok(ns)
}

/// The chip reaches a collective: `(op id, call ns, issued ns, device ns)`
/// (`Runtime::begin_collective`).
#[pyfunction]
pub fn begin_collective(
    py: Python<'_>,
    name: &str,
    shapes: &str,
) -> PyResult<(u64, f64, f64, f64)> {
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
    let rt = runtime().map_err(crate::err)?;
    py.detach(|| rt.device_time_ns()).map_err(crate::err)
}

/// Launches made from now on start at `ns` or later (`Work.wait()`).
#[pyfunction]
pub fn wait_until(ns: f64) -> PyResult<()> {
    runtime().map_err(crate::err)?.wait_until(ns);
    Ok(())
}
