//! Backward operators: the activations' (`threshold_backward`, `gelu_backward`,
//! `silu_backward`, `sigmoid_backward`, `tanh_backward`), the softmaxes'
//! (`_softmax_backward_data`, `_log_softmax_backward_data`), `native_layer_norm_backward`,
//! `nll_loss_backward` and `embedding_dense_backward`, with PyTorch's formulas evaluated in
//! f64.
//!
//! PyTorch details the reference follows: the activation backwards promote `grad_output` with
//! the other input (`threshold_backward` compares in the promoted dtype, integers included);
//! the softmax backwards give `input_dtype`; `nll_loss_backward` with `mean` divides the
//! gradient by the total weight in the input's dtype before the class weight multiplies it
//! (two roundings, as ATen's CPU kernel does); `embedding_dense_backward` zeroes the
//! `padding_idx` row and, with `scale_grad_by_freq`, divides each gradient row by how often
//! its index occurs.
//!
//! Tolerances: `torch.testing`'s defaults, plus the f32 accumulation bound (`n·u·Σ|terms|`,
//! `u = 2^-24`) of every sum the kernels take (rows of the softmax and layer-norm backwards,
//! columns for the weight and bias gradients, repeated indices for the embedding gradient,
//! which accumulates in its own dtype as ATen's `index_add_` does).

use proptest::prelude::*;
use tpuemu_backend::ops::Value;
use tpuemu_backend::{DType, Scalar};

use super::harness::{Input, Out, Sample, Tol, check, opt_tensor, t, v};
use super::reference::{
    HostTensor, indices, numel, operand, ravel, result_type, round, unit_roundoff, wrap, zip_map,
};
use super::strategies::{
    Values, broadcast_pair, dim_of, float_dtype, index_dtype, indices as index_input, input,
    num_dtype, shape, shape_rank,
};
use super::unary::sigmoid;

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::smooth_l1_loss_backward", loss_backwards),
    ("aten::huber_loss_backward", loss_backwards),
    ("aten::binary_cross_entropy_backward", loss_backwards),
    ("aten::threshold_backward", threshold_backward),
    ("aten::gelu_backward", activation_backwards),
    ("aten::silu_backward", activation_backwards),
    ("aten::hardswish_backward", activation_backwards),
    ("aten::mish_backward", activation_backwards),
    ("aten::elu_backward", elu_backward),
    ("aten::sigmoid_backward", activation_backwards),
    ("aten::tanh_backward", activation_backwards),
    ("aten::_softmax_backward_data", softmax_backwards),
    ("aten::_log_softmax_backward_data", softmax_backwards),
    ("aten::native_layer_norm_backward", layer_norm_backward),
    ("aten::nll_loss_backward", nll_loss_backward),
    ("aten::embedding_dense_backward", embedding_dense_backward),
];

const U: f64 = 1.0 / 16_777_216.0;

fn pair(dtypes: BoxedStrategy<DType>, vals: Values) -> impl Strategy<Value = (Input, Input)> {
    (broadcast_pair(), dtypes.clone(), dtypes, any::<bool>()).prop_flat_map(
        move |((sa, sb), da, db, same)| {
            (
                input(sa, da, vals),
                input(sb, if same { da } else { db }, vals),
            )
        },
    )
}

#[test]
fn threshold_backward() {
    check(
        "aten::threshold_backward",
        (
            pair(num_dtype(), Values::Special(3.0)),
            prop_oneof![
                (-2i64..=2).prop_map(Scalar::Int),
                (-2.0f64..2.0).prop_map(Scalar::Float)
            ],
        )
            .prop_map(|((g, x), th)| {
                let c = result_type(&[operand(&g.host), operand(&x.host)]);
                let tr = round(th.to_f64(), c);
                let want = zip_map(&[&g.host, &x.host], c, |e| {
                    if round(e[1], c) <= tr {
                        0.0
                    } else {
                        round(e[0], c)
                    }
                });
                let th = match th {
                    Scalar::Int(i) => Value::Int(i),
                    s => Value::Float(s.to_f64()),
                };
                Sample::new(vec![t(g), t(x), v(th)], vec![Out::exact(want)])
            }),
    );
}

/// d/dx gelu (erf form).
fn gelu_grad(x: f64) -> f64 {
    let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
    let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    cdf + x * pdf
}

/// d/dx gelu (tanh form).
fn gelu_tanh_grad(x: f64) -> f64 {
    let b = (2.0 / std::f64::consts::PI).sqrt();
    let k = 0.044715;
    let inner = b * (x + k * x * x * x);
    let t = inner.tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * b * (1.0 + 3.0 * k * x * x)
}

/// The activation backwards: `(name, extra argument, f(grad, x))`.
type Backward = (&'static str, Option<&'static str>, fn(f64, f64) -> f64);

const ACTIVATIONS: [Backward; 7] = [
    ("aten::hardswish_backward", None, |g, x| {
        if x < -3.0 {
            0.0
        } else if x <= 3.0 {
            g * (x / 3.0 + 0.5)
        } else {
            g
        }
    }),
    ("aten::mish_backward", None, |g, x| {
        let t = (x.exp().ln_1p()).tanh();
        g * (t + x * sigmoid(x) * (1.0 - t * t))
    }),
    ("aten::gelu_backward", None, |g, x| g * gelu_grad(x)),
    ("aten::gelu_backward", Some("tanh"), |g, x| {
        g * gelu_tanh_grad(x)
    }),
    ("aten::silu_backward", None, |g, x| {
        let s = sigmoid(x);
        g * s * (1.0 + x * (1.0 - s))
    }),
    ("aten::sigmoid_backward", None, |g, y| g * (1.0 - y) * y),
    ("aten::tanh_backward", None, |g, y| g * (1.0 - y * y)),
];

#[test]
fn activation_backwards() {
    for (op, arg, f) in ACTIVATIONS {
        check(
            op,
            pair(float_dtype(), Values::Special(4.0)).prop_map(move |(g, x)| {
                let c = result_type(&[operand(&g.host), operand(&x.host)]);
                let want = zip_map(&[&g.host, &x.host], c, |e| {
                    f(round(e[0], c), round(e[1], c))
                });
                let mut args = vec![t(g), t(x)];
                args.extend(arg.map(|a| v(Value::Str(a.into()))));
                Sample::new(args, vec![Out::close(want)])
            }),
        );
    }
}

#[test]
fn elu_backward() {
    // (alpha, scale, input_scale): ELU, SELU's constants, CELU(alpha = 2) as PyTorch calls it.
    for (alpha, scale, ipt) in [
        (1.0, 1.0, 1.0),
        (1.673_263_242_354_377_3, 1.050_700_987_355_480_5, 1.0),
        (2.0, 1.0, 0.5),
    ] {
        for is_result in [false, true] {
            check(
                "aten::elu_backward",
                pair(float_dtype(), Values::Special(4.0)).prop_map(move |(g, x)| {
                    let c = result_type(&[operand(&g.host), operand(&x.host)]);
                    let want = zip_map(&[&g.host, &x.host], c, |e| {
                        let (g, x) = (round(e[0], c), round(e[1], c));
                        // NaN is not `<= 0`: it takes the positive branch, as in PyTorch.
                        if x > 0.0 || x.is_nan() {
                            g * scale
                        } else if is_result {
                            g * ipt * (x + alpha * scale)
                        } else {
                            g * ipt * alpha * scale * (x * ipt).exp()
                        }
                    });
                    let s = |a: f64| v(Value::Float(a));
                    let args = vec![
                        t(g),
                        s(alpha),
                        s(scale),
                        s(ipt),
                        v(Value::Bool(is_result)),
                        t(x),
                    ];
                    Sample::new(args, vec![Out::close(want)])
                }),
            );
        }
    }
}

/// Rows along `d`: each row's flat positions in `shape`.
fn row_positions(shape: &[usize], d: usize) -> Vec<Vec<usize>> {
    if shape.is_empty() {
        return vec![vec![0]];
    }
    let mut outer = shape.to_vec();
    outer[d] = 1;
    indices(&outer)
        .map(|o| {
            (0..shape[d])
                .map(|k| {
                    let mut i = o.clone();
                    i[d] = k;
                    ravel(&i, shape)
                })
                .collect()
        })
        .collect()
}

#[test]
fn softmax_backwards() {
    for (op, log) in [
        ("aten::_softmax_backward_data", false),
        ("aten::_log_softmax_backward_data", true),
    ] {
        let yvals = if log {
            Values::Between(-4.0, 0.0)
        } else {
            Values::Between(0.0, 1.0)
        };
        check(
            op,
            (shape_rank(0, 4), float_dtype(), float_dtype())
                .prop_flat_map(move |(s, d, idt)| {
                    let n = s.len();
                    // The input dtype: the gradient's, or bf16/f16 under f32 (half_to_float).
                    let idt = if d == DType::F32 && idt != DType::F32 {
                        idt
                    } else {
                        d
                    };
                    (
                        input(s.clone(), d, Values::Range(2.0)),
                        input(s, d, yvals),
                        dim_of(n),
                        Just(idt),
                    )
                })
                .prop_map(move |(g, y, dim, idt)| {
                    let shape = g.host.shape.clone();
                    let d = wrap(dim, shape.len());
                    let mut vals = vec![0.0; g.host.numel()];
                    let mut extra = vec![0.0; g.host.numel()];
                    for row in row_positions(&shape, d) {
                        let n = row.len() as f64;
                        let (gs, ys) = (&g.host.data, &y.host.data);
                        let (s, sa): (f64, f64) = if log {
                            (
                                row.iter().map(|p| gs[*p]).sum(),
                                row.iter().map(|p| gs[*p].abs()).sum(),
                            )
                        } else {
                            (
                                row.iter().map(|p| gs[*p] * ys[*p]).sum(),
                                row.iter().map(|p| (gs[*p] * ys[*p]).abs()).sum(),
                            )
                        };
                        for p in &row {
                            let (gv, yv) = (gs[*p], ys[*p]);
                            let (val, bound) = if log {
                                let e = yv.exp();
                                (gv - e * s, (n + 4.0) * U * (gv.abs() + e * sa))
                            } else {
                                (yv * (gv - s), (n + 4.0) * U * yv.abs() * (gv.abs() + sa))
                            };
                            vals[*p] = val;
                            extra[*p] = bound;
                        }
                    }
                    let want = HostTensor::new(&shape, idt, vals);
                    Sample::new(
                        vec![t(g), t(y), v(Value::Int(dim)), v(Value::Dtype(idt))],
                        vec![Out::Close(want, Tol::of(idt).with_extra(extra))],
                    )
                }),
        );
    }
}

#[test]
fn layer_norm_backward() {
    check(
        "aten::native_layer_norm_backward",
        (shape_rank(1, 4), float_dtype())
            .prop_flat_map(|(s, d)| {
                let n = s.len();
                (Just(s), Just(d), 1..=n, any::<[bool; 5]>())
            })
            .prop_flat_map(|(s, d, k, flags)| {
                let ns = s[s.len() - k..].to_vec();
                let param = |on: bool| {
                    if on {
                        input(ns.clone(), d, Values::Range(2.0))
                            .prop_map(Some)
                            .boxed()
                    } else {
                        Just(None).boxed()
                    }
                };
                (
                    input(s.clone(), d, Values::Range(2.0)),
                    input(s, d, Values::Range(3.0)),
                    param(flags[0]),
                    param(flags[1]),
                    Just((k, [flags[2], flags[3], flags[4]])),
                )
            })
            .prop_map(|(dy, x, w, b, (k, mask))| layer_norm_backward_sample(dy, x, w, b, k, mask)),
    );
}

fn layer_norm_backward_sample(
    dy: Input,
    x: Input,
    w: Option<Input>,
    b: Option<Input>,
    k: usize,
    mask: [bool; 3],
) -> Sample {
    let dt = x.host.dtype;
    let n = x.host.dim();
    let ns = x.host.shape[n - k..].to_vec();
    let rl = numel(&ns);
    let outer = x.host.shape[..n - k].to_vec();
    let rows = numel(&outer);
    // The saved statistics, as the forward gives them (in the input's dtype).
    let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let row = &x.host.data[r * rl..(r + 1) * rl];
        let nf = rl.max(1) as f64;
        let mu = row.iter().sum::<f64>() / nf;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / nf;
        mean[r] = round(mu, dt);
        rstd[r] = round(1.0 / (var + 1e-5).sqrt(), dt);
    }
    let mut sshape = outer.clone();
    sshape.extend(std::iter::repeat_n(1, k));
    let mean_t = HostTensor::new(&sshape, dt, mean.clone());
    let rstd_t = HostTensor::new(&sshape, dt, rstd.clone());
    let (dys, xs) = (&dy.host.data, &x.host.data);
    let wv = |j: usize| w.as_ref().map_or(1.0, |w| w.host.data[j]);
    let mut outs = Vec::new();
    if mask[0] {
        let mut dx = vec![0.0; xs.len()];
        let mut ex = vec![0.0; xs.len()];
        let nf = rl as f64;
        for r in 0..rows {
            let (mu, a) = (mean[r], rstd[r]);
            let g: Vec<f64> = (0..rl).map(|j| dys[r * rl + j] * wv(j)).collect();
            let ds: f64 = (0..rl).map(|j| g[j] * xs[r * rl + j]).sum();
            let db: f64 = g.iter().sum();
            let dsa: f64 = (0..rl).map(|j| (g[j] * xs[r * rl + j]).abs()).sum();
            let dba: f64 = g.iter().map(|x| x.abs()).sum();
            let bb = (db * mu - ds) * a * a * a / nf;
            let c = -bb * mu - db * a / nf;
            let ba = (dba * mu.abs() + dsa) * a * a * a / nf;
            let ca = ba * mu.abs() + dba * a / nf;
            for j in 0..rl {
                let xv = xs[r * rl + j];
                dx[r * rl + j] = a * g[j] + bb * xv + c;
                ex[r * rl + j] = (nf + 8.0) * U * ((a * g[j]).abs() + ba * xv.abs() + ca);
            }
        }
        let dx = HostTensor::new(&x.host.shape, dt, dx);
        outs.push(Out::Close(dx, Tol::of(dt).with_extra(ex)));
    }
    let column_sums = |f: &dyn Fn(usize, usize) -> f64| -> (Vec<f64>, Vec<f64>) {
        (0..rl)
            .map(|j| {
                let terms: Vec<f64> = (0..rows).map(|r| f(r, j)).collect();
                let s: f64 = terms.iter().sum();
                let sa: f64 = terms.iter().map(|x| x.abs()).sum();
                (s, (rows as f64 + 4.0) * U * sa)
            })
            .unzip()
    };
    if mask[1] && w.is_some() {
        let (s, e) = column_sums(&|r, j| dys[r * rl + j] * (xs[r * rl + j] - mean[r]) * rstd[r]);
        let d = w.as_ref().map_or(dt, |w| w.host.dtype);
        outs.push(Out::Close(
            HostTensor::new(&ns, d, s),
            Tol::of(d).with_extra(e),
        ));
    }
    if mask[2] && b.is_some() {
        let (s, e) = column_sums(&|r, j| dys[r * rl + j]);
        let d = b.as_ref().map_or(dt, |b| b.host.dtype);
        outs.push(Out::Close(
            HostTensor::new(&ns, d, s),
            Tol::of(d).with_extra(e),
        ));
    }
    let ns_arg: Vec<i64> = ns.iter().map(|d| *d as i64).collect();
    Sample::new(
        vec![
            t(dy),
            t(x),
            v(Value::Ints(ns_arg)),
            t(Input::plain(mean_t)),
            t(Input::plain(rstd_t)),
            opt_tensor(w.clone()),
            opt_tensor(b.clone()),
            v(Value::Bools(mask.to_vec())),
        ],
        outs,
    )
}

#[test]
fn nll_loss_backward() {
    check(
        "aten::nll_loss_backward",
        super::nn::nll_draws()
            .prop_flat_map(|(batch, c, d, red, ignore, weighted)| {
                let xshape = batch.map_or(vec![c], |b| vec![b, c]);
                let tshape = batch.map_or(vec![], |b| vec![b]);
                let gshape = if red == 0 { tshape.clone() } else { vec![] };
                (
                    input(xshape, d, Values::Range(2.0)),
                    index_input(tshape, DType::I64, 0, c as i64 - 1),
                    super::nn::class_weights(weighted, c, d),
                    input(gshape, d, Values::Range(2.0)),
                    Just((red, ignore)),
                    proptest::collection::vec(any::<bool>(), 8),
                )
            })
            .prop_map(|(x, mut tg, w, g, (red, ignore), drop)| {
                let ig = ignore.unwrap_or(-100);
                for (v, d) in tg.host.data.iter_mut().zip(drop.iter().cycle()) {
                    if *d && ignore.is_some() {
                        *v = ig as f64;
                    }
                }
                let dt = x.host.dtype;
                let wt = |c: usize| w.as_ref().map_or(1.0, |w| w.host.data[c]);
                let total: f64 = tg
                    .host
                    .data
                    .iter()
                    .filter(|t| **t as i64 != ig)
                    .map(|t| wt(*t as usize))
                    .sum();
                let total = round(if total == 0.0 { 1.0 } else { total }, dt);
                let classes = *x.host.shape.last().expect("classes");
                let batched = x.host.dim() == 2;
                let want = HostTensor::from_fn(&x.host.shape, dt, |i| {
                    let row = if batched { i[0] } else { 0 };
                    let col = i[x.host.dim() - 1];
                    let tv = tg.host.data[row] as i64;
                    if tv == ig || tv as usize != col {
                        return 0.0;
                    }
                    let gv = if red == 0 && batched {
                        g.host.data[row]
                    } else {
                        g.host.data[0]
                    };
                    let q = if red == 1 { round(gv / total, dt) } else { gv };
                    let _ = classes;
                    round(wt(col) * -q, dt)
                });
                let tw = Input::plain(HostTensor::scalar(total, dt));
                Sample::new(
                    vec![
                        t(g),
                        t(x),
                        t(tg),
                        opt_tensor(w.clone()),
                        v(Value::Int(red)),
                        v(Value::Int(ig)),
                        t(tw),
                    ],
                    vec![Out::close(want)],
                )
            }),
    );
}

#[test]
fn embedding_dense_backward() {
    check(
        "aten::embedding_dense_backward",
        (
            1usize..8,
            0usize..5,
            shape_rank(0, 3),
            float_dtype(),
            index_dtype(),
            prop_oneof![Just(-1i64), 0i64..8],
            any::<bool>(),
        )
            .prop_flat_map(|(rows, dim, ishape, d, id, pad, freq)| {
                let mut gshape = ishape.clone();
                gshape.push(dim);
                (
                    input(gshape, d, Values::Range(2.0)),
                    index_input(ishape, id, 0, rows as i64 - 1),
                    Just((rows, pad, freq)),
                )
            })
            .prop_map(|(g, idx, (rows, pad, freq))| {
                let dt = g.host.dtype;
                let dim = *g.host.shape.last().expect("dim");
                let ids: Vec<usize> = idx.host.data.iter().map(|x| *x as usize).collect();
                let count = |r: usize| ids.iter().filter(|i| **i == r).count() as f64;
                let mut vals = vec![0.0; rows * dim];
                let mut extra = vec![0.0; rows * dim];
                for (k, r) in ids.iter().enumerate() {
                    for j in 0..dim {
                        let mut gv = g.host.data[k * dim + j];
                        if freq {
                            gv /= count(*r);
                        }
                        vals[r * dim + j] += gv;
                        extra[r * dim + j] += gv.abs();
                    }
                }
                let step = unit_roundoff(dt).max(U);
                for r in 0..rows {
                    for j in 0..dim {
                        if r as i64 == pad {
                            vals[r * dim + j] = 0.0;
                            extra[r * dim + j] = 0.0;
                        }
                        extra[r * dim + j] *= (count(r) + 2.0) * step;
                    }
                }
                let want = HostTensor::new(&[rows, dim], dt, vals);
                Sample::new(
                    vec![
                        t(g),
                        t(idx),
                        v(Value::Int(rows as i64)),
                        v(Value::Int(pad)),
                        v(Value::Bool(freq)),
                    ],
                    vec![Out::Close(want, Tol::of(dt).with_extra(extra))],
                )
            }),
    );
}

/// `smooth_l1_loss_backward`, `huber_loss_backward` and `binary_cross_entropy_backward`: the
/// derivatives of the losses' definitions (PyTorch's documentation) in `z = input - target`,
/// times the incoming gradient (a scalar for `mean` and `sum`), divided by the element count
/// for `mean`; at the kinks, ATen's side.
#[test]
fn loss_backwards() {
    let case = |xs: Values, ys: Values| {
        (shape(), float_dtype(), 0i64..3).prop_flat_map(move |(s, d, r)| {
            let gs = if r == 0 { s.clone() } else { vec![] };
            (
                input(gs, d, Values::Range(3.0)),
                input(s.clone(), d, xs),
                input(s, d, ys),
                Just(r),
            )
        })
    };
    let norm = |x: &Input, r: i64| {
        if r == 1 {
            1.0 / numel(&x.host.shape).max(1) as f64
        } else {
            1.0
        }
    };
    check(
        "aten::smooth_l1_loss_backward",
        (case(Values::Range(3.0), Values::Range(3.0)), 0.5f64..2.0).prop_map(
            move |((g, x, y, r), beta)| {
                let n = norm(&x, r);
                let want = zip_map(&[&g.host, &x.host, &y.host], x.host.dtype, |v| {
                    let z = v[1] - v[2];
                    let s = if z <= -beta {
                        -1.0
                    } else if z >= beta {
                        1.0
                    } else {
                        z / beta
                    };
                    n * s * v[0]
                });
                let args = vec![t(g), t(x), t(y), v(Value::Int(r)), v(Value::Float(beta))];
                Sample::new(args, vec![Out::close(want)])
            },
        ),
    );
    check(
        "aten::huber_loss_backward",
        (case(Values::Range(3.0), Values::Range(3.0)), 0.5f64..2.0).prop_map(
            move |((g, x, y, r), delta)| {
                let n = norm(&x, r);
                let want = zip_map(&[&g.host, &x.host, &y.host], x.host.dtype, |v| {
                    let z = v[1] - v[2];
                    n * z.clamp(-delta, delta) * v[0]
                });
                let args = vec![t(g), t(x), t(y), v(Value::Int(r)), v(Value::Float(delta))];
                Sample::new(args, vec![Out::close(want)])
            },
        ),
    );
    check(
        "aten::binary_cross_entropy_backward",
        (
            case(Values::Between(0.05, 0.95), Values::Between(0.0, 1.0)),
            any::<bool>(),
        )
            .prop_flat_map(|((g, x, y, r), weighted)| {
                let (s, d) = (x.host.shape.clone(), x.host.dtype);
                let w = if weighted {
                    input(s, d, Values::Between(0.0, 2.0))
                        .prop_map(Some)
                        .boxed()
                } else {
                    Just(None).boxed()
                };
                (Just((g, x, y, r)), w)
            })
            .prop_map(move |((g, x, y, r), w)| {
                // d/dx -(y log x + (1 - y) log(1 - x)) = (x - y) / (x (1 - x)).
                let n = norm(&x, r);
                let ones = HostTensor::scalar(1.0, x.host.dtype);
                let wh = w.as_ref().map_or(ones, |w| w.host.clone());
                let want = zip_map(&[&g.host, &x.host, &y.host, &wh], x.host.dtype, |v| {
                    n * v[0] * (v[1] - v[2]) / (v[1] * (1.0 - v[1])) * v[3]
                });
                let args = vec![t(g), t(x), t(y), opt_tensor(w), v(Value::Int(r))];
                Sample::new(args, vec![Out::close(want)])
            }),
    );
}
