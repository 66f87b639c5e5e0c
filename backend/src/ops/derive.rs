//! In-place and `out=` forms, derived from functional operators by one generic mechanism.
//!
//! PyTorch has, for most functional operators, an in-place form (`add_.Tensor(Tensor(a!)
//! self, ...)`) and one or more `out=` forms (`add.out(..., *, Tensor(a!) out)`) with the same
//! arguments. Each is registered here from PyTorch's schema table without code of its own:
//! - **in-place**: compute the functional result, check it can be written into `self` (shape
//!   equal to `self`'s, dtype castable, as PyTorch checks), copy it into `self`'s view;
//! - **out=**: compute the functional results, then for each `out` tensor: resize it when its
//!   shape differs (an empty `out` is the usual case), check the dtype is castable, copy.
//!   A resized `out` gets new storage: the returned tensor is the one to use (a bridge sets
//!   its tensor to it).
//!
//! View operators have no derived forms (their in-place forms, `t_` or `squeeze_`, change
//! metadata, not data).

use std::collections::BTreeMap;

use super::registry::{OpDef, OpImpl, Run};
use super::schema::{Schema, Type, aten};
use super::sharding::Sharding;
use super::{Args, Value};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// `ty` without alias annotations.
fn plain(ty: &Type) -> Type {
    match ty {
        Type::Tensor(_) => Type::Tensor(None),
        Type::Other(s, _) => Type::Other(s.clone(), None),
        Type::Optional(t) => Type::Optional(Box::new(plain(t))),
        Type::List(t, n) => Type::List(Box::new(plain(t)), *n),
        t => t.clone(),
    }
}

/// Whether `args` are the functional schema's arguments (names, types, defaults, keyword-only).
fn same_args(functional: &Schema, args: &[super::schema::Argument]) -> bool {
    functional.args.len() == args.len()
        && functional.args.iter().zip(args).all(|(f, a)| {
            f.name == a.name
                && plain(&f.ty) == plain(&a.ty)
                && f.kwarg_only == a.kwarg_only
                && f.default == a.default
        })
}

/// The in-place and out= forms PyTorch has for the registered functional operators.
pub(crate) fn forms(registered: &BTreeMap<&'static str, OpDef>) -> Vec<OpDef> {
    let mut by_base: BTreeMap<&str, Vec<&'static Schema>> = BTreeMap::new();
    for s in aten::all().values() {
        by_base.entry(s.name.as_str()).or_default().push(s);
    }
    let mut out = Vec::new();
    for def in registered.values() {
        let f = def.schema;
        if def.implementation == OpImpl::View
            || f.is_inplace()
            || f.is_out()
            || !f.written_args().is_empty()
            || f.returns.is_empty()
            || !f.returns.iter().all(|r| r.ty == Type::Tensor(None))
        {
            continue;
        }
        let inplace_name = format!("{}_", f.name);
        for s in by_base.get(inplace_name.as_str()).into_iter().flatten() {
            if s.overload == f.overload && s.is_inplace() && same_args(f, &s.args) {
                out.push(derived(def, s, OpImpl::InPlace));
            }
        }
        for s in by_base.get(f.name.as_str()).into_iter().flatten() {
            let written = s.written_args();
            if !s.is_out()
                || written.len() != f.returns.len()
                || written
                    .iter()
                    .any(|&i| i < f.args.len() || !s.args[i].kwarg_only)
                || !same_args(f, &s.args[..f.args.len().min(s.args.len())])
                || s.args.len() != f.args.len() + written.len()
            {
                continue;
            }
            out.push(derived(def, s, OpImpl::Out));
        }
    }
    out
}

fn derived(def: &OpDef, s: &'static Schema, implementation: OpImpl) -> OpDef {
    let name: &'static str = Box::leak(s.full_name().into_boxed_str());
    let sharding = match (implementation, def.sharding) {
        (OpImpl::InPlace, Sharding::Pointwise { lin, .. }) => {
            Sharding::Pointwise { lin, inplace: true }
        }
        (OpImpl::InPlace, _) => Sharding::Replicate("in-place form of a non-elementwise operator"),
        _ => Sharding::Replicate("out= forms run on replicated inputs"),
    };
    OpDef {
        name,
        schema: s,
        implementation,
        dtypes: def.dtypes,
        run: if implementation == OpImpl::InPlace {
            Run::InPlace(def.name)
        } else {
            Run::Out(def.name)
        },
        sharding,
    }
}

fn check_cast(name: &str, from: DType, to: DType) -> Result<()> {
    if from.can_cast(to) {
        Ok(())
    } else {
        Err(TpuError::DtypeMismatch(format!(
            "{name}: result type {} can't be cast to the desired output type {}",
            from.scalar_type_name(),
            to.scalar_type_name()
        )))
    }
}

/// PyTorch's refusal to write a tensor whose elements share memory (an expanded view).
fn check_no_overlap(name: &str, t: &Tensor) -> Result<()> {
    let l = t.layout();
    if l.shape
        .iter()
        .zip(&l.strides)
        .any(|(&n, &s)| n > 1 && s == 0)
    {
        return Err(TpuError::BadArgs(format!(
            "{name}: unsupported operation: more than one element of the written-to tensor refers to a single memory location. Please clone() the tensor before performing the operation."
        )));
    }
    Ok(())
}

/// Runs the in-place form `def` of `functional` on bound `args`.
pub(crate) fn inplace(
    rt: &Runtime,
    def: &OpDef,
    functional: &OpDef,
    args: &Args,
) -> Result<Vec<Value>> {
    let dst = args.tensor(0)?.clone();
    check_no_overlap(def.name, &dst)?;
    let res = super::run(rt, functional, args)?;
    let Some(Value::Tensor(r)) = res.first() else {
        return Err(TpuError::Device(format!(
            "{}: the functional form gave no tensor",
            def.name
        )));
    };
    if r.shape() != dst.shape() {
        return Err(TpuError::ShapeMismatch(format!(
            "{}: output with shape {:?} doesn't match the broadcast shape {:?}",
            def.name,
            dst.shape(),
            r.shape()
        )));
    }
    check_cast(def.name, r.dtype(), dst.dtype())?;
    super::creation::copy_(&dst, r)?;
    Ok(vec![Value::Tensor(dst)])
}

/// Runs the `out=` form `def` of `functional` on bound `args`.
pub(crate) fn out(
    rt: &Runtime,
    def: &OpDef,
    functional: &OpDef,
    args: &Args,
) -> Result<Vec<Value>> {
    let n = functional.schema.args.len();
    let inputs = Args::new(def.name, args.values()[..n].to_vec());
    let res = super::run(rt, functional, &inputs)?;
    let mut outs = Vec::with_capacity(res.len());
    for (k, r) in res.iter().enumerate() {
        let Some(Value::Tensor(o)) = args.get(n + k) else {
            return Err(TpuError::BadArgs(format!(
                "{}: out must be a Tensor",
                def.name
            )));
        };
        // A result the call did not compute (an output mask) leaves its `out` as it is.
        let Value::Tensor(r) = r else {
            outs.push(Value::Tensor(o.clone()));
            continue;
        };
        check_cast(def.name, r.dtype(), o.dtype())?;
        check_no_overlap(def.name, o)?;
        let o = if o.shape() == r.shape() {
            o.clone()
        } else {
            Tensor::empty(rt, r.shape(), o.dtype())?
        };
        super::creation::copy_(&o, r)?;
        outs.push(Value::Tensor(o));
    }
    Ok(outs)
}
