//! Operators on DTensors: [`call`] runs any registered ATen operator (the DTensor form of
//! [`tpuemu_backend::ops::call`]), and the tensor-like methods of [`DTensor`] call it.
//!
//! A call finds the operator's sharding rule ([`super::propagate`]), picks a strategy per mesh
//! dimension, redistributes the inputs to it (collectives where values must move), runs the
//! operator on every rank's local tensors and wraps the results with the strategy's output
//! placements. An operator without a rule runs on replicated inputs (every rank computes the
//! whole result) and is counted in every rank's `metrics().sharding_fallbacks`.

use super::api::DTensor;
use super::mesh::DeviceMesh;
use super::placement::Placement;
use super::propagate::{self, Chosen, OpCtx};
use super::trace::local_call;
pub use super::value::DValue;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use tpuemu_backend::ops::Value;

/// Runs the operator registered as `name` on DTensors (see the module docs). `mesh` is the mesh
/// of the DTensor arguments (and where creation operators put their result).
pub fn call(mesh: &DeviceMesh, name: &str, args: Vec<DValue>) -> Result<Vec<DValue>> {
    let ctx = OpCtx::new(mesh, name, &args, call)?;
    match propagate::rule(ctx.sharding) {
        Some(rule) => {
            if let Some(special) = rule.special
                && let Some(out) = special(&ctx)?
            {
                return Ok(out);
            }
            let cands = (rule.candidates)(&ctx)?;
            let per_dim = propagate::choose(&ctx, &cands, &rule)?;
            let inputs = ctx
                .inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let want: Vec<Placement> = per_dim.iter().map(|s| s.inputs[i]).collect();
                    t.redistribute(&want)
                })
                .collect::<Result<Vec<_>>>()?;
            let ch = Chosen {
                ctx: &ctx,
                per_dim,
                inputs,
            };
            let run = |r: usize, a: Vec<Value>| match rule.local {
                Some(f) => f(&ch, r, a),
                None => ch.call(r, a),
            };
            let per_rank = (0..mesh.num_ranks())
                .map(|r| run(r, local_args(&args, &ch.inputs, r)))
                .collect::<Result<Vec<_>>>()?;
            wrap(mesh, per_rank, |j| ch.output(j))
        }
        None => fallback(&ctx, &args),
    }
}

/// Replicate every input, run everywhere, count it.
fn fallback(ctx: &OpCtx, args: &[DValue]) -> Result<Vec<DValue>> {
    let mesh = ctx.mesh;
    let rep = vec![Placement::Replicate; mesh.ndim()];
    let inputs = ctx
        .inputs
        .iter()
        .map(|t| t.redistribute(&rep))
        .collect::<Result<Vec<_>>>()?;
    for rt in mesh.runtimes() {
        rt.count(|m| {
            *m.sharding_fallbacks
                .entry(ctx.name.to_string())
                .or_default() += 1
        });
    }
    let per_rank = (0..mesh.num_ranks())
        .map(|r| local_call(mesh, r, ctx.name, local_args(args, &inputs, r)))
        .collect::<Result<Vec<_>>>()?;
    wrap(mesh, per_rank, |_| rep.clone())
}

/// `args` with every DTensor replaced by rank `r`'s local tensor of the redistributed inputs
/// (which are in argument order).
fn local_args(args: &[DValue], inputs: &[DTensor], r: usize) -> Vec<Value> {
    let mut next = inputs.iter();
    let mut take = || next.next().map(|t| t.locals[r].clone());
    args.iter()
        .map(|a| match a {
            DValue::Tensor(_) => take().map_or(Value::None, Value::Tensor),
            DValue::Tensors(ts) => Value::Tensors(ts.iter().filter_map(|_| take()).collect()),
            DValue::OptTensors(ts) => {
                Value::OptTensors(ts.iter().map(|t| t.as_ref().and_then(|_| take())).collect())
            }
            DValue::Value(v) => v.clone(),
        })
        .collect()
}

/// DTensors from each rank's results; result `j` gets `placements(j)`.
fn wrap(
    mesh: &DeviceMesh,
    per_rank: Vec<Vec<Value>>,
    placements: impl Fn(usize) -> Vec<Placement>,
) -> Result<Vec<DValue>> {
    let n = per_rank[0].len();
    let mut cols: Vec<Vec<Value>> = vec![Vec::with_capacity(per_rank.len()); n];
    for outs in per_rank {
        if outs.len() != n {
            return Err(TpuError::Device(
                "ranks returned different numbers of results".into(),
            ));
        }
        for (j, v) in outs.into_iter().enumerate() {
            cols[j].push(v);
        }
    }
    cols.into_iter()
        .enumerate()
        .map(|(j, col)| match &col[0] {
            Value::Tensor(_) => {
                let locals = col
                    .into_iter()
                    .map(|v| match v {
                        Value::Tensor(t) => Ok(t),
                        _ => Err(TpuError::Device("ranks returned different results".into())),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(DValue::Tensor(DTensor::from_parts(
                    mesh,
                    placements(j),
                    locals,
                )?))
            }
            Value::Tensors(first) => {
                let len = first.len();
                let mut lists: Vec<Vec<crate::tensor::Tensor>> = vec![Vec::new(); len];
                for v in col {
                    let Value::Tensors(ts) = v else {
                        return Err(TpuError::Device("ranks returned different results".into()));
                    };
                    for (i, t) in ts.into_iter().enumerate() {
                        lists[i].push(t);
                    }
                }
                Ok(DValue::Tensors(
                    lists
                        .into_iter()
                        .map(|l| DTensor::from_parts(mesh, placements(j), l))
                        .collect::<Result<_>>()?,
                ))
            }
            other => Ok(DValue::Value(other.clone())),
        })
        .collect()
}

fn first(out: Vec<DValue>, op: &str) -> Result<DTensor> {
    match out.into_iter().next() {
        Some(DValue::Tensor(t)) => Ok(t),
        _ => Err(TpuError::Device(format!("{op}: expected a DTensor result"))),
    }
}

/// A DTensor operator returning one tensor.
pub fn call1(mesh: &DeviceMesh, name: &str, args: Vec<DValue>) -> Result<DTensor> {
    first(call(mesh, name, args)?, name)
}

fn v(x: Value) -> DValue {
    DValue::Value(x)
}

fn scalar(s: Scalar) -> Value {
    match s {
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Int(i),
        Scalar::Float(f) => Value::Float(f),
    }
}

/// `torch.zeros(shape)` as a replicated DTensor on `mesh`.
pub fn zeros(mesh: &DeviceMesh, shape: &[usize], dtype: DType) -> Result<DTensor> {
    call1(
        mesh,
        "aten::zeros",
        vec![
            v(Value::Ints(shape.iter().map(|n| *n as i64).collect())),
            v(Value::Dtype(dtype)),
        ],
    )
}

impl DTensor {
    fn op(&self, name: &str, rest: Vec<DValue>) -> Result<DTensor> {
        let mut args = vec![DValue::Tensor(self.clone())];
        args.extend(rest);
        call1(&self.mesh, name, args)
    }

    /// `self + other`.
    pub fn add(&self, other: &DTensor) -> Result<DTensor> {
        self.op("aten::add.Tensor", vec![other.clone().into()])
    }

    /// `self - other`.
    pub fn sub(&self, other: &DTensor) -> Result<DTensor> {
        self.op("aten::sub.Tensor", vec![other.clone().into()])
    }

    /// `self * other`.
    pub fn mul(&self, other: &DTensor) -> Result<DTensor> {
        self.op("aten::mul.Tensor", vec![other.clone().into()])
    }

    /// `self / other`.
    pub fn div(&self, other: &DTensor) -> Result<DTensor> {
        self.op("aten::div.Tensor", vec![other.clone().into()])
    }

    /// `self * s`.
    pub fn mul_scalar(&self, s: impl Into<Scalar>) -> Result<DTensor> {
        self.op("aten::mul.Scalar", vec![v(scalar(s.into()))])
    }

    /// `self + s`.
    pub fn add_scalar(&self, s: impl Into<Scalar>) -> Result<DTensor> {
        self.op(
            "aten::add.Scalar",
            vec![v(scalar(s.into())), v(Value::Int(1))],
        )
    }

    /// `self @ other` for 2-D operands (`mm`).
    pub fn mm(&self, other: &DTensor) -> Result<DTensor> {
        self.op("aten::mm", vec![other.clone().into()])
    }

    /// `self @ other` batched (`bmm`).
    pub fn bmm(&self, other: &DTensor) -> Result<DTensor> {
        self.op("aten::bmm", vec![other.clone().into()])
    }

    /// `beta * self + alpha * (a @ b)` (`addmm`, `self` the bias).
    pub fn addmm(&self, a: &DTensor, b: &DTensor) -> Result<DTensor> {
        self.op("aten::addmm", vec![a.clone().into(), b.clone().into()])
    }

    /// `self.t()`.
    pub fn t(&self) -> Result<DTensor> {
        self.op("aten::t", vec![])
    }

    /// `self.transpose(a, b)`.
    pub fn transpose(&self, a: i64, b: i64) -> Result<DTensor> {
        self.op(
            "aten::transpose.int",
            vec![v(Value::Int(a)), v(Value::Int(b))],
        )
    }

    /// `self.permute(dims)`.
    pub fn permute(&self, dims: &[i64]) -> Result<DTensor> {
        self.op("aten::permute", vec![v(Value::Ints(dims.to_vec()))])
    }

    /// `self.view(shape)`.
    pub fn view(&self, shape: &[i64]) -> Result<DTensor> {
        self.op("aten::view", vec![v(Value::Ints(shape.to_vec()))])
    }

    /// `self.reshape(shape)`.
    pub fn reshape(&self, shape: &[i64]) -> Result<DTensor> {
        self.op("aten::reshape", vec![v(Value::Ints(shape.to_vec()))])
    }

    /// `self.unsqueeze(dim)`.
    pub fn unsqueeze(&self, dim: i64) -> Result<DTensor> {
        self.op("aten::unsqueeze", vec![v(Value::Int(dim))])
    }

    /// `self.sum(dims, keepdim)`.
    pub fn sum(&self, dims: &[i64], keepdim: bool) -> Result<DTensor> {
        self.op(
            "aten::sum.dim_IntList",
            vec![v(Value::Ints(dims.to_vec())), v(Value::Bool(keepdim))],
        )
    }

    /// `self.mean(dims, keepdim)`.
    pub fn mean(&self, dims: &[i64], keepdim: bool) -> Result<DTensor> {
        self.op(
            "aten::mean.dim",
            vec![v(Value::Ints(dims.to_vec())), v(Value::Bool(keepdim))],
        )
    }

    /// `self.amax(dims, keepdim)`.
    pub fn amax(&self, dims: &[i64], keepdim: bool) -> Result<DTensor> {
        self.op(
            "aten::amax",
            vec![v(Value::Ints(dims.to_vec())), v(Value::Bool(keepdim))],
        )
    }

    /// `softmax(self, dim)`.
    pub fn softmax(&self, dim: i64) -> Result<DTensor> {
        self.op(
            "aten::_softmax",
            vec![v(Value::Int(dim)), v(Value::Bool(false))],
        )
    }

    /// `log_softmax(self, dim)`.
    pub fn log_softmax(&self, dim: i64) -> Result<DTensor> {
        self.op(
            "aten::_log_softmax",
            vec![v(Value::Int(dim)), v(Value::Bool(false))],
        )
    }

    /// `gelu(self, approximate)`.
    pub fn gelu(&self, approximate: &str) -> Result<DTensor> {
        self.op("aten::gelu", vec![v(Value::Str(approximate.to_string()))])
    }

    /// `relu(self)`.
    pub fn relu(&self) -> Result<DTensor> {
        self.op("aten::relu", vec![])
    }

    /// `self.to(dtype)`.
    pub fn to_dtype(&self, dtype: DType) -> Result<DTensor> {
        self.op("aten::_to_copy", vec![v(Value::Dtype(dtype))])
    }
}
