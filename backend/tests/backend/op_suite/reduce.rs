//! Reductions: `sum`, `mean`, `prod` (whole tensor and along dims, with `dtype=`), `amax`,
//! `amin`, `max`, `min` (whole and along a dim with indices), `argmax`, `argmin`, `var`,
//! `std`, over any placement, empty rows and whole tensors large enough to take the two-kernel
//! path.
//!
//! Tolerances: the device accumulates float sums and products in f32 in its own order (lanes,
//! then a tree), so on top of `torch.testing`'s defaults a float sum of `n` terms may be off by
//! Higham's bound `n·u·Σ|x|` (`u = 2^-24`), a product by `n·u·|prod|`, and a variance (two
//! passes: mean, then squared deviations) by `2(n+3)·u·Σx²/(N-c)`; `std` by the square root of
//! that. PyTorch's CPU kernels accumulate in another order and are off from the exact value by
//! the same kind of amount: these are differences of order, not of quality. Extremes and
//! indices are exact: NaN propagates to values and counts as the extreme for indices; ties give
//! the first index.

use proptest::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Input, Out, Sample, Tol, check, check_samples, dtype_arg, ints, t, tp, v};
use super::reference::{HostTensor, numel, reduced_shape, rows, wrap};
use super::strategies::{
    Values, any_dtype, dim_of, dims_of, float_dtype, input, num_dtype, shape, shape_rank,
};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::sum", sums),
    ("aten::sum.dim_IntList", sums),
    ("aten::mean", means),
    ("aten::mean.dim", means),
    ("aten::prod", prods),
    ("aten::prod.dim_int", prods),
    ("aten::amax", extremes),
    ("aten::amin", extremes),
    ("aten::max", extremes),
    ("aten::min", extremes),
    ("aten::max.dim", extremes_dim),
    ("aten::min.dim", extremes_dim),
    ("aten::argmax", arg_extremes),
    ("aten::argmin", arg_extremes),
    ("aten::var.correction", moments),
    ("aten::std.correction", moments),
    ("aten::sum", large_whole_tensor),
];

const U: f64 = 1.0 / 16_777_216.0;

/// A reduction's output: `f(row)` per kept index, with an error bound per element.
fn reduce_ref(
    x: &HostTensor,
    dims: &[usize],
    keepdim: bool,
    out: DType,
    f: impl Fn(&[f64]) -> (f64, f64),
) -> Out {
    let (rs, _) = rows(x, dims);
    let shape = reduced_shape(&x.shape, dims, keepdim);
    let (vals, extra): (Vec<f64>, Vec<f64>) = rs.iter().map(|r| f(r)).unzip();
    let want = HostTensor::new(&shape, out, vals);
    Out::Close(want, Tol::of(out).with_extra(extra))
}

/// `dims` as written (maybe negative) to sorted dim indices; empty means all.
fn dim_set(dims: &[i64], n: usize) -> Vec<usize> {
    if dims.is_empty() {
        return (0..n).collect();
    }
    let mut d: Vec<usize> = dims.iter().map(|d| wrap(*d, n)).collect();
    d.sort_unstable();
    d
}

/// Sum with Higham's bound for an f32 accumulation.
fn sum_row(row: &[f64], out: DType) -> (f64, f64) {
    let s: f64 = row.iter().sum();
    let bound = if out.is_float() {
        row.len() as f64 * U * row.iter().map(|x| x.abs()).sum::<f64>()
    } else {
        0.0
    };
    (s, bound)
}

/// An input for sums and products: the values of a float or integer dtype in `vals`.
fn red_input(dtypes: BoxedStrategy<DType>, vals: Values) -> impl Strategy<Value = Input> {
    (shape(), dtypes).prop_flat_map(move |(s, d)| input(s, d, vals))
}

/// The result dtype of `sum`/`prod`: `dtype` if given, else the input's float dtype or int64.
fn acc_dtype(x: DType, d: Option<DType>) -> DType {
    d.unwrap_or(if x.is_float() { x } else { DType::I64 })
}

fn opt_dtype() -> impl Strategy<Value = Option<DType>> {
    prop_oneof![3 => Just(None), 1 => num_dtype().prop_map(Some)]
}

#[test]
fn sums() {
    check(
        "aten::sum",
        (red_input(any_dtype(), Values::Range(4.0)), opt_dtype()).prop_map(|(x, d)| {
            let out = acc_dtype(x.host.dtype, d);
            let xc = x.host.to(out);
            let all: Vec<usize> = (0..x.host.dim()).collect();
            let want = reduce_ref(&xc, &all, false, out, |r| sum_row(r, out));
            Sample::new(vec![t(x), v(dtype_arg(d))], vec![want])
        }),
    );
    check(
        "aten::sum.dim_IntList",
        red_input(any_dtype(), Values::Range(4.0))
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (Just(x), dims_of(n), any::<bool>(), opt_dtype())
            })
            .prop_map(|(x, dims, keepdim, d)| {
                let out = acc_dtype(x.host.dtype, d);
                let xc = x.host.to(out);
                let ds = dim_set(&dims, x.host.dim());
                let want = reduce_ref(&xc, &ds, keepdim, out, |r| sum_row(r, out));
                let dims_arg = if dims.is_empty() {
                    Value::None
                } else {
                    ints(&dims)
                };
                Sample::new(
                    vec![t(x), v(dims_arg), v(Value::Bool(keepdim)), v(dtype_arg(d))],
                    vec![want],
                )
            }),
    );
}

fn mean_row(row: &[f64]) -> (f64, f64) {
    let (s, b) = sum_row(row, DType::F32);
    let n = row.len() as f64;
    if row.is_empty() {
        (f64::NAN, 0.0)
    } else {
        (s / n, b / n)
    }
}

#[test]
fn means() {
    let mean_dtype = prop_oneof![2 => Just(None), 1 => float_dtype().prop_map(Some)];
    check(
        "aten::mean",
        (
            red_input(float_dtype(), Values::Range(4.0)),
            mean_dtype.clone(),
        )
            .prop_map(|(x, d)| {
                let out = d.unwrap_or(x.host.dtype);
                let all: Vec<usize> = (0..x.host.dim()).collect();
                let want = reduce_ref(&x.host.to(out), &all, false, out, mean_row);
                Sample::new(vec![t(x), v(dtype_arg(d))], vec![want])
            }),
    );
    check(
        "aten::mean.dim",
        red_input(any_dtype(), Values::Range(4.0))
            .prop_flat_map(move |x| {
                let n = x.host.dim();
                // Integer inputs need a float dtype=.
                let d = if x.host.dtype.is_float() {
                    mean_dtype.clone().boxed()
                } else {
                    float_dtype().prop_map(Some).boxed()
                };
                (Just(x), dims_of(n), any::<bool>(), d)
            })
            .prop_map(|(x, dims, keepdim, d)| {
                let out = d.unwrap_or(x.host.dtype);
                let ds = dim_set(&dims, x.host.dim());
                let want = reduce_ref(&x.host.to(out), &ds, keepdim, out, mean_row);
                Sample::new(
                    vec![
                        t(x),
                        v(ints(&dims)),
                        v(Value::Bool(keepdim)),
                        v(dtype_arg(d)),
                    ],
                    vec![want],
                )
            }),
    );
}

fn prod_row(row: &[f64], out: DType) -> (f64, f64) {
    let p: f64 = row.iter().product();
    let bound = if out.is_float() {
        row.len() as f64 * U * p.abs()
    } else {
        0.0
    };
    (p, bound)
}

#[test]
fn prods() {
    // Values near 1 in magnitude, so that products neither overflow nor vanish.
    let vals = Values::Between(-1.25, 1.25);
    check(
        "aten::prod",
        (red_input(any_dtype(), vals), opt_dtype()).prop_map(|(x, d)| {
            let out = acc_dtype(x.host.dtype, d);
            let all: Vec<usize> = (0..x.host.dim()).collect();
            let want = reduce_ref(&x.host.to(out), &all, false, out, |r| prod_row(r, out));
            Sample::new(vec![t(x), v(dtype_arg(d))], vec![want])
        }),
    );
    check(
        "aten::prod.dim_int",
        red_input(any_dtype(), vals)
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (Just(x), dim_of(n), any::<bool>(), opt_dtype())
            })
            .prop_map(|(x, dim, keepdim, d)| {
                let out = acc_dtype(x.host.dtype, d);
                let ds = if x.host.dim() == 0 {
                    vec![]
                } else {
                    vec![wrap(dim, x.host.dim())]
                };
                let keep = keepdim && x.host.dim() > 0;
                let want = reduce_ref(&x.host.to(out), &ds, keep, out, |r| prod_row(r, out));
                Sample::new(
                    vec![
                        t(x),
                        v(Value::Int(dim)),
                        v(Value::Bool(keepdim)),
                        v(dtype_arg(d)),
                    ],
                    vec![want],
                )
            }),
    );
}

/// The maximum (or minimum) of a row, NaN if any is NaN; and the index of its first
/// occurrence (of the first NaN).
fn extreme(row: &[f64], max: bool) -> (f64, usize) {
    let mut best = (row[0], 0);
    for (i, &x) in row.iter().enumerate() {
        if best.0.is_nan() {
            break;
        }
        if x.is_nan() || (max && x > best.0) || (!max && x < best.0) {
            best = (x, i);
        }
    }
    best
}

/// Values with ties (small integers) half the time, NaN and infinities now and then.
fn extreme_input(rank: (usize, usize)) -> impl Strategy<Value = Input> {
    (
        shape_rank(rank.0, rank.1),
        any_dtype(),
        prop_oneof![Just(Values::Ties), Just(Values::Special(4.0))],
    )
        .prop_flat_map(|(s, d, vals)| input(s, d, vals))
}

#[test]
fn extremes() {
    for (op, max) in [("aten::amax", true), ("aten::amin", false)] {
        check(
            op,
            extreme_input((0, 4))
                .prop_flat_map(|x| {
                    let n = x.host.dim();
                    (Just(x), dims_of(n), any::<bool>())
                })
                .prop_map(move |(x, dims, keepdim)| {
                    let n = x.host.dim();
                    let ds = dim_set(&dims, n);
                    let args = vec![t(x.clone()), v(ints(&dims)), v(Value::Bool(keepdim))];
                    let empty_row = ds.iter().any(|d| x.host.shape[*d] == 0);
                    if x.host.numel() == 0 && (dims.is_empty() || empty_row) {
                        return Sample::error(args, &["Expected reduction dim"]);
                    }
                    let d = x.host.dtype;
                    let want = reduce_ref(&x.host, &ds, keepdim, d, |r| (extreme(r, max).0, 0.0));
                    Sample::new(args, vec![exact(want)])
                }),
        );
    }
    for (op, max) in [("aten::max", true), ("aten::min", false)] {
        check(
            op,
            extreme_input((0, 4)).prop_map(move |x| {
                if x.host.numel() == 0 {
                    return Sample::error(vec![t(x)], &["Expected reduction dim to be specified"]);
                }
                let want = HostTensor::scalar(extreme(&x.host.data, max).0, x.host.dtype);
                Sample::new(vec![t(x)], vec![Out::exact(want)])
            }),
        );
    }
}

/// An `Out::Close` made exact.
fn exact(o: Out) -> Out {
    match o {
        Out::Close(h, _) => Out::exact(h),
        other => other,
    }
}

#[test]
fn extremes_dim() {
    for (op, max) in [("aten::max.dim", true), ("aten::min.dim", false)] {
        check(
            op,
            extreme_input((0, 4))
                .prop_flat_map(|x| {
                    let n = x.host.dim();
                    (Just(x), dim_of(n), any::<bool>())
                })
                .prop_map(move |(x, dim, keepdim)| {
                    let n = x.host.dim();
                    let args = vec![t(x.clone()), v(Value::Int(dim)), v(Value::Bool(keepdim))];
                    let ds = if n == 0 { vec![] } else { vec![wrap(dim, n)] };
                    if ds.iter().any(|d| x.host.shape[*d] == 0) {
                        return Sample::error(args, &["Expected reduction dim"]);
                    }
                    let keep = keepdim && n > 0;
                    let d = x.host.dtype;
                    let vals = reduce_ref(&x.host, &ds, keep, d, |r| (extreme(r, max).0, 0.0));
                    let idx = reduce_ref(&x.host, &ds, keep, DType::I64, |r| {
                        (extreme(r, max).1 as f64, 0.0)
                    });
                    Sample::new(args, vec![exact(vals), exact(idx)])
                }),
        );
    }
}

#[test]
fn arg_extremes() {
    for (op, max) in [("aten::argmax", true), ("aten::argmin", false)] {
        check(
            op,
            (
                shape_rank(0, 4),
                num_dtype(),
                prop_oneof![Just(Values::Ties), Just(Values::Special(4.0))],
            )
                .prop_flat_map(|(s, d, vals)| input(s, d, vals))
                .prop_flat_map(|x| {
                    let n = x.host.dim();
                    (
                        Just(x),
                        prop_oneof![Just(None), dim_of(n).prop_map(Some)],
                        any::<bool>(),
                    )
                })
                .prop_map(move |(x, dim, keepdim)| {
                    let n = x.host.dim();
                    let opt = dim.map_or(Value::None, Value::Int);
                    let args = vec![t(x.clone()), v(opt), v(Value::Bool(keepdim))];
                    let (src, ds, keep) = match dim {
                        // Flattened; with keepdim every dim becomes 1.
                        None => (x.host.reshaped(&[x.host.numel()]), vec![0], false),
                        Some(d) if n > 0 => (x.host.clone(), vec![wrap(d, n)], keepdim),
                        Some(_) => (x.host.reshaped(&[1]), vec![0], false),
                    };
                    if src.shape[ds[0]] == 0 {
                        return Sample::error(args, &["Expected reduction dim"]);
                    }
                    let mut o = reduce_ref(&src, &ds, keep, DType::I64, |r| {
                        (extreme(r, max).1 as f64, 0.0)
                    });
                    if dim.is_none()
                        && keepdim
                        && let Out::Close(h, _) = &o
                    {
                        o = Out::exact(h.reshaped(&vec![1; n]));
                    }
                    Sample::new(args, vec![exact(o)])
                }),
        );
    }
}

/// `var` (or `std`) of a row with `correction`, and the error bound of the two-pass f32
/// computation.
fn var_row(row: &[f64], c: f64, sqrt: bool) -> (f64, f64) {
    let n = row.len() as f64;
    if row.is_empty() {
        return (f64::NAN, 0.0);
    }
    let mean = row.iter().sum::<f64>() / n;
    let ss: f64 = row.iter().map(|x| (x - mean) * (x - mean)).sum();
    let denom = (n - c).max(0.0);
    let var = ss / denom;
    let sq: f64 = row.iter().map(|x| x * x).sum();
    let bound = 2.0 * (n + 3.0) * U * sq / denom;
    if sqrt {
        (var.sqrt(), bound.sqrt())
    } else {
        (var, bound)
    }
}

#[test]
fn moments() {
    for (op, sqrt) in [
        ("aten::var.correction", false),
        ("aten::std.correction", true),
    ] {
        check(
            op,
            red_input(float_dtype(), Values::Range(4.0))
                .prop_flat_map(|x| {
                    let n = x.host.dim();
                    (
                        Just(x),
                        prop_oneof![Just(None), dims_of(n).prop_map(Some)],
                        prop_oneof![
                            Just(None),
                            (0i64..=2).prop_map(|c| Some(Value::Int(c))),
                            Just(Some(Value::Float(0.5)))
                        ],
                        any::<bool>(),
                    )
                })
                .prop_map(move |(x, dims, corr, keepdim)| {
                    let n = x.host.dim();
                    let ds = dim_set(dims.as_deref().unwrap_or(&[]), n);
                    let c = match corr {
                        Some(Value::Int(c)) => c as f64,
                        Some(Value::Float(c)) => c,
                        _ => 1.0,
                    };
                    let d = x.host.dtype;
                    let want = reduce_ref(&x.host, &ds, keepdim, d, |r| var_row(r, c, sqrt));
                    let dims_arg = dims.map_or(Value::None, |d| ints(&d));
                    Sample::new(
                        vec![
                            t(x),
                            v(dims_arg),
                            v(corr.unwrap_or(Value::None)),
                            v(Value::Bool(keepdim)),
                        ],
                        vec![want],
                    )
                }),
        );
    }
}

/// Whole-tensor reductions above 64K elements take two kernels (partials, then their
/// combination); one sample of each.
#[test]
fn large_whole_tensor() {
    let n = 70_007;
    let data: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 250.0 - 2.0)
        .collect();
    let x = HostTensor::new(&[7, 10_001], DType::F32, data);
    let all = [0usize, 1];
    let sum = reduce_ref(&x, &all, false, DType::F32, |r| sum_row(r, DType::F32));
    let mean = reduce_ref(&x, &all, false, DType::F32, mean_row);
    let var = reduce_ref(&x, &all, false, DType::F32, |r| var_row(r, 1.0, false));
    let amax = reduce_ref(&x, &all, false, DType::F32, |r| (extreme(r, true).0, 0.0));
    check_samples(
        "aten::sum",
        vec![Sample::new(vec![tp(x.clone())], vec![sum])],
    );
    check_samples(
        "aten::mean",
        vec![Sample::new(vec![tp(x.clone())], vec![mean])],
    );
    check_samples(
        "aten::var.correction",
        vec![Sample::new(vec![tp(x.clone())], vec![var])],
    );
    check_samples(
        "aten::amax",
        vec![Sample::new(vec![tp(x.clone())], vec![amax])],
    );
    // A transposed view of the same values (the partials read it in memory order).
    let xt = x.permuted(&[1, 0]);
    let sum_t = reduce_ref(&xt, &all, false, DType::F32, |r| sum_row(r, DType::F32));
    let place = super::harness::Placement {
        perm: vec![1, 0],
        ..super::harness::Placement::contiguous(2)
    };
    let input = Input { host: xt, place };
    check_samples("aten::sum", vec![Sample::new(vec![t(input)], vec![sum_t])]);
    assert_eq!(numel(&[7, 10_001]), n);
}
