//! Local operator calls, and the trace a compiled DTensor function records.
//!
//! Every piece of local work a DTensor operation does — the operator itself on each rank, the
//! slices and zero-fills of redistribution, the layout changes around collectives — goes
//! through [`local_call`], and every collective through [`super::comm`]. While
//! [`super::compile`] traces a function, both are recorded here: per rank, which operator ran
//! on which values, and which collective joined which values. Values are local tensors,
//! identified by their storage and layout; a tensor the trace never saw produced (a weight
//! the function captured) is kept as a constant.

use std::collections::HashMap;

use super::comm::Coll;
use super::mesh::DeviceMesh;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use crate::ops::{self, Value};
use crate::tensor::Tensor;

/// A traced value: an id, or a tensor captured as a constant.
#[derive(Clone)]
pub(crate) enum TRef {
    Id(u64),
    Const(Tensor),
}

/// A traced argument.
#[derive(Clone)]
pub(crate) enum ArgT {
    Plain(Value),
    Tensor(TRef),
    Tensors(Vec<TRef>),
    OptTensors(Vec<Option<TRef>>),
}

/// A traced result.
#[derive(Clone)]
pub(crate) enum OutT {
    Tensor(u64),
    Tensors(Vec<u64>),
    Other,
}

/// One recorded step.
pub(crate) enum Event {
    /// Operator `op` on `rank`.
    Local {
        rank: usize,
        op: String,
        args: Vec<ArgT>,
        outs: Vec<OutT>,
    },
    /// A collective over mesh dimensions `mesh_dims` (one group over all of them): rank `r`
    /// reads `ins[r]`, writes `outs[r]`.
    Coll {
        coll: Coll,
        mesh_dims: Vec<usize>,
        ins: Vec<TRef>,
        outs: Vec<u64>,
    },
}

type Key = (u64, Layout, DType);

fn key(t: &Tensor) -> Key {
    (t.storage.id(), t.layout.clone(), t.dtype)
}

/// A trace in progress.
pub(crate) struct Trace {
    ids: Vec<HashMap<Key, u64>>,
    next: u64,
    pub events: Vec<Event>,
}

impl Trace {
    pub fn new(ranks: usize) -> Self {
        Trace {
            ids: vec![HashMap::new(); ranks],
            next: 0,
            events: Vec::new(),
        }
    }

    /// A fresh id for `t` on `rank`.
    pub fn define(&mut self, rank: usize, t: &Tensor) -> u64 {
        let id = self.next;
        self.next += 1;
        self.ids[rank].insert(key(t), id);
        id
    }

    /// The id of `t` on `rank`, if the trace produced it.
    pub fn id_of(&self, rank: usize, t: &Tensor) -> Option<u64> {
        self.ids[rank].get(&key(t)).copied()
    }

    fn tref(&self, rank: usize, t: &Tensor) -> TRef {
        match self.id_of(rank, t) {
            Some(i) => TRef::Id(i),
            None => TRef::Const(t.clone()),
        }
    }

    fn arg(&self, rank: usize, v: &Value) -> ArgT {
        match v {
            Value::Tensor(t) => ArgT::Tensor(self.tref(rank, t)),
            Value::Tensors(ts) => ArgT::Tensors(ts.iter().map(|t| self.tref(rank, t)).collect()),
            Value::OptTensors(ts) => ArgT::OptTensors(
                ts.iter()
                    .map(|t| t.as_ref().map(|t| self.tref(rank, t)))
                    .collect(),
            ),
            other => ArgT::Plain(other.clone()),
        }
    }

    /// The id of an output: the existing one when the operator returned a value the trace
    /// knows (an input passed through), a fresh one otherwise.
    fn out_id(&mut self, rank: usize, t: &Tensor) -> u64 {
        match self.id_of(rank, t) {
            Some(i) => i,
            None => self.define(rank, t),
        }
    }
}

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
