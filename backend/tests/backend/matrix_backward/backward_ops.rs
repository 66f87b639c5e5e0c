//! Backward operators (activations, threshold, softmax, layer norm, `nll_loss`, embedding)
//! against their formulas, and a compiled training-step slice against eager.

use super::*;

// ---------------------------------------------------------------------------------------
// Backward operators.

fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// Runs `f` on f32 and bf16 inputs in every mode and compares with `want(g, x)` computed on the
/// values the tensors hold.
fn check_binary_backward(
    name: &str,
    x_of: impl Fn(f64) -> f64,
    f: impl Fn(&Tensor, &Tensor) -> tpuemu_backend::Result<Tensor>,
    want: impl Fn(f64, f64) -> f64,
) {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let shape = [13, 150];
            let n = 13 * 150;
            let xs: Vec<f64> = rand(n, 70).iter().map(|v| x_of(v * 4.0)).collect();
            let (g, gv) = tensor(&rt, &rand(n, 71), &shape, dtype);
            let (x, xv) = tensor(&rt, &xs, &shape, dtype);
            // Transposed operands too.
            for (gt, xt, transposed) in [
                (g.clone(), x.clone(), false),
                (g.t().unwrap(), x.t().unwrap(), true),
            ] {
                let r = f(&gt, &xt).unwrap();
                assert_eq!(r.dtype(), dtype);
                let mut w: Vec<f64> = gv.iter().zip(&xv).map(|(g, x)| want(*g, *x)).collect();
                if transposed {
                    w = transpose(&w, 13, 150);
                }
                let (rtol, atol) = if dtype == DType::BF16 {
                    (1.6e-2, 1e-5)
                } else {
                    (1e-5, 1e-6)
                };
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &w,
                    rtol,
                    atol,
                    &format!("{name} {mode:?} {dtype}"),
                );
            }
        }
    }
}

#[test]
fn activation_backwards_match_their_formulas() {
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    check_binary_backward(
        "threshold",
        |x| if x.abs() < 0.3 { 0.0 } else { x },
        |g, x| backward::threshold_backward(g, x, Scalar::Int(0)),
        |g, x| if x <= 0.0 { 0.0 } else { g },
    );
    check_binary_backward(
        "gelu",
        |x| x,
        |g, x| backward::gelu_backward(g, x, "none"),
        |g, x| {
            let cdf = 0.5 * (1.0 + erf(x / 2f64.sqrt()));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            g * (cdf + x * pdf)
        },
    );
    check_binary_backward(
        "gelu tanh",
        |x| x,
        |g, x| backward::gelu_backward(g, x, "tanh"),
        |g, x| {
            let b = (2.0 / std::f64::consts::PI).sqrt();
            let inner = b * (x + 0.044715 * x * x * x);
            let t = inner.tanh();
            g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * b * (1.0 + 3.0 * 0.044715 * x * x))
        },
    );
    check_binary_backward(
        "silu",
        |x| x,
        backward::silu_backward,
        move |g, x| g * sig(x) * (1.0 + x * (1.0 - sig(x))),
    );
    check_binary_backward("sigmoid", sig, backward::sigmoid_backward, |g, y| {
        g * (1.0 - y) * y
    });
    check_binary_backward(
        "tanh",
        |x| x.tanh(),
        backward::tanh_backward,
        |g, y| g * (1.0 - y * y),
    );
}

#[test]
fn threshold_backward_details() {
    let rt = rt(Mode::Strict);
    // NaN input passes the gradient; promotion of bf16 grad with f32 input gives f32.
    let g = Tensor::from_slice(&rt, &[1.0f32, 2.0, 3.0, 4.0], &[4])
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let x = Tensor::from_slice(&rt, &[f32::NAN, -1.0, 0.5, 0.25], &[4]).unwrap();
    let r = backward::threshold_backward(&g, &x, Scalar::Float(0.5)).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(r.to_f64_vec().unwrap(), vec![1.0, 0.0, 0.0, 0.0]);
    // Integers work as in PyTorch (relu on int tensors).
    let gi = Tensor::from_slice(&rt, &[5i64, 6, 7], &[3]).unwrap();
    let xi = Tensor::from_slice(&rt, &[-1i64, 0, 2], &[3]).unwrap();
    let r = backward::threshold_backward(&gi, &xi, Scalar::Int(0)).unwrap();
    assert_eq!(r.dtype(), DType::I64);
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![0, 0, 7]);
    let e = backward::gelu_backward(&g, &x, "fast").unwrap_err();
    assert!(e.to_string().contains("approximate"), "{e}");
}

/// Softmax along `dim` of a row-major `shape`, in f64 (and its log).
fn softmax_ref(x: &[f64], shape: &[usize], dim: usize) -> Vec<f64> {
    let inner: usize = shape[dim + 1..].iter().product();
    let len = shape[dim];
    let outer: usize = shape[..dim].iter().product();
    let mut y = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let idx = |j: usize| (o * len + j) * inner + i;
            let m = (0..len)
                .map(|j| x[idx(j)])
                .fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..len).map(|j| (x[idx(j)] - m).exp()).sum();
            for j in 0..len {
                y[idx(j)] = (x[idx(j)] - m).exp() / s;
            }
        }
    }
    y
}

/// `f(g, y)` for each position, with the sums along `dim` of `g * y` and of `g`.
fn along(
    shape: &[usize],
    dim: usize,
    g: &[f64],
    y: &[f64],
    f: impl Fn(f64, f64, f64, f64) -> f64,
) -> Vec<f64> {
    let inner: usize = shape[dim + 1..].iter().product();
    let len = shape[dim];
    let outer: usize = shape[..dim].iter().product();
    let mut out = vec![0.0; g.len()];
    for o in 0..outer {
        for i in 0..inner {
            let idx = |j: usize| (o * len + j) * inner + i;
            let sgy: f64 = (0..len).map(|j| g[idx(j)] * y[idx(j)]).sum();
            let sg: f64 = (0..len).map(|j| g[idx(j)]).sum();
            for j in 0..len {
                out[idx(j)] = f(g[idx(j)], y[idx(j)], sgy, sg);
            }
        }
    }
    out
}

#[test]
fn softmax_backwards_match_their_formulas() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            for (shape, dim) in [
                (vec![5usize, 10, 5], 2usize),
                (vec![6, 300], 0),
                (vec![5], 0),
            ] {
                let n: usize = shape.iter().product();
                let y = round(&softmax_ref(&rand(n, 80), &shape, dim), dtype);
                let (yt, yv) = tensor(&rt, &y, &shape, dtype);
                let (gt, gv) = tensor(&rt, &rand(n, 81), &shape, dtype);
                let (rtol, atol) = if dtype == DType::BF16 {
                    (1.6e-2, 1e-4)
                } else {
                    (1e-5, 1e-6)
                };
                let r = backward::softmax_backward_data(&gt, &yt, dim as i64, dtype).unwrap();
                assert_eq!((r.shape(), r.dtype()), (&shape[..], dtype));
                let want = along(&shape, dim, &gv, &yv, |g, y, sgy, _| y * (g - sgy));
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    rtol,
                    atol,
                    &format!("softmax {mode:?} {dtype} {shape:?}"),
                );
                // log_softmax: output holds log-probabilities.
                let ly = round(&y.iter().map(|p| p.ln()).collect::<Vec<_>>(), dtype);
                let (lyt, lyv) = tensor(&rt, &ly, &shape, dtype);
                let r = backward::log_softmax_backward_data(
                    &gt,
                    &lyt,
                    dim as i64 - shape.len() as i64,
                    dtype,
                )
                .unwrap();
                let want = along(&shape, dim, &gv, &lyv, |g, y, _, sg| g - y.exp() * sg);
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    rtol,
                    atol * 10.0,
                    "log_softmax",
                );
            }
        }
    }
}

#[test]
fn layer_norm_backward_matches_the_formula() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let (m1, m2, nn) = (3, 4, 24);
            let shape = [m1, m2, nn];
            let rows = m1 * m2;
            let xs: Vec<f64> = rand(rows * nn, 90).iter().map(|v| v * 3.0 + 0.5).collect();
            let (x, xv) = tensor(&rt, &xs, &shape, dtype);
            let (dy, dyv) = tensor(&rt, &rand(rows * nn, 91), &shape, dtype);
            let (w, wv) = tensor(&rt, &rand(nn, 92), &[nn], dtype);
            let (b, _) = tensor(&rt, &rand(nn, 93), &[nn], dtype);
            // mean and rstd as the forward computes them, [m1, m2, 1] in f32.
            let mut mean = vec![0.0; rows];
            let mut rstd = vec![0.0; rows];
            for r in 0..rows {
                let row = &xv[r * nn..(r + 1) * nn];
                let mu = row.iter().sum::<f64>() / nn as f64;
                let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / nn as f64;
                mean[r] = mu as f32 as f64;
                rstd[r] = (1.0 / (var + 1e-5).sqrt()) as f32 as f64;
            }
            let (mt, _) = tensor(&rt, &mean, &[m1, m2, 1], DType::F32);
            let (rs, _) = tensor(&rt, &rstd, &[m1, m2, 1], DType::F32);
            let (dx, dw, db) = backward::native_layer_norm_backward(
                &dy,
                &x,
                &[nn as i64],
                &mt,
                &rs,
                Some(&w),
                Some(&b),
                [true, true, true],
            )
            .unwrap();
            let (dx, dw, db) = (dx.unwrap(), dw.unwrap(), db.unwrap());
            assert_eq!(
                (dx.shape(), dw.shape(), db.shape()),
                (&shape[..], &[nn][..], &[nn][..])
            );
            assert_eq!((dx.dtype(), dw.dtype()), (dtype, dtype));
            let mut want_dx = vec![0.0; rows * nn];
            let (mut want_dw, mut want_db) = (vec![0.0; nn], vec![0.0; nn]);
            for r in 0..rows {
                let (mu, a) = (mean[r], rstd[r]);
                let xh: Vec<f64> = (0..nn).map(|j| (xv[r * nn + j] - mu) * a).collect();
                let g: Vec<f64> = (0..nn).map(|j| dyv[r * nn + j] * wv[j]).collect();
                let mg = g.iter().sum::<f64>() / nn as f64;
                let mgx = g.iter().zip(&xh).map(|(g, x)| g * x).sum::<f64>() / nn as f64;
                for j in 0..nn {
                    want_dx[r * nn + j] = a * (g[j] - mg - xh[j] * mgx);
                    want_dw[j] += dyv[r * nn + j] * xh[j];
                    want_db[j] += dyv[r * nn + j];
                }
            }
            let (rtol, atol) = if dtype == DType::BF16 {
                (1.6e-2, 2e-2)
            } else {
                (1e-4, 1e-5)
            };
            let what = format!("{mode:?} {dtype}");
            assert_close(
                &dx.to_f64_vec().unwrap(),
                &want_dx,
                rtol,
                atol,
                &format!("dx {what}"),
            );
            assert_close(
                &dw.to_f64_vec().unwrap(),
                &want_dw,
                rtol,
                atol,
                &format!("dw {what}"),
            );
            assert_close(
                &db.to_f64_vec().unwrap(),
                &want_db,
                rtol,
                atol,
                &format!("db {what}"),
            );
            // Only some outputs, no weight; through the registry with PyTorch's arguments.
            let out = ops::call(
                &rt,
                "aten::native_layer_norm_backward",
                vec![
                    Value::Tensor(dy.clone()),
                    Value::Tensor(x.clone()),
                    Value::Ints(vec![nn as i64]),
                    Value::Tensor(mt.clone()),
                    Value::Tensor(rs.clone()),
                    Value::None,
                    Value::None,
                    Value::Bools(vec![true, false, false]),
                ],
            )
            .unwrap();
            assert!(matches!(out[1], Value::None) && matches!(out[2], Value::None));
            let Value::Tensor(dx2) = &out[0] else {
                panic!()
            };
            let mut want = vec![0.0; rows * nn];
            for r in 0..rows {
                let a = rstd[r];
                let xh: Vec<f64> = (0..nn).map(|j| (xv[r * nn + j] - mean[r]) * a).collect();
                let g = &dyv[r * nn..(r + 1) * nn];
                let mg = g.iter().sum::<f64>() / nn as f64;
                let mgx = g.iter().zip(&xh).map(|(g, x)| g * x).sum::<f64>() / nn as f64;
                for j in 0..nn {
                    want[r * nn + j] = a * (g[j] - mg - xh[j] * mgx);
                }
            }
            assert_close(
                &dx2.to_f64_vec().unwrap(),
                &want,
                rtol,
                atol,
                "dx without weight",
            );
        }
    }
}

#[test]
fn nll_loss_backward_matches_the_formula() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let (n, c) = (6, 5);
            let (x, _) = tensor(&rt, &rand(n * c, 100), &[n, c], dtype);
            let targets = [1i64, 0, 4, -100, 2, 4];
            let t = Tensor::from_slice(&rt, &targets, &[n]).unwrap();
            let (w, wv) = tensor(&rt, &[0.5, 2.0, 1.0, 0.25, 3.0], &[c], dtype);
            let tw_value: f64 = targets
                .iter()
                .filter(|t| **t >= 0)
                .map(|t| wv[*t as usize])
                .sum();
            let (tw, twv) = tensor(&rt, &[tw_value], &[], dtype);
            let (g, gv) = tensor(&rt, &[0.7], &[], dtype);
            for (reduction, weighted) in [(1, true), (1, false), (2, true), (0, true), (0, false)] {
                let (go, gov) = if reduction == 0 {
                    tensor(&rt, &rand(n, 101), &[n], dtype)
                } else {
                    (g.clone(), vec![gv[0]; n])
                };
                let r = backward::nll_loss_backward(
                    &go,
                    &x,
                    &t,
                    if weighted { Some(&w) } else { None },
                    reduction,
                    -100,
                    &tw,
                )
                .unwrap();
                assert_eq!((r.shape(), r.dtype()), (&[n, c][..], dtype));
                let mut want = vec![0.0; n * c];
                for (i, &ti) in targets.iter().enumerate() {
                    if ti == -100 {
                        continue;
                    }
                    let wt = if weighted { wv[ti as usize] } else { 1.0 };
                    let gi = if reduction == 1 {
                        round(&[gov[i] / twv[0]], dtype)[0]
                    } else {
                        gov[i]
                    };
                    want[i * c + ti as usize] = -wt * gi;
                }
                let want = round(&want, dtype);
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    1e-6,
                    1e-7,
                    &format!("nll {mode:?} {dtype} {reduction} {weighted}"),
                );
            }
            // A single sample (no batch dim).
            let x1 = ops::layout_ops::select(&x, 0, 0).unwrap();
            let t1 = Tensor::from_slice(&rt, &[3i64], &[]).unwrap();
            let r = backward::nll_loss_backward(&g, &x1, &t1, None, 2, -100, &tw).unwrap();
            let mut want = vec![0.0; c];
            want[3] = -gv[0];
            assert_eq!(r.to_f64_vec().unwrap(), want);
        }
    }
}

#[test]
fn embedding_dense_backward_accumulates_in_index_order() {
    for mode in MODES {
        let rt = rt(mode);
        for dtype in [DType::F32, DType::BF16] {
            let (num, d) = (10usize, 8);
            let idx = [3i64, 1, 3, 7, 0, 3];
            let it = Tensor::from_slice(&rt, &idx, &[2, 3]).unwrap();
            let (g, gv) = tensor(&rt, &rand(6 * d, 110), &[2, 3, d], dtype);
            for (pad, scale) in [(-1i64, false), (3, false), (-1, true)] {
                let r =
                    backward::embedding_dense_backward(&g, &it, num as i64, pad, scale).unwrap();
                assert_eq!((r.shape(), r.dtype()), (&[num, d][..], dtype));
                let mut want = vec![0.0; num * d];
                let count = |k: i64| idx.iter().filter(|&&x| x == k).count() as f64;
                for (i, &k) in idx.iter().enumerate() {
                    if k == pad {
                        continue;
                    }
                    for j in 0..d {
                        let s = if scale {
                            gv[i * d + j] / count(k)
                        } else {
                            gv[i * d + j]
                        };
                        let acc = want[k as usize * d + j] + s;
                        // Each addition rounds to the gradient's dtype, as PyTorch's does.
                        want[k as usize * d + j] = round(&[acc], dtype)[0];
                    }
                }
                let (rtol, atol) = if dtype == DType::BF16 {
                    (1.6e-2, 1e-5)
                } else {
                    (1e-6, 1e-7)
                };
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    rtol,
                    atol,
                    &format!("embedding {mode:?} {dtype} {pad} {scale}"),
                );
            }
        }
    }
}

/// A slice of a training step: linear, causal attention, and backward operators.
fn step(xs: &[Tensor]) -> tpuemu_backend::Result<Vec<Tensor>> {
    let (x, w, b, dy, idx) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4]);
    let h = matrix::addmm(b, x, w, Scalar::Int(1), Scalar::Float(0.5))?; // [16, 32]
    let q = h.reshape(&[2, 8, 32])?;
    let a = matrix::scaled_dot_product_attention(&q, &q, &q, None, 0.0, true, None, false)?;
    let g = backward::gelu_backward(dy, &h, "tanh")?;
    let dx = g.mm(&w.t()?)?;
    let sm = backward::softmax_backward_data(&g, &h, -1, h.dtype())?;
    let emb = backward::embedding_dense_backward(&g, idx, 20, 0, false)?;
    Ok(vec![a, dx, sm, emb])
}

#[test]
fn compiled_graph_matches_eager() {
    use tpuemu_backend::compile::compile;
    for dtype in [DType::F32, DType::BF16] {
        let rt = rt(Mode::Strict);
        let (x, _) = tensor(&rt, &rand(16 * 24, 120), &[16, 24], dtype);
        let (w, _) = tensor(&rt, &rand(24 * 32, 121), &[24, 32], dtype);
        let (b, _) = tensor(&rt, &rand(32, 122), &[32], dtype);
        let (dy, _) = tensor(&rt, &rand(16 * 32, 123), &[16, 32], dtype);
        let idx: Vec<i64> = (0..16).map(|i| (i * 7) % 20).collect();
        let idx = Tensor::from_slice(&rt, &idx, &[16]).unwrap();
        let inputs = [x, w, b, dy, idx];
        let want: Vec<Vec<f64>> = step(&inputs)
            .unwrap()
            .iter()
            .map(|t| t.to_f64_vec().unwrap())
            .collect();
        let mut g = compile(&rt, "step", step);
        let got = g.call(&inputs).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(&g.to_f64_vec().unwrap(), w, "{dtype} output {i}");
        }
    }
}
