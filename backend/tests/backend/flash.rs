//! Flash attention: `scaled_dot_product_attention` without a mask runs as one kernel whose
//! scores never reach HBM, in every mode, and agrees with attention computed on the host in
//! f64 from the same (bf16-rounded) inputs.
//!
//! The HBM bound is derived by hand: each query, key and value element read once (keys and
//! values once per key/value head), each output and logsumexp element written once.

use tpuemu_backend::ops::matrix::attention::scaled_dot_product_attention;
use tpuemu_backend::{DType, Mode, Runtime, Tensor};

use crate::host::rt;

fn data(n: usize, seed: u32) -> Vec<f32> {
    crate::inputs::hashed(n, seed, 2)
}

/// Attention on the host in f64: `q [B, H, L, E]`, `k [B, Hk, S, E]`, `v [B, Hk, S, Ev]`.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (b, h, hk, l, s, e, ev): (usize, usize, usize, usize, usize, usize, usize),
    causal: bool,
    scale: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; b * h * l * ev];
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / (h / hk);
            for i in 0..l {
                let qrow = &q[((bi * h + hi) * l + i) * e..][..e];
                let cols = if causal { (i + 1).min(s) } else { s };
                let scores: Vec<f64> = (0..cols)
                    .map(|j| {
                        let krow = &k[((bi * hk + kh) * s + j) * e..][..e];
                        qrow.iter()
                            .zip(krow)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                for c in 0..ev {
                    let mut acc = 0.0;
                    for (j, wj) in w.iter().enumerate() {
                        acc += wj * v[((bi * hk + kh) * s + j) * ev + c] as f64;
                    }
                    out[((bi * h + hi) * l + i) * ev + c] = acc / sum;
                }
            }
        }
    }
    out
}

fn bf16_round(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|v| half::bf16::from_f32(*v).to_f32())
        .collect()
}

/// One case: the result against the host's, and the kernels and HBM bytes of the call.
pub(crate) fn case(
    rt: &Runtime,
    dims: (usize, usize, usize, usize, usize, usize, usize),
    causal: bool,
) {
    let (b, h, hk, l, s, e, ev) = dims;
    let qv = bf16_round(&data(b * h * l * e, 1));
    let kv = bf16_round(&data(b * hk * s * e, 2));
    let vv = bf16_round(&data(b * hk * s * ev, 3));
    let t = |x: &[f32], shape: &[usize]| {
        Tensor::from_slice(rt, x, shape)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    let (q, k, v) = (
        t(&qv, &[b, h, l, e]),
        t(&kv, &[b, hk, s, e]),
        t(&vv, &[b, hk, s, ev]),
    );
    rt.sync().unwrap();
    rt.reset_metrics();
    let o = scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None, hk != h).unwrap();
    rt.sync().unwrap();
    let m = rt.metrics();
    assert_eq!(
        m.kernels_launched, 1,
        "{dims:?} causal {causal}: one kernel"
    );
    // Bytes: q, k, v read once; out (bf16) and the logsumexp (f32) written once.
    let bound = 2 * (b * h * l * e + b * hk * s * (e + ev) + b * h * l * ev) + 4 * b * h * l;
    assert!(
        m.hbm_bytes as usize <= bound,
        "{dims:?}: {} HBM bytes, hand-computed minimum {bound}",
        m.hbm_bytes
    );
    assert_eq!(o.shape(), &[b, h, l, ev]);
    let got = o.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let want = reference(&qv, &kv, &vv, dims, causal, 1.0 / (e as f64).sqrt());
    let top = want.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // The weights go to the matrix unit in bf16 (8 bits of mantissa), as the output does.
        assert!(
            (*g as f64 - w).abs() <= top * 2f64.powi(-6),
            "{dims:?} causal {causal}: element {i}: {g} vs {w}"
        );
    }
}

#[test]
fn attention_is_one_kernel_and_matches_the_host() {
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let rt = rt(mode);
        // Two query blocks (the second partial), a partial key block, grouped heads, Ev != E.
        case(&rt, (2, 4, 2, 600, 300, 64, 48), true);
        case(&rt, (2, 4, 2, 600, 300, 64, 48), false);
        // Head width above the array's rows, one query block, causal with L < S.
        case(&rt, (1, 2, 2, 40, 136, 160, 128), true);
        // Causal over whole key blocks (every masked block masked by its bias tiles), two
        // query blocks.
        case(&rt, (1, 2, 1, 640, 640, 64, 64), true);
    }
}

/// Gradients on the host in f64: `(dq, dk, dv)`.
fn reference_grads(
    x: [&[f32]; 4],
    dims: (usize, usize, usize, usize, usize, usize, usize),
    causal: bool,
    scale: f64,
) -> [Vec<f64>; 3] {
    let [q, k, v, go] = x;
    let (b, h, hk, l, s, e, ev) = dims;
    let (mut dq, mut dk, mut dv) = (
        vec![0.0; b * h * l * e],
        vec![0.0; b * hk * s * e],
        vec![0.0; b * hk * s * ev],
    );
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / (h / hk);
            let kr = |j: usize| ((bi * hk + kh) * s + j) * e;
            let vr = |j: usize| ((bi * hk + kh) * s + j) * ev;
            for i in 0..l {
                let qi = ((bi * h + hi) * l + i) * e;
                let oi = ((bi * h + hi) * l + i) * ev;
                let cols = if causal { (i + 1).min(s) } else { s };
                let sc: Vec<f64> = (0..cols)
                    .map(|j| {
                        (0..e)
                            .map(|c| q[qi + c] as f64 * k[kr(j) + c] as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                let p: Vec<f64> = w.iter().map(|x| x / sum).collect();
                let dp: Vec<f64> = (0..cols)
                    .map(|j| {
                        (0..ev)
                            .map(|c| go[oi + c] as f64 * v[vr(j) + c] as f64)
                            .sum()
                    })
                    .collect();
                let d: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for j in 0..cols {
                    let ds = p[j] * (dp[j] - d);
                    for c in 0..ev {
                        dv[vr(j) + c] += p[j] * go[oi + c] as f64;
                    }
                    for c in 0..e {
                        dq[qi + c] += scale * ds * k[kr(j) + c] as f64;
                        dk[kr(j) + c] += scale * ds * q[qi + c] as f64;
                    }
                }
            }
        }
    }
    [dq, dk, dv]
}

/// The backward kernel's gradients against the host's, and one kernel for the call.
pub(crate) fn backward_case(
    rt: &Runtime,
    dims: (usize, usize, usize, usize, usize, usize, usize),
    causal: bool,
) {
    use tpuemu_backend::ops::matrix::attention::flash_attention_for_cpu;
    use tpuemu_backend::ops::matrix::attention_backward::flash_attention_backward;
    let (b, h, hk, l, s, e, ev) = dims;
    let qv = bf16_round(&data(b * h * l * e, 11));
    let kv = bf16_round(&data(b * hk * s * e, 12));
    let vv = bf16_round(&data(b * hk * s * ev, 13));
    let gv = bf16_round(&data(b * h * l * ev, 14));
    let t = |x: &[f32], shape: &[usize]| {
        Tensor::from_slice(rt, x, shape)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    let (q, k, v, go) = (
        t(&qv, &[b, h, l, e]),
        t(&kv, &[b, hk, s, e]),
        t(&vv, &[b, hk, s, ev]),
        t(&gv, &[b, h, l, ev]),
    );
    // The forward (GQA through the composite sdpa; the CPU op takes equal heads).
    let (o, lse) = if h == hk {
        flash_attention_for_cpu(&q, &k, &v, 0.0, causal, None, None).unwrap()
    } else {
        let o = scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None, true).unwrap();
        // The logsumexp on the host, for the backward's input.
        let lse = host_lse(&qv, &kv, dims, causal);
        (o, Tensor::from_slice(rt, &lse, &[b, h, l]).unwrap())
    };
    rt.sync().unwrap();
    rt.reset_metrics();
    let (dq, dk, dv) =
        flash_attention_backward(&go, &q, &k, &v, &o, &lse, 0.0, causal, None, None).unwrap();
    rt.sync().unwrap();
    assert_eq!(
        rt.metrics().kernels_launched,
        1,
        "{dims:?}: one backward kernel"
    );
    let want = reference_grads([&qv, &kv, &vv, &gv], dims, causal, 1.0 / (e as f64).sqrt());
    check_grads([dq, dk, dv], &want, &format!("{dims:?} causal {causal}"));
}

/// The logsumexp of each row of scaled, masked scores, on the host.
fn host_lse(
    q: &[f32],
    k: &[f32],
    (b, h, hk, l, s, e, _): (usize, usize, usize, usize, usize, usize, usize),
    causal: bool,
) -> Vec<f32> {
    let scale = 1.0 / (e as f64).sqrt();
    let mut out = Vec::new();
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / (h / hk);
            for i in 0..l {
                let qi = ((bi * h + hi) * l + i) * e;
                let cols = if causal { (i + 1).min(s) } else { s };
                let sc: Vec<f64> = (0..cols)
                    .map(|j| {
                        let kj = ((bi * hk + kh) * s + j) * e;
                        (0..e)
                            .map(|c| q[qi + c] as f64 * k[kj + c] as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                out.push((m + sc.iter().map(|x| (x - m).exp()).sum::<f64>().ln()) as f32);
            }
        }
    }
    out
}

#[test]
fn attention_backward_is_one_kernel_and_matches_the_host() {
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let rt = rt(mode);
        backward_case(&rt, (1, 2, 2, 600, 300, 64, 48), true);
        backward_case(&rt, (2, 4, 2, 136, 200, 64, 64), false);
        backward_case(&rt, (1, 2, 1, 260, 260, 160, 32), true);
        backward_case(&rt, (1, 2, 1, 640, 640, 64, 64), true);
    }
}

/// The golden model's layout: `q`, `k`, `v` are head views of one `[B, L, 3 * H * E]` tensor
/// (row stride `3 H E`), f32 and bf16, causal; forward and backward against the host.
#[test]
fn packed_qkv_views_in_f32_and_bf16() {
    use tpuemu_backend::ops::matrix::attention::flash_attention_for_cpu;
    use tpuemu_backend::ops::matrix::attention_backward::flash_attention_backward;
    let (b, h, l, e) = (2usize, 2usize, 40usize, 64usize);
    let w = 3 * h * e;
    let packed = bf16_round(&data(b * l * w, 21));
    let go = bf16_round(&data(b * h * l * e, 22));
    // Host copies of q, k, v as [B, H, L, E].
    let part = |p: usize| -> Vec<f32> {
        let mut v = Vec::new();
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..l {
                    for c in 0..e {
                        v.push(packed[(bi * l + i) * w + p * h * e + hi * e + c]);
                    }
                }
            }
        }
        v
    };
    let (qv, kv, vv) = (part(0), part(1), part(2));
    let dims = (b, h, h, l, l, e, e);
    let want_o = reference(&qv, &kv, &vv, dims, true, 1.0 / (e as f64).sqrt());
    let want_g = reference_grads([&qv, &kv, &vv, &go], dims, true, 1.0 / (e as f64).sqrt());
    for dt in [DType::BF16, DType::F32] {
        for mode in [Mode::Strict, Mode::DeferAndFuse] {
            let rt = rt(mode);
            let t = Tensor::from_slice(&rt, &packed, &[b, l, 3, h, e])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let view = |p: i64| {
                tpuemu_backend::ops::layout_ops::select(&t, 2, p)
                    .unwrap()
                    .permute(&[0, 2, 1, 3])
                    .unwrap()
            };
            let (q, k, v) = (view(0), view(1), view(2));
            let g = Tensor::from_slice(&rt, &go, &[b, h, l, e])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let (o, lse) = flash_attention_for_cpu(&q, &k, &v, 0.0, true, None, None).unwrap();
            let (dq, dk, dv) =
                flash_attention_backward(&g, &q, &k, &v, &o, &lse, 0.0, true, None, None).unwrap();
            let close = |name: &str, got: &Tensor, want: &[f64], tol: f64| {
                let got = got.to_dtype(DType::F32).unwrap().contiguous().unwrap();
                let got = got.to_vec::<f32>().unwrap();
                let top = want.iter().fold(0.0f64, |a, x| a.max(x.abs()));
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() <= top * tol,
                        "{dt:?} {mode:?} {name}[{i}]: {g} vs {w}"
                    );
                }
            };
            close("out", &o, &want_o, 2f64.powi(-6));
            close("dv", &dv, &want_g[2], 2f64.powi(-5));
            close("dk", &dk, &want_g[1], 2f64.powi(-5));
            close("dq", &dq, &want_g[0], 2f64.powi(-5));
            // The packed input is unchanged (nothing wrote into the views' storage).
            let back = t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
            assert_eq!(
                back, packed,
                "{dt:?} {mode:?}: the packed qkv was overwritten"
            );
        }
    }
}

/// The backward's decomposition (operands the kernel cannot take: here a query whose rows are
/// not contiguous) with grouped key/value heads: the key/value gradients summed over each
/// group, against the host.
#[test]
fn attention_backward_decomposition_takes_grouped_heads() {
    use tpuemu_backend::ops::matrix::attention_backward::flash_attention_backward;
    let rt = rt(Mode::Strict);
    let dims = (1, 4, 2, 64, 64, 32, 32);
    let (b, h, hk, l, s, e, ev) = dims;
    let qv = bf16_round(&data(b * h * l * e, 21));
    let kv = bf16_round(&data(b * hk * s * e, 22));
    let vv = bf16_round(&data(b * hk * s * ev, 23));
    let gv = bf16_round(&data(b * h * l * ev, 24));
    let t = |x: &[f32], shape: &[usize]| {
        Tensor::from_slice(&rt, x, shape)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    // q stored as [B, H, E, L] and seen transposed: inner stride L.
    let mut qt = vec![0.0f32; qv.len()];
    for hi in 0..h {
        for i in 0..l {
            for c in 0..e {
                qt[(hi * e + c) * l + i] = qv[(hi * l + i) * e + c];
            }
        }
    }
    let q = t(&qt, &[b, h, e, l]).transpose(-2, -1).unwrap();
    let (k, v, go) = (
        t(&kv, &[b, hk, s, e]),
        t(&vv, &[b, hk, s, ev]),
        t(&gv, &[b, h, l, ev]),
    );
    let o = scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None, true).unwrap();
    let lse = Tensor::from_slice(&rt, &host_lse(&qv, &kv, dims, true), &[b, h, l]).unwrap();
    let (dq, dk, dv) =
        flash_attention_backward(&go, &q, &k, &v, &o, &lse, 0.0, true, None, None).unwrap();
    assert_eq!(dk.shape(), &[b, hk, s, e]);
    assert_eq!(dv.shape(), &[b, hk, s, ev]);
    let want = reference_grads([&qv, &kv, &vv, &gv], dims, true, 1.0 / (e as f64).sqrt());
    check_grads([dq, dk, dv], &want, "grouped heads, decomposed");
}

/// `(dq, dk, dv)` against the host's: within 2^-5 of the largest (P and dS go to the matrix
/// units in bf16, and O is the forward's bf16 output).
fn check_grads(got: [Tensor; 3], want: &[Vec<f64>; 3], what: &str) {
    for ((name, got), want) in ["dq", "dk", "dv"].iter().zip(got).zip(want) {
        let got = got.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let top = want.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        let worst = got
            .iter()
            .zip(want)
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0.0, f64::max);
        assert!(
            worst <= top * 2f64.powi(-5),
            "{what}: {name} off by {worst} (largest {top})"
        );
    }
}
