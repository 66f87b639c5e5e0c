//! What a DTensor trace records, as plain data: the collective primitives ([`Coll`]), traced
//! values and arguments, the recorded steps ([`Event`]) and the [`Trace`] that holds them.
//!
//! This module depends on no other DTensor module but [`super::placement`], so the mesh (which
//! owns a trace in progress), the collectives (which record into it) and the recorder
//! ([`super::trace`]) all build on it without importing one another in a circle.

use std::collections::HashMap;

use super::placement::Reduce;
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::Layout;
use crate::tensor::Tensor;
use tpuemu_backend::ops::Value;

/// A collective primitive (see [`super::comm`]'s module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Coll {
    AllGather,
    AllReduce(Reduce),
    ReduceScatter(Reduce),
    AllToAll,
}

impl Coll {
    /// The shape each rank gets for an input of `shape` over a group of `k`.
    pub fn out_shape(self, shape: &[usize], k: usize) -> Result<Vec<usize>> {
        let mut s = shape.to_vec();
        match self {
            Coll::AllGather => {
                if s.is_empty() {
                    return Err(TpuError::BadArgs("all-gather of a 0-dim tensor".into()));
                }
                s[0] *= k;
            }
            Coll::ReduceScatter(_) => {
                if s.is_empty() || !s[0].is_multiple_of(k) {
                    return Err(TpuError::ShapeMismatch(format!(
                        "reduce-scatter of {shape:?} over {k} ranks: the first dimension must divide"
                    )));
                }
                s[0] /= k;
            }
            Coll::AllToAll => {
                if s.first() != Some(&k) {
                    return Err(TpuError::ShapeMismatch(format!(
                        "all-to-all of {shape:?} over {k} ranks: expected {k} blocks"
                    )));
                }
            }
            Coll::AllReduce(_) => {}
        }
        Ok(s)
    }

    /// A name for traces and errors.
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllGather => "all_gather",
            Coll::AllReduce(_) => "all_reduce",
            Coll::ReduceScatter(_) => "reduce_scatter",
            Coll::AllToAll => "all_to_all",
        }
    }
}

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
    (t.storage().id(), t.layout().clone(), t.dtype())
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

    pub(crate) fn tref(&self, rank: usize, t: &Tensor) -> TRef {
        match self.id_of(rank, t) {
            Some(i) => TRef::Id(i),
            None => TRef::Const(t.clone()),
        }
    }

    pub(crate) fn arg(&self, rank: usize, v: &Value) -> ArgT {
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
    pub(crate) fn out_id(&mut self, rank: usize, t: &Tensor) -> u64 {
        match self.id_of(rank, t) {
            Some(i) => i,
            None => self.define(rank, t),
        }
    }
}
