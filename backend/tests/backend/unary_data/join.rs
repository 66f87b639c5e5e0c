//! `cat`, `stack` and `split`: every dim, promotion, views, empty tensors, errors.

use super::*;

/// Host `cat` of row-major arrays along `d`.
fn host_cat(parts: &[(&[f64], &[usize])], d: usize) -> (Vec<f64>, Vec<usize>) {
    let mut shape = parts[0].1.to_vec();
    shape[d] = parts.iter().map(|p| p.1[d]).sum();
    let n: usize = shape.iter().product();
    let mut out = vec![0.0; n];
    let mut at = 0;
    for (v, s) in parts {
        for (i, x) in v.iter().enumerate() {
            let mut idx = unravel(i, s);
            idx[d] += at;
            out[ravel(&idx, &shape)] = *x;
        }
        at += s[d];
    }
    (out, shape)
}

#[test]
fn cat_along_every_dim_with_promotion() {
    for mode in MODES {
        let rt = rt(mode);
        let (a, b) = (values(24, 1), values(12, 2));
        for (d, bs) in [(0usize, [1usize, 3, 4]), (1, [2, 1, 4]), (2, [2, 3, 2])] {
            let bv = &b[..bs.iter().product()];
            let ta = tensor(&rt, &a, &[2, 3, 4], DType::F32);
            let tb = tensor(&rt, bv, &bs, DType::BF16);
            let (want, shape) = host_cat(&[(&a, &[2, 3, 4]), (bv, &bs)], d);
            // bf16 + f32 -> f32; dims given negative too.
            let y = data::cat(&[ta.clone(), tb.clone()], d as i64 - 3).unwrap();
            check(
                &y,
                DType::F32,
                &shape,
                &want,
                &format!("cat dim {d} {mode:?}"),
            );
        }
        // int32 + int64 -> int64; bool + int32 -> int32; bf16 + f16 -> f32.
        let i = tensor(&rt, &[1.0, -2.0], &[2], DType::I32);
        let l = tensor(&rt, &[7.0], &[1], DType::I64);
        let y = data::cat(&[i.clone(), l], 0).unwrap();
        check(&y, DType::I64, &[3], &[1.0, -2.0, 7.0], "cat ints");
        let b = tensor(&rt, &[1.0, 0.0], &[2], DType::Bool);
        check(
            &data::cat(&[b, i], 0).unwrap(),
            DType::I32,
            &[4],
            &[1.0, 0.0, 1.0, -2.0],
            "cat bool int",
        );
        let h = tensor(&rt, &[0.1], &[1], DType::F16);
        let g = tensor(&rt, &[0.1], &[1], DType::BF16);
        check(
            &data::cat(&[h, g], 0).unwrap(),
            DType::F32,
            &[2],
            &[round(0.1, DType::F16), round(0.1, DType::BF16)],
            "cat f16 bf16",
        );
    }
}

#[test]
fn cat_of_views_and_empty_tensors() {
    for mode in MODES {
        let rt = rt(mode);
        let v = values(12, 4);
        let x = tensor(&rt, &v, &[3, 4], DType::F32);
        // A transposed [4, 3] and a sliced [4, 2] joined along dim 1.
        let t = x.t().unwrap();
        let s = layout_ops::slice(&t, 1, Some(0), Some(3), 2).unwrap();
        let tv = transposed(&v, 3, 4);
        let sv: Vec<f64> = (0..4).flat_map(|i| [tv[i * 3], tv[i * 3 + 2]]).collect();
        let (want, shape) = host_cat(&[(&tv, &[4, 3]), (&sv, &[4, 2])], 1);
        let e = tensor(&rt, &[], &[0], DType::I64);
        let y = data::cat(&[e.clone(), t, e.clone(), s], 1).unwrap();
        // The empty 1-D int64 tensors are skipped for shapes but promote nothing past f32.
        check(
            &y,
            DType::F32,
            &shape,
            &want,
            &format!("cat views {mode:?}"),
        );
        // Only empty 1-D tensors: an empty 1-D result.
        let z = data::cat(&[e.clone(), e], 0).unwrap();
        check(&z, DType::I64, &[0], &[], "cat empties");
        // Zero-size along the cat dim and elsewhere.
        let a = tensor(&rt, &[], &[0, 3], DType::F32);
        let b = tensor(&rt, &[1.0, 2.0, 3.0], &[1, 3], DType::F32);
        check(
            &data::cat(&[a.clone(), b], 0).unwrap(),
            DType::F32,
            &[1, 3],
            &[1.0, 2.0, 3.0],
            "cat zero rows",
        );
        let c = data::cat(&[a.clone(), a], 1).unwrap();
        check(&c, DType::F32, &[0, 6], &[], "cat zero size");
    }
}

#[test]
fn cat_errors_read_like_pytorch() {
    let rt = rt(Mode::Strict);
    let a = tensor(&rt, &[0.0; 6], &[2, 3], DType::F32);
    let b = tensor(&rt, &[0.0; 8], &[2, 4], DType::F32);
    let c = tensor(&rt, &[0.0; 3], &[3], DType::F32);
    let s = tensor(&rt, &[1.0], &[], DType::F32);
    let msg = |r: tpuemu_backend::Result<Tensor>| r.unwrap_err().to_string();
    let e = msg(data::cat(&[a.clone(), b.clone()], 0));
    assert!(
        e.contains("Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for tensor number 1 in the list."),
        "{e}"
    );
    assert!(data::cat(&[a.clone(), b], 1).is_ok());
    let e = msg(data::cat(&[a.clone(), c], 0));
    assert!(
        e.contains("Tensors must have same number of dimensions: got 2 and 1"),
        "{e}"
    );
    let e = msg(data::cat(&[a.clone(), s], 0));
    assert!(
        e.contains("zero-dimensional tensor (at position 1) cannot be concatenated"),
        "{e}"
    );
    let e = msg(data::cat(std::slice::from_ref(&a), 2));
    assert!(
        e.contains("Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
        "{e}"
    );
    let e = msg(data::cat(&[], 0));
    assert!(e.contains("expected a non-empty list of Tensors"), "{e}");
}

#[test]
fn stack_inserts_a_dim() {
    for mode in MODES {
        let rt = rt(mode);
        let (a, b) = (values(6, 5), values(6, 6));
        let ta = tensor(&rt, &a, &[2, 3], DType::BF16);
        let tb = tensor(&rt, &b, &[2, 3], DType::BF16);
        for d in 0..3usize {
            let mut s = vec![2usize, 3];
            s.insert(d, 1);
            let (want, shape) = host_cat(&[(&a, &s), (&b, &s)], d);
            let want: Vec<f64> = want.iter().map(|v| round(*v, DType::BF16)).collect();
            let y = data::stack(&[ta.clone(), tb.clone()], d as i64).unwrap();
            check(
                &y,
                DType::BF16,
                &shape,
                &want,
                &format!("stack {d} {mode:?}"),
            );
        }
        let y = data::stack(&[ta.clone(), tb.t().unwrap().t().unwrap()], -1).unwrap();
        assert_eq!(y.shape(), &[2, 3, 2]);
        let z = tensor(&rt, &[], &[0, 1, 0], DType::F32);
        let y = data::stack(&[z.clone(), z], 1).unwrap();
        check(&y, DType::F32, &[0, 2, 1, 0], &[], "stack empty");
        let e = data::stack(&[ta.clone(), ta.t().unwrap()], 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [3, 2] at entry 1"),
            "{e}"
        );
        assert!(data::stack(std::slice::from_ref(&ta), 3).is_err());
        assert!(data::stack(&[], 0).is_err());
    }
}

#[test]
fn split_returns_views() {
    let rt = rt(Mode::Strict);
    let v = values(30, 7);
    let x = tensor(&rt, &v, &[5, 6], DType::F32);
    let parts = x.split(2, 0).unwrap();
    assert_eq!(
        parts.iter().map(|p| p.shape().to_vec()).collect::<Vec<_>>(),
        vec![vec![2, 6], vec![2, 6], vec![1, 6]]
    );
    assert!(parts.iter().all(|p| p.shares_storage(&x)));
    close(
        &parts[2].to_f64_vec().unwrap(),
        &v[24..],
        DType::F32,
        "split last",
    );
    let parts = x.split(4, -1).unwrap();
    assert_eq!(parts[1].shape(), &[5, 2]);
    let want: Vec<f64> = (0..5).flat_map(|i| [v[i * 6 + 4], v[i * 6 + 5]]).collect();
    close(
        &parts[1].to_f64_vec().unwrap(),
        &want,
        DType::F32,
        "split cols",
    );
    assert_eq!(x.split(10, 0).unwrap().len(), 1);
    let z = tensor(&rt, &[], &[0, 2], DType::F32);
    assert_eq!(z.split(0, 0).unwrap().len(), 1);
    assert!(x.split(0, 0).is_err());
    assert!(x.split(-1, 0).is_err());
    assert!(x.split(2, 2).is_err());
    // By name, as recorded: split.Tensor(self, split_size, dim) -> Tensor[].
    let out = ops::call(
        &rt,
        "aten::split.Tensor",
        vec![Value::Tensor(x.clone()), Value::Int(4), Value::Int(1)],
    )
    .unwrap();
    let [Value::Tensors(ts)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(ts.len(), 2);
}

#[test]
fn cat_writes_fuse_with_their_producers() {
    let rt = rt(Mode::DeferAndFuse);
    let v = values(6, 3);
    let a = tensor(&rt, &v, &[2, 3], DType::F32);
    rt.reset_metrics();
    let y = data::cat(&[a.exp().unwrap(), a.neg().unwrap()], 0).unwrap();
    let want: Vec<f64> = v
        .iter()
        .map(|x| round(x.exp(), DType::F32))
        .chain(v.iter().map(|x| -x))
        .collect();
    check(&y, DType::F32, &[4, 3], &want, "cat fused");
    // The slice writes fuse with the producers they read (each write of the shared output
    // starts a kernel of its own at most).
    assert!(
        rt.metrics().kernels_launched <= 2,
        "{}",
        rt.metrics().report()
    );
}
