//! In-place and `out=` forms, derived from functional operators by one generic mechanism.
//!
//! PyTorch has, for most functional operators, an in-place form (`add_.Tensor(Tensor(a!)
//! self, ...)`) and one or more `out=` forms (`add.out(..., *, Tensor(a!) out)`). Each is
//! registered here from PyTorch's schema table without code of its own, with a
//! [`Derivation`]: which functional operator it runs, where each of that operator's arguments
//! comes from, and which of its own arguments receive the results. The Python bridge
//! registers the same table (`tpuemu._rust.registry()`): the forms are derived once, here.
//! - **in-place**: compute the functional result, check it can be written into `self` (shape
//!   equal to `self`'s, dtype castable, as PyTorch checks), copy it into `self`'s view;
//! - **out=**: compute the functional results, then for each `out` tensor (or each element of
//!   a `Tensor[] out` list): resize it when its shape differs (an empty `out` is the usual
//!   case), check the dtype is castable, copy. A resized `out` gets new storage: the returned
//!   tensor is the one to use (a bridge sets its tensor to it).
//!
//! An `out=` form whose arguments are the functional's followed by the outputs is derived
//! first; an `out=` form no functional matches so (a factory's: `zeros.out(size, *, out)`
//! has none of `zeros`'s `dtype`, `layout`, `device`, `pin_memory`) is then matched by
//! argument names: the functional's missing `dtype` is the first output's dtype, its other
//! missing arguments must be optional (left `None`).
//!
//! View operators have no derived forms (their in-place forms, `t_` or `squeeze_`, change
//! metadata, not data).

use std::collections::{BTreeMap, BTreeSet};

use super::registry::{ArgSource, Derivation, OpDef, OpImpl, Run};
use super::schema::{Argument, Schema, Type, aten};
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
fn same_args(functional: &Schema, args: &[Argument]) -> bool {
    functional.args.len() == args.len()
        && functional.args.iter().zip(args).all(|(f, a)| {
            f.name == a.name
                && plain(&f.ty) == plain(&a.ty)
                && f.kwarg_only == a.kwarg_only
                && f.default == a.default
        })
}

/// Whether the functional returns tensors only: some `Tensor`s or one `Tensor[]`.
fn returns_tensors(f: &Schema) -> bool {
    let tensor = Type::Tensor(None);
    let list = Type::List(Box::new(Type::Tensor(None)), None);
    !f.returns.is_empty()
        && (f.returns.iter().all(|r| r.ty == tensor)
            || (f.returns.len() == 1 && f.returns[0].ty == list))
}

/// Whether `s` is an `out=` form with one keyword-only written argument per result of `f`.
fn writes_results_of(s: &Schema, f: &Schema) -> bool {
    let written = s.written_args();
    s.is_out() && written.len() == f.returns.len() && written.iter().all(|&i| s.args[i].kwarg_only)
}

/// `out`'s arguments as `f`'s followed by the outputs.
fn exact_out(s: &Schema, f: &Schema) -> Option<Vec<ArgSource>> {
    let n = f.args.len();
    (writes_results_of(s, f)
        && s.args.len() == n + s.written_args().len()
        && s.written_args().iter().all(|&i| i >= n)
        && same_args(f, &s.args[..n]))
    .then(|| (0..n).map(ArgSource::Arg).collect())
}

/// `f`'s arguments found in `out`'s by name and type (see the module docs), every argument of
/// `out` that is not written used.
fn out_by_name(s: &Schema, f: &Schema) -> Option<Vec<ArgSource>> {
    if !writes_results_of(s, f) {
        return None;
    }
    let written = s.written_args();
    let mut used = BTreeSet::new();
    let mut args = Vec::with_capacity(f.args.len());
    for a in &f.args {
        let found = (0..s.args.len()).find(|i| {
            !written.contains(i)
                && s.args[*i].name == a.name
                && plain(&s.args[*i].ty) == plain(&a.ty)
        });
        args.push(match found {
            Some(i) => {
                used.insert(i);
                ArgSource::Arg(i)
            }
            None if a.name == "dtype" => ArgSource::OutDtype,
            None if matches!(a.ty, Type::Optional(_)) => ArgSource::Default,
            None => return None,
        });
    }
    (used.len() + written.len() == s.args.len()).then_some(args)
}

/// The in-place and out= forms PyTorch has for the registered functional operators.
pub(crate) fn forms(registered: &BTreeMap<&'static str, OpDef>) -> Vec<OpDef> {
    let mut by_base: BTreeMap<&str, Vec<&'static Schema>> = BTreeMap::new();
    for s in aten::all().values() {
        by_base.entry(s.name.as_str()).or_default().push(s);
    }
    let functionals: Vec<&OpDef> = registered
        .values()
        .filter(|d| {
            let f = d.schema;
            d.implementation != OpImpl::View
                && !f.is_inplace()
                && !f.is_out()
                && f.written_args().is_empty()
                && returns_tensors(f)
        })
        .collect();
    let mut out: BTreeMap<&'static str, OpDef> = BTreeMap::new();
    let mut add = |def: &OpDef, s: &'static Schema, implementation, args, writes| {
        let name = s.full_name();
        if !registered.contains_key(name.as_str()) && !out.contains_key(name.as_str()) {
            let d = derived(def, s, implementation, args, writes);
            out.insert(d.name, d);
        }
    };
    for def in &functionals {
        let f = def.schema;
        let n = f.args.len();
        let inplace_name = format!("{}_", f.name);
        let single = f.returns.len() == 1 && f.returns[0].ty == Type::Tensor(None);
        // The in-place form of the same overload name; or, where PyTorch names them apart
        // (`pow_.Scalar` of `pow.Tensor_Scalar`), the one functional with the same arguments.
        let twin = |s: &Schema| {
            s.overload == f.overload
                || by_base
                    .get(f.name.as_str())
                    .into_iter()
                    .flatten()
                    .filter(|g| !g.is_inplace() && !g.is_out() && same_args(g, &s.args))
                    .count()
                    == 1
        };
        for s in by_base.get(inplace_name.as_str()).into_iter().flatten() {
            if single && s.is_inplace() && same_args(f, &s.args) && twin(s) {
                add(
                    def,
                    s,
                    OpImpl::InPlace,
                    (0..n).map(ArgSource::Arg).collect(),
                    vec![0],
                );
            }
        }
        for s in by_base.get(f.name.as_str()).into_iter().flatten() {
            if let Some(args) = exact_out(s, f) {
                add(def, s, OpImpl::Out, args, s.written_args());
            }
        }
    }
    for def in &functionals {
        let f = def.schema;
        for s in by_base.get(f.name.as_str()).into_iter().flatten() {
            if let Some(args) = out_by_name(s, f) {
                add(def, s, OpImpl::Out, args, s.written_args());
            }
        }
    }
    out.into_values().collect()
}

fn derived(
    def: &OpDef,
    s: &'static Schema,
    implementation: OpImpl,
    args: Vec<ArgSource>,
    writes: Vec<usize>,
) -> OpDef {
    let sharding = match (implementation, def.sharding) {
        (OpImpl::InPlace, Sharding::Pointwise { lin, .. }) => {
            Sharding::Pointwise { lin, inplace: true }
        }
        (OpImpl::InPlace, _) => Sharding::Replicate("in-place form of a non-elementwise operator"),
        _ => Sharding::Replicate("out= forms run on replicated inputs"),
    };
    let how: &'static Derivation = Box::leak(Box::new(Derivation {
        functional: def.name,
        args,
        writes,
    }));
    OpDef {
        name: Box::leak(s.full_name().into_boxed_str()),
        schema: s,
        implementation,
        dtypes: def.dtypes,
        run: if implementation == OpImpl::InPlace {
            Run::InPlace(how)
        } else {
            Run::Out(how)
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

impl Derivation {
    /// The functional operator's arguments, taken from the derived form's `args`.
    fn inputs(&self, name: &'static str, args: &Args) -> Args {
        let out_dtype = self.writes.first().and_then(|&i| match args.get(i) {
            Some(Value::Tensor(t)) => Some(t.dtype()),
            Some(Value::Tensors(ts)) => ts.first().map(Tensor::dtype),
            _ => None,
        });
        let values = self
            .args
            .iter()
            .map(|a| match a {
                ArgSource::Arg(i) => args.get(*i).cloned().unwrap_or(Value::None),
                ArgSource::Default => Value::None,
                ArgSource::OutDtype => out_dtype.map_or(Value::None, Value::Dtype),
            })
            .collect();
        Args::new(name, values)
    }

    /// The tensors written, in result order (a `Tensor[]` argument's elements in turn).
    fn targets(&self, name: &str, args: &Args) -> Result<Vec<Tensor>> {
        let mut ts = Vec::new();
        for &i in &self.writes {
            match args.get(i) {
                Some(Value::Tensor(t)) => ts.push(t.clone()),
                Some(Value::Tensors(l)) => ts.extend(l.iter().cloned()),
                _ => {
                    return Err(TpuError::BadArgs(format!(
                        "{name}: argument {i} must be a Tensor to write the result into"
                    )));
                }
            }
        }
        Ok(ts)
    }
}

/// Runs the in-place form `def` (computing `how.functional`) on bound `args`.
pub(crate) fn inplace(
    rt: &Runtime,
    def: &OpDef,
    how: &Derivation,
    functional: &OpDef,
    args: &Args,
) -> Result<Vec<Value>> {
    let dst = how.targets(def.name, args)?.remove(0);
    check_no_overlap(def.name, &dst)?;
    let res = super::run(rt, functional, &how.inputs(def.name, args))?;
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

/// Runs the `out=` form `def` (computing `how.functional`) on bound `args`: returns the
/// written tensors (a `Tensor[]` output as one list), each the argument itself or, where it
/// had to be resized, its replacement.
pub(crate) fn out(
    rt: &Runtime,
    def: &OpDef,
    how: &Derivation,
    functional: &OpDef,
    args: &Args,
) -> Result<Vec<Value>> {
    let res = super::run(rt, functional, &how.inputs(def.name, args))?;
    let targets = how.targets(def.name, args)?;
    let results: Vec<Option<&Tensor>> = res
        .iter()
        .flat_map(|v| match v {
            Value::Tensor(t) => vec![Some(t)],
            Value::Tensors(ts) => ts.iter().map(Some).collect(),
            _ => vec![None],
        })
        .collect();
    if results.len() != targets.len() {
        return Err(TpuError::BadArgs(format!(
            "{}: {} results for {} outputs",
            def.name,
            results.len(),
            targets.len()
        )));
    }
    let mut written = Vec::with_capacity(targets.len());
    for (r, o) in results.into_iter().zip(targets) {
        // A result the call did not compute (an output mask) leaves its `out` as it is.
        let Some(r) = r else {
            written.push(o);
            continue;
        };
        check_cast(def.name, r.dtype(), o.dtype())?;
        check_no_overlap(def.name, &o)?;
        let o = if o.shape() == r.shape() {
            o
        } else {
            Tensor::empty(rt, r.shape(), o.dtype())?
        };
        super::creation::copy_(&o, r)?;
        written.push(o);
    }
    let list = how
        .writes
        .iter()
        .any(|&i| matches!(args.get(i), Some(Value::Tensors(_))));
    Ok(if list {
        vec![Value::Tensors(written)]
    } else {
        written.into_iter().map(Value::Tensor).collect()
    })
}
