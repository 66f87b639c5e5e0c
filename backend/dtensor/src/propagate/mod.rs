//! Sharding propagation: for each operator, the ways it can run on sharded inputs.
//!
//! A rule lists *strategies*: input placements under which running the operator on each rank's
//! local tensors gives the output with known placements (`Shard(0) × Replicate → Shard(0)` for
//! `mm`). Strategies are chosen per mesh dimension, independently, by the cost of
//! redistributing the inputs to what the strategy asks ([`super::redistribute::cost`]: bytes a
//! rank moves over ICI; local slicing is nearly free); ties go to the strategy listed first,
//! and every rule lists "all `Replicate`" last, which always works. A rule may also rewrite
//! the local call (a view's target shape becomes the local shape; a mean over a sharded
//! dimension is scaled by the number of shards) or take over the call entirely (a mean loss
//! over a sharded batch divides a partial sum by the all-reduced total weight).
//!
//! The families: [`pointwise`] (elementwise, with the linear ones keeping `Partial`),
//! [`reduce`], [`matrix`] (column-, row- and batch-parallel products, attention), [`nn`]
//! (softmaxes and norms along unsharded dimensions, losses), [`data`] (cat, gathers,
//! embedding), [`views`] (shard dimensions mapped through every view) and creation operators
//! (replicated). Each operator declares its rule in the registry ([`tpuemu_backend::ops::Sharding`]);
//! those declared `Replicate` (with their reason), and any operator the registry does not know
//! (a custom operator), run on replicated inputs and count in `metrics().sharding_fallbacks`.

pub(crate) mod data;
pub(crate) mod matrix;
pub(crate) mod nn;
pub(crate) mod pointwise;
pub(crate) mod reduce;
pub(crate) mod views;

use super::api::DTensor;
use super::mesh::DeviceMesh;
use super::placement::{self, Placement};
use super::redistribute::cost;
use super::trace::local_call;
use super::value::DValue;
use crate::error::{Result, TpuError};
use tpuemu_backend::ops::{Args, Sharding, Value};

pub(crate) const R: Placement = Placement::Replicate;
pub(crate) const P: Placement = Placement::PARTIAL;

pub(crate) fn s(d: usize) -> Placement {
    Placement::Shard(d)
}

/// One way to run an operator along one mesh dimension.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Strategy {
    /// The placement each tensor input needs (in the order the arguments hold them).
    pub inputs: Vec<Placement>,
    /// The placement of each result (by position; a list result uses one for all its tensors;
    /// the last repeats for further results).
    pub outputs: Vec<Placement>,
}

pub(crate) fn st(inputs: &[Placement], outputs: &[Placement]) -> Strategy {
    Strategy {
        inputs: inputs.to_vec(),
        outputs: outputs.to_vec(),
    }
}

/// What a rule sees of a call.
pub(crate) struct OpCtx<'a> {
    pub mesh: &'a DeviceMesh,
    pub name: &'a str,
    pub args: &'a [DValue],
    /// The tensor inputs, in argument order (lists flattened, absent optionals skipped).
    pub inputs: Vec<DTensor>,
    /// The arguments with every tensor as `None`, to read the rest.
    pub plain: Args,
    /// The operator's declared sharding rule.
    pub sharding: Sharding,
    /// Runs another DTensor operator ([`super::ops::call`], passed in by it): special rules
    /// that rewrite a call into others use it.
    pub call: CallFn,
}

/// The DTensor operator entry point's signature.
pub(crate) type CallFn = fn(&DeviceMesh, &str, Vec<DValue>) -> Result<Vec<DValue>>;

impl<'a> OpCtx<'a> {
    pub fn new(
        mesh: &'a DeviceMesh,
        name: &'a str,
        args: &'a [DValue],
        call: CallFn,
    ) -> Result<Self> {
        let mut inputs = Vec::new();
        let mut plain = Vec::new();
        for a in args {
            match a {
                DValue::Tensor(t) => {
                    inputs.push(t.clone());
                    plain.push(Value::None);
                }
                DValue::Tensors(ts) => {
                    inputs.extend(ts.iter().cloned());
                    plain.push(Value::None);
                }
                DValue::OptTensors(ts) => {
                    inputs.extend(ts.iter().flatten().cloned());
                    plain.push(Value::None);
                }
                DValue::Value(v) => {
                    if matches!(
                        v,
                        Value::Tensor(_) | Value::Tensors(_) | Value::OptTensors(_)
                    ) {
                        return Err(TpuError::BadArgs(format!(
                            "{name}: got mixed Tensor and DTensor arguments; distribute every tensor (distribute_tensor) before calling a distributed operator"
                        )));
                    }
                    plain.push(v.clone());
                }
            }
        }
        for t in &inputs {
            if !t.mesh.same(mesh) {
                return Err(TpuError::DeviceMismatch(format!(
                    "{name}: DTensor arguments live on different device meshes"
                )));
            }
        }
        Ok(OpCtx {
            mesh,
            name,
            args,
            inputs,
            plain: Args::new(name.to_string(), plain),
            sharding: declared(name),
            call,
        })
    }

    /// An error of this operator.
    pub fn err(&self, message: &str) -> TpuError {
        TpuError::InOp {
            op: self.name.to_string(),
            message: message.to_string(),
        }
    }

    /// Input `i`'s shape.
    pub fn shape(&self, i: usize) -> &[usize] {
        &self.inputs[i].shape
    }

    /// Input `i`'s number of dimensions.
    pub fn ndim(&self, i: usize) -> usize {
        self.inputs[i].shape.len()
    }

    /// A strategy with input `first` at `p` and every other input replicated.
    pub fn first_only(&self, p: Placement, outputs: &[Placement]) -> Strategy {
        let mut ins = vec![R; self.inputs.len()];
        if let Some(x) = ins.first_mut() {
            *x = p;
        }
        st(&ins, outputs)
    }

    /// Every input and `outputs` replicated: always valid.
    pub fn replicate(&self, outputs: usize) -> Strategy {
        st(&vec![R; self.inputs.len()], &vec![R; outputs.max(1)])
    }
}

/// The strategies of an operator, given its call.
pub(crate) type Candidates = fn(&OpCtx) -> Result<Vec<Strategy>>;
/// Runs the operator on one rank with its local arguments.
pub(crate) type LocalRun = fn(&Chosen, usize, Vec<Value>) -> Result<Vec<Value>>;
/// Takes over a call (decompositions into other DTensor operators); `None` to go on with the
/// strategies.
pub(crate) type Special = fn(&OpCtx) -> Result<Option<Vec<DValue>>>;

/// A sharding rule.
#[derive(Clone, Copy)]
pub(crate) struct Rule {
    pub candidates: Candidates,
    pub local: Option<LocalRun>,
    pub special: Option<Special>,
    /// The first input is written in place: its placement cannot change.
    pub inplace: bool,
    /// The shape of the first result, where a shard of it may not divide (views).
    pub out_shape: Option<OutShape>,
}

/// Computes the shape of an operator's first result from its call.
pub(crate) type OutShape = fn(&OpCtx) -> Result<Vec<usize>>;

impl Rule {
    /// A rule (the family name is for reading the rule tables; listings take the family from
    /// the operator's declaration).
    pub const fn new(_family: &'static str, candidates: Candidates) -> Self {
        Rule {
            candidates,
            local: None,
            special: None,
            inplace: false,
            out_shape: None,
        }
    }

    pub const fn out_shape(mut self, f: fn(&OpCtx) -> Result<Vec<usize>>) -> Self {
        self.out_shape = Some(f);
        self
    }

    pub const fn local(mut self, f: LocalRun) -> Self {
        self.local = Some(f);
        self
    }

    pub const fn special(mut self, f: Special) -> Self {
        self.special = Some(f);
        self
    }

    pub const fn inplace(mut self) -> Self {
        self.inplace = true;
        self
    }
}

/// A call with its strategy chosen and its inputs redistributed.
pub(crate) struct Chosen<'a> {
    pub ctx: &'a OpCtx<'a>,
    /// The strategy of each mesh dimension.
    pub per_dim: Vec<Strategy>,
    /// The inputs, redistributed.
    pub inputs: Vec<DTensor>,
}

impl Chosen<'_> {
    /// The placements of result `j`.
    pub fn output(&self, j: usize) -> Vec<Placement> {
        self.per_dim
            .iter()
            .map(|s| s.outputs[j.min(s.outputs.len() - 1)])
            .collect()
    }

    /// The operator on `rank` with these arguments.
    pub fn call(&self, rank: usize, args: Vec<Value>) -> Result<Vec<Value>> {
        local_call(self.ctx.mesh, rank, self.ctx.name, args)
    }
}

/// The sharding rule `name` declares (a replicated fallback for an operator the registry does
/// not know, such as a custom one).
pub(crate) fn declared(name: &str) -> Sharding {
    tpuemu_backend::ops::registry()
        .get(name)
        .map_or(Sharding::Replicate("not a registered operator"), |d| {
            d.sharding
        })
}

/// The rule implementing a declaration, if it is not a replicated fallback.
pub(crate) fn rule(sharding: Sharding) -> Option<Rule> {
    match sharding {
        Sharding::Pointwise { inplace, .. } => Some(pointwise::rule(inplace)),
        Sharding::Reduction { .. } => Some(reduce::rule()),
        Sharding::View(kind) => Some(views::rule(kind)),
        Sharding::Special(s) => matrix::rule(s)
            .or_else(|| nn::rule(s))
            .or_else(|| data::rule(s)),
        Sharding::Creation => Some(Rule::new("creation", |_| Ok(vec![st(&[], &[R])]))),
        Sharding::Replicate(_) => None,
    }
}

/// The family of `name`'s sharding rule (`pointwise`, `matrix`, ...), `None` for a fallback.
pub fn sharding_rule(name: &str) -> Option<&'static str> {
    declared(name).family()
}

/// Local bytes of a DTensor under its current placements.
fn local_bytes(t: &DTensor) -> f64 {
    let counts = placement::shard_counts(&t.placements, t.mesh.shape(), t.shape.len());
    let n: usize = t.shape.iter().zip(&counts).map(|(n, k)| n / k).product();
    (n * t.dtype.size()) as f64
}

fn valid(ctx: &OpCtx, dims: &[&Strategy], out: Option<&[usize]>) -> bool {
    let fits = |ps: Vec<Placement>, shape: &[usize]| {
        let mut ps = ps;
        ps.resize(ctx.mesh.ndim(), R);
        placement::validate(&ps, ctx.mesh.shape(), shape).is_ok()
    };
    ctx.inputs
        .iter()
        .enumerate()
        .all(|(i, t)| fits(dims.iter().map(|s| s.inputs[i]).collect(), &t.shape))
        && out.is_none_or(|o| fits(dims.iter().map(|s| s.outputs[0]).collect(), o))
}

/// Picks a strategy for each mesh dimension.
pub(crate) fn choose(ctx: &OpCtx, cands: &[Strategy], rule: &Rule) -> Result<Vec<Strategy>> {
    let inplace = rule.inplace;
    let out = rule.out_shape.map(|f| f(ctx)).transpose()?;
    let n = ctx.mesh.ndim();
    let usable: Vec<&Strategy> = cands
        .iter()
        .filter(|c| c.inputs.len() == ctx.inputs.len() && !c.outputs.is_empty())
        .collect();
    let mut picked: Vec<&Strategy> = Vec::with_capacity(n);
    for m in 0..n {
        let k = ctx.mesh.shape()[m];
        let mut best: Option<(f64, &Strategy)> = None;
        for c in &usable {
            if inplace && ctx.inputs.first().map(|t| t.placements[m]) != c.inputs.first().copied() {
                continue;
            }
            let mut trial = picked.clone();
            trial.push(c);
            if !valid(ctx, &trial, out.as_deref()) {
                continue;
            }
            let cost: f64 = ctx
                .inputs
                .iter()
                .zip(&c.inputs)
                .map(|(t, want)| cost(t.placements[m], *want, local_bytes(t), k))
                .sum();
            if best.is_none_or(|(b, _)| cost < b) {
                best = Some((cost, c));
            }
        }
        match best {
            Some((_, c)) => picked.push(c),
            None if inplace => {
                return Err(TpuError::Unsupported(format!(
                    "{}: cannot run in place on a DTensor with placements {}: redistribute it first",
                    ctx.name,
                    placement::describe(&ctx.inputs[0].placements)
                )));
            }
            None => {
                return Err(TpuError::Unsupported(format!(
                    "{}: no sharding strategy fits inputs {}",
                    ctx.name,
                    describe_inputs(ctx)
                )));
            }
        }
    }
    Ok(picked.into_iter().cloned().collect())
}

/// `[4, 8] [Shard(dim=0)], [8] [Replicate()]`.
pub(crate) fn describe_inputs(ctx: &OpCtx) -> String {
    ctx.inputs
        .iter()
        .map(|t| format!("{:?} {}", t.shape, placement::describe(&t.placements)))
        .collect::<Vec<_>>()
        .join(", ")
}
