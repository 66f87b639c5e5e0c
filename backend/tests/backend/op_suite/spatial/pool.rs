//! Pooling against direct loops: max with indices, average, adaptive, `max_unpool` and the
//! pooling backwards.

use super::*;

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
pub(super) fn max_pools() {
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
pub(super) fn avg_pools() {
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
pub(super) fn adaptive_pools() {
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
pub(super) fn unpool() {
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
pub(super) fn pool_backwards() {
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
