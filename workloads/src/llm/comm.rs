//! Collectives for a step: recorded on one chip and timed on the slice ([`SoloComm`],
//! [`CommTimer`]), or run for real between every chip of a slice ([`PeerComm`]).
//!
//! Every collective is the backend's own: a DTensor redistribution (`Shard(0)` -> `Replicate`
//! all-gathers, `Partial` -> `Shard(0)` reduce-scatters, `Partial` -> `Replicate`
//! all-reduces, and `Shard(1)` -> `Shard(0)` of a local tensor seen as `[k, numel / k]` for an
//! all-to-all) over the named mesh dimensions, one ISA program run by every chip of the slice.

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};

use tpuemu_backend::dtype::DType;
use tpuemu_backend::error::{Result, TpuError};
use tpuemu_backend::kernels::collective::{Collective, CollectiveOp, CollectiveSpec};
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;
use tpuemu_dtensor::{DTensor, DeviceMesh, Placement, Reduce};
use tpuemu_emulator::Emulator;
use tpuemu_isa::Device;

use super::ctx::{Coll, CollKind, Comm};

/// The shape of a collective's output on each chip.
pub fn out_shape(kind: CollKind, shape: &[usize], k: usize) -> Result<Vec<usize>> {
    let mut s = shape.to_vec();
    match kind {
        CollKind::AllGather => s[0] *= k,
        CollKind::ReduceScatter => {
            if !s[0].is_multiple_of(k) {
                return Err(TpuError::ShapeMismatch(format!(
                    "reduce-scatter of {shape:?} over {k} chips: dimension 0 must divide"
                )));
            }
            s[0] /= k
        }
        CollKind::AllReduce => {}
        CollKind::AllToAll => {
            let n: usize = shape.iter().product();
            if !n.is_multiple_of(k) {
                return Err(TpuError::ShapeMismatch(format!(
                    "all-to-all of {shape:?} over {k} chips: the elements must divide"
                )));
            }
        }
    }
    Ok(s)
}

fn placements(mesh: &DeviceMesh, dims: &[usize], p: Placement) -> Vec<Placement> {
    (0..mesh.ndim())
        .map(|d| {
            if dims.contains(&d) {
                p
            } else {
                Placement::Replicate
            }
        })
        .collect()
}

/// `(from, to)` placements of a collective over `dims`.
fn transition(mesh: &DeviceMesh, kind: CollKind, dims: &[usize]) -> [Vec<Placement>; 2] {
    let (a, b) = match kind {
        CollKind::AllGather => (Placement::Shard(0), Placement::Replicate),
        CollKind::ReduceScatter => (Placement::Partial(Reduce::Sum), Placement::Shard(0)),
        CollKind::AllReduce => (Placement::Partial(Reduce::Sum), Placement::Replicate),
        // Local `[k, c]`, row `j` for chip `j`: the global `[k, k c]` (Shard(1)) to rows
        // (Shard(0)) gives chip `j` row `j` of every chip, concatenated.
        CollKind::AllToAll => (Placement::Shard(1), Placement::Shard(0)),
    };
    [placements(mesh, dims, a), placements(mesh, dims, b)]
}

fn group(mesh_shape: &[usize], dims: &[usize]) -> usize {
    dims.iter().map(|d| mesh_shape[*d]).product()
}

/// Records collectives on one chip standing for all (the symmetry shortcut): the output is a
/// tensor of the right shape and no value; the prediction times the collective on the slice
/// with [`CommTimer`].
pub struct SoloComm {
    /// Sizes of the mesh dimensions.
    pub mesh_shape: Vec<usize>,
}

impl Comm for SoloComm {
    fn collective(&mut self, rt: &Runtime, c: &Coll, t: &Tensor) -> Result<Tensor> {
        let k = group(&self.mesh_shape, &c.dims);
        let s = out_shape(c.kind, t.shape(), k)?;
        Tensor::empty(rt, &s, t.dtype())
    }

    fn group_size(&self, dims: &[usize]) -> usize {
        group(&self.mesh_shape, dims)
    }
}

/// Times collectives on a slice: each distinct (kind, dimensions, bytes, dtype) once, by running
/// it on every chip of the mesh (timing only) — or, given the slice's emulator
/// ([`CommTimer::with_emulator`]), a translation-symmetric one (a gather, scatter or reduction
/// whose rings close in one hop) on one chip standing for all, as `tpuemu bench collective`
/// does (`Emulator::launch_symmetric`; the same time, tested in `tests/llm_predict.rs`).
pub struct CommTimer {
    mesh: DeviceMesh,
    cache: HashMap<(CollKind, Vec<usize>, u64, DType), f64>,
    emu: Option<Arc<Emulator>>,
    one_chip: usize,
}

impl CommTimer {
    /// A timer over `mesh` (its device should be in timing-only mode).
    pub fn new(mesh: DeviceMesh) -> Self {
        CommTimer {
            mesh,
            cache: HashMap::new(),
            emu: None,
            one_chip: 0,
        }
    }

    /// The same timer, simulating symmetric collectives on one chip of `emu`: a timing-only
    /// slice of the mesh's shape and generation, *not* the mesh's own device (a launch moves
    /// a device's clock, and the other collectives are timed on the mesh's).
    pub fn with_emulator(mut self, emu: Arc<Emulator>) -> Self {
        self.emu = Some(emu);
        self
    }

    /// Simulated ns of a symmetric collective on one chip standing for all; `None` where it is
    /// not symmetric (an all-to-all, a ring that does not close in one hop) or no emulator
    /// was given.
    fn time_symmetric(
        &self,
        kind: CollKind,
        dims: &[usize],
        n: usize,
        dtype: DType,
    ) -> Result<Option<f64>> {
        let Some(emu) = &self.emu else {
            return Ok(None);
        };
        let k = group(self.mesh.shape(), dims);
        let (op, elements) = match kind {
            CollKind::AllGather => (CollectiveOp::AllGather, n * k),
            CollKind::ReduceScatter => (CollectiveOp::ReduceScatter, n),
            // Padded to a multiple of the group, as the DTensor all-reduce pads it.
            CollKind::AllReduce => (CollectiveOp::AllReduce, n.next_multiple_of(k)),
            CollKind::AllToAll => return Ok(None),
        };
        // The group's axes as the DTensor collective lists them (`tpuemu_dtensor`'s `comm`):
        // each mesh dimension's topology axes, last first.
        let axes: Vec<usize> = dims
            .iter()
            .flat_map(|&m| self.mesh.topology_axes(m).iter().rev().copied())
            .collect();
        let spec = CollectiveSpec::new(op, dtype, elements as u64, &axes);
        let topo = emu.topology();
        // A collective the kernel cannot generate as asked (uneven shards) takes the DTensor
        // path, which shapes it as the step's would be.
        match Collective::new(&spec, topo) {
            Ok(c) if c.translation_symmetric(topo) => {}
            _ => return Ok(None),
        }
        let sim = crate::collective::simulate(emu, &spec, None, false)
            .map_err(|e| TpuError::Device(e.to_string()))?;
        if sim.stats.represented_by.is_none() {
            return Ok(None);
        }
        let clock = emu.topology().chips[0].core.clock_hz;
        Ok(Some(sim.seconds(clock) * 1e9))
    }

    /// Distinct collectives run so far.
    pub fn runs(&self) -> usize {
        self.cache.len()
    }

    /// Of those, the ones simulated on one chip standing for all.
    pub fn runs_on_one_chip(&self) -> usize {
        self.one_chip
    }

    fn sync_all(&self) -> Result<f64> {
        let mut t: f64 = 0.0;
        for rt in self.mesh.runtimes() {
            rt.sync()?;
            t = t.max(rt.host_time_ns());
        }
        Ok(t)
    }

    /// Simulated ns of `kind` over `dims` on a local input of `bytes` of `dtype` per chip.
    pub fn time(
        &mut self,
        kind: CollKind,
        dims: &[usize],
        bytes: u64,
        dtype: DType,
    ) -> Result<f64> {
        let key = (kind, dims.to_vec(), bytes, dtype);
        if let Some(ns) = self.cache.get(&key) {
            return Ok(*ns);
        }
        let n = (bytes as usize).div_ceil(dtype.size());
        if let Some(ns) = self.time_symmetric(kind, dims, n, dtype)? {
            self.one_chip += 1;
            self.cache.insert(key, ns);
            return Ok(ns);
        }
        let shape = match kind {
            CollKind::AllToAll => {
                let k = group(self.mesh.shape(), dims);
                vec![k, n.div_ceil(k)]
            }
            _ => vec![n],
        };
        let locals: Vec<Tensor> = self
            .mesh
            .runtimes()
            .iter()
            .map(|rt| Tensor::empty(rt, &shape, dtype))
            .collect::<Result<_>>()?;
        let [from, to] = transition(&self.mesh, kind, dims);
        let x = DTensor::from_local(&self.mesh, locals, &from)?;
        let t0 = self.sync_all()?;
        let y = x.redistribute(&to)?;
        let t1 = self.sync_all()?;
        drop(y);
        let ns = t1 - t0;
        self.cache.insert(key, ns);
        Ok(ns)
    }
}

struct Shared {
    mesh: DeviceMesh,
    barrier: Barrier,
    ins: Mutex<Vec<Option<Tensor>>>,
    outs: Mutex<Vec<Option<std::result::Result<Tensor, String>>>>,
}

/// Runs collectives for real between the chips of a mesh, one thread per chip (the full
/// simulation). Every chip's thread must make the same collectives in the same order.
pub struct PeerComm {
    rank: usize,
    shared: Arc<Shared>,
}

impl PeerComm {
    /// One `PeerComm` per rank of `mesh`.
    pub fn for_mesh(mesh: &DeviceMesh) -> Vec<PeerComm> {
        let n = mesh.num_ranks();
        let shared = Arc::new(Shared {
            mesh: mesh.clone(),
            barrier: Barrier::new(n),
            ins: Mutex::new(vec![None; n]),
            outs: Mutex::new((0..n).map(|_| None).collect()),
        });
        (0..n)
            .map(|rank| PeerComm {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }

    /// The rank this chip is.
    pub fn rank(&self) -> usize {
        self.rank
    }

    fn run(&self, c: &Coll, shape: &[usize]) -> std::result::Result<Vec<Tensor>, String> {
        let sh = &self.shared;
        let locals: Vec<Tensor> = sh
            .ins
            .lock()
            .map_err(|e| e.to_string())?
            .iter_mut()
            .map(|t| t.take().ok_or("a rank gave no tensor"))
            .collect::<std::result::Result<_, _>>()?;
        let [from, to] = transition(&sh.mesh, c.kind, &c.dims);
        let x = DTensor::from_local(&sh.mesh, locals, &from).map_err(|e| e.to_string())?;
        let y = x.redistribute(&to).map_err(|e| e.to_string())?;
        if c.kind != CollKind::AllToAll {
            return Ok(y.locals().to_vec());
        }
        let shape: Vec<i64> = shape.iter().map(|s| *s as i64).collect();
        y.locals()
            .iter()
            .map(|t| t.reshape(&shape).map_err(|e| e.to_string()))
            .collect()
    }
}

impl Comm for PeerComm {
    fn collective(&mut self, _rt: &Runtime, c: &Coll, t: &Tensor) -> Result<Tensor> {
        let sh = self.shared.clone();
        let mut t = if t.is_contiguous() {
            t.clone()
        } else {
            t.contiguous()?
        };
        let shape = t.shape().to_vec();
        if c.kind == CollKind::AllToAll {
            let k = self.group_size(&c.dims) as i64;
            out_shape(c.kind, &shape, k as usize)?;
            t = t.reshape(&[k, t.numel() as i64 / k])?;
        }
        sh.ins.lock().map_err(|e| TpuError::Device(e.to_string()))?[self.rank] = Some(t);
        sh.barrier.wait();
        if self.rank == 0 {
            let r = self.run(c, &shape);
            let mut outs = sh
                .outs
                .lock()
                .map_err(|e| TpuError::Device(e.to_string()))?;
            match r {
                Ok(v) => {
                    for (o, t) in outs.iter_mut().zip(v) {
                        *o = Some(Ok(t));
                    }
                }
                Err(e) => outs.iter_mut().for_each(|o| *o = Some(Err(e.clone()))),
            }
        }
        sh.barrier.wait();
        let out = sh
            .outs
            .lock()
            .map_err(|e| TpuError::Device(e.to_string()))?[self.rank]
            .take()
            .ok_or_else(|| TpuError::Device("collective: no result".into()))?;
        out.map_err(TpuError::Device)
    }

    fn group_size(&self, dims: &[usize]) -> usize {
        group(self.shared.mesh.shape(), dims)
    }
}
