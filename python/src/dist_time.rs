//! Each collective's simulated duration on the slice, for `tpuemu.distributed`: the backend's
//! collective programs (what `tpuemu bench collective` runs, through the same
//! [`tpuemu_workloads::collective::simulate`]) and a one-DMA program for `send`/`recv`, run
//! timing-only on every chip of an emulated slice, once per distinct case in this process.

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::kernels::collective::{CollectiveOp, CollectiveSpec};
use tpuemu_isa::{CoreRef, Device, KernelArg, Launch, LaunchTarget};

use crate::dist::parse_slice;

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
    cached(&TIMES, key, || {
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
        ns.map_err(|e| PyRuntimeError::new_err(format!("timing {}: {e}", op.name())))
    })
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
    cached(&P2P_TIMES, key, || {
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
        ns.map_err(|e| PyRuntimeError::new_err(format!("timing send: {e}")))
    })
}

/// `cache[key]`, computed by `compute` the first time.
fn cached<K: std::hash::Hash + Eq>(
    cache: &Mutex<Option<HashMap<K, f64>>>,
    key: K,
    compute: impl FnOnce() -> PyResult<f64>,
) -> PyResult<f64> {
    if let Some(ns) = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&key))
    {
        return Ok(*ns);
    }
    let ns = compute()?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, ns);
    Ok(ns)
}
