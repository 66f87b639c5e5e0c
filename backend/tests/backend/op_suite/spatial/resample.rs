//! Padding (replication, reflection), resampling (nearest, linear, cubic; forward and
//! backward), `grid_sampler_2d` and the pixel and channel shuffles.

use super::*;

#[test]
pub(super) fn pads() {
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

/// The upsampling overloads (without `aten::`): interpolation mode, spatial dims, and whether
/// the overload takes `align_corners`.
const UPSAMPLES: &[(&str, &str, usize, bool)] = &[
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

/// The `align_corners` values an overload is tested with (only `false` where it takes none).
fn aligns(has_align: bool) -> Vec<bool> {
    if has_align {
        vec![false, true]
    } else {
        vec![false]
    }
}

/// The input positions that output position `yi` (of an upsampling of `shape` to the spatial
/// sizes `outs`) reads, each with its weight: the product of the per-dim taps' weights.
fn taps(
    mode: &str,
    shape: &[usize],
    outs: &[usize],
    yi: &[usize],
    align: bool,
) -> Vec<(Vec<usize>, f64)> {
    let nd = outs.len();
    let per: Vec<Vec<(usize, f64)>> = (0..nd)
        .map(|i| interp_weights(mode, shape[2 + i], outs[i], yi[2 + i], align))
        .collect();
    let sizes: Vec<usize> = per.iter().map(|p| p.len()).collect();
    indices(&sizes)
        .map(|kk| {
            let mut pos = yi[..2].to_vec();
            let mut w = 1.0;
            for i in 0..nd {
                let (p, wi) = per[i][kk[i]];
                pos.push(p);
                w *= wi;
            }
            (pos, w)
        })
        .collect()
}

#[test]
pub(super) fn upsamples() {
    for &(base, mode, nd, has_align) in UPSAMPLES {
        let shape: Vec<usize> = [2, 2, 5, 3, 4][..2 + nd].to_vec();
        let outs: Vec<usize> = [8, 7, 3][..nd].to_vec();
        let x = vals(&shape, DType::F32, nd as u64 + 20);
        let mut plain = Vec::new();
        let mut vecs = Vec::new();
        for align in aligns(has_align) {
            let mut ys = shape[..2].to_vec();
            ys.extend(&outs);
            let mut want = Vec::new();
            let mut extra = Vec::new();
            for yi in indices(&ys) {
                let (mut acc, mut mag) = (0.0, 0.0);
                for (pos, w) in taps(mode, &shape, &outs, &yi, align) {
                    acc += w * x.at(&pos);
                    mag += (w * x.at(&pos)).abs();
                }
                want.push(acc);
                // Source coordinates computed in f32 and f32 sums.
                extra.push(mag * 64.0 * U + 1e-6);
            }
            let o = ints(&outs.iter().map(|&a| a as i64).collect::<Vec<_>>());
            let mut args = vec![tp(x.clone()), v(o)];
            if has_align {
                args.push(v(Value::Bool(align)));
            }
            let out = Out::Close(
                HostTensor::new(&ys, DType::F32, want),
                Tol::of(DType::F32).with_extra(extra),
            );
            // The `.vec` overload: the same, with `scale_factors` None.
            let mut vargs = args.clone();
            vargs.push(v(Value::None));
            plain.push(Sample::new(args, vec![out.clone()]));
            vecs.push(Sample::new(vargs, vec![out]));
        }
        let name: &'static str = Box::leak(format!("aten::{base}").into_boxed_str());
        let vname: &'static str = Box::leak(format!("aten::{base}.vec").into_boxed_str());
        check_samples(name, plain);
        check_samples(vname, vecs);
    }
}

#[test]
pub(super) fn upsample_backwards() {
    for &(base, mode, nd, has_align) in UPSAMPLES {
        let shape: Vec<usize> = [2, 2, 5, 3, 4][..2 + nd].to_vec();
        let outs: Vec<usize> = [8, 2, 3][..nd].to_vec();
        let mut ys = shape[..2].to_vec();
        ys.extend(&outs);
        let g = vals(&ys, DType::F32, nd as u64 + 40);
        let mut samples = Vec::new();
        for align in aligns(has_align) {
            // The adjoint: every output's gradient goes to its taps with their weights.
            let mut gx = vec![0.0; numel(&shape)];
            let mut mag = vec![0.0; numel(&shape)];
            for (f, yi) in indices(&ys).enumerate() {
                for (pos, w) in taps(mode, &shape, &outs, &yi, align) {
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
pub(super) fn grid_sampler() {
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
pub(super) fn shuffles() {
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
