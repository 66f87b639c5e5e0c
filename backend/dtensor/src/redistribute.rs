//! `redistribute`: moving a DTensor from one set of placements to another, one mesh dimension
//! at a time, with collectives where values must move.
//!
//! | from → to | how |
//! |---|---|
//! | `Shard(i)` → `Replicate` | all-gather along `i` |
//! | `Partial(sum)` → `Replicate` | all-reduce |
//! | `Partial(sum)` → `Shard(i)` | reduce-scatter along `i` |
//! | `Partial(max/min)` → `Replicate` | all-gather of the terms, then their max/min on each rank (the collectives only sum) |
//! | `Replicate` → `Shard(i)` | each rank keeps its slice (no communication) |
//! | `Shard(i)` → `Shard(j)` | all-to-all |
//! | `Replicate` → `Partial(sum)` | the first rank of each group keeps the value, the others hold zeros |
//! | `Replicate` → `Partial(max/min)` | every rank keeps the value |
//! | `Shard(i)` → `Partial` | all-gather, then as from `Replicate` |
//!
//! A mesh dimension whose change touches tensor dimensions no other mesh dimension shards (in
//! the current or the target placements) changes directly, as in the table. The others — nested
//! shards of one tensor dimension, or shards that trade dimensions between mesh dimensions —
//! go through `Replicate`: those mesh dimensions (and any that shard the same tensor dimensions)
//! are gathered from the last to the first, then sliced from the first to the last, which keeps
//! the nesting order right.
//!
//! Except when the only change is several mesh dimensions that each gather one tensor
//! dimension (`Shard(d)` → `Replicate` on all of them: a `Shard` on the flattened mesh),
//! reduce-scatter into it (`Partial(sum)` → `Shard(d)`) or all-reduce, and no other mesh
//! dimension shards that tensor dimension: then one collective over all of them does it, which
//! runs their topology axes at once.

use super::api::DTensor;
use super::comm;
use super::mesh::DeviceMesh;
use super::placement::{self, Placement, Reduce};
use super::trace::local1;
use crate::error::{Result, TpuError};
use crate::tensor::Tensor;
use tpuemu_backend::ops::Value;

struct Moving {
    mesh: DeviceMesh,
    cur: Vec<Placement>,
    locals: Vec<Tensor>,
}

fn involved(p: Placement, q: Placement) -> Vec<usize> {
    p.shard_dim().into_iter().chain(q.shard_dim()).collect()
}

impl Moving {
    /// Whether the change along `m` touches only tensor dimensions no other mesh dimension
    /// shards now or in `target`.
    fn isolated(&self, m: usize, target: &[Placement]) -> bool {
        let dims = involved(self.cur[m], target[m]);
        (0..self.cur.len()).filter(|o| *o != m).all(|o| {
            involved(self.cur[o], target[o])
                .iter()
                .all(|d| !dims.contains(d))
        })
    }

    fn slice(&mut self, m: usize, d: usize) -> Result<()> {
        let k = self.mesh.shape()[m];
        for r in 0..self.locals.len() {
            let t = &self.locals[r];
            let piece = t.shape()[d] / k;
            let start = self.mesh.coords(r)[m] * piece;
            let s = local1(
                &self.mesh,
                r,
                "aten::slice.Tensor",
                vec![
                    Value::Tensor(t.clone()),
                    Value::Int(d as i64),
                    Value::Int(start as i64),
                    Value::Int((start + piece) as i64),
                    Value::Int(1),
                ],
            )?;
            self.locals[r] = comm::contiguous(&self.mesh, r, &s)?;
        }
        self.cur[m] = Placement::Shard(d);
        Ok(())
    }

    fn make_partial(&mut self, m: usize, op: Reduce) -> Result<()> {
        if op == Reduce::Sum {
            for r in 0..self.locals.len() {
                if self.mesh.coords(r)[m] != 0 {
                    let t = &self.locals[r];
                    let shape: Vec<i64> = t.shape().iter().map(|n| *n as i64).collect();
                    self.locals[r] = local1(
                        &self.mesh,
                        r,
                        "aten::zeros",
                        vec![Value::Ints(shape), Value::Dtype(t.dtype())],
                    )?;
                }
            }
        }
        self.cur[m] = Placement::Partial(op);
        Ok(())
    }

    fn gather(&mut self, m: usize, d: usize) -> Result<()> {
        self.locals = comm::all_gather(&self.mesh, &[m], &self.locals, d)?;
        self.cur[m] = Placement::Replicate;
        Ok(())
    }

    fn resolve(&mut self, m: usize, op: Reduce) -> Result<()> {
        self.locals = match op {
            Reduce::Sum => comm::all_reduce(&self.mesh, &[m], &self.locals, Reduce::Sum)?,
            Reduce::Max | Reduce::Min => {
                let mut stacked = Vec::new();
                for (r, t) in self.locals.iter().enumerate() {
                    stacked.push(local1(
                        &self.mesh,
                        r,
                        "aten::unsqueeze",
                        vec![Value::Tensor(t.clone()), Value::Int(0)],
                    )?);
                }
                let all = comm::all_gather(&self.mesh, &[m], &stacked, 0)?;
                let name = if op == Reduce::Max {
                    "aten::amax"
                } else {
                    "aten::amin"
                };
                all.into_iter()
                    .enumerate()
                    .map(|(r, t)| {
                        local1(
                            &self.mesh,
                            r,
                            name,
                            vec![Value::Tensor(t), Value::Ints(vec![0]), Value::Bool(false)],
                        )
                    })
                    .collect::<Result<_>>()?
            }
        };
        self.cur[m] = Placement::Replicate;
        Ok(())
    }

    fn make_replicate(&mut self, m: usize) -> Result<()> {
        match self.cur[m] {
            Placement::Shard(d) => self.gather(m, d),
            Placement::Partial(op) => self.resolve(m, op),
            Placement::Replicate => Ok(()),
        }
    }

    fn leave_replicate(&mut self, m: usize, to: Placement) -> Result<()> {
        match to {
            Placement::Shard(d) => self.slice(m, d),
            Placement::Partial(op) => self.make_partial(m, op),
            Placement::Replicate => Ok(()),
        }
    }

    /// One mesh dimension, directly (see the module table).
    fn direct(&mut self, m: usize, to: Placement) -> Result<()> {
        match (self.cur[m], to) {
            (Placement::Shard(d), Placement::Shard(e)) => {
                self.locals = comm::all_to_all(&self.mesh, m, &self.locals, d, e)?;
                self.cur[m] = to;
                Ok(())
            }
            (Placement::Partial(Reduce::Sum), Placement::Shard(d)) => {
                self.locals = comm::reduce_scatter(&self.mesh, &[m], &self.locals, d, Reduce::Sum)?;
                self.cur[m] = to;
                Ok(())
            }
            _ => {
                self.make_replicate(m)?;
                self.leave_replicate(m, to)
            }
        }
    }
}

/// What one collective over several mesh dimensions can do.
#[derive(Clone, Copy)]
enum Fused {
    Gather(usize),
    Scatter(usize),
    Reduce,
}

/// The mesh dimensions that change and the collective that changes them all at once, where
/// one does (see the module docs).
fn fused(cur: &[Placement], target: &[Placement]) -> Option<(Vec<usize>, Fused)> {
    let dims: Vec<usize> = (0..cur.len()).filter(|&m| cur[m] != target[m]).collect();
    if dims.len() < 2 {
        return None;
    }
    let sum = Placement::Partial(Reduce::Sum);
    let how = match (cur[dims[0]], target[dims[0]]) {
        (Placement::Shard(d), Placement::Replicate) => Fused::Gather(d),
        (p, Placement::Shard(d)) if p == sum => Fused::Scatter(d),
        (p, Placement::Replicate) if p == sum => Fused::Reduce,
        _ => return None,
    };
    let all = dims
        .iter()
        .all(|&m| (cur[m], target[m]) == (cur[dims[0]], target[dims[0]]));
    // Nested shards of the tensor dimension elsewhere would interleave with the group's.
    let alone = match how {
        Fused::Gather(d) | Fused::Scatter(d) => (0..cur.len())
            .filter(|m| !dims.contains(m))
            .all(|m| !involved(cur[m], target[m]).contains(&d)),
        Fused::Reduce => true,
    };
    (all && alone).then_some((dims, how))
}

/// `x` with placements `target` (see the module docs).
pub(crate) fn redistribute(x: &DTensor, target: &[Placement]) -> Result<DTensor> {
    placement::validate(target, x.mesh.shape(), &x.shape)?;
    if x.placements == target {
        return Ok(x.clone());
    }
    let n = target.len();
    let mut mv = Moving {
        mesh: x.mesh.clone(),
        cur: x.placements.clone(),
        locals: x.locals.clone(),
    };
    if let Some((dims, how)) = fused(&mv.cur, target) {
        let (mesh, l) = (&mv.mesh, &mv.locals);
        mv.locals = match how {
            Fused::Gather(d) => comm::all_gather(mesh, &dims, l, d)?,
            Fused::Scatter(d) => comm::reduce_scatter(mesh, &dims, l, d, Reduce::Sum)?,
            Fused::Reduce => comm::all_reduce(mesh, &dims, l, Reduce::Sum)?,
        };
        for &m in &dims {
            mv.cur[m] = target[m];
        }
    }
    for m in 0..n {
        if mv.cur[m] != target[m] && mv.isolated(m, target) {
            mv.direct(m, target[m])?;
        }
    }
    // The rest through Replicate, with every mesh dimension sharding the same tensor
    // dimensions.
    let mut unwind: Vec<bool> = (0..n).map(|m| mv.cur[m] != target[m]).collect();
    loop {
        let dims: Vec<usize> = (0..n)
            .filter(|m| unwind[*m])
            .flat_map(|m| involved(mv.cur[m], target[m]))
            .collect();
        let mut grew = false;
        for m in 0..n {
            if !unwind[m]
                && involved(mv.cur[m], target[m])
                    .iter()
                    .any(|d| dims.contains(d))
            {
                unwind[m] = true;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    for m in (0..n).rev() {
        if unwind[m] {
            mv.make_replicate(m)?;
        }
    }
    for m in 0..n {
        if unwind[m] {
            mv.leave_replicate(m, target[m])?;
        }
    }
    if mv.cur != target {
        return Err(TpuError::Device(format!(
            "redistribute: reached {} instead of {}",
            placement::describe(&mv.cur),
            placement::describe(target)
        )));
    }
    Ok(DTensor {
        mesh: x.mesh.clone(),
        placements: mv.cur,
        shape: x.shape.clone(),
        dtype: x.dtype,
        locals: mv.locals,
    })
}

/// Bytes moved over ICI per rank (roughly) to change `from` into `to` along a mesh dimension
/// of `k` ranks, for a tensor of `local` bytes per rank; a small cost for local work.
pub(crate) fn cost(from: Placement, to: Placement, local: f64, k: usize) -> f64 {
    let k = k as f64;
    let part = local * (k - 1.0) / k;
    match (from, to) {
        _ if from == to => 0.0,
        (Placement::Replicate, _) => 1.0,
        (Placement::Shard(_), Placement::Replicate) => local * (k - 1.0),
        (Placement::Shard(_), Placement::Shard(_)) => part,
        (Placement::Shard(_), Placement::Partial(_)) => local * (k - 1.0) + 1.0,
        (Placement::Partial(Reduce::Sum), Placement::Shard(_)) => part,
        (Placement::Partial(Reduce::Sum), Placement::Replicate) => 2.0 * part,
        (Placement::Partial(Reduce::Sum), Placement::Partial(_)) => 2.0 * part + 1.0,
        (Placement::Partial(_), _) => local * (k - 1.0) + 1.0,
    }
}

impl DTensor {
    /// This tensor with `placements` (`DTensor.redistribute`), moving values with collectives
    /// as the module table says.
    pub fn redistribute(&self, placements: &[Placement]) -> Result<DTensor> {
        redistribute(self, placements)
    }
}
