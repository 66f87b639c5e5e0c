//! Collectives over one mesh dimension, or several at once: all-gather, all-reduce,
//! reduce-scatter and all-to-all of the ranks' local tensors.
//!
//! The primitives ([`raw`]) work on one contiguous tensor per rank, all of one shape, along the
//! *front* dimension, in group order (the coordinate along the mesh dimension):
//!
//! | collective | each rank gives | each rank gets |
//! |---|---|---|
//! | all-gather | `[a, ...]` | `[k·a, ...]`: the group's tensors one after another |
//! | all-reduce | `x` | the reduction of the group's `x` |
//! | reduce-scatter | `[k·b, ...]` | `[b, ...]`: its block of the reduction |
//! | all-to-all | `[k, ...]` | `[k, ...]`: block `q` is member `q`'s block for this rank |
//!
//! The DTensor forms ([`all_gather`], [`reduce_scatter`], [`all_to_all`]) move the tensor
//! dimension concerned to the front (a layout change and a copy, skipped when the dimensions
//! before it are all of size 1) and back. Before a collective runs, every rank's deferred
//! graph runs (flush reason `collective`).
//!
//! Over several mesh dimensions (`mesh_dims`, first outermost) the group is every rank that
//! differs only in those dimensions, its members in row-major order of their coordinates
//! there — the order of nested `Shard`s of one tensor dimension — and the collective is one
//! launch over all their topology axes, which runs the axes at once
//! ([`crate::kernels::collective`]).

use std::sync::Arc;

use super::events::Coll;
use super::mesh::DeviceMesh;
use super::placement::Reduce;
use super::trace::{local1, record_coll};
use crate::error::{Result, TpuError};
use crate::kernels::collective::{
    BufferSlice, ChipBuffers, Collective, CollectiveError, CollectiveOp, CollectiveSpec,
};
use crate::tensor::Tensor;
use tpuemu_backend::ops::Value;

/// The ranks of a group over `mesh_dims`.
fn group_size(mesh: &DeviceMesh, mesh_dims: &[usize]) -> usize {
    mesh_dims.iter().map(|&m| mesh.shape()[m]).product()
}

/// Runs a primitive over mesh dimensions `mesh_dims` on contiguous local tensors (one per
/// rank, one shape). While a compiled function is traced, records it and returns placeholders.
pub(crate) fn raw(
    mesh: &DeviceMesh,
    mesh_dims: &[usize],
    coll: Coll,
    ins: &[Tensor],
) -> Result<Vec<Tensor>> {
    let k = group_size(mesh, mesh_dims);
    let shape = ins[0].shape().to_vec();
    let out_shape = coll.out_shape(&shape, k)?;
    if mesh.tracing() {
        let outs: Vec<Tensor> = ins
            .iter()
            .map(|t| Tensor::empty(t.runtime(), &out_shape, t.dtype()))
            .collect::<Result<_>>()?;
        record_coll(mesh, coll, mesh_dims, ins, &outs);
        return Ok(outs);
    }
    run(mesh, mesh_dims, coll, ins, &out_shape)
}

/// Runs a primitive now: one launch of the ISA collective over every chip of the mesh
/// ([`crate::kernels::collective`]), submitted when the last rank's host gets to it; every
/// rank waits for it like for its own kernels.
pub(crate) fn run(
    mesh: &DeviceMesh,
    mesh_dims: &[usize],
    coll: Coll,
    ins: &[Tensor],
    out_shape: &[usize],
) -> Result<Vec<Tensor>> {
    for (r, t) in ins.iter().enumerate() {
        if !t.is_contiguous() || !t.runtime().same(mesh.runtime(r)) {
            return Err(TpuError::Device(format!(
                "{}: rank {r}'s input is not a contiguous tensor of that rank",
                coll.name()
            )));
        }
    }
    let dtype = ins[0].dtype();
    let outs: Vec<Tensor> = ins
        .iter()
        .map(|t| Tensor::empty(t.runtime(), out_shape, dtype))
        .collect::<Result<_>>()?;
    let elements = match coll {
        Coll::AllGather => outs[0].numel(),
        _ => ins[0].numel(),
    } as u64;
    if elements == 0 {
        return Ok(outs);
    }
    let op = match coll {
        Coll::AllGather => CollectiveOp::AllGather,
        Coll::AllReduce(Reduce::Sum) => CollectiveOp::AllReduce,
        Coll::ReduceScatter(Reduce::Sum) => CollectiveOp::ReduceScatter,
        Coll::AllToAll => CollectiveOp::AllToAll,
        Coll::AllReduce(r) | Coll::ReduceScatter(r) => {
            return Err(TpuError::Unsupported(format!(
                "{} with {}: the collectives only sum",
                coll.name(),
                r.name()
            )));
        }
    };
    for rt in mesh.runtimes() {
        rt.flush_for("collective")?;
    }
    // The kernel ranks a group with its first listed axis outermost; a mesh coordinate
    // unravels over its axes first axis fastest: list them last first, dimension by dimension.
    let axes: Vec<usize> = mesh_dims
        .iter()
        .flat_map(|&m| mesh.topology_axes(m).iter().rev().copied())
        .collect();
    let spec = CollectiveSpec::new(op, dtype, elements, &axes);
    let (c, program) = {
        let mut cache = mesh
            .inner
            .programs
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match cache.get(&spec) {
            Some(x) => x.clone(),
            None => {
                let c = Arc::new(Collective::new(&spec, mesh.device().topology())?);
                let pid = mesh.device().load(c.program())?;
                cache.insert(spec.clone(), (c.clone(), pid));
                (c, pid)
            }
        }
    };
    let mut bufs = Vec::with_capacity(ins.len());
    for (r, (i, o)) in ins.iter().zip(&outs).enumerate() {
        let rt = mesh.runtime(r);
        let ib = rt.ensure_buffer(i.storage())?;
        let ob = rt.ensure_buffer(o.storage())?;
        bufs.push(ChipBuffers {
            chip: mesh.chip(r),
            input: BufferSlice {
                buffer: ib,
                offset: (i.storage_offset() * dtype.size()) as u64,
            },
            output: BufferSlice::whole(ob),
        });
    }
    let submit = mesh.host_time_ns();
    let id = c
        .launch(mesh.device().as_ref(), program, &bufs, submit)
        .map_err(|e| match e {
            CollectiveError::Kernel(k) => TpuError::from(k),
            CollectiveError::Device(d) => TpuError::from(d),
            CollectiveError::Buffers(m) => TpuError::Device(format!("{}: {m}", coll.name())),
        })?;
    for (r, rt) in mesh.runtimes().iter().enumerate() {
        rt.adopt_launch(
            id,
            format!("c10d::{}", coll.name()),
            format!(
                "[{:?}] over mesh dimensions {mesh_dims:?} (rank {r})",
                ins[r].shape()
            ),
        )?;
    }
    Ok(outs)
}

/// `perm` that moves dimension `d` of an `n`-dimensional tensor to the front.
fn to_front(d: usize, n: usize) -> Vec<i64> {
    std::iter::once(d as i64)
        .chain((0..n as i64).filter(|i| *i != d as i64))
        .collect()
}

/// The inverse of [`to_front`].
fn from_front(d: usize, n: usize) -> Vec<i64> {
    (0..n as i64)
        .map(|i| match i {
            i if (i as usize) < d => i + 1,
            i if i as usize == d => 0,
            i => i,
        })
        .collect()
}

pub(crate) fn permute(mesh: &DeviceMesh, r: usize, t: &Tensor, perm: Vec<i64>) -> Result<Tensor> {
    local1(
        mesh,
        r,
        "aten::permute",
        vec![Value::Tensor(t.clone()), Value::Ints(perm)],
    )
}

pub(crate) fn contiguous(mesh: &DeviceMesh, r: usize, t: &Tensor) -> Result<Tensor> {
    if t.is_contiguous() {
        return Ok(t.clone());
    }
    local1(mesh, r, "aten::clone", vec![Value::Tensor(t.clone())])
}

/// Each rank's tensor with dimension `d` at the front, contiguous (no copy when the
/// dimensions before `d` all have size 1 and the tensor is contiguous).
fn fronted(mesh: &DeviceMesh, locals: &[Tensor], d: usize) -> Result<Vec<Tensor>> {
    locals
        .iter()
        .enumerate()
        .map(|(r, t)| {
            let p = if d == 0 {
                t.clone()
            } else {
                permute(mesh, r, t, to_front(d, t.dim()))?
            };
            contiguous(mesh, r, &p)
        })
        .collect()
}

/// Each rank's tensor with the front dimension moved back to `d`, contiguous.
fn unfronted(mesh: &DeviceMesh, locals: Vec<Tensor>, d: usize) -> Result<Vec<Tensor>> {
    locals
        .into_iter()
        .enumerate()
        .map(|(r, t)| {
            if d == 0 {
                return Ok(t);
            }
            let p = permute(mesh, r, &t, from_front(d, t.dim()))?;
            contiguous(mesh, r, &p)
        })
        .collect()
}

/// Concatenates the group's tensors along dimension `d` (Shard(d) -> Replicate).
pub(crate) fn all_gather(
    mesh: &DeviceMesh,
    mesh_dims: &[usize],
    locals: &[Tensor],
    d: usize,
) -> Result<Vec<Tensor>> {
    let f = fronted(mesh, locals, d)?;
    let g = raw(mesh, mesh_dims, Coll::AllGather, &f)?;
    unfronted(mesh, g, d)
}

/// Reduces the group's tensors (Partial -> Replicate). The collective needs a multiple of
/// the group size in elements: other sizes are padded with zeros around it.
pub(crate) fn all_reduce(
    mesh: &DeviceMesh,
    mesh_dims: &[usize],
    locals: &[Tensor],
    op: Reduce,
) -> Result<Vec<Tensor>> {
    let k = group_size(mesh, mesh_dims);
    let numel = locals[0].numel();
    let pad = (k - numel % k) % k;
    let c: Vec<Tensor> = locals
        .iter()
        .enumerate()
        .map(|(r, t)| {
            let c = contiguous(mesh, r, t)?;
            if pad == 0 {
                return Ok(c);
            }
            let flat = local1(
                mesh,
                r,
                "aten::view",
                vec![Value::Tensor(c), Value::Ints(vec![numel as i64])],
            )?;
            local1(
                mesh,
                r,
                "aten::constant_pad_nd",
                vec![
                    Value::Tensor(flat),
                    Value::Ints(vec![0, pad as i64]),
                    Value::Int(0),
                ],
            )
        })
        .collect::<Result<_>>()?;
    let out = raw(mesh, mesh_dims, Coll::AllReduce(op), &c)?;
    if pad == 0 {
        return Ok(out);
    }
    let shape: Vec<i64> = locals[0].shape().iter().map(|n| *n as i64).collect();
    out.into_iter()
        .enumerate()
        .map(|(r, t)| {
            let s = local1(
                mesh,
                r,
                "aten::slice.Tensor",
                vec![
                    Value::Tensor(t),
                    Value::Int(0),
                    Value::Int(0),
                    Value::Int(numel as i64),
                    Value::Int(1),
                ],
            )?;
            local1(
                mesh,
                r,
                "aten::view",
                vec![Value::Tensor(s), Value::Ints(shape.clone())],
            )
        })
        .collect()
}

/// Reduces the group's tensors and leaves each rank its block along `d` (Partial -> Shard(d)).
pub(crate) fn reduce_scatter(
    mesh: &DeviceMesh,
    mesh_dims: &[usize],
    locals: &[Tensor],
    d: usize,
    op: Reduce,
) -> Result<Vec<Tensor>> {
    let f = fronted(mesh, locals, d)?;
    let s = raw(mesh, mesh_dims, Coll::ReduceScatter(op), &f)?;
    unfronted(mesh, s, d)
}

/// Shard(from) -> Shard(to): each rank splits its tensor along `to` into one block per group
/// member and gets the member's blocks back, concatenated along `from`.
pub(crate) fn all_to_all(
    mesh: &DeviceMesh,
    mesh_dim: usize,
    locals: &[Tensor],
    from: usize,
    to: usize,
) -> Result<Vec<Tensor>> {
    let k = mesh.shape()[mesh_dim] as i64;
    let mut blocks = Vec::new();
    for (r, t) in locals.iter().enumerate() {
        // [.., n_to, ..] -> [.., k, n_to / k, ..] -> k first.
        let mut s: Vec<i64> = t.shape().iter().map(|n| *n as i64).collect();
        let n_to = s[to];
        s[to] = n_to / k;
        s.insert(to, k);
        let c = contiguous(mesh, r, t)?;
        let v = local1(
            mesh,
            r,
            "aten::view",
            vec![Value::Tensor(c), Value::Ints(s.clone())],
        )?;
        let p = permute(mesh, r, &v, to_front(to, s.len()))?;
        blocks.push(contiguous(mesh, r, &p)?);
    }
    let got = raw(mesh, &[mesh_dim], Coll::AllToAll, &blocks)?;
    let mut out = Vec::new();
    for (r, t) in got.into_iter().enumerate() {
        // [k, ...local with `to` divided...]: block q is piece q along `from`.
        let n = t.dim() - 1;
        let perm: Vec<i64> = (1..=n as i64)
            .take(from)
            .chain(std::iter::once(0))
            .chain((1..=n as i64).skip(from))
            .collect();
        let p = permute(mesh, r, &t, perm)?;
        let c = contiguous(mesh, r, &p)?;
        let mut s: Vec<i64> = locals[r].shape().iter().map(|n| *n as i64).collect();
        s[from] *= k;
        s[to] /= k;
        out.push(local1(
            mesh,
            r,
            "aten::view",
            vec![Value::Tensor(c), Value::Ints(s)],
        )?);
    }
    Ok(out)
}
