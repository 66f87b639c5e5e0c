//! `DeviceMesh`: named dimensions over the chips of a slice, one [`Runtime`] per chip.
//!
//! The model is PyTorch's SPMD one: every chip is a *rank* with its own runtime (its own host
//! clock, kernel cache, deferred graph and metrics), as if each chip had its own process. A
//! [`DTensor`](super::DTensor) holds one local tensor per rank; an operator on DTensors runs
//! the same local operator on every rank, and collectives join the ranks.
//!
//! ## Ranks, coordinates and chips
//!
//! Ranks are numbered row-major over the mesh dimensions (the last dimension varies fastest),
//! as `torch.arange(world).reshape(mesh_shape)` does: on a `("dp", 2), ("tp", 4)` mesh, rank
//! `r` has coordinates `(r / 4, r % 4)`.
//!
//! Mesh dimensions map onto the slice's topology axes in order: each mesh dimension takes the
//! next topology axes whose sizes multiply to its size (axes of size 1 are skipped). On a
//! `v5e` `[2, 4]` slice, the mesh `(2, 4)` maps dimension 0 to axis 0 and dimension 1 to axis
//! 1, and the mesh `(8,)` maps its one dimension to both axes. A mesh coordinate along a
//! dimension spanning several axes unravels with the first axis fastest, as the topology
//! numbers its chips; the chip of a rank is the one at the resulting topology coordinates
//! ([`DeviceMesh::chip`]). So on `(2, 4)` over `[2, 4]`, rank 1 `(0, 1)` is the chip at
//! `(0, 1)`, chip 2; on `(8,)` rank `r` is chip `r`. A mesh that does not cover whole axes
//! (`(4, 2)` over `[2, 4]`) is refused: collectives run along topology axes.

use std::sync::{Arc, Mutex};

use tpuemu_isa::{ChipId, Device};

use super::events::Trace;
use crate::error::{Result, TpuError};
use crate::runtime::{HostCosts, MatmulPrecision, Metrics, Mode, Runtime};

pub(crate) struct MeshInner {
    pub device: Arc<dyn Device>,
    pub names: Vec<String>,
    pub sizes: Vec<usize>,
    /// Topology axes of each mesh dimension.
    pub axes: Vec<Vec<usize>>,
    /// One runtime per rank.
    pub ranks: Vec<Runtime>,
    /// Set while a compiled DTensor function is being traced.
    pub trace: Mutex<Option<Trace>>,
    /// Collective programs, generated and loaded once per spec.
    pub programs: Mutex<
        std::collections::HashMap<
            crate::kernels::collective::CollectiveSpec,
            (
                Arc<crate::kernels::collective::Collective>,
                tpuemu_isa::ProgramId,
            ),
        >,
    >,
}

/// Named dimensions over the chips of a device (`torch.distributed.device_mesh.DeviceMesh`).
/// Cheap to clone; clones are the same mesh.
#[derive(Clone)]
pub struct DeviceMesh {
    pub(crate) inner: Arc<MeshInner>,
}

impl std::fmt::Debug for DeviceMesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self
            .inner
            .names
            .iter()
            .zip(&self.inner.sizes)
            .map(|(n, s)| format!("{n}={s}"))
            .collect();
        write!(
            f,
            "DeviceMesh({}, {} chips of {})",
            dims.join(", "),
            self.num_ranks(),
            self.inner.device.topology().generation
        )
    }
}

/// Assigns each mesh dimension the topology axes it covers.
fn map_axes(names: &[String], sizes: &[usize], topo: &[u32]) -> Result<Vec<Vec<usize>>> {
    let mut axes = Vec::new();
    let mut next = 0;
    for (name, size) in names.iter().zip(sizes) {
        let mut mine = Vec::new();
        let mut covered = 1usize;
        while covered < *size && next < topo.len() {
            if topo[next] > 1 {
                mine.push(next);
                covered *= topo[next] as usize;
            }
            next += 1;
        }
        if covered != *size {
            return Err(TpuError::ShapeMismatch(format!(
                "DeviceMesh: dimension '{name}' of size {size} does not cover whole topology axes of the slice {topo:?} (mesh dimensions map onto the axes in order)"
            )));
        }
        axes.push(mine);
    }
    Ok(axes)
}

impl DeviceMesh {
    /// A mesh with named dimensions (`[("dp", 2), ("tp", 4)]`) over every chip of `device`; the
    /// sizes must multiply to the number of chips and cover the topology axes in order (see the
    /// module docs). Each rank's runtime starts in the mode the environment asks for.
    pub fn new(device: Arc<dyn Device>, dims: &[(&str, usize)]) -> Result<Self> {
        let topo = device.topology().clone();
        if dims.is_empty() {
            return Err(TpuError::BadArgs(
                "DeviceMesh: give at least one dimension".into(),
            ));
        }
        let names: Vec<String> = dims.iter().map(|(n, _)| n.to_string()).collect();
        let sizes: Vec<usize> = dims.iter().map(|(_, s)| *s).collect();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(TpuError::BadArgs(format!(
                    "DeviceMesh: dimension name '{n}' is used twice"
                )));
            }
        }
        if sizes.contains(&0) {
            return Err(TpuError::ShapeMismatch(format!(
                "DeviceMesh: dimension sizes {sizes:?} must be positive"
            )));
        }
        let world: usize = sizes.iter().product();
        if world != topo.num_chips() {
            return Err(TpuError::ShapeMismatch(format!(
                "DeviceMesh: mesh {sizes:?} has {world} ranks but the {} slice {:?} has {} chips",
                topo.generation,
                topo.mesh,
                topo.num_chips()
            )));
        }
        let axes = map_axes(&names, &sizes, &topo.mesh)?;
        let mut ranks = Vec::with_capacity(world);
        for r in 0..world {
            let chip = chip_of(&sizes, &axes, &topo.mesh, r, &topo)?;
            ranks.push(Runtime::on_chip(device.clone(), chip)?);
        }
        Ok(DeviceMesh {
            inner: Arc::new(MeshInner {
                device,
                names,
                sizes,
                axes,
                ranks,
                trace: Mutex::new(None),
                programs: Mutex::new(Default::default()),
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.inner.device
    }

    /// Number of mesh dimensions.
    pub fn ndim(&self) -> usize {
        self.inner.sizes.len()
    }

    /// Size of each mesh dimension.
    pub fn shape(&self) -> &[usize] {
        &self.inner.sizes
    }

    /// Names of the mesh dimensions.
    pub fn names(&self) -> &[String] {
        &self.inner.names
    }

    /// The index of the dimension called `name`.
    pub fn dim_named(&self, name: &str) -> Result<usize> {
        self.inner
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| {
                TpuError::BadArgs(format!(
                    "DeviceMesh: no dimension '{name}' (the mesh has {:?})",
                    self.inner.names
                ))
            })
    }

    /// The topology axes mesh dimension `dim` runs along.
    pub fn topology_axes(&self, dim: usize) -> &[usize] {
        &self.inner.axes[dim]
    }

    /// Number of ranks (chips).
    pub fn num_ranks(&self) -> usize {
        self.inner.ranks.len()
    }

    /// The runtime of `rank`.
    pub fn runtime(&self, rank: usize) -> &Runtime {
        &self.inner.ranks[rank]
    }

    /// Every rank's runtime, in rank order.
    pub fn runtimes(&self) -> &[Runtime] {
        &self.inner.ranks
    }

    /// The chip `rank` runs on.
    pub fn chip(&self, rank: usize) -> ChipId {
        self.inner.ranks[rank].chip()
    }

    /// The mesh coordinates of `rank`.
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        unravel(rank, &self.inner.sizes)
    }

    /// The rank at mesh coordinates `coords`.
    pub fn rank_at(&self, coords: &[usize]) -> usize {
        coords
            .iter()
            .zip(&self.inner.sizes)
            .fold(0, |acc, (c, s)| acc * s + c)
    }

    /// The groups of ranks along mesh dimension `dim`: ranks that differ only in that
    /// coordinate, each group in coordinate order; groups ordered by their first rank.
    pub fn groups(&self, dim: usize) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for r in 0..self.num_ranks() {
            let c = self.coords(r);
            if c[dim] != 0 {
                continue;
            }
            out.push(
                (0..self.inner.sizes[dim])
                    .map(|i| {
                        let mut cc = c.clone();
                        cc[dim] = i;
                        self.rank_at(&cc)
                    })
                    .collect(),
            );
        }
        out
    }

    /// Sets every rank's mode (leaving DeferAndFuse flushes).
    pub fn set_mode(&self, mode: Mode) -> Result<()> {
        for rt in self.runtimes() {
            rt.set_mode(mode)?;
        }
        Ok(())
    }

    /// Rank 0's mode (the ranks share one unless set apart).
    pub fn mode(&self) -> Mode {
        self.inner.ranks[0].mode()
    }

    /// Sets every rank's matmul precision.
    pub fn set_precision(&self, p: MatmulPrecision) {
        for rt in self.runtimes() {
            rt.set_precision(p);
        }
    }

    /// Sets every rank's host costs.
    pub fn set_costs(&self, c: HostCosts) {
        for rt in self.runtimes() {
            rt.set_costs(c.clone());
        }
    }

    /// Sets every rank's DeferAndFuse flush limit.
    pub fn set_max_pending_ops(&self, n: usize) {
        for rt in self.runtimes() {
            rt.set_max_pending_ops(n);
        }
    }

    /// Runs everything every rank recorded and waits for it.
    pub fn sync(&self) -> Result<()> {
        for rt in self.runtimes() {
            rt.sync()?;
        }
        Ok(())
    }

    /// The latest host clock of the ranks, ns: after [`DeviceMesh::sync`], when the slowest
    /// rank finished.
    pub fn host_time_ns(&self) -> f64 {
        self.runtimes()
            .iter()
            .map(Runtime::host_time_ns)
            .fold(0.0, f64::max)
    }

    /// Each rank's metrics, in rank order. A collective is waited for by every rank it joins,
    /// so each of them reports its launch (and the launch's ICI and HBM bytes, which are
    /// counted over all its chips).
    pub fn metrics(&self) -> Vec<Metrics> {
        self.runtimes().iter().map(Runtime::metrics).collect()
    }

    /// Clears every rank's metrics.
    pub fn reset_metrics(&self) {
        for rt in self.runtimes() {
            rt.reset_metrics();
        }
    }

    /// Whether two handles are the same mesh.
    pub fn same(&self, other: &DeviceMesh) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether a compiled DTensor function is being traced.
    pub(crate) fn tracing(&self) -> bool {
        self.inner
            .trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

/// Row-major coordinates of `index` in `sizes`.
pub(crate) fn unravel(mut index: usize, sizes: &[usize]) -> Vec<usize> {
    let mut c = vec![0; sizes.len()];
    for d in (0..sizes.len()).rev() {
        c[d] = index % sizes[d];
        index /= sizes[d];
    }
    c
}

/// The chip of `rank`: its coordinate along each mesh dimension unravels over that
/// dimension's topology axes, first axis fastest.
fn chip_of(
    sizes: &[usize],
    axes: &[Vec<usize>],
    topo_mesh: &[u32],
    rank: usize,
    topo: &tpuemu_isa::Topology,
) -> Result<ChipId> {
    let coords = unravel(rank, sizes);
    let mut at = vec![0u32; topo_mesh.len()];
    for (c, ax) in coords.iter().zip(axes) {
        let mut rest = *c as u32;
        for a in ax {
            at[*a] = rest % topo_mesh[*a];
            rest /= topo_mesh[*a];
        }
    }
    topo.chip_at(&at).ok_or_else(|| {
        TpuError::DeviceMismatch(format!("DeviceMesh: no chip at coordinates {at:?}"))
    })
}
