//! Compiling functions over DTensors: `torch.compile` of an SPMD program.
//!
//! [`compile`] wraps a function over DTensors. The first call with a given input signature
//! (global shapes, dtypes, placements) *traces* it: every rank's runtime captures instead of
//! running, and the DTensor layer records, per rank, each local operator and each collective
//! ([`super::trace`]). The trace is cut at the collectives: each rank's local work between two
//! collectives becomes one [`tpuemu_backend::compile::CompiledFn`] on that rank (fused, memory planned,
//! linked into one program, launched once), and the collectives run between them as the
//! graph breaks. Later calls with the same signature replay that plan: per segment one launch
//! per rank, per collective one launch over the mesh. Tensors the function captures (weights
//! closed over) are constants of the compiled graphs, as in [`tpuemu_backend::compile`].
//!
//! The function must not read values back (`to_vec`) or depend on them: like
//! `torch.compile(fullgraph=True)`, it is traced once per signature.

use std::collections::{HashMap, HashSet};

use super::api::DTensor;
use super::comm;
use super::events::Coll;
use super::events::{ArgT, Event, OutT, TRef, Trace};
use super::mesh::DeviceMesh;
use super::placement::Placement;
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::tensor::Tensor;
use tpuemu_backend::compile::CompiledFn;
use tpuemu_backend::ops::{self, Value};

type DFn = dyn Fn(&[DTensor]) -> Result<Vec<DTensor>> + Send + Sync;
type DSig = Vec<(Vec<usize>, DType, Vec<Placement>)>;

/// One rank's local operator, as recorded.
#[derive(Clone)]
struct LocalOp {
    op: String,
    args: Vec<ArgT>,
    outs: Vec<OutT>,
}

/// One rank's part of a local segment: its compiled function, the ids it reads and returns.
type RankSegment = (CompiledFn, Vec<u64>, Vec<u64>);

/// Per rank, the ids a segment reads and the ids it returns (`None` for a collective step).
type SegmentIo = Option<Vec<(Vec<u64>, Vec<u64>)>>;

enum Step {
    /// Per rank: its compiled segment (if it has work), the ids it reads and returns.
    Local { ranks: Vec<Option<RankSegment>> },
    Coll {
        coll: Coll,
        mesh_dims: Vec<usize>,
        ins: Vec<TRef>,
        outs: Vec<u64>,
    },
}

struct Plan {
    steps: Vec<Step>,
    /// Per input, per rank: its id.
    inputs: Vec<Vec<u64>>,
    /// Per output: its placements and, per rank, where its local tensor comes from.
    outputs: Vec<(Vec<Placement>, Vec<TRef>)>,
}

/// A compiled DTensor function (see the module docs).
pub struct DCompiledFn {
    mesh: DeviceMesh,
    name: String,
    f: Box<DFn>,
    plans: HashMap<DSig, Plan>,
}

/// Compiles `f` over DTensors on `mesh` (see the module docs).
pub fn compile(
    mesh: &DeviceMesh,
    name: &str,
    f: impl Fn(&[DTensor]) -> Result<Vec<DTensor>> + Send + Sync + 'static,
) -> DCompiledFn {
    DCompiledFn {
        mesh: mesh.clone(),
        name: name.to_string(),
        f: Box::new(f),
        plans: HashMap::new(),
    }
}

fn signature(inputs: &[DTensor]) -> DSig {
    inputs
        .iter()
        .map(|t| (t.shape.clone(), t.dtype, t.placements.clone()))
        .collect()
}

impl DCompiledFn {
    /// Runs the compiled function (tracing and compiling first for a new signature).
    pub fn call(&mut self, inputs: &[DTensor]) -> Result<Vec<DTensor>> {
        for t in inputs {
            if !t.mesh.same(&self.mesh) {
                return Err(TpuError::DeviceMismatch(format!(
                    "compiled `{}`: an input lives on another device mesh",
                    self.name
                )));
            }
        }
        let sig = signature(inputs);
        if !self.plans.contains_key(&sig) {
            let plan = self.trace(inputs)?;
            self.plans.insert(sig.clone(), plan);
        }
        let plan = self.plans.get_mut(&sig).expect("just inserted");
        run(&self.mesh, plan, inputs)
    }

    /// Signatures compiled so far.
    pub fn compiles(&self) -> usize {
        self.plans.len()
    }

    /// Collective launches per call of the plan for `inputs`' signature, if compiled.
    pub fn collectives(&self, inputs: &[DTensor]) -> Option<usize> {
        self.plans.get(&signature(inputs)).map(|p| {
            p.steps
                .iter()
                .filter(|s| matches!(s, Step::Coll { .. }))
                .count()
        })
    }

    fn trace(&self, inputs: &[DTensor]) -> Result<Plan> {
        let mesh = &self.mesh;
        if mesh.tracing() {
            return Err(TpuError::Unsupported(format!(
                "compiled `{}` called while another DTensor function is being traced",
                self.name
            )));
        }
        for rt in mesh.runtimes() {
            rt.begin_capture();
        }
        let mut tr = Trace::new(mesh.num_ranks());
        let input_ids: Vec<Vec<u64>> = inputs
            .iter()
            .map(|t| {
                t.locals
                    .iter()
                    .enumerate()
                    .map(|(r, l)| tr.define(r, l))
                    .collect()
            })
            .collect();
        *mesh.inner.trace.lock().unwrap_or_else(|e| e.into_inner()) = Some(tr);
        let result = (self.f)(inputs);
        let tr = mesh
            .inner
            .trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("the trace set above");
        for rt in mesh.runtimes() {
            rt.end_capture();
        }
        let outputs = result?;
        let outs: Vec<(Vec<Placement>, Vec<TRef>)> = outputs
            .iter()
            .map(|t| {
                (
                    t.placements.clone(),
                    t.locals
                        .iter()
                        .enumerate()
                        .map(|(r, l)| match tr.id_of(r, l) {
                            Some(i) => TRef::Id(i),
                            None => TRef::Const(l.clone()),
                        })
                        .collect(),
                )
            })
            .collect();
        let steps = self.build(tr, &outs)?;
        Ok(Plan {
            steps,
            inputs: input_ids,
            outputs: outs,
        })
    }

    /// Cuts the trace at collectives and compiles each rank's segments.
    fn build(&self, tr: Trace, outs: &[(Vec<Placement>, Vec<TRef>)]) -> Result<Vec<Step>> {
        let n = self.mesh.num_ranks();
        // Segments: per rank, the local operators between collectives.
        enum Raw {
            Seg(Vec<Vec<LocalOp>>),
            Coll(Coll, Vec<usize>, Vec<TRef>, Vec<u64>),
        }
        let mut raw = Vec::new();
        let mut cur: Vec<Vec<LocalOp>> = vec![Vec::new(); n];
        for e in tr.events {
            match e {
                Event::Local {
                    rank,
                    op,
                    args,
                    outs,
                } => cur[rank].push(LocalOp { op, args, outs }),
                Event::Coll {
                    coll,
                    mesh_dims,
                    ins,
                    outs,
                } => {
                    raw.push(Raw::Seg(std::mem::replace(&mut cur, vec![Vec::new(); n])));
                    raw.push(Raw::Coll(coll, mesh_dims, ins, outs));
                }
            }
        }
        raw.push(Raw::Seg(cur));
        // Liveness, backwards: what each segment must return.
        let mut needed: Vec<HashSet<u64>> = vec![HashSet::new(); n];
        for (_, refs) in outs {
            for (r, t) in refs.iter().enumerate() {
                if let TRef::Id(i) = t {
                    needed[r].insert(*i);
                }
            }
        }
        let mut io: Vec<SegmentIo> = Vec::with_capacity(raw.len());
        for step in raw.iter().rev() {
            match step {
                Raw::Coll(_, _, ins, _) => {
                    for (r, t) in ins.iter().enumerate() {
                        if let TRef::Id(i) = t {
                            needed[r].insert(*i);
                        }
                    }
                    io.push(None);
                }
                Raw::Seg(per_rank) => {
                    let mut v = Vec::with_capacity(n);
                    for (r, ops) in per_rank.iter().enumerate() {
                        let (ins, defined) = uses(ops);
                        let live_out: Vec<u64> = defined
                            .iter()
                            .copied()
                            .filter(|i| needed[r].contains(i))
                            .collect();
                        for d in &defined {
                            needed[r].remove(d);
                        }
                        needed[r].extend(ins.iter().copied());
                        v.push((ins, live_out));
                    }
                    io.push(Some(v));
                }
            }
        }
        io.reverse();
        let mut steps = Vec::new();
        for (k, (step, io)) in raw.into_iter().zip(io).enumerate() {
            match (step, io) {
                (Raw::Coll(coll, mesh_dims, ins, outs), _) => steps.push(Step::Coll {
                    coll,
                    mesh_dims,
                    ins,
                    outs,
                }),
                (Raw::Seg(per_rank), Some(io)) => {
                    if per_rank.iter().all(Vec::is_empty) {
                        continue;
                    }
                    let ranks = per_rank
                        .into_iter()
                        .zip(io)
                        .enumerate()
                        .map(|(r, (ops, (ins, live_out)))| {
                            if ops.is_empty() {
                                return None;
                            }
                            let f = segment(
                                &self.mesh,
                                r,
                                &format!("{}/{k}", self.name),
                                ops,
                                ins.clone(),
                                live_out.clone(),
                            );
                            Some((f, ins, live_out))
                        })
                        .collect();
                    steps.push(Step::Local { ranks });
                }
                (Raw::Seg(_), None) => unreachable!("segments have liveness"),
            }
        }
        Ok(steps)
    }
}

/// The ids a segment reads from outside (in first-use order) and the ids it defines.
fn uses(ops: &[LocalOp]) -> (Vec<u64>, Vec<u64>) {
    let mut defined: Vec<u64> = Vec::new();
    let mut ins: Vec<u64> = Vec::new();
    let read = |t: &TRef, defined: &Vec<u64>, ins: &mut Vec<u64>| {
        if let TRef::Id(i) = t
            && !defined.contains(i)
            && !ins.contains(i)
        {
            ins.push(*i);
        }
    };
    for op in ops {
        for a in &op.args {
            match a {
                ArgT::Tensor(t) => read(t, &defined, &mut ins),
                ArgT::Tensors(ts) => ts.iter().for_each(|t| read(t, &defined, &mut ins)),
                ArgT::OptTensors(ts) => ts
                    .iter()
                    .flatten()
                    .for_each(|t| read(t, &defined, &mut ins)),
                ArgT::Plain(_) => {}
            }
        }
        for o in &op.outs {
            let ids: Vec<u64> = match o {
                OutT::Tensor(i) => vec![*i],
                OutT::Tensors(is) => is.clone(),
                OutT::Other => Vec::new(),
            };
            for i in ids {
                if !defined.contains(&i) && !ins.contains(&i) {
                    defined.push(i);
                }
            }
        }
    }
    (ins, defined)
}

fn resolve(t: &TRef, env: &HashMap<u64, Tensor>) -> Result<Tensor> {
    match t {
        TRef::Const(t) => Ok(t.clone()),
        TRef::Id(i) => env.get(i).cloned().ok_or_else(|| {
            TpuError::Device(format!("compiled DTensor function: value {i} unbound"))
        }),
    }
}

fn instantiate(a: &ArgT, env: &HashMap<u64, Tensor>) -> Result<Value> {
    Ok(match a {
        ArgT::Plain(v) => v.clone(),
        ArgT::Tensor(t) => Value::Tensor(resolve(t, env)?),
        ArgT::Tensors(ts) => {
            Value::Tensors(ts.iter().map(|t| resolve(t, env)).collect::<Result<_>>()?)
        }
        ArgT::OptTensors(ts) => Value::OptTensors(
            ts.iter()
                .map(|t| t.as_ref().map(|t| resolve(t, env)).transpose())
                .collect::<Result<_>>()?,
        ),
    })
}

fn bind(o: &[OutT], res: Vec<Value>, env: &mut HashMap<u64, Tensor>) {
    for (o, v) in o.iter().zip(res) {
        match (o, v) {
            (OutT::Tensor(i), Value::Tensor(t)) => {
                env.insert(*i, t);
            }
            (OutT::Tensors(is), Value::Tensors(ts)) => {
                for (i, t) in is.iter().zip(ts) {
                    env.insert(*i, t);
                }
            }
            _ => {}
        }
    }
}

/// One rank's segment as a compiled function: replays the recorded operators.
fn segment(
    mesh: &DeviceMesh,
    rank: usize,
    name: &str,
    ops: Vec<LocalOp>,
    ins: Vec<u64>,
    outs: Vec<u64>,
) -> CompiledFn {
    let rt = mesh.runtime(rank).clone();
    tpuemu_backend::compile::compile(&rt.clone(), name, move |xs: &[Tensor]| {
        let mut env: HashMap<u64, Tensor> = ins.iter().copied().zip(xs.iter().cloned()).collect();
        for op in &ops {
            let args = op
                .args
                .iter()
                .map(|a| instantiate(a, &env))
                .collect::<Result<Vec<_>>>()?;
            let res = ops::call(&rt, &op.op, args)?;
            bind(&op.outs, res, &mut env);
        }
        outs.iter().map(|i| resolve(&TRef::Id(*i), &env)).collect()
    })
}

fn run(mesh: &DeviceMesh, plan: &mut Plan, inputs: &[DTensor]) -> Result<Vec<DTensor>> {
    let n = mesh.num_ranks();
    let mut env: Vec<HashMap<u64, Tensor>> = vec![HashMap::new(); n];
    for (t, ids) in inputs.iter().zip(&plan.inputs) {
        for (r, id) in ids.iter().enumerate() {
            env[r].insert(*id, t.locals[r].clone());
        }
    }
    for step in &mut plan.steps {
        match step {
            Step::Local { ranks } => {
                for (r, seg) in ranks.iter_mut().enumerate() {
                    let Some((f, ins, outs)) = seg else {
                        continue;
                    };
                    let xs = ins
                        .iter()
                        .map(|i| resolve(&TRef::Id(*i), &env[r]))
                        .collect::<Result<Vec<_>>>()?;
                    let ys = f.call(&xs)?;
                    for (i, y) in outs.iter().zip(ys) {
                        env[r].insert(*i, y);
                    }
                }
            }
            Step::Coll {
                coll,
                mesh_dims,
                ins,
                outs,
            } => {
                let xs = ins
                    .iter()
                    .enumerate()
                    .map(|(r, t)| resolve(t, &env[r]))
                    .collect::<Result<Vec<_>>>()?;
                let ys = comm::raw(mesh, mesh_dims, *coll, &xs)?;
                for (r, (i, y)) in outs.iter().zip(ys).enumerate() {
                    env[r].insert(*i, y);
                }
            }
        }
    }
    plan.outputs
        .iter()
        .map(|(p, refs)| {
            let locals = refs
                .iter()
                .enumerate()
                .map(|(r, t)| resolve(t, &env[r]))
                .collect::<Result<Vec<_>>>()?;
            DTensor::from_parts(mesh, p.clone(), locals)
        })
        .collect()
}
