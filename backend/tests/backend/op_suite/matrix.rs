//! Matrix products (`mm`, `bmm`, `addmm`, `baddbmm`, `dot`, `mv`) and scaled dot-product
//! attention (`scaled_dot_product_attention`, `_scaled_dot_product_flash_attention_for_cpu`),
//! on transposed and strided operands, empty and wide dims, at every matmul precision.
//!
//! The tolerance is `torch.testing`'s default plus a bound from the matrix units' numerics,
//! computed per output element from `S = Σ_k |a_ik|·|b_kj|`:
//! - bf16 operands: exact products, f32 accumulation: `k·u·S` (`u = 2^-24`);
//! - f32 (and f16, which the units take as f32) at DEFAULT precision: one bf16 pass, each
//!   operand rounded to bf16 (relative error up to `2^-8`): `2^-7·S + k·u·S`. This is what a TPU
//!   computes by default (JAX's and torch_xla's DEFAULT): about 3 significant digits, far from
//!   f32's 1.3e-6, and the reason the other precisions exist;
//! - f32 at HIGH (three passes, 16 bits of each operand, the low-by-low product dropped):
//!   `2^-14·S + k·u·S`;
//! - f32 at HIGHEST (six passes, about f32): `(k + 8)·u·S`.
//!
//! Attention composes these: a score error `e_s` (the product bound times the scale) changes
//! the softmax weights by a relative `2·e_s`, and the output by that times `Σ_j p_j·|v_j|`,
//! plus the rounding of the weights to bf16 for bf16 inputs and the second product's bound.
//! Fully masked rows give zeros (PyTorch's math backend, `_safe_softmax`).

use proptest::prelude::*;
use tpuemu_backend::ops::Value;
use tpuemu_backend::{DType, MatmulPrecision};

use super::harness::{Arg, Input, Out, Sample, Tol, check, t, v};
use super::reference::{HostTensor, broadcast, indices, numel};
use super::strategies::{Values, float_dtype, input};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::mm", products),
    ("aten::bmm", products),
    ("aten::dot", products),
    ("aten::mv", products),
    ("aten::addmm", addmm),
    ("aten::baddbmm", baddbmm),
    ("aten::scaled_dot_product_attention", sdpa),
    (
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        flash_for_cpu,
    ),
];

const U: f64 = 1.0 / 16_777_216.0;

/// A matrix dim: mostly small, now and then empty or wider than a 128-wide tile.
fn mdim() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 12 => 1usize..=9, 2 => 120usize..=140]
}

fn precision() -> impl Strategy<Value = Option<MatmulPrecision>> {
    prop_oneof![
        Just(None),
        Just(Some(MatmulPrecision::Default)),
        Just(Some(MatmulPrecision::High)),
        Just(Some(MatmulPrecision::Highest)),
    ]
}

/// The relative operand error and the accumulation factor of a product of `dtype` operands.
fn operand_error(dtype: DType, p: Option<MatmulPrecision>) -> f64 {
    match (dtype, p.unwrap_or(MatmulPrecision::Default)) {
        (DType::BF16, _) => 0.0,
        (_, MatmulPrecision::Default) => f64::powi(2.0, -7) * 1.01,
        (_, MatmulPrecision::High) => f64::powi(2.0, -14),
        (_, MatmulPrecision::Highest) => 8.0 * U,
    }
}

/// `out[b, i, j] = Σ_k a[b, i, k]·w[b, k, j]` over 3-D host tensors, with the bound.
fn bmm_ref(a: &HostTensor, w: &HostTensor, p: Option<MatmulPrecision>) -> (Vec<f64>, Vec<f64>) {
    let (bs, m, k) = (a.shape[0], a.shape[1], a.shape[2]);
    let n = w.shape[2];
    let r = operand_error(a.dtype, p) + k as f64 * U;
    let mut vals = Vec::with_capacity(bs * m * n);
    let mut extra = Vec::with_capacity(bs * m * n);
    for b in 0..bs {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut sa) = (0.0, 0.0);
                for kk in 0..k {
                    let x = a.at(&[b, i, kk]) * w.at(&[b, kk, j]);
                    s += x;
                    sa += x.abs();
                }
                vals.push(s);
                extra.push(r * sa);
            }
        }
    }
    (vals, extra)
}

fn as3(h: &HostTensor, lead: usize) -> HostTensor {
    let mut s = h.shape.clone();
    while s.len() < 3 {
        s.insert(if lead == 0 { 0 } else { s.len() }, 1);
    }
    h.reshaped(&s)
}

/// A product sample: operands of `shapes`, the result reshaped to `out`.
fn product(
    sa: Vec<usize>,
    sb: Vec<usize>,
    to3: fn(&HostTensor, &HostTensor) -> (HostTensor, HostTensor),
    out: fn(&[usize], &[usize]) -> Vec<usize>,
) -> impl Strategy<Value = Sample> {
    (float_dtype(), precision())
        .prop_flat_map(move |(d, p)| {
            (
                input(sa.clone(), d, Values::Range(2.0)),
                input(sb.clone(), d, Values::Range(2.0)),
                Just(p),
            )
        })
        .prop_map(move |(a, b, p)| {
            let (a3, b3) = to3(&a.host, &b.host);
            let (vals, extra) = bmm_ref(&a3, &b3, p);
            let shape = out(&a.host.shape, &b.host.shape);
            let d = a.host.dtype;
            let want = HostTensor::new(&shape, d, vals);
            let s = Sample::new(
                vec![t(a), t(b)],
                vec![Out::Close(want, Tol::of(d).with_extra(extra))],
            );
            s.at(p)
        })
}

#[test]
fn products() {
    check(
        "aten::mm",
        (mdim(), mdim(), mdim()).prop_flat_map(|(m, k, n)| {
            product(
                vec![m, k],
                vec![k, n],
                |a, b| (as3(a, 0), as3(b, 0)),
                |a, b| vec![a[0], b[1]],
            )
        }),
    );
    check(
        "aten::bmm",
        (0usize..4, mdim(), mdim(), mdim()).prop_flat_map(|(bs, m, k, n)| {
            product(
                vec![bs, m, k],
                vec![bs, k, n],
                |a, b| (a.clone(), b.clone()),
                |a, b| vec![a[0], a[1], b[2]],
            )
        }),
    );
    check(
        "aten::dot",
        mdim().prop_flat_map(|k| {
            product(
                vec![k],
                vec![k],
                |a, b| (as3(a, 0), b.reshaped(&[1, b.shape[0], 1])),
                |_, _| vec![],
            )
        }),
    );
    check(
        "aten::mv",
        (mdim(), mdim()).prop_flat_map(|(m, k)| {
            product(
                vec![m, k],
                vec![k],
                |a, b| (as3(a, 0), b.reshaped(&[1, b.shape[0], 1])),
                |a, _| vec![a[0]],
            )
        }),
    );
}

/// `beta·self + alpha·prod` with the product's bound scaled by `|alpha|`.
fn add_product(
    bias: &HostTensor,
    prod: (Vec<f64>, Vec<f64>),
    shape: &[usize],
    beta: f64,
    alpha: f64,
    d: DType,
) -> Out {
    let b = bias.broadcast_to(shape);
    let vals: Vec<f64> = prod
        .0
        .iter()
        .zip(&b.data)
        .map(|(p, s)| {
            let s = if beta == 0.0 { 0.0 } else { beta * s };
            alpha * p + s
        })
        .collect();
    let extra: Vec<f64> = prod
        .1
        .iter()
        .zip(&vals)
        .map(|(e, r)| alpha.abs() * e + 4.0 * U * r.abs())
        .collect();
    Out::Close(
        HostTensor::new(shape, d, vals),
        Tol::of(d).with_extra(extra),
    )
}

fn coefficients() -> impl Strategy<Value = (Option<f64>, Option<f64>)> {
    let c = prop_oneof![
        Just(None),
        Just(Some(0.0)),
        Just(Some(0.5)),
        Just(Some(-2.0))
    ];
    (c.clone(), c)
}

fn coefficient_args(beta: Option<f64>, alpha: Option<f64>) -> Vec<Arg> {
    let f = |x: Option<f64>| v(x.map_or(Value::None, Value::Float));
    vec![f(beta), f(alpha)]
}

/// A bias shape that broadcasts to `out`: `out` itself, its last dims, or with 1s.
fn bias_shape(out: Vec<usize>) -> impl Strategy<Value = Vec<usize>> {
    let n = out.len();
    (0..=n, proptest::collection::vec(any::<bool>(), n)).prop_map(move |(drop, ones)| {
        out.iter()
            .zip(&ones)
            .skip(drop)
            .map(|(d, o)| if *o { 1 } else { *d })
            .collect()
    })
}

/// `beta·bias + alpha·(a @ b)` with `lead` batch dims (none: `addmm`, one: `baddbmm`) and a
/// bias that broadcasts to the result.
fn biased_product(lead: impl Strategy<Value = Vec<usize>>) -> impl Strategy<Value = Sample> {
    (
        lead,
        mdim(),
        mdim(),
        mdim(),
        float_dtype(),
        precision(),
        coefficients(),
    )
        .prop_flat_map(|(lead, m, k, n, d, p, c)| {
            let shape = |r: usize, c: usize| [lead.clone(), vec![r, c]].concat();
            (
                bias_shape(shape(m, n)).prop_flat_map(move |s| input(s, d, Values::Range(2.0))),
                input(shape(m, k), d, Values::Range(2.0)),
                input(shape(k, n), d, Values::Range(2.0)),
                Just((p, c)),
            )
        })
        .prop_map(|(bias, a, b, (p, (beta, alpha)))| {
            let prod = bmm_ref(&as3(&a.host, 0), &as3(&b.host, 0), p);
            let mut shape = a.host.shape.clone();
            *shape.last_mut().unwrap() = *b.host.shape.last().unwrap();
            let d = a.host.dtype;
            let want = add_product(
                &bias.host,
                prod,
                &shape,
                beta.unwrap_or(1.0),
                alpha.unwrap_or(1.0),
                d,
            );
            let mut args = vec![t(bias), t(a), t(b)];
            args.extend(coefficient_args(beta, alpha));
            Sample::new(args, vec![want]).at(p)
        })
}

#[test]
fn addmm() {
    check("aten::addmm", biased_product(Just(vec![])));
}

#[test]
fn baddbmm() {
    check(
        "aten::baddbmm",
        biased_product((0usize..4).prop_map(|bs| vec![bs])),
    );
}

/// An attention call: the inputs and options.
#[derive(Clone, Debug)]
struct Attn {
    q: Input,
    k: Input,
    v: Input,
    mask: Option<Input>,
    causal: bool,
    scale: Option<f64>,
    gqa: bool,
    precision: Option<MatmulPrecision>,
}

/// The reference: output `[..., L, Ev]` and logsumexp `[..., L]` with their bounds.
fn attention_ref(a: &Attn) -> (HostTensor, Vec<f64>, HostTensor, Vec<f64>) {
    let (q, k, v) = (&a.q.host, &a.k.host, &a.v.host);
    let d = q.dtype;
    let (nq, nk) = (q.dim(), k.dim());
    let (l, e) = (q.shape[nq - 2], q.shape[nq - 1]);
    let s = k.shape[nk - 2];
    let ev = v.shape[v.dim() - 1];
    let scale = a.scale.unwrap_or(1.0 / (e as f64).sqrt());
    let qb = &q.shape[..nq - 2];
    let kb = &k.shape[..nk - 2];
    // Grouped-query attention repeats each key/value head for its group of query heads.
    let group = if a.gqa && nq >= 3 && nk >= 3 {
        q.shape[nq - 3] / k.shape[nk - 3]
    } else {
        1
    };
    let kb_eff: Vec<usize> = if group > 1 {
        let mut b = kb.to_vec();
        let h = b.len() - 1;
        b[h] *= group;
        b
    } else {
        kb.to_vec()
    };
    let batch = broadcast(&[qb, &kb_eff]).expect("batch dims broadcast");
    let mut oshape = batch.clone();
    oshape.extend([l, ev]);
    let mut lshape = batch.clone();
    lshape.push(l);
    let r_in = operand_error(if d == DType::F16 { DType::F32 } else { d }, a.precision);
    let r_p = if d == DType::BF16 {
        f64::powi(2.0, -8)
    } else {
        0.0
    };
    let pick = |t: &HostTensor, bi: &[usize], i: usize, j: usize, kv: bool| -> f64 {
        let nb = t.dim() - 2;
        let lead = bi.len() - nb;
        let mut idx: Vec<usize> = (0..nb)
            .map(|x| {
                let mut b = bi[lead + x];
                if kv && group > 1 && x == nb - 1 {
                    b /= group;
                }
                if t.shape[x] == 1 { 0 } else { b }
            })
            .collect();
        idx.extend([i, j]);
        t.at(&idx)
    };
    let mut out = vec![0.0; numel(&oshape)];
    let mut eout = vec![0.0; numel(&oshape)];
    let mut lse = vec![0.0; numel(&lshape)];
    let mut else_ = vec![0.0; numel(&lshape)];
    for (bflat, bi) in indices(&batch).enumerate() {
        for i in 0..l {
            let mut scores = vec![f64::NEG_INFINITY; s];
            let mut es = 0.0f64;
            for (j, sc) in scores.iter_mut().enumerate() {
                let (mut dot, mut sa) = (0.0, 0.0);
                for x in 0..e {
                    let p = pick(q, &bi, i, x, false) * pick(k, &bi, j, x, true);
                    dot += p;
                    sa += p.abs();
                }
                let mut val = dot * scale;
                es = es.max((r_in + (e as f64 + 2.0) * U) * sa * scale.abs());
                let keep = match &a.mask {
                    Some(m) if m.host.dtype == DType::Bool => {
                        m.host.at_broadcast(&[&bi[..], &[i, j]].concat()) != 0.0
                    }
                    Some(m) => {
                        val += m.host.at_broadcast(&[&bi[..], &[i, j]].concat());
                        true
                    }
                    None => !a.causal || j <= i,
                };
                if keep {
                    *sc = val;
                }
            }
            let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let row = bflat * l + i;
            if mx == f64::NEG_INFINITY {
                // No key: zeros, and a logsumexp of -inf.
                lse[row] = f64::NEG_INFINITY;
                continue;
            }
            let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = w.iter().sum();
            lse[row] = mx + sum.ln();
            else_[row] = 2.0 * es + (s as f64 + 4.0) * U * (1.0 + lse[row].abs());
            for c in 0..ev {
                let (mut o, mut oa) = (0.0, 0.0);
                for (j, wj) in w.iter().enumerate() {
                    let p = wj / sum * pick(v, &bi, j, c, true);
                    o += p;
                    oa += p.abs();
                }
                let at = (bflat * l + i) * ev + c;
                out[at] = o;
                eout[at] = oa * (4.0 * es + r_p + r_in + (s as f64 + 6.0) * U) * 1.5;
            }
        }
    }
    (
        HostTensor::new(&oshape, d, out),
        eout,
        HostTensor::new(&lshape, DType::F32, lse),
        else_,
    )
}

/// Attention inputs: batch dims (broadcasting between query and key/value), heads grouped
/// for GQA, an optional bool or float mask (no fully masked row when `full_rows`).
fn attention(four_d: bool, full_rows: bool) -> impl Strategy<Value = Attn> {
    let batch = if four_d {
        (0usize..3, 1usize..3)
            .prop_map(|(b, h)| vec![b.max(1), h])
            .boxed()
    } else {
        proptest::collection::vec(1usize..3, 0..=2).boxed()
    };
    (
        batch,
        1usize..4,
        (
            1usize..7,
            prop_oneof![4 => 1usize..7, 1 => Just(0usize)],
            1usize..9,
            1usize..9,
        ),
        float_dtype(),
        0u8..4,
        prop_oneof![Just(None), Just(Some(0.3))],
        precision(),
        any::<bool>(),
    )
        .prop_flat_map(
            move |(mut qb, group, (l, s, e, ev), d, mask_kind, scale, p, bcast)| {
                let gqa = !four_d && group > 1 && !qb.is_empty();
                let mut kb = qb.clone();
                if gqa {
                    let h = qb.len() - 1;
                    qb[h] = kb[h] * group;
                } else if bcast && !kb.is_empty() && !four_d {
                    kb[0] = 1;
                }
                let s = if full_rows { s.max(1) } else { s };
                let sh = |b: &[usize], x: usize, y: usize| {
                    let mut v = b.to_vec();
                    v.extend([x, y]);
                    v
                };
                let mask = match mask_kind {
                    1 => input(vec![l, s], DType::Bool, Values::Range(1.0))
                        .prop_map(Some)
                        .boxed(),
                    2 => input(sh(&qb, l, s), d, Values::Between(-2.0, 0.0))
                        .prop_map(Some)
                        .boxed(),
                    _ => Just(None).boxed(),
                };
                (
                    input(sh(&qb, l, e), d, Values::Range(1.5)),
                    input(sh(&kb, s, e), d, Values::Range(1.5)),
                    input(sh(&kb, s, ev), d, Values::Range(1.5)),
                    mask,
                    Just((mask_kind == 3, scale, gqa, p)),
                )
            },
        )
        .prop_map(move |(q, k, v, mask, (causal, scale, gqa, precision))| {
            let mask = mask.map(|mut m| {
                if full_rows && m.host.dtype == DType::Bool {
                    // Keep the first key of every row.
                    let s = m.host.shape[m.host.dim() - 1];
                    for (f, x) in m.host.data.iter_mut().enumerate() {
                        if f % s.max(1) == 0 {
                            *x = 1.0;
                        }
                    }
                    m.place.expanded.iter_mut().for_each(|e| *e = false);
                }
                m
            });
            Attn {
                q,
                k,
                v,
                mask,
                causal,
                scale,
                gqa,
                precision,
            }
        })
}

#[test]
fn sdpa() {
    check(
        "aten::scaled_dot_product_attention",
        attention(false, false).prop_map(|a| {
            let (o, eo, _, _) = attention_ref(&a);
            let d = a.q.host.dtype;
            let args = vec![
                t(a.q),
                t(a.k),
                t(a.v),
                a.mask.map_or(v(Value::None), t),
                v(Value::Float(0.0)),
                v(Value::Bool(a.causal)),
                v(a.scale.map_or(Value::None, Value::Float)),
                v(Value::Bool(a.gqa)),
            ];
            let s = Sample::new(args, vec![Out::Close(o, Tol::of(d).with_extra(eo))]);
            s.at(a.precision)
        }),
    );
}

#[test]
fn flash_for_cpu() {
    check(
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        attention(true, true).prop_map(|a| {
            let (o, eo, lse, el) = attention_ref(&a);
            let d = a.q.host.dtype;
            let args = vec![
                t(a.q),
                t(a.k),
                t(a.v),
                v(Value::Float(0.0)),
                v(Value::Bool(a.causal)),
                a.mask.map_or(v(Value::None), t),
                v(a.scale.map_or(Value::None, Value::Float)),
            ];
            let s = Sample::new(
                args,
                vec![
                    Out::Close(o, Tol::of(d).with_extra(eo)),
                    Out::Close(lse, Tol::of(DType::F32).with_extra(el)),
                ],
            );
            s.at(a.precision)
        }),
    );
}
