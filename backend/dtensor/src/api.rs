//! `DTensor` itself: creation (`distribute_tensor`, `from_local`), the global view of its
//! shape, and getting values back (`full_tensor`, `to_vec`).

use std::fmt;

use super::mesh::DeviceMesh;
use super::placement::{self, Placement, Reduce, describe};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::tensor::{Element, Tensor};

/// A tensor distributed over a [`DeviceMesh`]: one local tensor per rank, laid out along each
/// mesh dimension by a [`Placement`] (`torch.distributed.tensor.DTensor`).
#[derive(Clone)]
pub struct DTensor {
    pub(crate) mesh: DeviceMesh,
    pub(crate) placements: Vec<Placement>,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) locals: Vec<Tensor>,
}

impl fmt::Debug for DTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DTensor(shape={:?}, dtype={}, placements={}, mesh={:?})",
            self.shape,
            self.dtype,
            describe(&self.placements),
            self.mesh
        )
    }
}

/// Distributes `tensor` (on any runtime, or see [`distribute_f64s`] for host data) over `mesh`
/// with `placements` (`torch.distributed.tensor.distribute_tensor`). The values go through the
/// host, as when every process loads its part of a checkpoint: each rank receives only its
/// shard. `Partial(sum)` puts the value on the first rank of each group and zeros elsewhere;
/// `Partial(max|min)` puts it everywhere.
pub fn distribute_tensor(
    mesh: &DeviceMesh,
    tensor: &Tensor,
    placements: &[Placement],
) -> Result<DTensor> {
    let vals = tensor.to_f64_vec()?;
    distribute_f64s(mesh, &vals, tensor.shape(), tensor.dtype(), placements)
}

/// Distributes host values (row-major, `shape`, converted to `dtype`).
pub fn distribute_f64s(
    mesh: &DeviceMesh,
    values: &[f64],
    shape: &[usize],
    dtype: DType,
    placements: &[Placement],
) -> Result<DTensor> {
    let numel: usize = shape.iter().product();
    if values.len() != numel {
        return Err(TpuError::ShapeMismatch(format!(
            "distribute: shape {shape:?} is invalid for input of size {}",
            values.len()
        )));
    }
    placement::validate(placements, mesh.shape(), shape)?;
    let local_shape = placement::local_shape(placements, mesh.shape(), shape);
    let mut locals = Vec::with_capacity(mesh.num_ranks());
    for r in 0..mesh.num_ranks() {
        let coords = mesh.coords(r);
        let zero = placements
            .iter()
            .zip(&coords)
            .any(|(p, c)| *p == Placement::Partial(Reduce::Sum) && *c != 0);
        let region = placement::local_region(placements, mesh.shape(), &coords, shape);
        let vals: Vec<f64> = if zero {
            vec![0.0; local_shape.iter().product()]
        } else {
            gather_region(values, shape, &region)
        };
        let n = vals.len();
        locals.push(Tensor::from_f64s(
            mesh.runtime(r),
            vals.into_iter(),
            n,
            &local_shape,
            dtype,
        )?);
    }
    Ok(DTensor {
        mesh: mesh.clone(),
        placements: placements.to_vec(),
        shape: shape.to_vec(),
        dtype,
        locals,
    })
}

/// Distributes a host slice.
pub fn distribute_slice<T: Element>(
    mesh: &DeviceMesh,
    data: &[T],
    shape: &[usize],
    placements: &[Placement],
) -> Result<DTensor> {
    let vals: Vec<f64> = data.iter().map(|x| x.to_f64()).collect();
    distribute_f64s(mesh, &vals, shape, T::DTYPE, placements)
}

/// The elements of `values` (row-major `shape`) inside `region`, row-major.
fn gather_region(values: &[f64], shape: &[usize], region: &[(usize, usize)]) -> Vec<f64> {
    let n: usize = region.iter().map(|r| r.1).product();
    let strides = crate::layout::contiguous_strides(shape);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        let flat: isize = idx
            .iter()
            .zip(region)
            .zip(&strides)
            .map(|((i, r), s)| (i + r.0) as isize * s)
            .sum();
        out.push(values[flat as usize]);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < region[d].1 {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Writes `local` (row-major over `region`) into `out` (row-major `shape`).
fn scatter_region(out: &mut [f64], shape: &[usize], region: &[(usize, usize)], local: &[f64]) {
    let strides = crate::layout::contiguous_strides(shape);
    let mut idx = vec![0usize; shape.len()];
    for v in local {
        let flat: isize = idx
            .iter()
            .zip(region)
            .zip(&strides)
            .map(|((i, r), s)| (i + r.0) as isize * s)
            .sum();
        out[flat as usize] = *v;
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < region[d].1 {
                break;
            }
            idx[d] = 0;
        }
    }
}

impl DTensor {
    /// A DTensor from one local tensor per rank (each on its rank's runtime, all of one shape
    /// and dtype) and their placements; the global shape follows
    /// (`DTensor.from_local`, with every rank's tensor given at once).
    pub fn from_local(
        mesh: &DeviceMesh,
        locals: Vec<Tensor>,
        placements: &[Placement],
    ) -> Result<DTensor> {
        if locals.len() != mesh.num_ranks() {
            return Err(TpuError::BadArgs(format!(
                "DTensor.from_local: {} local tensors for {} ranks",
                locals.len(),
                mesh.num_ranks()
            )));
        }
        let (shape, dtype) = (locals[0].shape().to_vec(), locals[0].dtype());
        for (r, t) in locals.iter().enumerate() {
            if !t.runtime().same(mesh.runtime(r)) {
                return Err(TpuError::DeviceMismatch(format!(
                    "DTensor.from_local: the tensor for rank {r} is not on that rank's runtime (chip {})",
                    mesh.chip(r)
                )));
            }
            if t.shape() != shape || t.dtype() != dtype {
                return Err(TpuError::ShapeMismatch(format!(
                    "DTensor.from_local: rank {r} holds {:?} {} but rank 0 holds {shape:?} {dtype}; local tensors must match",
                    t.shape(),
                    t.dtype()
                )));
            }
        }
        Self::from_parts(mesh, placements.to_vec(), locals)
    }

    /// Wraps local tensors known to be consistent (checks the placements against them).
    pub(crate) fn from_parts(
        mesh: &DeviceMesh,
        placements: Vec<Placement>,
        locals: Vec<Tensor>,
    ) -> Result<DTensor> {
        let local_shape = locals[0].shape().to_vec();
        if placements.len() != mesh.ndim() {
            return Err(TpuError::BadArgs(format!(
                "DTensor: {} placements for a mesh of {} dimensions",
                placements.len(),
                mesh.ndim()
            )));
        }
        for p in &placements {
            if let Placement::Shard(d) = p
                && *d >= local_shape.len()
            {
                return Err(TpuError::BadDim(format!(
                    "DTensor: {p} of a {}-dimensional tensor",
                    local_shape.len()
                )));
            }
        }
        let shape = placement::global_shape(&placements, mesh.shape(), &local_shape);
        Ok(DTensor {
            mesh: mesh.clone(),
            dtype: locals[0].dtype(),
            placements,
            shape,
            locals,
        })
    }

    /// The mesh.
    pub fn mesh(&self) -> &DeviceMesh {
        &self.mesh
    }

    /// The placement along each mesh dimension.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }

    /// The global shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// `size(dim)` of the global shape.
    pub fn size(&self, dim: i64) -> Result<usize> {
        Ok(self.shape[crate::layout::wrap_dim(dim, self.shape.len())?])
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements of the global tensor.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Rank `rank`'s local tensor (`to_local()` on that rank).
    pub fn to_local(&self, rank: usize) -> &Tensor {
        &self.locals[rank]
    }

    /// Every rank's local tensor, in rank order.
    pub fn locals(&self) -> &[Tensor] {
        &self.locals
    }

    /// The whole tensor on rank 0 (`full_tensor()`): redistributes to `Replicate` on every
    /// mesh dimension (collectives on the device) and returns rank 0's copy.
    pub fn full_tensor(&self) -> Result<Tensor> {
        let r = self.redistribute(&vec![Placement::Replicate; self.mesh.ndim()])?;
        Ok(r.locals[0].clone())
    }

    /// The global values, row-major, as f64 (a synchronisation point). Shards are read from
    /// the ranks that hold them and assembled on the host; partial values are reduced on the
    /// device first.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let t = if self.placements.iter().any(|p| p.is_partial()) {
            let target: Vec<Placement> = self
                .placements
                .iter()
                .map(|p| match p {
                    Placement::Partial(_) => Placement::Replicate,
                    other => *other,
                })
                .collect();
            self.redistribute(&target)?
        } else {
            self.clone()
        };
        let mut out = vec![0.0; self.numel()];
        for r in 0..self.mesh.num_ranks() {
            let coords = self.mesh.coords(r);
            // One holder per shard: coordinate 0 along every mesh dimension that replicates.
            if t.placements
                .iter()
                .zip(&coords)
                .any(|(p, c)| !p.is_shard() && *c != 0)
            {
                continue;
            }
            let region = placement::local_region(&t.placements, t.mesh.shape(), &coords, &t.shape);
            let vals = t.locals[r].to_f64_vec()?;
            scatter_region(&mut out, &t.shape, &region, &vals);
        }
        Ok(out)
    }

    /// The global values converted to `T` (a synchronisation point).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.to_f64_vec()?.into_iter().map(T::from_f64).collect())
    }
}
