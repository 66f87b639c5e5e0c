//! `masked_fill`, `tril`/`triu`, `constant_pad_nd` and `flip`.

use super::*;

#[test]
fn masked_fill_broadcasts_and_converts_the_value() {
    for mode in MODES {
        let rt = rt(mode);
        let mv = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0];
        let mask = tensor(&rt, &mv, &[2, 3], DType::Bool);
        for d in [DType::F32, DType::BF16, DType::I32, DType::I64, DType::Bool] {
            let xv = [1.0, -2.0, 3.0];
            let x = tensor(&rt, &xv, &[3], d);
            for value in [Scalar::Float(10.7), Scalar::Int(-3), Scalar::Bool(true)] {
                let y = x.masked_fill(&mask, value).unwrap();
                let fill = match (value, d) {
                    (Scalar::Float(f), d) if !d.is_float() && d != DType::Bool => f.trunc(),
                    (v, _) => v.to_f64(),
                };
                let want: Vec<f64> = (0..6)
                    .map(|i| round(if mv[i] != 0.0 { fill } else { xv[i % 3] }, d))
                    .collect();
                check(
                    &y,
                    d,
                    &[2, 3],
                    &want,
                    &format!("masked_fill {d} {value:?} {mode:?}"),
                );
            }
        }
        // NaN fill, a transposed input, a zero-dim value tensor.
        let x = tensor(&rt, &values(6, 2), &[3, 2], DType::F32).t().unwrap();
        let y = x.masked_fill(&mask, f64::NAN).unwrap();
        let xv = transposed(&values(6, 2), 3, 2);
        let want: Vec<f64> = (0..6)
            .map(|i| if mv[i] != 0.0 { f64::NAN } else { xv[i] })
            .collect();
        check(&y, DType::F32, &[2, 3], &want, "masked_fill nan");
        let val = tensor(&rt, &[2.5], &[], DType::F32);
        let y = data::masked_fill_tensor(&x, &mask, &val).unwrap();
        let want: Vec<f64> = (0..6)
            .map(|i| if mv[i] != 0.0 { 2.5 } else { xv[i] })
            .collect();
        check(&y, DType::F32, &[2, 3], &want, "masked_fill tensor");
        let e = x.masked_fill(&x, 1.0).unwrap_err().to_string();
        assert!(
            e.contains("masked_fill_ only supports boolean masks"),
            "{e}"
        );
        let v1 = tensor(&rt, &[2.5], &[1], DType::F32);
        assert!(data::masked_fill_tensor(&x, &mask, &v1).is_err());
        // By name, as recorded: masked_fill.Scalar(self, mask, value).
        let out = ops::call(
            &rt,
            "aten::masked_fill.Scalar",
            vec![
                Value::Tensor(x.clone()),
                Value::Tensor(mask.clone()),
                Value::Int(10),
            ],
        )
        .unwrap();
        let Value::Tensor(y) = &out[0] else { panic!() };
        assert_eq!(y.to_f64_vec().unwrap()[0], 10.0);
    }
}

#[test]
fn tril_triu_with_offsets() {
    for mode in MODES {
        let rt = rt(mode);
        let shape = [2usize, 3, 5];
        let v = values(30, 4);
        for d in [DType::F32, DType::BF16, DType::I64, DType::Bool] {
            let rv: Vec<f64> = v.iter().map(|a| round(*a, d)).collect();
            let x = tensor(&rt, &rv, &shape, d);
            for k in [-4i64, -1, 0, 2, 7] {
                for lower in [true, false] {
                    let y = if lower { x.tril(k) } else { x.triu(k) }.unwrap();
                    let want: Vec<f64> = (0..30)
                        .map(|i| {
                            let c = unravel(i, &shape);
                            let diff = c[2] as i64 - c[1] as i64;
                            let keep = if lower { diff <= k } else { diff >= k };
                            if keep { rv[i] } else { 0.0 }
                        })
                        .collect();
                    check(
                        &y,
                        d,
                        &shape,
                        &want,
                        &format!("tri {lower} {k} {d} {mode:?}"),
                    );
                }
            }
        }
        // Transposed input.
        let x = tensor(&rt, &v[..12], &[3, 4], DType::F32).t().unwrap();
        let tv = transposed(&v[..12], 3, 4);
        let want: Vec<f64> = (0..12)
            .map(|i| if i % 3 <= i / 3 { tv[i] } else { 0.0 })
            .collect();
        check(
            &x.tril(0).unwrap(),
            DType::F32,
            &[4, 3],
            &want,
            "tril transposed",
        );
        let e = tensor(&rt, &[1.0, 2.0], &[2], DType::F32)
            .tril(0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tril: input tensor must have at least 2 dimensions"),
            "{e}"
        );
        let z = tensor(&rt, &[], &[0, 3], DType::F32);
        check(&z.triu(1).unwrap(), DType::F32, &[0, 3], &[], "triu empty");
    }
}

/// Host constant padding of a row-major array.
fn host_pad(v: &[f64], shape: &[usize], pad: &[i64], value: f64) -> (Vec<f64>, Vec<usize>) {
    let n = shape.len();
    let mut lo = vec![0i64; n];
    let mut oshape: Vec<usize> = shape.to_vec();
    for (i, p) in pad.chunks(2).enumerate() {
        let d = n - 1 - i;
        lo[d] = p[0];
        oshape[d] = (shape[d] as i64 + p[0] + p[1]) as usize;
    }
    let out = (0..oshape.iter().product())
        .map(|i| {
            let o = unravel(i, &oshape);
            let src: Option<Vec<usize>> = (0..n)
                .map(|d| {
                    let s = o[d] as i64 - lo[d];
                    (s >= 0 && s < shape[d] as i64).then_some(s as usize)
                })
                .collect();
            src.map_or(value, |s| v[ravel(&s, shape)])
        })
        .collect();
    (out, oshape)
}

#[test]
fn constant_pad_nd_pads_and_crops() {
    for mode in MODES {
        let rt = rt(mode);
        let shape = [2usize, 3, 4];
        let v = values(24, 5);
        let cases: [&[i64]; 6] = [
            &[2, 2],
            &[1, 0, 0, 2],
            &[-1, 2, 1, -2],
            &[-1, -1, -1, 0, 1, 1],
            &[0, -4],
            &[],
        ];
        for d in [DType::F32, DType::BF16, DType::I32, DType::Bool] {
            let rv: Vec<f64> = v.iter().map(|a| round(*a, d)).collect();
            let x = tensor(&rt, &rv, &shape, d);
            for pad in cases {
                let y = x.pad(pad, 1.5).unwrap();
                let fill = if d.is_float() { 1.5 } else { round(1.0, d) };
                let (want, os) = host_pad(&rv, &shape, pad, round(fill, d));
                check(&y, d, &os, &want, &format!("pad {pad:?} {d} {mode:?}"));
            }
        }
        // A transposed input, padding that crops it all away.
        let x = tensor(&rt, &v[..12], &[3, 4], DType::F32).t().unwrap();
        let tv = transposed(&v[..12], 3, 4);
        let (want, os) = host_pad(&tv, &[4, 3], &[1, -2, 0, 1], 0.0);
        check(
            &x.pad(&[1, -2, 0, 1], 0).unwrap(),
            DType::F32,
            &os,
            &want,
            "pad t",
        );
        let (want, os) = host_pad(&tv, &[4, 3], &[-3, 2], 7.0);
        check(
            &x.pad(&[-3, 2], 7.0).unwrap(),
            DType::F32,
            &os,
            &want,
            "pad crop all",
        );
        // Zero-size input, as recorded: [0, 3, 3] with [0, 1] and 2.0.
        let z = tensor(&rt, &[], &[0, 3, 3], DType::F32);
        check(
            &z.pad(&[0, 1], 2.0).unwrap(),
            DType::F32,
            &[0, 3, 4],
            &[],
            "pad empty",
        );
        let e = x.pad(&[1, 2, 3], 0).unwrap_err().to_string();
        assert!(
            e.contains("Length of pad must be even but instead it equals 3"),
            "{e}"
        );
        let e = x.pad(&[1, 1, 1, 1, 1, 1], 0).unwrap_err().to_string();
        assert!(
            e.contains("Length of pad should be no more than twice the number of dimensions"),
            "{e}"
        );
        let e = x.pad(&[-2, -2], 0).unwrap_err().to_string();
        assert!(e.contains("resulted in a negative output size"), "{e}");
        let out = ops::call(
            &rt,
            "aten::constant_pad_nd",
            vec![
                Value::Tensor(x.clone()),
                Value::Ints(vec![2, 2]),
                Value::Float(0.0),
            ],
        )
        .unwrap();
        let Value::Tensor(y) = &out[0] else { panic!() };
        assert_eq!(y.shape(), &[4, 7]);
    }
}

#[test]
fn flip_reverses_dims() {
    for mode in MODES {
        let rt = rt(mode);
        let shape = [2usize, 3, 4];
        let v = values(24, 6);
        for d in [DType::F32, DType::BF16, DType::I64, DType::Bool] {
            let rv: Vec<f64> = v.iter().map(|a| round(*a, d)).collect();
            let x = tensor(&rt, &rv, &shape, d);
            for dims in [vec![0i64], vec![2], vec![0, -1], vec![1, 0, 2], vec![]] {
                let y = x.flip(&dims).unwrap();
                let fl: Vec<usize> = dims.iter().map(|k| k.rem_euclid(3) as usize).collect();
                let want: Vec<f64> = (0..24)
                    .map(|i| {
                        let mut c = unravel(i, &shape);
                        for k in &fl {
                            c[*k] = shape[*k] - 1 - c[*k];
                        }
                        rv[ravel(&c, &shape)]
                    })
                    .collect();
                check(&y, d, &shape, &want, &format!("flip {dims:?} {d} {mode:?}"));
            }
        }
        // A transposed input, a zero-dim one, a zero-size one.
        let x = tensor(&rt, &v[..12], &[3, 4], DType::F32).t().unwrap();
        let tv = transposed(&v[..12], 3, 4);
        let want: Vec<f64> = (0..12).map(|i| tv[(3 - i / 3) * 3 + i % 3]).collect();
        check(
            &x.flip(&[0]).unwrap(),
            DType::F32,
            &[4, 3],
            &want,
            "flip transposed",
        );
        let s = tensor(&rt, &[3.0], &[], DType::F32);
        check(
            &s.flip(&[0]).unwrap(),
            DType::F32,
            &[],
            &[3.0],
            "flip scalar",
        );
        let z = tensor(&rt, &[], &[5, 0, 2], DType::F32);
        check(
            &z.flip(&[0, 2]).unwrap(),
            DType::F32,
            &[5, 0, 2],
            &[],
            "flip empty",
        );
        let e = x.flip(&[0, -2]).unwrap_err().to_string();
        assert!(
            e.contains("appears multiple times in the list of dims"),
            "{e}"
        );
        assert!(x.flip(&[2]).is_err());
    }
}

#[test]
fn data_calls_by_overload_name() {
    let rt = rt(Mode::DeferAndFuse);
    let a = tensor(&rt, &values(6, 1), &[2, 3], DType::F32);
    let i = tensor(&rt, &[1.0, 0.0], &[2], DType::I64);
    let calls: Vec<(&str, Vec<Value>, Vec<usize>)> = vec![
        (
            "aten::cat",
            vec![Value::Tensors(vec![a.clone(), a.clone()]), Value::Int(-1)],
            vec![2, 6],
        ),
        (
            "aten::stack",
            vec![Value::Tensors(vec![a.clone()]), Value::Int(-1)],
            vec![2, 3, 1],
        ),
        (
            "aten::index_select",
            vec![
                Value::Tensor(a.clone()),
                Value::Int(-1),
                Value::Tensor(i.clone()),
            ],
            vec![2, 2],
        ),
        (
            "aten::gather",
            vec![
                Value::Tensor(a.clone()),
                Value::Int(0),
                Value::Tensor(i.unsqueeze(0).unwrap()),
                Value::Bool(false),
            ],
            vec![1, 2],
        ),
        (
            "aten::tril",
            vec![Value::Tensor(a.clone()), Value::Int(1)],
            vec![2, 3],
        ),
        ("aten::triu", vec![Value::Tensor(a.clone())], vec![2, 3]),
        (
            "aten::flip",
            vec![Value::Tensor(a.clone()), Value::Ints(vec![0, 1])],
            vec![2, 3],
        ),
    ];
    for (name, args, shape) in calls {
        let out = ops::call(&rt, name, args).unwrap();
        let Value::Tensor(t) = &out[0] else {
            panic!("{name}")
        };
        assert_eq!(t.shape(), &shape[..], "{name}");
        assert_eq!(
            t.to_f64_vec().unwrap().len(),
            shape.iter().product::<usize>()
        );
    }
}
