//! Local operator calls, and the trace a compiled DTensor function records.
//!
//! Every piece of local work a DTensor operation does — the operator itself on each rank, the
//! slices and zero-fills of redistribution, the layout changes around collectives — goes
//! through [`local_call`], and every collective through [`super::comm`]. While
//! [`super::compile`] traces a function, both are recorded here: per rank, which operator ran
//! on which values, and which collective joined which values. Values are local tensors,
//! identified by their storage and layout; a tensor the trace never saw produced (a weight
//! the function captured) is kept as a constant.

use super::events::{Coll, Event, OutT, TRef};
use super::mesh::DeviceMesh;
use crate::error::Result;
use crate::tensor::Tensor;
use tpuemu_backend::ops::{self, Value};

/// Runs operator `name` on `rank`'s runtime with local arguments (recorded while tracing).
pub(crate) fn local_call(
    mesh: &DeviceMesh,
    rank: usize,
    name: &str,
    args: Vec<Value>,
) -> Result<Vec<Value>> {
    let traced = {
        let tr = mesh.inner.trace.lock().unwrap_or_else(|e| e.into_inner());
        tr.as_ref()
            .map(|tr| args.iter().map(|a| tr.arg(rank, a)).collect::<Vec<_>>())
    };
    let outs = ops::call(mesh.runtime(rank), name, args)?;
    if let Some(args) = traced {
        let mut guard = mesh.inner.trace.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tr) = guard.as_mut() {
            let o = outs
                .iter()
                .map(|v| match v {
                    Value::Tensor(t) => OutT::Tensor(tr.out_id(rank, t)),
                    Value::Tensors(ts) => {
                        OutT::Tensors(ts.iter().map(|t| tr.out_id(rank, t)).collect())
                    }
                    _ => OutT::Other,
                })
                .collect();
            tr.events.push(Event::Local {
                rank,
                op: name.to_string(),
                args,
                outs: o,
            });
        }
    }
    Ok(outs)
}

/// Records a collective (while tracing).
pub(crate) fn record_coll(
    mesh: &DeviceMesh,
    coll: Coll,
    mesh_dims: &[usize],
    ins: &[Tensor],
    outs: &[Tensor],
) {
    let mut guard = mesh.inner.trace.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tr) = guard.as_mut() {
        let i: Vec<TRef> = ins.iter().enumerate().map(|(r, t)| tr.tref(r, t)).collect();
        let o: Vec<u64> = outs
            .iter()
            .enumerate()
            .map(|(r, t)| tr.define(r, t))
            .collect();
        tr.events.push(Event::Coll {
            coll,
            mesh_dims: mesh_dims.to_vec(),
            ins: i,
            outs: o,
        });
    }
}

/// The single tensor an operator returned.
pub(crate) fn one(outs: Vec<Value>, op: &str) -> Result<Tensor> {
    match outs.into_iter().next() {
        Some(Value::Tensor(t)) => Ok(t),
        _ => Err(crate::error::TpuError::Device(format!(
            "{op}: expected a tensor result"
        ))),
    }
}

/// Shorthand: a local operator returning one tensor.
pub(crate) fn local1(
    mesh: &DeviceMesh,
    rank: usize,
    name: &str,
    args: Vec<Value>,
) -> Result<Tensor> {
    one(local_call(mesh, rank, name, args)?, name)
}
