//! `index_select`, `gather` and `embedding`: every dim and dtype, int32/int64 indices, views,
//! zero-dim and empty indices, and out-of-range indices failing instead of reading memory.

use super::*;

/// Host `index_select` of a row-major array.
fn host_index_select(v: &[f64], shape: &[usize], d: usize, idx: &[usize]) -> Vec<f64> {
    let mut oshape = shape.to_vec();
    oshape[d] = idx.len();
    (0..oshape.iter().product())
        .map(|i| {
            let mut k = unravel(i, &oshape);
            k[d] = idx[k[d]];
            v[ravel(&k, shape)]
        })
        .collect()
}

#[test]
fn index_select_along_every_dim() {
    for mode in MODES {
        let rt = rt(mode);
        let shape = [3usize, 4, 5];
        let v = values(60, 8);
        for d in [DType::F32, DType::BF16, DType::I32, DType::Bool] {
            let rv: Vec<f64> = v.iter().map(|a| round(*a, d)).collect();
            let x = tensor(&rt, &rv, &shape, d);
            for (dim, idx) in [
                (0usize, vec![2usize, 0, 2]),
                (1, vec![3, 1]),
                (2, vec![4, 0, 0, 1]),
            ] {
                for it in [DType::I64, DType::I32] {
                    let fi: Vec<f64> = idx.iter().map(|i| *i as f64).collect();
                    let ti = tensor(&rt, &fi, &[idx.len()], it);
                    let y = x.index_select(dim as i64, &ti).unwrap();
                    let mut os = shape.to_vec();
                    os[dim] = idx.len();
                    let want = host_index_select(&rv, &shape, dim, &idx);
                    check(
                        &y,
                        d,
                        &os,
                        &want,
                        &format!("index_select {d} dim {dim} {mode:?}"),
                    );
                }
            }
        }
        // A transposed input, a strided index, a negative dim.
        let x = tensor(&rt, &v[..20], &[4, 5], DType::F32);
        let t = x.t().unwrap();
        let idx = tensor(&rt, &[3.0, 9.0, 0.0, 9.0, 1.0], &[5], DType::I64);
        let idx = layout_ops::slice(&idx, 0, None, None, 2).unwrap(); // [3, 0, 1]
        let y = t.index_select(-1, &idx).unwrap();
        let tv = transposed(&v[..20], 4, 5);
        let want = host_index_select(&tv, &[5, 4], 1, &[3, 0, 1]);
        check(&y, DType::F32, &[5, 3], &want, "index_select transposed");
        // A zero-dim input with a one-element index; an empty index.
        let s = tensor(&rt, &[2.5], &[], DType::F32);
        let zero = tensor(&rt, &[0.0], &[1], DType::I64);
        check(
            &s.index_select(0, &zero).unwrap(),
            DType::F32,
            &[],
            &[2.5],
            "scalar",
        );
        let none = tensor(&rt, &[], &[0], DType::I64);
        check(
            &x.index_select(1, &none).unwrap(),
            DType::F32,
            &[4, 0],
            &[],
            "empty",
        );
    }
}

#[test]
fn index_select_errors() {
    let rt = rt(Mode::Strict);
    let x = tensor(&rt, &values(6, 1), &[2, 3], DType::F32);
    let fidx = tensor(&rt, &[0.0], &[1], DType::F32);
    let e = x.index_select(0, &fidx).unwrap_err().to_string();
    assert!(e.contains("Expected dtype int32 or int64 for index"), "{e}");
    let m = tensor(&rt, &[0.0; 4], &[2, 2], DType::I64);
    let e = x.index_select(0, &m).unwrap_err().to_string();
    assert!(e.contains("Index is supposed to be a vector"), "{e}");
    let ok = tensor(&rt, &[0.0], &[1], DType::I64);
    assert!(x.index_select(2, &ok).is_err());
    let empty = tensor(&rt, &[], &[0, 3], DType::F32);
    let e = empty.index_select(0, &ok).unwrap_err().to_string();
    assert!(e.contains("index out of range in self"), "{e}");
}

/// An out-of-range index must fail (at the operator or at the read), never panic or return
/// data silently.
fn must_fail(mode: Mode, f: impl FnOnce(&Runtime) -> tpuemu_backend::Result<Tensor>) {
    let rt = rt(mode);
    let r = f(&rt).and_then(|t| t.to_f64_vec());
    assert!(r.is_err(), "{mode:?}: out-of-range index returned {r:?}");
    // The runtime stays usable.
    let x = tensor(&rt, &[1.0, 2.0], &[2], DType::F32);
    assert_eq!(x.neg().unwrap().to_f64_vec().unwrap(), vec![-1.0, -2.0]);
}

#[test]
fn out_of_range_indices_fail() {
    for mode in MODES {
        let v = values(12, 2);
        for bad in [3.0, -1.0, 1000.0, 2147483647.0] {
            // index_select along dim 0 (raw indices) and dim 1 (combined offsets).
            must_fail(mode, |rt| {
                let x = tensor(rt, &v, &[3, 4], DType::F32);
                x.index_select(0, &tensor(rt, &[0.0, bad], &[2], DType::I64))
            });
            let bad1 = if bad < 0.0 { bad } else { bad.max(4.0) };
            must_fail(mode, |rt| {
                let x = tensor(rt, &v, &[3, 4], DType::F32);
                x.index_select(1, &tensor(rt, &[1.0, bad1], &[2], DType::I32))
            });
            // A slice of a bigger tensor: rows beyond the slice exist in memory.
            must_fail(mode, |rt| {
                let x = tensor(rt, &v, &[6, 2], DType::F32);
                let s = layout_ops::slice(&x, 0, Some(2), Some(4), 1)?;
                s.index_select(0, &tensor(rt, &[bad.min(2.0)], &[1], DType::I64))
            });
            must_fail(mode, |rt| {
                let w = tensor(rt, &v, &[3, 4], DType::BF16);
                data::embedding(&w, &tensor(rt, &[1.0, bad], &[1, 2], DType::I64))
            });
            must_fail(mode, |rt| {
                let x = tensor(rt, &v, &[3, 4], DType::F32);
                let i = tensor(rt, &[0.0, 1.0, 2.0, bad.min(4.0)], &[1, 4], DType::I64);
                x.gather(0, &i)
            });
        }
        // gather along dim 1: index 4 would be the next row's first element.
        must_fail(mode, |rt| {
            let x = tensor(rt, &v, &[3, 4], DType::F32);
            x.gather(1, &tensor(rt, &[4.0], &[1, 1], DType::I64))
        });
    }
}

/// Host `gather` along `d`.
fn host_gather(v: &[f64], shape: &[usize], d: usize, idx: &[usize], ishape: &[usize]) -> Vec<f64> {
    (0..idx.len())
        .map(|i| {
            let mut k = unravel(i, ishape);
            k[d] = idx[i];
            v[ravel(&k, shape)]
        })
        .collect()
}

#[test]
fn gather_along_a_dim() {
    for mode in MODES {
        let rt = rt(mode);
        let shape = [3usize, 4, 5];
        let v = values(60, 9);
        for d in [DType::F32, DType::BF16, DType::I64, DType::Bool] {
            let rv: Vec<f64> = v.iter().map(|a| round(*a, d)).collect();
            let x = tensor(&rt, &rv, &shape, d);
            for dim in 0..3usize {
                // The index may be smaller than the input in every dim.
                let ishape = [2usize, 3, 4];
                let idx: Vec<usize> = (0..24).map(|i| (i * 7 + dim) % shape[dim]).collect();
                let fi: Vec<f64> = idx.iter().map(|i| *i as f64).collect();
                let ti = tensor(&rt, &fi, &ishape, DType::I64);
                let y = x.gather(dim as i64, &ti).unwrap();
                let want = host_gather(&rv, &shape, dim, &idx, &ishape);
                check(
                    &y,
                    d,
                    &ishape,
                    &want,
                    &format!("gather {d} dim {dim} {mode:?}"),
                );
            }
        }
        // Transposed input, int32 index, negative dim.
        let x = tensor(&rt, &v[..12], &[3, 4], DType::F32);
        let t = x.t().unwrap(); // [4, 3]
        let idx = [2usize, 0, 1, 1, 0, 2, 2, 2];
        let fi: Vec<f64> = idx.iter().map(|i| *i as f64).collect();
        let ti = tensor(&rt, &fi, &[4, 2], DType::I32);
        let y = t.gather(-1, &ti).unwrap();
        let tv = transposed(&v[..12], 3, 4);
        check(
            &y,
            DType::F32,
            &[4, 2],
            &host_gather(&tv, &[4, 3], 1, &idx, &[4, 2]),
            "gather transposed",
        );
        // Zero-dim and empty, as in the recorded cases.
        let s = tensor(&rt, &[1.5], &[], DType::F32);
        let z = tensor(&rt, &[0.0], &[], DType::I64);
        check(
            &s.gather(0, &z).unwrap(),
            DType::F32,
            &[],
            &[1.5],
            "gather scalar",
        );
        let e = tensor(&rt, &[], &[0], DType::I64);
        let x1 = tensor(&rt, &v[..5], &[5], DType::F32);
        check(
            &x1.gather(0, &e).unwrap(),
            DType::F32,
            &[0],
            &[],
            "gather empty",
        );
    }
}

#[test]
fn gather_errors() {
    let rt = rt(Mode::Strict);
    let x = tensor(&rt, &values(12, 1), &[3, 4], DType::F32);
    let i1 = tensor(&rt, &[0.0], &[1], DType::I64);
    let e = x.gather(0, &i1).unwrap_err().to_string();
    assert!(
        e.contains("Index tensor must have the same number of dimensions as input tensor"),
        "{e}"
    );
    let big = tensor(&rt, &[0.0; 5], &[1, 5], DType::I64);
    let e = x.gather(0, &big).unwrap_err().to_string();
    assert!(e.contains("Size does not match at dimension 1"), "{e}");
    let f = tensor(&rt, &[0.0], &[1, 1], DType::F32);
    assert!(x.gather(0, &f).is_err());
    assert!(x.gather(2, &i1).is_err());
}

#[test]
fn embedding_looks_up_rows() {
    for mode in MODES {
        let rt = rt(mode);
        let v = values(40, 3);
        for d in [DType::F32, DType::BF16, DType::F16] {
            let rv: Vec<f64> = v.iter().map(|a| round(*a, d)).collect();
            let w = tensor(&rt, &rv, &[10, 4], d);
            let idx = [3usize, 9, 0, 3, 7, 1];
            let fi: Vec<f64> = idx.iter().map(|i| *i as f64).collect();
            let ti = tensor(&rt, &fi, &[2, 3], DType::I64);
            let want: Vec<f64> = idx
                .iter()
                .flat_map(|i| rv[i * 4..i * 4 + 4].to_vec())
                .collect();
            let y = data::embedding(&w, &ti).unwrap();
            check(&y, d, &[2, 3, 4], &want, &format!("embedding {d} {mode:?}"));
            // Transposed indices (non-contiguous), int32.
            let t = tensor(&rt, &fi, &[2, 3], DType::I32).t().unwrap();
            let tidx = [3usize, 3, 9, 7, 0, 1];
            let want: Vec<f64> = tidx
                .iter()
                .flat_map(|i| rv[i * 4..i * 4 + 4].to_vec())
                .collect();
            check(
                &data::embedding(&w, &t).unwrap(),
                d,
                &[3, 2, 4],
                &want,
                "embedding t",
            );
        }
        // A zero-dim index (as in the recorded cases): one row.
        let w = tensor(&rt, &v, &[10, 4], DType::F32);
        let s = tensor(&rt, &[5.0], &[], DType::I64);
        check(
            &data::embedding(&w, &s).unwrap(),
            DType::F32,
            &[4],
            &v[20..24],
            "scalar",
        );
        // By name, with the recorded argument list.
        let ti = tensor(&rt, &[1.0, 2.0], &[2], DType::I64);
        let out = ops::call(
            &rt,
            "aten::embedding",
            vec![
                Value::Tensor(w.clone()),
                Value::Tensor(ti),
                Value::Int(0),
                Value::Bool(true),
                Value::Bool(true),
            ],
        )
        .unwrap();
        let Value::Tensor(y) = &out[0] else { panic!() };
        check(y, DType::F32, &[2, 4], &v[4..12], "embedding by name");
        let e = data::embedding(&w, &tensor(&rt, &[1.0], &[1], DType::F32))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'indices' to have one of the following scalar types: Long, Int"),
            "{e}"
        );
        let w1 = tensor(&rt, &v[..4], &[4], DType::F32);
        assert!(data::embedding(&w1, &s).is_err());
    }
}

/// More indices than one SMEM chunk holds (4,096), in a count that leaves a partial chunk and a
/// partial loop trip, with repeats: every output row is its table row (index `i * 7919 % 13`,
/// computed here, not by the kernel).
#[test]
fn embedding_of_more_indices_than_a_chunk() {
    let n = 4096 + 4 * 3 + 3;
    for mode in MODES {
        let rt = rt(mode);
        let v = values(13 * 6, 5);
        let w = tensor(&rt, &v, &[13, 6], DType::F32);
        let idx: Vec<usize> = (0..n).map(|i| i * 7919 % 13).collect();
        let fi: Vec<f64> = idx.iter().map(|i| *i as f64).collect();
        for it in [DType::I64, DType::I32] {
            let ti = tensor(&rt, &fi, &[n], it);
            let want: Vec<f64> = idx
                .iter()
                .flat_map(|i| v[i * 6..i * 6 + 6].to_vec())
                .collect();
            let y = data::embedding(&w, &ti).unwrap();
            check(&y, DType::F32, &[n, 6], &want, &format!("{it} {mode:?}"));
        }
    }
}
