//! The derived forms of a sampled operator (its in-place `op_` and `out=` overloads): each
//! runs on fresh copies of the sample's inputs and must write what the functional form returns
//! into its destination.

use super::*;

/// Checks a derived form (in-place or `out=`) of the operator against what the functional
/// form must give on the same sample: the same values written into `self` (where PyTorch
/// allows it: the result has `self`'s shape and dtype; an error where the shape differs or
/// the dtype cannot be cast), or into fresh, empty `out` tensors.
pub(super) fn verify_derived(
    rt: &Runtime,
    d: &ops::OpDef,
    s: &Sample,
    want: &[Out],
) -> Result<(), String> {
    let (slots, inputs) = slots(&s.args);
    let xs = inputs
        .iter()
        .map(|x| materialize(rt, x))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let args = bind(&slots, &xs);
    let meta = |o: &Out| match o {
        Out::Close(h, _) => (h.shape.clone(), h.dtype),
        Out::Meta(sh, dt) => (sh.clone(), *dt),
    };
    match d.implementation {
        ops::OpImpl::Out => {
            // The form's arguments by name from the sample's (the derivation says which of
            // the functional's each is: `zeros.out` has `size` but not `dtype`, which is the
            // out tensor's), then fresh, empty outs.
            let Some(how) = d.derivation() else {
                return Err("an out= form without its derivation".into());
            };
            let mut kwargs: Vec<(String, Value)> = Vec::new();
            for (j, src) in how.args.iter().enumerate() {
                if let (ops::ArgSource::Arg(i), Some(v)) = (src, args.get(j)) {
                    kwargs.push((d.schema.args[*i].name.clone(), v.clone()));
                }
            }
            let mut outs = Vec::with_capacity(want.len());
            for o in want {
                let (_, dt) = meta(o);
                outs.push(Tensor::empty(rt, &[0], dt).map_err(|e| e.to_string())?);
            }
            let written = &how.writes;
            let list = written.len() == 1
                && matches!(d.schema.args[written[0]].ty, ops::schema::Type::List(..));
            if list {
                kwargs.push((d.schema.args[written[0]].name.clone(), Value::Tensors(outs)));
            } else if written.len() == want.len() {
                for (&w, o) in written.iter().zip(outs) {
                    kwargs.push((d.schema.args[w].name.clone(), Value::Tensor(o)));
                }
            } else {
                // Some results are absent (an output mask): not compared here.
                return Ok(());
            }
            let outs =
                flatten(ops::call_kw(rt, d.name, Vec::new(), kwargs).map_err(|e| e.to_string())?);
            if outs.len() != want.len() {
                return Err(format!("{} outputs, want {}", outs.len(), want.len()));
            }
            for (i, (g, w)) in outs.iter().zip(want).enumerate() {
                compare(i, g, w)?;
            }
            Ok(())
        }
        ops::OpImpl::InPlace => {
            let Some(Slot::T(0)) = slots.first() else {
                return Ok(());
            };
            let (shape, dt) = meta(&want[0]);
            let dst = &xs[0];
            let r = ops::call(rt, d.name, args);
            let castable = !(dt.is_float() && !dst.dtype().is_float()
                || dt != DType::Bool && dst.dtype() == DType::Bool);
            // An expanded `self` cannot be written (PyTorch refuses it too).
            let overlaps = dst
                .shape()
                .iter()
                .zip(dst.strides())
                .any(|(&n, &st)| n > 1 && st == 0);
            let castable = castable && !overlaps;
            match r {
                Err(e) if shape != dst.shape() || !castable => {
                    let _ = e;
                    Ok(())
                }
                Err(e) => Err(format!("unexpected error: {e}")),
                Ok(_) if shape != dst.shape() || !castable => Err(format!(
                    "wrote a {shape:?} {dt} result into a {:?} {} tensor",
                    dst.shape(),
                    dst.dtype()
                )),
                Ok(out) => {
                    let Some(Value::Tensor(o)) = out.first() else {
                        return Err("no tensor returned".into());
                    };
                    if !o.shares_storage(dst) {
                        return Err("the result is not `self`".into());
                    }
                    // The written values, where the dtype is the result's (a cast in between
                    // rounds them: checked by `copy_`'s own suite).
                    if dst.dtype() == dt {
                        compare(0, dst, &want[0])
                    } else {
                        Ok(())
                    }
                }
            }
        }
        _ => Ok(()),
    }
}
