//! Index outputs that PyTorch leaves open among equal values. `topk` and `kthvalue` return
//! "the index of any one of" equal elements (their documentation; the CPU kernel's choice
//! comes from quickselect and `std::partial_sort`). Such a call passes when its values match
//! and every returned index points, along the reduced dimension, at an input element equal
//! to the value returned beside it (and `topk`'s indices in one slice are distinct).

use crate::executor::OpCall;
use crate::value::Value;

/// The operators whose index output is open among ties.
pub const TIED_INDEX_OPS: &[&str] = &["aten::topk", "aten::kthvalue"];

/// Whether `actual`'s index output (output 1) is one PyTorch could have returned for
/// `call`, given that its values (output 0) already matched.
pub fn indices_valid_among_ties(call: &OpCall, actual: &[Value]) -> bool {
    if !TIED_INDEX_OPS.contains(&call.op) {
        return false;
    }
    let (Ok(x), Some(Value::Tensor(vals)), Some(Value::Tensor(idx))) =
        (call.tensor("self"), actual.first(), actual.get(1))
    else {
        return false;
    };
    let Some(Value::Int(dim)) = call.arg("dim") else {
        return false;
    };
    let keepdim = call.op == "aten::topk" || matches!(call.arg("keepdim"), Some(Value::Bool(true)));
    let shape = x.shape();
    let nd = shape.len().max(1) as i64;
    if *dim < -nd || *dim >= nd {
        return false;
    }
    let d = if shape.is_empty() {
        0
    } else {
        dim.rem_euclid(nd) as usize
    };
    let xs = x.to_f64_vec();
    let (vs, is) = (vals.to_f64_vec(), idx.to_f64_vec());
    if vs.len() != is.len() || vals.shape() != idx.shape() {
        return false;
    }
    let oshape = idx.shape();
    // Row-major strides of the input.
    let mut strides = vec![1usize; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    let mut seen: std::collections::HashSet<(usize, i64)> = Default::default();
    for (p, (&v, &i)) in vs.iter().zip(&is).enumerate() {
        // The output position as a multi-index.
        let mut rem = p;
        let mut coord = vec![0usize; oshape.len()];
        for k in (0..oshape.len()).rev() {
            coord[k] = rem % oshape[k].max(1);
            rem /= oshape[k].max(1);
        }
        if shape.is_empty() {
            if i != 0.0 || xs.first() != Some(&v) {
                return false;
            }
            continue;
        }
        if i < 0.0 || i.fract() != 0.0 || i as usize >= shape[d] {
            return false;
        }
        if keepdim {
            coord[d] = i as usize;
        } else {
            coord.insert(d, i as usize);
        }
        if coord.len() != shape.len() {
            return false;
        }
        let at: usize = coord.iter().zip(&strides).map(|(c, s)| c * s).sum();
        let same = xs[at] == v || (xs[at].is_nan() && v.is_nan());
        if !same {
            return false;
        }
        if call.op == "aten::topk" {
            // The slice: the position with the reduced coordinate zeroed.
            coord[d] = 0;
            let slice: usize = coord.iter().zip(&strides).map(|(c, s)| c * s).sum();
            if !seen.insert((slice, i as i64)) {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{ArgSchema, OpSchema};
    use crate::tensor::{DType, HostTensor};

    fn schema(names: &[&str]) -> OpSchema {
        OpSchema {
            schema: String::new(),
            arguments: names
                .iter()
                .map(|n| ArgSchema {
                    name: n.to_string(),
                    ty: String::new(),
                    mutable: false,
                    kwarg_only: false,
                })
                .collect(),
            returns: Vec::new(),
        }
    }

    fn ints(shape: &[usize], v: &[i64]) -> Value {
        Value::Tensor(HostTensor::from_i64s(DType::I64, shape.to_vec(), v).unwrap())
    }

    #[test]
    fn an_index_must_point_at_an_equal_element() {
        // topk(x, 2) of [5, 7, 7, 1] along dim 0: values [7, 7]; indices [1, 2] or [2, 1].
        let s = schema(&["self", "k", "dim", "largest", "sorted"]);
        let args = [
            ints(&[4], &[5, 7, 7, 1]),
            Value::Int(2),
            Value::Int(0),
            Value::Bool(true),
            Value::Bool(true),
        ];
        let call = OpCall {
            op: "aten::topk",
            schema: &s,
            args: &args,
        };
        let ok =
            |idx: &[i64]| indices_valid_among_ties(&call, &[ints(&[2], &[7, 7]), ints(&[2], idx)]);
        assert!(ok(&[2, 1]));
        assert!(ok(&[1, 2]));
        assert!(!ok(&[1, 1]), "the same element twice");
        assert!(!ok(&[0, 2]), "index 0 holds 5, not 7");
        assert!(!ok(&[1, 4]), "out of range");
        // kthvalue(x, 2, dim=1) of [[3, 1, 1]]: value 1 at index 1 or 2, not 0.
        let s = schema(&["self", "k", "dim", "keepdim"]);
        let args = [
            ints(&[1, 3], &[3, 1, 1]),
            Value::Int(2),
            Value::Int(1),
            Value::Bool(false),
        ];
        let call = OpCall {
            op: "aten::kthvalue",
            schema: &s,
            args: &args,
        };
        let ok = |i: i64| indices_valid_among_ties(&call, &[ints(&[1], &[1]), ints(&[1], &[i])]);
        assert!(ok(1) && ok(2) && !ok(0));
        // Other operators keep the exact comparison.
        let call = OpCall {
            op: "aten::sort",
            ..call
        };
        assert!(!indices_valid_among_ties(
            &call,
            &[ints(&[1], &[1]), ints(&[1], &[1])]
        ));
    }
}
