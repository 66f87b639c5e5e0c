//! Spatial neural-network operators: convolution (plain, grouped, strided, dilated, padded,
//! transposed; forward and backward), pooling (max with indices, average, adaptive, unpool),
//! padding (replication, reflection), resampling (nearest, linear, cubic), batch and group
//! norm, pixel and channel shuffles, `_safe_softmax` and `native_dropout_backward`.
//!
//! The references are direct loops over the definitions (PyTorch's documented formulas, not
//! the backend's decompositions): a convolution sums `x[n, c, l·s - p + k·d]·w[o, c, k]` over
//! every in-bounds tap; its backward distributes the same products. Tolerances: the matrix
//! units' bound for convolutions (f32 at DEFAULT is one bf16 pass: `(2^-7 + k·u)·Σ|x||w|`,
//! bf16 operands `k·u·Σ|x||w|`), `torch.testing`'s defaults elsewhere plus an f32 summation
//! bound where the kernel sums.

use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Out, Sample, Tol, check_samples, tp, v};
use super::reference::{HostTensor, indices, numel, ravel};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::convolution", convolution),
    ("aten::_convolution", convolution),
    ("aten::convolution_backward", convolution_backward),
    ("aten::max_pool1d_with_indices", max_pools),
    ("aten::max_pool2d_with_indices", max_pools),
    ("aten::max_pool3d_with_indices", max_pools),
    ("aten::max_pool1d", max_pools),
    ("aten::max_pool2d", max_pools),
    ("aten::max_pool3d", max_pools),
    ("aten::avg_pool1d", avg_pools),
    ("aten::avg_pool2d", avg_pools),
    ("aten::avg_pool3d", avg_pools),
    ("aten::_adaptive_avg_pool2d", adaptive_pools),
    ("aten::_adaptive_avg_pool3d", adaptive_pools),
    ("aten::adaptive_avg_pool1d", adaptive_pools),
    ("aten::adaptive_avg_pool2d", adaptive_pools),
    ("aten::adaptive_avg_pool3d", adaptive_pools),
    ("aten::adaptive_max_pool1d", adaptive_pools),
    ("aten::adaptive_max_pool2d", adaptive_pools),
    ("aten::adaptive_max_pool3d", adaptive_pools),
    ("aten::max_unpool2d", unpool),
    ("aten::max_unpool3d", unpool),
    ("aten::replication_pad1d", pads),
    ("aten::replication_pad2d", pads),
    ("aten::replication_pad3d", pads),
    ("aten::reflection_pad1d", pads),
    ("aten::reflection_pad2d", pads),
    ("aten::reflection_pad3d", pads),
    ("aten::upsample_nearest1d", upsamples),
    ("aten::upsample_nearest1d.vec", upsamples),
    ("aten::upsample_nearest2d", upsamples),
    ("aten::upsample_nearest2d.vec", upsamples),
    ("aten::upsample_nearest3d", upsamples),
    ("aten::upsample_nearest3d.vec", upsamples),
    ("aten::_upsample_nearest_exact1d", upsamples),
    ("aten::_upsample_nearest_exact1d.vec", upsamples),
    ("aten::_upsample_nearest_exact2d", upsamples),
    ("aten::_upsample_nearest_exact2d.vec", upsamples),
    ("aten::_upsample_nearest_exact3d", upsamples),
    ("aten::_upsample_nearest_exact3d.vec", upsamples),
    ("aten::upsample_linear1d", upsamples),
    ("aten::upsample_linear1d.vec", upsamples),
    ("aten::upsample_bilinear2d", upsamples),
    ("aten::upsample_bilinear2d.vec", upsamples),
    ("aten::upsample_trilinear3d", upsamples),
    ("aten::upsample_trilinear3d.vec", upsamples),
    ("aten::upsample_bicubic2d", upsamples),
    ("aten::upsample_bicubic2d.vec", upsamples),
    ("aten::upsample_nearest1d_backward", upsample_backwards),
    ("aten::upsample_nearest2d_backward", upsample_backwards),
    ("aten::upsample_nearest3d_backward", upsample_backwards),
    (
        "aten::_upsample_nearest_exact1d_backward",
        upsample_backwards,
    ),
    (
        "aten::_upsample_nearest_exact2d_backward",
        upsample_backwards,
    ),
    (
        "aten::_upsample_nearest_exact3d_backward",
        upsample_backwards,
    ),
    ("aten::upsample_linear1d_backward", upsample_backwards),
    ("aten::upsample_bilinear2d_backward", upsample_backwards),
    ("aten::upsample_trilinear3d_backward", upsample_backwards),
    ("aten::upsample_bicubic2d_backward", upsample_backwards),
    ("aten::native_batch_norm", batch_norms),
    ("aten::_native_batch_norm_legit", batch_norms),
    ("aten::_native_batch_norm_legit.no_stats", batch_norms),
    ("aten::_native_batch_norm_legit_no_training", batch_norms),
    ("aten::native_group_norm", group_norm),
    ("aten::pixel_shuffle", shuffles),
    ("aten::pixel_unshuffle", shuffles),
    ("aten::channel_shuffle", shuffles),
    ("aten::grid_sampler_2d", grid_sampler),
    ("aten::im2col", im2col_col2im),
    ("aten::col2im", im2col_col2im),
    ("aten::max_pool2d_with_indices_backward", pool_backwards),
    ("aten::max_pool3d_with_indices_backward", pool_backwards),
    ("aten::avg_pool2d_backward", pool_backwards),
    ("aten::avg_pool3d_backward", pool_backwards),
    ("aten::_adaptive_avg_pool2d_backward", pool_backwards),
    ("aten::_adaptive_avg_pool3d_backward", pool_backwards),
    ("aten::_safe_softmax", safe_softmax),
    ("aten::native_dropout_backward", dropout_backward),
];

const U: f64 = 1.0 / 16_777_216.0;

/// Deterministic values in `[-2, 2)` (a linear congruential generator seeded per tensor).
fn vals(shape: &[usize], dtype: DType, seed: u64) -> HostTensor {
    let mut s = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    HostTensor::from_fn(shape, dtype, |_| {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 33) % 4096) as f64 / 1024.0 - 2.0
    })
}

fn ints(x: &[i64]) -> Value {
    Value::Ints(x.to_vec())
}

/// Every (input index, weight index, output index) of a convolution's products: the plain
/// convolution's `y[n, g·og + o, l] += x[n, g·cg + c, l·s - p + k·d]·w[g·og + o, c, k]`.
#[allow(clippy::too_many_arguments)]
fn taps(
    xs: &[usize],
    ws: &[usize],
    ys: &[usize],
    s: &[usize],
    p: &[usize],
    d: &[usize],
    groups: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let nd = xs.len() - 2;
    let (cg, og) = (ws[1], ws[0] / groups);
    for yi in indices(ys) {
        let (n, oc) = (yi[0], yi[1]);
        let g = oc / og;
        for c in 0..cg {
            for k in indices(&ws[2..]) {
                let mut xi = vec![n, g * cg + c];
                let mut ok = true;
                for i in 0..nd {
                    let pos = (yi[2 + i] * s[i] + k[i] * d[i]) as i64 - p[i] as i64;
                    if pos < 0 || pos >= xs[2 + i] as i64 {
                        ok = false;
                    }
                    xi.push(pos.max(0) as usize);
                }
                if ok {
                    let mut wi = vec![oc, c];
                    wi.extend(&k);
                    f(ravel(&xi, xs), ravel(&wi, ws), ravel(&yi, ys));
                }
            }
        }
    }
}

fn out_size(i: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (i + 2 * p - d * (k - 1) - 1) / s + 1
}

/// The matrix-unit bound for `dtype` operands at DEFAULT precision, per unit of `Σ|x||w|`.
fn mxu_rel(dtype: DType, k: usize) -> f64 {
    let base = if dtype == DType::BF16 {
        0.0
    } else {
        f64::powi(2.0, -7) * 1.01
    };
    base + (k as f64 + 2.0) * U
}

/// A convolution sample: `x [N, C, sp...]`, `w [O, C/g, k...]`.
#[allow(clippy::too_many_arguments)]
fn conv_sample(
    dtype: DType,
    xs: &[usize],
    ws: &[usize],
    bias: bool,
    s: &[usize],
    p: &[usize],
    d: &[usize],
    groups: usize,
    transposed: bool,
    seed: u64,
) -> Sample {
    let nd = xs.len() - 2;
    let x = vals(xs, dtype, seed);
    let w = vals(ws, dtype, seed + 1);
    let b = vals(
        &[if transposed { ws[1] * groups } else { ws[0] }],
        dtype,
        seed + 2,
    );
    let kk: usize = ws[1..].iter().product();
    let (ys, vals_, sums) = if !transposed {
        let mut ys = vec![xs[0], ws[0]];
        for i in 0..nd {
            ys.push(out_size(xs[2 + i], ws[2 + i], s[i], p[i], d[i]));
        }
        let mut y = vec![0.0; numel(&ys)];
        let mut a = vec![0.0; numel(&ys)];
        taps(xs, ws, &ys, s, p, d, groups, |xi, wi, yi| {
            y[yi] += x.data[xi] * w.data[wi];
            a[yi] += (x.data[xi] * w.data[wi]).abs();
        });
        (ys, y, a)
    } else {
        // The transposed convolution is the adjoint: its input plays the plain output.
        let mut os = vec![xs[0], ws[1] * groups];
        for i in 0..nd {
            os.push((xs[2 + i] - 1) * s[i] + d[i] * (ws[2 + i] - 1) + 1 - 2 * p[i]);
        }
        // Plain weight shape seen from the output side: [Cin, Cout/g, k] is [O, C/g, k] with
        // O = Cin (the transposed input channels), C = Cout.
        let mut y = vec![0.0; numel(&os)];
        let mut a = vec![0.0; numel(&os)];
        taps(&os, ws, xs, s, p, d, groups, |oi, wi, xi| {
            y[oi] += x.data[xi] * w.data[wi];
            a[oi] += (x.data[xi] * w.data[wi]).abs();
        });
        (os, y, a)
    };
    let ch = ys[1];
    let mut want = vals_;
    if bias {
        for (i, v) in want.iter_mut().enumerate() {
            *v += b.data[(i / numel(&ys[2..])) % ch];
        }
    }
    let extra: Vec<f64> = sums.iter().map(|a| a * mxu_rel(dtype, kk)).collect();
    let args = vec![
        tp(x),
        tp(w),
        if bias { tp(b) } else { v(Value::None) },
        v(ints(&s.iter().map(|&a| a as i64).collect::<Vec<_>>())),
        v(ints(&p.iter().map(|&a| a as i64).collect::<Vec<_>>())),
        v(ints(&d.iter().map(|&a| a as i64).collect::<Vec<_>>())),
        v(Value::Bool(transposed)),
        v(ints(&vec![0; nd])),
        v(Value::Int(groups as i64)),
    ];
    Sample::new(
        args,
        vec![Out::Close(
            HostTensor::new(&ys, dtype, want),
            Tol::of(dtype).with_extra(extra),
        )],
    )
}

#[test]
fn convolution() {
    let mut samples = Vec::new();
    for (k, dt) in [DType::F32, DType::BF16, DType::F16]
        .into_iter()
        .enumerate()
    {
        let sd = 10 * k as u64;
        samples.push(conv_sample(
            dt,
            &[2, 3, 7],
            &[4, 3, 3],
            true,
            &[1],
            &[0],
            &[1],
            1,
            false,
            sd,
        ));
        samples.push(conv_sample(
            dt,
            &[1, 4, 6, 5],
            &[6, 2, 3, 2],
            true,
            &[2, 1],
            &[1, 1],
            &[1, 2],
            2,
            false,
            sd + 1,
        ));
        samples.push(conv_sample(
            dt,
            &[2, 4, 5, 5],
            &[4, 1, 3, 3],
            false,
            &[1, 1],
            &[1, 1],
            &[1, 1],
            4,
            false,
            sd + 2,
        ));
        samples.push(conv_sample(
            dt,
            &[1, 2, 4, 3, 3],
            &[3, 2, 2, 2, 2],
            true,
            &[1, 1, 1],
            &[0, 1, 0],
            &[1, 1, 1],
            1,
            false,
            sd + 3,
        ));
        samples.push(conv_sample(
            dt,
            &[2, 4, 3, 3],
            &[4, 3, 3, 2],
            true,
            &[2, 1],
            &[1, 0],
            &[1, 1],
            1,
            true,
            sd + 4,
        ));
        samples.push(conv_sample(
            dt,
            &[2, 4, 5],
            &[4, 2, 3],
            false,
            &[2],
            &[1],
            &[2],
            2,
            true,
            sd + 5,
        ));
    }
    let mut c = samples.clone();
    check_samples("aten::convolution", std::mem::take(&mut samples));
    for s in &mut c {
        for extra in [false, false, true, true] {
            s.args.push(v(Value::Bool(extra)));
        }
    }
    check_samples("aten::_convolution", c);
}

#[test]
fn convolution_backward() {
    let mut samples = Vec::new();
    for (xs, ws, s, p, d, g) in [
        (vec![2, 3, 7], vec![4, 3, 3], vec![1], vec![0], vec![1], 1),
        (
            vec![2, 4, 6, 5],
            vec![6, 2, 3, 2],
            vec![2, 1],
            vec![1, 1],
            vec![1, 2],
            2,
        ),
    ] {
        let dt = DType::F32;
        let nd = xs.len() - 2;
        let mut ys = vec![xs[0], ws[0]];
        for i in 0..nd {
            ys.push(out_size(xs[2 + i], ws[2 + i], s[i], p[i], d[i]));
        }
        let x = vals(&xs, dt, 5);
        let w = vals(&ws, dt, 6);
        let gy = vals(&ys, dt, 7);
        let mut gi = vec![0.0; numel(&xs)];
        let mut gia = vec![0.0; numel(&xs)];
        let mut gw = vec![0.0; numel(&ws)];
        let mut gwa = vec![0.0; numel(&ws)];
        taps(&xs, &ws, &ys, &s, &p, &d, g, |xi, wi, yi| {
            gi[xi] += gy.data[yi] * w.data[wi];
            gia[xi] += (gy.data[yi] * w.data[wi]).abs();
            gw[wi] += gy.data[yi] * x.data[xi];
            gwa[wi] += (gy.data[yi] * x.data[xi]).abs();
        });
        let mut gb = vec![0.0; ws[0]];
        let per = numel(&ys[2..]);
        for (i, val) in gy.data.iter().enumerate() {
            gb[(i / per) % ws[0]] += val;
        }
        let big = numel(&ys) as f64;
        let tol = |a: Vec<f64>, k: f64| {
            Tol::of(dt).with_extra(
                a.iter()
                    .map(|v| v * (f64::powi(2.0, -7) * 1.01 + (k + 2.0) * U))
                    .collect(),
            )
        };
        let k_in = (ws[0] * numel(&ws[2..])) as f64;
        let args = vec![
            tp(gy.clone()),
            tp(x.clone()),
            tp(w.clone()),
            v(ints(&[ws[0] as i64])),
            v(ints(&s.iter().map(|&a| a as i64).collect::<Vec<_>>())),
            v(ints(&p.iter().map(|&a| a as i64).collect::<Vec<_>>())),
            v(ints(&d.iter().map(|&a| a as i64).collect::<Vec<_>>())),
            v(Value::Bool(false)),
            v(ints(&vec![0; nd])),
            v(Value::Int(g as i64)),
            v(Value::Bools(vec![true, true, true])),
        ];
        let gb_abs: Vec<f64> = vec![big * 2.0 * U * 4.0; ws[0]];
        samples.push(Sample::new(
            args,
            vec![
                Out::Close(HostTensor::new(&xs, dt, gi), tol(gia, k_in)),
                Out::Close(HostTensor::new(&ws, dt, gw), tol(gwa, big)),
                Out::Close(
                    HostTensor::new(&[ws[0]], dt, gb),
                    Tol::of(dt).with_extra(gb_abs),
                ),
            ],
        ));
    }
    check_samples("aten::convolution_backward", samples);
}

/// Max pooling reference: values and flat indices of the first maximum per window.
#[allow(clippy::too_many_arguments)]
fn max_pool_ref(
    x: &HostTensor,
    nd: usize,
    k: &[usize],
    s: &[usize],
    p: &[usize],
    d: &[usize],
) -> (HostTensor, HostTensor) {
    let lead = x.dim() - nd;
    let mut ys = x.shape[..lead].to_vec();
    for i in 0..nd {
        ys.push(out_size(x.shape[lead + i], k[i], s[i], p[i], d[i]));
    }
    let mut vals_ = Vec::new();
    let mut idx = Vec::new();
    for yi in indices(&ys) {
        let mut best = f64::NEG_INFINITY;
        let mut bi = -1i64;
        for kk in indices(k) {
            let mut pos = Vec::new();
            let mut ok = true;
            for i in 0..nd {
                let q = (yi[lead + i] * s[i] + kk[i] * d[i]) as i64 - p[i] as i64;
                ok &= q >= 0 && q < x.shape[lead + i] as i64;
                pos.push(q.max(0) as usize);
            }
            if !ok {
                continue;
            }
            let mut full = yi[..lead].to_vec();
            full.extend(&pos);
            let val = x.at(&full);
            if val > best || bi < 0 {
                best = val;
                bi = ravel(&pos, &x.shape[lead..]) as i64;
            }
        }
        vals_.push(best);
        idx.push(bi as f64);
    }
    (
        HostTensor::new(&ys, x.dtype, vals_),
        HostTensor::new(&ys, DType::I64, idx),
    )
}

#[test]
fn max_pools() {
    for nd in 1..=3usize {
        let shape: Vec<usize> = [2, 3, 7, 6, 5][..2 + nd].to_vec();
        let mut samples = Vec::new();
        let mut plain = Vec::new();
        for (j, (k, s, p, d)) in [(2usize, 2usize, 0usize, 1usize), (3, 2, 1, 1), (2, 1, 1, 2)]
            .into_iter()
            .enumerate()
        {
            for dt in [DType::F32, DType::BF16] {
                let x = vals(&shape, dt, (nd * 10 + j) as u64);
                let (kv, sv, pv, dv) = (vec![k; nd], vec![s; nd], vec![p; nd], vec![d; nd]);
                let (y, i) = max_pool_ref(&x, nd, &kv, &sv, &pv, &dv);
                let i64s = |v: &[usize]| ints(&v.iter().map(|&a| a as i64).collect::<Vec<_>>());
                let args = vec![
                    tp(x),
                    v(i64s(&kv)),
                    v(i64s(&sv)),
                    v(i64s(&pv)),
                    v(i64s(&dv)),
                    v(Value::Bool(false)),
                ];
                plain.push(Sample::new(args.clone(), vec![Out::exact(y.clone())]));
                samples.push(Sample::new(args, vec![Out::exact(y), Out::exact(i)]));
            }
        }
        let with: &'static str = [
            "aten::max_pool1d_with_indices",
            "aten::max_pool2d_with_indices",
            "aten::max_pool3d_with_indices",
        ][nd - 1];
        let without: &'static str =
            ["aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d"][nd - 1];
        check_samples(with, samples);
        check_samples(without, plain);
    }
}

#[test]
fn avg_pools() {
    for nd in 1..=3usize {
        let shape: Vec<usize> = [2, 3, 7, 6, 5][..2 + nd].to_vec();
        let mut samples = Vec::new();
        for (j, (k, s, p, cip)) in [
            (2usize, 2usize, 0usize, true),
            (3, 2, 1, true),
            (3, 2, 1, false),
        ]
        .into_iter()
        .enumerate()
        {
            let dt = DType::F32;
            let x = vals(&shape, dt, (nd * 7 + j) as u64);
            let lead = 2;
            let mut ys = shape[..lead].to_vec();
            for i in 0..nd {
                ys.push(out_size(shape[lead + i], k, s, p, 1));
            }
            let mut want = Vec::new();
            for yi in indices(&ys) {
                let (mut sum, mut cnt, mut cnt_pad) = (0.0, 0usize, 1usize);
                for i in 0..nd {
                    let st = (yi[lead + i] * s) as i64 - p as i64;
                    let en = (st + k as i64).min((shape[lead + i] + p) as i64);
                    cnt_pad *= (en - st) as usize;
                }
                for kk in indices(&vec![k; nd]) {
                    let mut pos = yi[..lead].to_vec();
                    let mut ok = true;
                    for i in 0..nd {
                        let q = (yi[lead + i] * s + kk[i]) as i64 - p as i64;
                        ok &= q >= 0 && q < shape[lead + i] as i64;
                        pos.push(q.max(0) as usize);
                    }
                    if ok {
                        sum += x.at(&pos);
                        cnt += 1;
                    }
                }
                want.push(sum / if cip { cnt_pad } else { cnt } as f64);
            }
            let kn = k.pow(nd as u32) as f64;
            let extra = vec![kn * U * 4.0; want.len()];
            let iv = |a: usize| ints(&vec![a as i64; nd]);
            let mut args = vec![
                tp(x),
                v(iv(k)),
                v(iv(s)),
                v(iv(p)),
                v(Value::Bool(false)),
                v(Value::Bool(cip)),
            ];
            if nd > 1 {
                args.push(v(Value::None));
            }
            samples.push(Sample::new(
                args,
                vec![Out::Close(
                    HostTensor::new(&ys, dt, want),
                    Tol::of(dt).with_extra(extra),
                )],
            ));
        }
        check_samples(
            ["aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d"][nd - 1],
            samples,
        );
    }
}

#[test]
fn adaptive_pools() {
    for nd in 1..=3usize {
        let shape: Vec<usize> = [2, 3, 7, 5, 4][..2 + nd].to_vec();
        let outs: Vec<usize> = [3, 4, 2][..nd].to_vec();
        let x = vals(&shape, DType::F32, nd as u64);
        let mut ys = shape[..2].to_vec();
        ys.extend(&outs);
        let (mut avg, mut mx, mut mi) = (Vec::new(), Vec::new(), Vec::new());
        for yi in indices(&ys) {
            let ranges: Vec<(usize, usize)> = (0..nd)
                .map(|i| {
                    let (inn, o, oo) = (shape[2 + i], yi[2 + i], outs[i]);
                    (o * inn / oo, ((o + 1) * inn).div_ceil(oo))
                })
                .collect();
            let sizes: Vec<usize> = ranges.iter().map(|(a, b)| b - a).collect();
            let (mut sum, mut best, mut bi) = (0.0, f64::NEG_INFINITY, 0usize);
            for kk in indices(&sizes) {
                let pos: Vec<usize> = (0..nd).map(|i| ranges[i].0 + kk[i]).collect();
                let mut full = yi[..2].to_vec();
                full.extend(&pos);
                let val = x.at(&full);
                sum += val;
                if val > best {
                    best = val;
                    bi = ravel(&pos, &shape[2..]);
                }
            }
            avg.push(sum / numel(&sizes) as f64);
            mx.push(best);
            mi.push(bi as f64);
        }
        let o = ints(&outs.iter().map(|&a| a as i64).collect::<Vec<_>>());
        let extra = vec![64.0 * U * 4.0; avg.len()];
        let avg_s = vec![Sample::new(
            vec![tp(x.clone()), v(o.clone())],
            vec![Out::Close(
                HostTensor::new(&ys, DType::F32, avg),
                Tol::of(DType::F32).with_extra(extra),
            )],
        )];
        let max_s = vec![Sample::new(
            vec![tp(x.clone()), v(o.clone())],
            vec![
                Out::exact(HostTensor::new(&ys, DType::F32, mx)),
                Out::exact(HostTensor::new(&ys, DType::I64, mi)),
            ],
        )];
        match nd {
            1 => check_samples("aten::adaptive_avg_pool1d", avg_s),
            2 => {
                check_samples("aten::_adaptive_avg_pool2d", avg_s.clone());
                check_samples("aten::adaptive_avg_pool2d", avg_s);
            }
            _ => {
                check_samples("aten::_adaptive_avg_pool3d", avg_s.clone());
                check_samples("aten::adaptive_avg_pool3d", avg_s);
            }
        }
        check_samples(
            [
                "aten::adaptive_max_pool1d",
                "aten::adaptive_max_pool2d",
                "aten::adaptive_max_pool3d",
            ][nd - 1],
            max_s,
        );
    }
}

#[test]
fn unpool() {
    for nd in 2..=3usize {
        let outs: Vec<usize> = [4, 6, 4][..nd].to_vec();
        let ins: Vec<usize> = outs.iter().map(|o| o / 2).collect();
        let mut xs = vec![2, 3];
        xs.extend(&ins);
        let x = vals(&xs, DType::F32, 3);
        // Each input position points at a distinct output position of its plane.
        let per_out = numel(&outs);
        let idx = HostTensor::from_fn(&xs, DType::I64, |i| {
            let pos: Vec<usize> = (0..nd)
                .map(|d| i[2 + d] * 2 + (i[0] + i[1] + d) % 2)
                .collect();
            ravel(&pos, &outs) as f64
        });
        let mut ys = vec![2, 3];
        ys.extend(&outs);
        let mut want = vec![0.0; numel(&ys)];
        for (f, i) in indices(&xs).enumerate() {
            let plane = i[0] * 3 + i[1];
            want[plane * per_out + idx.data[f] as usize] = x.data[f];
        }
        let o = ints(&outs.iter().map(|&a| a as i64).collect::<Vec<_>>());
        let mut args = vec![tp(x), tp(idx), v(o)];
        if nd == 3 {
            args.push(v(ints(&[2, 2, 2])));
            args.push(v(ints(&[0, 0, 0])));
        }
        let s = vec![Sample::new(
            args,
            vec![Out::exact(HostTensor::new(&ys, DType::F32, want))],
        )];
        check_samples(
            if nd == 2 {
                "aten::max_unpool2d"
            } else {
                "aten::max_unpool3d"
            },
            s,
        );
    }
}

#[test]
fn pads() {
    for nd in 1..=3usize {
        for reflect in [false, true] {
            let shape: Vec<usize> = [2, 3, 5, 4, 4][..2 + nd].to_vec();
            let pad: Vec<i64> = [2i64, 1, -1, 3, 0, 2][..2 * nd].to_vec();
            let x = vals(&shape, DType::F32, 9);
            let mut ys = shape.clone();
            for i in 0..nd {
                let d = shape.len() - 1 - i;
                ys[d] = (shape[d] as i64 + pad[2 * i] + pad[2 * i + 1]) as usize;
            }
            let want = HostTensor::from_fn(&ys, DType::F32, |yi| {
                let mut src = yi.to_vec();
                for i in 0..nd {
                    let d = shape.len() - 1 - i;
                    let n = shape[d] as i64;
                    let mut j = yi[d] as i64 - pad[2 * i];
                    if reflect {
                        if j < 0 {
                            j = -j;
                        }
                        if j >= n {
                            j = 2 * (n - 1) - j;
                        }
                    } else {
                        j = j.clamp(0, n - 1);
                    }
                    src[d] = j as usize;
                }
                x.at(&src)
            });
            let name: &'static str = match (reflect, nd) {
                (false, 1) => "aten::replication_pad1d",
                (false, 2) => "aten::replication_pad2d",
                (false, _) => "aten::replication_pad3d",
                (true, 1) => "aten::reflection_pad1d",
                (true, 2) => "aten::reflection_pad2d",
                (true, _) => "aten::reflection_pad3d",
            };
            check_samples(
                name,
                vec![Sample::new(
                    vec![tp(x), v(ints(&pad))],
                    vec![Out::exact(want)],
                )],
            );
        }
    }
}

/// PyTorch's cubic convolution weights (`A = -0.75`) for taps at `t+1, t, 1-t, 2-t`.
fn cubic(t: f64) -> [f64; 4] {
    let a = -0.75;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// The weights of input positions for output `o` along one dim (PyTorch's rules).
fn interp_weights(
    mode: &str,
    input: usize,
    out: usize,
    o: usize,
    align: bool,
) -> Vec<(usize, f64)> {
    let scale = if align && (mode == "linear" || mode == "cubic") {
        if out > 1 {
            (input as f64 - 1.0) / (out as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        input as f64 / out as f64
    };
    let last = input - 1;
    match mode {
        "nearest" => vec![(((o as f64 * scale).floor() as usize).min(last), 1.0)],
        "exact" => vec![((((o as f64 + 0.5) * scale).floor() as usize).min(last), 1.0)],
        "linear" => {
            let src = if align {
                o as f64 * scale
            } else {
                ((o as f64 + 0.5) * scale - 0.5).max(0.0)
            };
            let i0 = src as usize;
            let i1 = if i0 < last { i0 + 1 } else { i0 };
            let l1 = src - i0 as f64;
            vec![(i0, 1.0 - l1), (i1, l1)]
        }
        _ => {
            let src = if align {
                o as f64 * scale
            } else {
                (o as f64 + 0.5) * scale - 0.5
            };
            let fl = src.floor();
            let c = cubic(src - fl);
            (0..4)
                .map(|k| {
                    (
                        ((fl as i64 + k as i64 - 1).clamp(0, last as i64)) as usize,
                        c[k],
                    )
                })
                .collect()
        }
    }
}

#[test]
fn upsamples() {
    let cases: &[(&str, &str, usize, bool)] = &[
        ("upsample_nearest1d", "nearest", 1, false),
        ("upsample_nearest2d", "nearest", 2, false),
        ("upsample_nearest3d", "nearest", 3, false),
        ("_upsample_nearest_exact1d", "exact", 1, false),
        ("_upsample_nearest_exact2d", "exact", 2, false),
        ("_upsample_nearest_exact3d", "exact", 3, false),
        ("upsample_linear1d", "linear", 1, true),
        ("upsample_bilinear2d", "linear", 2, true),
        ("upsample_trilinear3d", "linear", 3, true),
        ("upsample_bicubic2d", "cubic", 2, true),
    ];
    for &(base, mode, nd, has_align) in cases {
        let shape: Vec<usize> = [2, 2, 5, 3, 4][..2 + nd].to_vec();
        let outs: Vec<usize> = [8, 7, 3][..nd].to_vec();
        let x = vals(&shape, DType::F32, nd as u64 + 20);
        let mut plain = Vec::new();
        let mut vecs = Vec::new();
        for align in if has_align {
            vec![false, true]
        } else {
            vec![false]
        } {
            let mut ys = shape[..2].to_vec();
            ys.extend(&outs);
            let mut want = Vec::new();
            let mut extra = Vec::new();
            for yi in indices(&ys) {
                let per: Vec<Vec<(usize, f64)>> = (0..nd)
                    .map(|i| interp_weights(mode, shape[2 + i], outs[i], yi[2 + i], align))
                    .collect();
                let sizes: Vec<usize> = per.iter().map(|p| p.len()).collect();
                let (mut acc, mut mag) = (0.0, 0.0);
                for kk in indices(&sizes) {
                    let mut pos = yi[..2].to_vec();
                    let mut w = 1.0;
                    for i in 0..nd {
                        let (p, wi) = per[i][kk[i]];
                        pos.push(p);
                        w *= wi;
                    }
                    acc += w * x.at(&pos);
                    mag += (w * x.at(&pos)).abs();
                }
                want.push(acc);
                // Source coordinates computed in f32 and f32 sums.
                extra.push(mag * 64.0 * U + 1e-6);
            }
            let o = ints(&outs.iter().map(|&a| a as i64).collect::<Vec<_>>());
            let mut args = vec![tp(x.clone()), v(o.clone())];
            if has_align {
                args.push(v(Value::Bool(align)));
            }
            let out = Out::Close(
                HostTensor::new(&ys, DType::F32, want),
                Tol::of(DType::F32).with_extra(extra),
            );
            plain.push(Sample::new(args, vec![out.clone()]));
            let mut vargs = vec![tp(x.clone()), v(o)];
            if has_align {
                vargs.push(v(Value::Bool(align)));
            }
            vargs.push(v(Value::None));
            vecs.push(Sample::new(vargs, vec![out]));
        }
        let name: &'static str = Box::leak(format!("aten::{base}").into_boxed_str());
        let vname: &'static str = Box::leak(format!("aten::{base}.vec").into_boxed_str());
        check_samples(name, plain);
        check_samples(vname, vecs);
    }
}

/// Per-channel statistics over every dim but 1: mean and biased variance.
fn channel_stats(x: &HostTensor) -> (Vec<f64>, Vec<f64>) {
    let c = x.shape[1];
    let (mut s, mut n) = (vec![0.0; c], vec![0usize; c]);
    for (f, i) in indices(&x.shape).enumerate() {
        s[i[1]] += x.data[f];
        n[i[1]] += 1;
    }
    let mean: Vec<f64> = s.iter().zip(&n).map(|(a, b)| a / *b as f64).collect();
    let mut v = vec![0.0; c];
    for (f, i) in indices(&x.shape).enumerate() {
        v[i[1]] += (x.data[f] - mean[i[1]]).powi(2);
    }
    (mean, v.iter().zip(&n).map(|(a, b)| a / *b as f64).collect())
}

#[test]
fn batch_norms() {
    let dt = DType::F32;
    let shape = [3, 4, 5];
    let x = vals(&shape, dt, 31);
    let w = vals(&[4], dt, 32);
    let b = vals(&[4], dt, 33);
    let rm = vals(&[4], dt, 34);
    let rv = HostTensor::from_fn(&[4], dt, |i| 0.5 + i[0] as f64);
    let eps = 1e-5;
    let tol = Tol::of(dt).with_extra(vec![1e-5; numel(&shape)]);
    let norm = |mean: &[f64], var: &[f64]| {
        HostTensor::from_fn(&shape, dt, |i| {
            let c = i[1];
            (x.at(i) - mean[c]) / (var[c] + eps).sqrt() * w.data[c] + b.data[c]
        })
    };
    let (mean, var) = channel_stats(&x);
    let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let train = norm(&mean, &var);
    let eval = norm(&rm.data, &rv.data);
    let empty = HostTensor::new(&[0], dt, vec![]);
    let stat_tol = || Tol::of(dt).with_extra(vec![1e-5; 4]);
    let trained = vec![
        Out::Close(train.clone(), tol.clone()),
        Out::Close(HostTensor::new(&[4], dt, mean.clone()), stat_tol()),
        Out::Close(HostTensor::new(&[4], dt, invstd.clone()), stat_tol()),
    ];
    let evaluated = vec![
        Out::Close(eval.clone(), tol.clone()),
        Out::exact(empty.clone()),
        Out::exact(empty.clone()),
    ];
    let f = |a: f64| v(Value::Float(a));
    check_samples(
        "aten::native_batch_norm",
        vec![
            Sample::new(
                vec![
                    tp(x.clone()),
                    tp(w.clone()),
                    tp(b.clone()),
                    v(Value::None),
                    v(Value::None),
                    v(Value::Bool(true)),
                    f(0.1),
                    f(eps),
                ],
                trained.clone(),
            ),
            Sample::new(
                vec![
                    tp(x.clone()),
                    tp(w.clone()),
                    tp(b.clone()),
                    tp(rm.clone()),
                    tp(rv.clone()),
                    v(Value::Bool(false)),
                    f(0.1),
                    f(eps),
                ],
                evaluated.clone(),
            ),
        ],
    );
    check_samples(
        "aten::_native_batch_norm_legit",
        vec![Sample::new(
            vec![
                tp(x.clone()),
                tp(w.clone()),
                tp(b.clone()),
                tp(rm.clone()),
                tp(rv.clone()),
                v(Value::Bool(false)),
                f(0.1),
                f(eps),
            ],
            evaluated.clone(),
        )],
    );
    check_samples(
        "aten::_native_batch_norm_legit_no_training",
        vec![Sample::new(
            vec![
                tp(x.clone()),
                tp(w.clone()),
                tp(b.clone()),
                tp(rm.clone()),
                tp(rv.clone()),
                f(0.1),
                f(eps),
            ],
            evaluated,
        )],
    );
    check_samples(
        "aten::_native_batch_norm_legit.no_stats",
        vec![Sample::new(
            vec![
                tp(x.clone()),
                tp(w.clone()),
                tp(b.clone()),
                v(Value::Bool(true)),
                f(0.1),
                f(eps),
            ],
            trained,
        )],
    );
}

#[test]
fn group_norm() {
    let dt = DType::F32;
    let (n, c, hw, g) = (2usize, 6usize, 5usize, 3usize);
    let x = vals(&[n, c, hw], dt, 41);
    let w = vals(&[c], dt, 42);
    let b = vals(&[c], dt, 43);
    let eps = 1e-5;
    let cg = c / g;
    let (mut mean, mut rstd) = (vec![0.0; n * g], vec![0.0; n * g]);
    for ni in 0..n {
        for gi in 0..g {
            let xs: Vec<f64> = (0..cg)
                .flat_map(|ci| (0..hw).map(move |h| (gi * cg + ci, h)))
                .map(|(ch, h)| x.at(&[ni, ch, h]))
                .collect();
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            let var = xs.iter().map(|v| (v - m).powi(2)).sum::<f64>() / xs.len() as f64;
            mean[ni * g + gi] = m;
            rstd[ni * g + gi] = 1.0 / (var + eps).sqrt();
        }
    }
    let y = HostTensor::from_fn(&[n, c, hw], dt, |i| {
        let s = i[0] * g + i[1] / cg;
        (x.at(i) - mean[s]) * rstd[s] * w.data[i[1]] + b.data[i[1]]
    });
    let extra = |k: usize| Tol::of(dt).with_extra(vec![1e-5; k]);
    check_samples(
        "aten::native_group_norm",
        vec![Sample::new(
            vec![
                tp(x),
                tp(w),
                tp(b),
                v(Value::Int(n as i64)),
                v(Value::Int(c as i64)),
                v(Value::Int(hw as i64)),
                v(Value::Int(g as i64)),
                v(Value::Float(eps)),
            ],
            vec![
                Out::Close(y, extra(n * c * hw)),
                Out::Close(HostTensor::new(&[n, g], dt, mean), extra(n * g)),
                Out::Close(HostTensor::new(&[n, g], dt, rstd), extra(n * g)),
            ],
        )],
    );
}

#[test]
fn shuffles() {
    for dt in [DType::F32, DType::I64] {
        let x = vals(&[2, 8, 2, 3], dt, 51);
        // pixel_shuffle(r = 2): y[n, c, h·2 + i, w·2 + j] = x[n, c·4 + i·2 + j, h, w].
        let y = HostTensor::from_fn(&[2, 2, 4, 6], dt, |i| {
            x.at(&[
                i[0],
                i[1] * 4 + (i[2] % 2) * 2 + i[3] % 2,
                i[2] / 2,
                i[3] / 2,
            ])
        });
        check_samples(
            "aten::pixel_shuffle",
            vec![Sample::new(
                vec![tp(x.clone()), v(Value::Int(2))],
                vec![Out::exact(y.clone())],
            )],
        );
        check_samples(
            "aten::pixel_unshuffle",
            vec![Sample::new(
                vec![tp(y), v(Value::Int(2))],
                vec![Out::exact(x.clone())],
            )],
        );
        // channel_shuffle(g = 2): y[n, k·2 + gi] = x[n, gi·4 + k].
        let z = HostTensor::from_fn(&[2, 8, 2, 3], dt, |i| {
            x.at(&[i[0], (i[1] % 2) * 4 + i[1] / 2, i[2], i[3]])
        });
        check_samples(
            "aten::channel_shuffle",
            vec![Sample::new(
                vec![tp(x), v(Value::Int(2))],
                vec![Out::exact(z)],
            )],
        );
    }
}

#[test]
fn safe_softmax() {
    let dt = DType::F32;
    let mut x = vals(&[3, 4], dt, 61);
    for j in 0..4 {
        x.data[4 + j] = f64::NEG_INFINITY;
    }
    x.data[9] = f64::NEG_INFINITY;
    let mut want = Vec::new();
    for r in 0..3 {
        let row = &x.data[r * 4..r * 4 + 4];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            want.extend([0.0; 4]);
            continue;
        }
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        want.extend(row.iter().map(|v| (v - m).exp() / s));
    }
    let y = HostTensor::new(&[3, 4], dt, want);
    check_samples(
        "aten::_safe_softmax",
        vec![Sample::new(
            vec![tp(x), v(Value::Int(1)), v(Value::None)],
            vec![Out::Close(y, Tol::of(dt).with_extra(vec![8.0 * U; 12]))],
        )],
    );
}

#[test]
fn dropout_backward() {
    for dt in [DType::F32, DType::BF16] {
        let g = vals(&[4, 5], dt, 71);
        let m = HostTensor::from_fn(&[4, 5], DType::Bool, |i| {
            ((i[0] + i[1]) % 3 != 0) as u8 as f64
        });
        let y = HostTensor::from_fn(&[4, 5], dt, |i| g.at(i) * m.at(i) * 1.25);
        check_samples(
            "aten::native_dropout_backward",
            vec![Sample::new(
                vec![tp(g), tp(m), v(Value::Float(1.25))],
                vec![Out::close(y)],
            )],
        );
    }
}

/// `grid_sampler_2d` reference for bilinear and nearest sampling with zeros or border padding.
fn grid_ref(x: &HostTensor, grid: &HostTensor, mode: i64, padding: i64, align: bool) -> HostTensor {
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (ho, wo) = (grid.shape[1], grid.shape[2]);
    let unnorm = |v: f64, size: usize| {
        if align {
            (v + 1.0) / 2.0 * (size as f64 - 1.0)
        } else {
            ((v + 1.0) * size as f64 - 1.0) / 2.0
        }
    };
    HostTensor::from_fn(&[n, c, ho, wo], x.dtype, |i| {
        let mut ix = unnorm(grid.at(&[i[0], i[2], i[3], 0]), w);
        let mut iy = unnorm(grid.at(&[i[0], i[2], i[3], 1]), h);
        if padding == 1 {
            ix = ix.clamp(0.0, w as f64 - 1.0);
            iy = iy.clamp(0.0, h as f64 - 1.0);
        }
        let at = |yy: f64, xx: f64| {
            if yy >= 0.0 && yy <= h as f64 - 1.0 && xx >= 0.0 && xx <= w as f64 - 1.0 {
                x.at(&[i[0], i[1], yy as usize, xx as usize])
            } else {
                0.0
            }
        };
        if mode == 1 {
            return at(iy.round_ties_even(), ix.round_ties_even());
        }
        let (x0, y0) = (ix.floor(), iy.floor());
        let (fx, fy) = (ix - x0, iy - y0);
        at(y0, x0) * (1.0 - fx) * (1.0 - fy)
            + at(y0, x0 + 1.0) * fx * (1.0 - fy)
            + at(y0 + 1.0, x0) * (1.0 - fx) * fy
            + at(y0 + 1.0, x0 + 1.0) * fx * fy
    })
}

#[test]
fn grid_sampler() {
    let x = vals(&[2, 3, 4, 5], DType::F32, 81);
    // Coordinates in [-1.2, 1.2]: some samples fall outside the input.
    let raw = vals(&[2, 3, 4, 2], DType::F32, 82);
    let grid = HostTensor::new(
        &raw.shape,
        DType::F32,
        raw.data.iter().map(|v| v * 0.6).collect(),
    );
    let mut samples = Vec::new();
    for mode in [0i64, 1] {
        for padding in [0i64, 1] {
            for align in [false, true] {
                let want = grid_ref(&x, &grid, mode, padding, align);
                let extra = vec![32.0 * U * 4.0; want.numel()];
                samples.push(Sample::new(
                    vec![
                        tp(x.clone()),
                        tp(grid.clone()),
                        v(Value::Int(mode)),
                        v(Value::Int(padding)),
                        v(Value::Bool(align)),
                    ],
                    vec![Out::Close(want, Tol::of(DType::F32).with_extra(extra))],
                ));
            }
        }
    }
    check_samples("aten::grid_sampler_2d", samples);
}

#[test]
fn im2col_col2im() {
    let (n, c, h, w) = (2usize, 3usize, 5usize, 4usize);
    let (k, d, p, st) = (
        [2usize, 3usize],
        [1usize, 2usize],
        [1usize, 1usize],
        [2usize, 1usize],
    );
    let x = vals(&[n, c, h, w], DType::F32, 91);
    let oh = out_size(h, k[0], st[0], p[0], d[0]);
    let ow = out_size(w, k[1], st[1], p[1], d[1]);
    let kk = k[0] * k[1];
    // cols[n, c·K + (i·kw + j), oy·ow + ox] = x[n, c, oy·s - p + i·d, ox·s - p + j·d] (0 outside).
    let pos = |o: usize, kx: usize, dim: usize| (o * st[dim] + kx * d[dim]) as i64 - p[dim] as i64;
    let cols = HostTensor::from_fn(&[n, c * kk, oh * ow], DType::F32, |i| {
        let (ch, kidx) = (i[1] / kk, i[1] % kk);
        let (y, xx) = (
            pos(i[2] / ow, kidx / k[1], 0),
            pos(i[2] % ow, kidx % k[1], 1),
        );
        if y < 0 || y >= h as i64 || xx < 0 || xx >= w as i64 {
            0.0
        } else {
            x.at(&[i[0], ch, y as usize, xx as usize])
        }
    });
    let iv = |a: [usize; 2]| ints(&[a[0] as i64, a[1] as i64]);
    check_samples(
        "aten::im2col",
        vec![Sample::new(
            vec![tp(x), v(iv(k)), v(iv(d)), v(iv(p)), v(iv(st))],
            vec![Out::exact(cols.clone())],
        )],
    );
    // col2im sums every column element back to its position.
    let mut want = vec![0.0; n * c * h * w];
    for i in indices(&cols.shape) {
        let (ch, kidx) = (i[1] / kk, i[1] % kk);
        let (y, xx) = (
            pos(i[2] / ow, kidx / k[1], 0),
            pos(i[2] % ow, kidx % k[1], 1),
        );
        if y >= 0 && y < h as i64 && xx >= 0 && xx < w as i64 {
            want[ravel(&[i[0], ch, y as usize, xx as usize], &[n, c, h, w])] += cols.at(&i);
        }
    }
    let extra = vec![8.0 * U * 4.0; want.len()];
    check_samples(
        "aten::col2im",
        vec![Sample::new(
            vec![
                tp(cols),
                v(ints(&[h as i64, w as i64])),
                v(iv(k)),
                v(iv(d)),
                v(iv(p)),
                v(iv(st)),
            ],
            vec![Out::Close(
                HostTensor::new(&[n, c, h, w], DType::F32, want),
                Tol::of(DType::F32).with_extra(extra),
            )],
        )],
    );
}

#[test]
fn pool_backwards() {
    for nd in 2..=3usize {
        let shape: Vec<usize> = [2, 2, 5, 6, 4][..2 + nd].to_vec();
        let x = vals(&shape, DType::F32, 100 + nd as u64);
        let (k, s, p) = (vec![3usize; nd], vec![2usize; nd], vec![1usize; nd]);
        let (y, idx) = max_pool_ref(&x, nd, &k, &s, &p, &vec![1; nd]);
        let g = vals(&y.shape, DType::F32, 110 + nd as u64);
        // Max: each gradient lands on its maximum (overlapping windows add).
        let per: usize = numel(&shape[2..]);
        let mut gi = vec![0.0; x.numel()];
        for (f, i) in indices(&y.shape).enumerate() {
            let plane = i[0] * shape[1] + i[1];
            gi[plane * per + idx.data[f] as usize] += g.data[f];
        }
        let i64s = |a: &[usize]| ints(&a.iter().map(|&q| q as i64).collect::<Vec<_>>());
        let name: &'static str = if nd == 2 {
            "aten::max_pool2d_with_indices_backward"
        } else {
            "aten::max_pool3d_with_indices_backward"
        };
        check_samples(
            name,
            vec![Sample::new(
                vec![
                    tp(g.clone()),
                    tp(x.clone()),
                    v(i64s(&k)),
                    v(i64s(&s)),
                    v(i64s(&p)),
                    v(i64s(&vec![1; nd])),
                    v(Value::Bool(false)),
                    tp(idx),
                ],
                vec![Out::Close(
                    HostTensor::new(&shape, DType::F32, gi),
                    Tol::of(DType::F32).with_extra(vec![4.0 * U * 4.0; x.numel()]),
                )],
            )],
        );
        // Average (count_include_pad): each gradient / |window ∩ padded input| to every tap.
        let mut ga = vec![0.0; x.numel()];
        for (f, i) in indices(&y.shape).enumerate() {
            let mut cnt = 1usize;
            for dd in 0..nd {
                let st = (i[2 + dd] * s[dd]) as i64 - p[dd] as i64;
                let en = (st + k[dd] as i64).min((shape[2 + dd] + p[dd]) as i64);
                cnt *= (en - st) as usize;
            }
            for kk in indices(&k) {
                let mut pos = vec![i[0], i[1]];
                let mut ok = true;
                for dd in 0..nd {
                    let q = (i[2 + dd] * s[dd] + kk[dd]) as i64 - p[dd] as i64;
                    ok &= q >= 0 && q < shape[2 + dd] as i64;
                    pos.push(q.max(0) as usize);
                }
                if ok {
                    ga[ravel(&pos, &shape)] += g.data[f] / cnt as f64;
                }
            }
        }
        let name: &'static str = if nd == 2 {
            "aten::avg_pool2d_backward"
        } else {
            "aten::avg_pool3d_backward"
        };
        check_samples(
            name,
            vec![Sample::new(
                vec![
                    tp(g),
                    tp(x.clone()),
                    v(i64s(&k)),
                    v(i64s(&s)),
                    v(i64s(&p)),
                    v(Value::Bool(false)),
                    v(Value::Bool(true)),
                    v(Value::None),
                ],
                vec![Out::Close(
                    HostTensor::new(&shape, DType::F32, ga),
                    Tol::of(DType::F32).with_extra(vec![16.0 * U * 4.0; x.numel()]),
                )],
            )],
        );
        // Adaptive average: each gradient / window size to every element of its window.
        let outs: Vec<usize> = [3, 4, 3][..nd].to_vec();
        let mut ys = shape[..2].to_vec();
        ys.extend(&outs);
        let ga2 = vals(&ys, DType::F32, 120 + nd as u64);
        let mut gi2 = vec![0.0; x.numel()];
        for (f, i) in indices(&ys).enumerate() {
            let ranges: Vec<(usize, usize)> = (0..nd)
                .map(|dd| {
                    (
                        i[2 + dd] * shape[2 + dd] / outs[dd],
                        ((i[2 + dd] + 1) * shape[2 + dd]).div_ceil(outs[dd]),
                    )
                })
                .collect();
            let sizes: Vec<usize> = ranges.iter().map(|(a, b)| b - a).collect();
            for kk in indices(&sizes) {
                let mut pos = vec![i[0], i[1]];
                pos.extend((0..nd).map(|dd| ranges[dd].0 + kk[dd]));
                gi2[ravel(&pos, &shape)] += ga2.data[f] / numel(&sizes) as f64;
            }
        }
        let name: &'static str = if nd == 2 {
            "aten::_adaptive_avg_pool2d_backward"
        } else {
            "aten::_adaptive_avg_pool3d_backward"
        };
        check_samples(
            name,
            vec![Sample::new(
                vec![tp(ga2), tp(x)],
                vec![Out::Close(
                    HostTensor::new(&shape, DType::F32, gi2),
                    Tol::of(DType::F32).with_extra(vec![16.0 * U * 4.0; numel(&shape)]),
                )],
            )],
        );
    }
}

#[test]
fn upsample_backwards() {
    let cases: &[(&str, &str, usize, bool)] = &[
        ("upsample_nearest1d", "nearest", 1, false),
        ("upsample_nearest2d", "nearest", 2, false),
        ("upsample_nearest3d", "nearest", 3, false),
        ("_upsample_nearest_exact1d", "exact", 1, false),
        ("_upsample_nearest_exact2d", "exact", 2, false),
        ("_upsample_nearest_exact3d", "exact", 3, false),
        ("upsample_linear1d", "linear", 1, true),
        ("upsample_bilinear2d", "linear", 2, true),
        ("upsample_trilinear3d", "linear", 3, true),
        ("upsample_bicubic2d", "cubic", 2, true),
    ];
    for &(base, mode, nd, has_align) in cases {
        let shape: Vec<usize> = [2, 2, 5, 3, 4][..2 + nd].to_vec();
        let outs: Vec<usize> = [8, 2, 3][..nd].to_vec();
        let mut ys = shape[..2].to_vec();
        ys.extend(&outs);
        let g = vals(&ys, DType::F32, nd as u64 + 40);
        let mut samples = Vec::new();
        for align in if has_align {
            vec![false, true]
        } else {
            vec![false]
        } {
            // The adjoint: every output's gradient goes to its taps with their weights.
            let mut gx = vec![0.0; numel(&shape)];
            let mut mag = vec![0.0; numel(&shape)];
            for (f, yi) in indices(&ys).enumerate() {
                let per: Vec<Vec<(usize, f64)>> = (0..nd)
                    .map(|i| interp_weights(mode, shape[2 + i], outs[i], yi[2 + i], align))
                    .collect();
                let sizes: Vec<usize> = per.iter().map(|p| p.len()).collect();
                for kk in indices(&sizes) {
                    let mut pos = yi[..2].to_vec();
                    let mut w = 1.0;
                    for i in 0..nd {
                        let (p, wi) = per[i][kk[i]];
                        pos.push(p);
                        w *= wi;
                    }
                    gx[ravel(&pos, &shape)] += w * g.data[f];
                    mag[ravel(&pos, &shape)] += (w * g.data[f]).abs();
                }
            }
            let extra: Vec<f64> = mag.iter().map(|m| m * 64.0 * U + 1e-6).collect();
            let i64s = |a: &[usize]| ints(&a.iter().map(|&q| q as i64).collect::<Vec<_>>());
            let mut args = vec![tp(g.clone()), v(i64s(&outs)), v(i64s(&shape))];
            if has_align {
                args.push(v(Value::Bool(align)));
            }
            samples.push(Sample::new(
                args,
                vec![Out::Close(
                    HostTensor::new(&shape, DType::F32, gx),
                    Tol::of(DType::F32).with_extra(extra),
                )],
            ));
        }
        let name: &'static str = Box::leak(format!("aten::{base}_backward").into_boxed_str());
        check_samples(name, samples);
    }
}
