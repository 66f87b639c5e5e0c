//! Neural-network forward operators: `_softmax`, `_log_softmax`, `native_layer_norm`,
//! `rms_norm`, `nll_loss_forward`, `nll_loss2d_forward`.
//!
//! PyTorch details the reference follows: `_log_softmax` along the last dim of a bf16/f16
//! tensor rounds the row's sum of exponentials and its log to that dtype; `rms_norm` holds
//! `eps` (default: f32's epsilon) in the input's dtype and rounds `x * rsqrt(mean(x²) + eps)`
//! to it before the weight; `native_layer_norm` returns the mean and `rstd` in the input's
//! dtype; `nll_loss` on one sample (`[C]`) reduces like a batch of one (its total weight is the
//! target's weight), a mean over no weight is NaN.
//!
//! Tolerances: `torch.testing`'s defaults, plus the f32 accumulation bounds of the row sums the
//! kernels take (`n·u` relative, `u = 2^-24`, for the sums in softmaxes and norms; the
//! variance's two-pass bound through `rsqrt` for layer norm).

use proptest::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Input, Out, Sample, Tol, check, ints, opt_tensor, t, v};
use super::reference::{HostTensor, indices, numel, promote, ravel, round, wrap};
use super::strategies::{Values, dim_of, float_dtype, indices as index_input, input, shape_rank};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::_softmax", softmaxes),
    ("aten::_log_softmax", softmaxes),
    ("aten::native_layer_norm", layer_norm),
    ("aten::rms_norm", rms_norm),
    ("aten::nll_loss_forward", nll_loss),
    ("aten::nll_loss2d_forward", nll_loss2d),
];

const U: f64 = 1.0 / 16_777_216.0;

/// Applies `f` to each row along `d` of `x` (a 0-dim tensor is one row of one), putting the
/// results back in place; `f` returns values and their error bounds.
fn along(
    x: &HostTensor,
    d: usize,
    out: DType,
    f: impl Fn(&[f64]) -> Vec<(f64, f64)>,
) -> (HostTensor, Vec<f64>) {
    let mut vals = vec![0.0; x.numel()];
    let mut extra = vec![0.0; x.numel()];
    if x.dim() == 0 {
        let r = f(&x.data);
        return (HostTensor::new(&[], out, vec![r[0].0]), vec![r[0].1]);
    }
    let mut outer = x.shape.clone();
    outer[d] = 1;
    for o in indices(&outer) {
        let pos: Vec<usize> = (0..x.shape[d])
            .map(|k| {
                let mut i = o.clone();
                i[d] = k;
                ravel(&i, &x.shape)
            })
            .collect();
        let row: Vec<f64> = pos.iter().map(|p| x.data[*p]).collect();
        for (p, (val, e)) in pos.iter().zip(f(&row)) {
            vals[*p] = val;
            extra[*p] = e;
        }
    }
    (HostTensor::new(&x.shape, out, vals), extra)
}

#[test]
fn softmaxes() {
    for (op, log) in [("aten::_softmax", false), ("aten::_log_softmax", true)] {
        check(
            op,
            (shape_rank(0, 4), float_dtype(), any::<bool>())
                .prop_flat_map(|(s, d, h2f)| {
                    let n = s.len();
                    (input(s, d, Values::Range(8.0)), dim_of(n), Just(h2f))
                })
                .prop_map(move |(x, dim, h2f)| {
                    let dt = x.host.dtype;
                    let h2f = h2f && dt != DType::F32;
                    let out = if h2f { DType::F32 } else { dt };
                    let n = x.host.dim();
                    let d = wrap(dim, n);
                    let round_lse = log && out != DType::F32 && n > 0 && d + 1 == n;
                    let (want, extra) = along(&x.host, d, out, |row| {
                        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                        let k = row.len() as f64;
                        row.iter()
                            .map(|v| {
                                if log {
                                    let ls = if round_lse {
                                        round(round(s, out).ln(), out)
                                    } else {
                                        s.ln()
                                    };
                                    (v - m - ls, (k + 2.0) * U * (1.0 + (v - m).abs()))
                                } else {
                                    let p = (v - m).exp() / s;
                                    (p, (k + 2.0) * U * p)
                                }
                            })
                            .collect()
                    });
                    Sample::new(
                        vec![t(x), v(Value::Int(dim)), v(Value::Bool(h2f))],
                        vec![Out::Close(want, Tol::of(out).with_extra(extra))],
                    )
                }),
        );
    }
}

/// An optional affine parameter of `shape` and `dtype`.
fn param(shape: Vec<usize>, dtype: DType) -> impl Strategy<Value = Option<Input>> {
    prop_oneof![
        1 => Just(None),
        2 => input(shape, dtype, Values::Range(2.0)).prop_map(Some),
    ]
}

/// A normalised input: its shape and how many trailing dims are normalised (at least one).
fn norm_input() -> impl Strategy<Value = (Input, usize)> {
    (shape_rank(1, 4), float_dtype()).prop_flat_map(|(s, d)| {
        let n = s.len();
        (input(s, d, Values::Range(4.0)), 1..=n)
    })
}

#[test]
fn layer_norm() {
    check(
        "aten::native_layer_norm",
        norm_input()
            .prop_flat_map(|(x, k)| {
                let n = x.host.dim();
                let ns = x.host.shape[n - k..].to_vec();
                let d = x.host.dtype;
                (
                    Just((x, k)),
                    param(ns.clone(), d),
                    param(ns, d),
                    prop_oneof![Just(1e-5), Just(1e-3)],
                )
            })
            .prop_map(|((x, k), w, b, eps)| {
                let dt = x.host.dtype;
                let n = x.host.dim();
                let ns = x.host.shape[n - k..].to_vec();
                let rl = numel(&ns);
                let outer = &x.host.shape[..n - k];
                let rows = numel(outer);
                let mut y = vec![0.0; x.host.numel()];
                let mut ey = vec![0.0; x.host.numel()];
                let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
                let (mut em, mut er) = (vec![0.0; rows], vec![0.0; rows]);
                for r in 0..rows {
                    let row = &x.host.data[r * rl..(r + 1) * rl];
                    let nf = rl as f64;
                    if rl == 0 {
                        mean[r] = f64::NAN;
                        rstd[r] = f64::NAN;
                        continue;
                    }
                    let mu = row.iter().sum::<f64>() / nf;
                    let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / nf;
                    let rs = 1.0 / (var + eps).sqrt();
                    let e_mu = nf * U * row.iter().map(|v| v.abs()).sum::<f64>() / nf;
                    let e_var = 2.0 * (nf + 3.0) * U * row.iter().map(|v| v * v).sum::<f64>() / nf;
                    let e_rs = rs * (e_var / (2.0 * (var + eps)) + 4.0 * U);
                    mean[r] = mu;
                    rstd[r] = rs;
                    em[r] = e_mu;
                    er[r] = e_rs;
                    for (j, xv) in row.iter().enumerate() {
                        let wv = w.as_ref().map_or(1.0, |w| w.host.data[j]);
                        let bv = b.as_ref().map_or(0.0, |b| b.host.data[j]);
                        let z = (xv - mu) * rs;
                        y[r * rl + j] = z * wv + bv;
                        let e = (xv - mu).abs() * e_rs + e_mu * rs + 4.0 * U * z.abs();
                        ey[r * rl + j] = 2.0 * (e * wv.abs() + 2.0 * U * (z * wv).abs());
                    }
                }
                let mut sshape = outer.to_vec();
                sshape.extend(std::iter::repeat_n(1, k));
                let y = HostTensor::new(&x.host.shape, dt, y);
                let mean = HostTensor::new(&sshape, dt, mean);
                let rstd = HostTensor::new(&sshape, dt, rstd);
                let ns_arg: Vec<i64> = ns.iter().map(|d| *d as i64).collect();
                Sample::new(
                    vec![
                        t(x),
                        v(ints(&ns_arg)),
                        opt_tensor(w),
                        opt_tensor(b),
                        v(Value::Float(eps)),
                    ],
                    vec![
                        Out::Close(y, Tol::of(dt).with_extra(ey)),
                        Out::Close(mean, Tol::of(dt).with_extra(em)),
                        Out::Close(rstd, Tol::of(dt).with_extra(er)),
                    ],
                )
            }),
    );
}

#[test]
fn rms_norm() {
    check(
        "aten::rms_norm",
        norm_input()
            .prop_flat_map(|(x, k)| {
                let n = x.host.dim();
                let ns = x.host.shape[n - k..].to_vec();
                (
                    Just((x, k)),
                    (float_dtype(), any::<bool>()).prop_flat_map(move |(wd, same)| {
                        param(ns.clone(), wd).prop_map(move |w| (w, same))
                    }),
                    prop_oneof![Just(None), Just(Some(1e-5)), Just(Some(1e-2))],
                )
            })
            .prop_map(|((x, k), (w, same), eps)| {
                let dt = x.host.dtype;
                // Usually the weight has the input's dtype; sometimes another one (promotion).
                let w = w.map(|w| {
                    if same {
                        Input {
                            host: w.host.to(dt),
                            ..w
                        }
                    } else {
                        w
                    }
                });
                let out = w.as_ref().map_or(dt, |w| promote(dt, w.host.dtype));
                let n = x.host.dim();
                let ns = x.host.shape[n - k..].to_vec();
                let rl = numel(&ns);
                let e = round(eps.unwrap_or(f32::EPSILON as f64), dt);
                let mut y = vec![0.0; x.host.numel()];
                let mut ey = vec![0.0; x.host.numel()];
                for r in 0..numel(&x.host.shape[..n - k]) {
                    let row = &x.host.data[r * rl..(r + 1) * rl];
                    let ms = row.iter().map(|v| v * v).sum::<f64>() / rl as f64;
                    let rs = 1.0 / (ms + e).sqrt();
                    for (j, xv) in row.iter().enumerate() {
                        let z = round(xv * rs, dt);
                        let wv = w.as_ref().map_or(1.0, |w| w.host.data[j]);
                        y[r * rl + j] = z * wv;
                        // The f32 sum's bound, and one rounding step of `dt` should the f32
                        // value land on the other side of a rounding boundary.
                        let step = super::reference::unit_roundoff(dt).max(U) * 2.0;
                        ey[r * rl + j] = ((rl as f64 + 3.0) * U + step) * (xv * rs * wv).abs();
                    }
                }
                let y = HostTensor::new(&x.host.shape, out, y);
                let ns_arg: Vec<i64> = ns.iter().map(|d| *d as i64).collect();
                Sample::new(
                    vec![
                        t(x),
                        v(ints(&ns_arg)),
                        opt_tensor(w),
                        v(eps.map_or(Value::None, Value::Float)),
                    ],
                    vec![Out::Close(y, Tol::of(out).with_extra(ey))],
                )
            }),
    );
}

/// The shared nll reference: `x` holds the classes along `cdim`, `target` the rest.
fn nll_ref(
    x: &HostTensor,
    target: &HostTensor,
    weight: Option<&HostTensor>,
    reduction: i64,
    ignore: i64,
    cdim: usize,
) -> Vec<Out> {
    let dt = x.dtype;
    let batched = x.dim() > 1;
    let mut losses = Vec::new();
    let mut weights = Vec::new();
    for (k, ti) in indices(&target.shape).enumerate() {
        let tv = target.data[k] as i64;
        if tv == ignore {
            losses.push(0.0);
            weights.push(0.0);
            continue;
        }
        let mut xi = ti.clone();
        xi.insert(cdim, tv as usize);
        let w = weight.map_or(1.0, |w| w.data[tv as usize]);
        losses.push(-w * x.at(&xi));
        weights.push(w);
    }
    let tol = |extra: f64| Tol::of(dt).with_extra(vec![extra]);
    if reduction == 0 && batched {
        let out = HostTensor::new(&target.shape, dt, losses);
        return vec![Out::close(out), Out::exact(HostTensor::scalar(0.0, dt))];
    }
    let ls: f64 = losses.iter().sum();
    let ws: f64 = weights.iter().sum();
    let n = losses.len() as f64;
    let el = n * U * losses.iter().map(|l| l.abs()).sum::<f64>();
    let ew = n * U * weights.iter().map(|w| w.abs()).sum::<f64>();
    let (out, eo) = if reduction == 1 {
        let q = ls / ws;
        (
            q,
            if ws != 0.0 {
                (el + q.abs() * ew) / ws.abs()
            } else {
                0.0
            },
        )
    } else {
        (ls, el)
    };
    vec![
        Out::Close(HostTensor::scalar(out, dt), tol(eo)),
        Out::Close(HostTensor::scalar(ws, dt), tol(ew)),
    ]
}

/// Targets in `[0, classes)`, some replaced by `ignore`.
fn targets(shape: Vec<usize>, classes: usize, ignore: i64) -> impl Strategy<Value = Input> {
    let n = numel(&shape);
    (
        index_input(shape, DType::I64, 0, classes as i64 - 1),
        proptest::collection::vec(prop_oneof![4 => Just(false), 1 => Just(true)], n),
    )
        .prop_map(move |(mut t, drop)| {
            for (v, d) in t.host.data.iter_mut().zip(drop) {
                if d {
                    *v = ignore as f64;
                }
            }
            t
        })
}

fn nll_sample(
    x: Input,
    target: Input,
    weight: Option<Input>,
    reduction: i64,
    ignore: Option<i64>,
    cdim: usize,
) -> Sample {
    let ig = ignore.unwrap_or(-100);
    let outs = nll_ref(
        &x.host,
        &target.host,
        weight.as_ref().map(|w| &w.host),
        reduction,
        ig,
        cdim,
    );
    let mut args = vec![
        t(x),
        t(target),
        opt_tensor(weight),
        v(Value::Int(reduction)),
    ];
    args.push(v(Value::Int(ig)));
    Sample::new(args, outs)
}

/// An `nll_loss` call's `ignore_index`: none (PyTorch's default, -100) or a class.
fn ignore_index() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![Just(None), (0i64..3).prop_map(Some)]
}

/// What an `nll_loss` (forward or backward) call draws: the batch size (`None`: unbatched),
/// the class count, the dtype, the reduction (0 none, 1 mean, 2 sum), the `ignore_index` and
/// whether it has class weights.
pub(super) fn nll_draws()
-> impl Strategy<Value = (Option<usize>, usize, DType, i64, Option<i64>, bool)> {
    (
        prop_oneof![Just(None), (0usize..6).prop_map(Some)],
        1usize..7,
        float_dtype(),
        0i64..3,
        ignore_index(),
        any::<bool>(),
    )
}

/// Per-class weights of `c` classes in `[0, 2]` where `weighted`, else none.
pub(super) fn class_weights(weighted: bool, c: usize, d: DType) -> BoxedStrategy<Option<Input>> {
    if weighted {
        input(vec![c], d, Values::Between(0.0, 2.0))
            .prop_map(Some)
            .boxed()
    } else {
        Just(None).boxed()
    }
}

#[test]
fn nll_loss() {
    check(
        "aten::nll_loss_forward",
        nll_draws()
            .prop_flat_map(|(batch, c, d, red, ignore, weighted)| {
                let xshape = match batch {
                    Some(b) => vec![b, c],
                    None => vec![c],
                };
                let tshape = batch.map_or(vec![], |b| vec![b]);
                let ig = ignore.unwrap_or(-100);
                (
                    input(xshape, d, Values::Range(4.0)),
                    targets(tshape, c, ig),
                    class_weights(weighted, c, d),
                    Just((red, ignore)),
                )
            })
            .prop_map(|(x, tg, w, (red, ignore))| {
                let cdim = if x.host.dim() == 1 { 0 } else { 1 };
                nll_sample(x, tg, w, red, ignore, cdim)
            }),
    );
}

#[test]
fn nll_loss2d() {
    check(
        "aten::nll_loss2d_forward",
        (
            (0usize..3, 1usize..5, 0usize..4, 1usize..4),
            float_dtype(),
            0i64..3,
            ignore_index(),
            any::<bool>(),
        )
            .prop_flat_map(|((n, c, h, w), d, red, ignore, weighted)| {
                let ig = ignore.unwrap_or(-100);
                (
                    input(vec![n, c, h, w], d, Values::Range(4.0)),
                    targets(vec![n, h, w], c, ig),
                    class_weights(weighted, c, d),
                    Just((red, ignore)),
                )
            })
            .prop_map(|(x, tg, w, (red, ignore))| nll_sample(x, tg, w, red, ignore, 1)),
    );
}
