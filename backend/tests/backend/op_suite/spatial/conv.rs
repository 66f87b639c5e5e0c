//! Convolution (plain, grouped, strided, dilated, padded, transposed; forward and backward),
//! `im2col` and `col2im`, against direct loops over the definitions.

use super::*;

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
pub(super) fn convolution() {
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
pub(super) fn convolution_backward() {
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

#[test]
pub(super) fn im2col_col2im() {
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
