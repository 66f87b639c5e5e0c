//! Batch and group norm, `_safe_softmax` and `native_dropout_backward`.

use super::*;

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
pub(super) fn batch_norms() {
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
    // Every overload takes `input, weight, bias`, then its running statistics (none, `None`s or
    // the tensors), then `training` (where it has one), `momentum` and `eps`.
    let args = |stats: Vec<Arg>, training: Option<bool>| {
        let mut a = vec![tp(x.clone()), tp(w.clone()), tp(b.clone())];
        a.extend(stats);
        a.extend(training.map(|t| v(Value::Bool(t))));
        a.extend([f(0.1), f(eps)]);
        a
    };
    let nones = || vec![v(Value::None), v(Value::None)];
    let running = || vec![tp(rm.clone()), tp(rv.clone())];
    check_samples(
        "aten::native_batch_norm",
        vec![
            Sample::new(args(nones(), Some(true)), trained.clone()),
            Sample::new(args(running(), Some(false)), evaluated.clone()),
        ],
    );
    check_samples(
        "aten::_native_batch_norm_legit",
        vec![Sample::new(args(running(), Some(false)), evaluated.clone())],
    );
    check_samples(
        "aten::_native_batch_norm_legit_no_training",
        vec![Sample::new(args(running(), None), evaluated)],
    );
    check_samples(
        "aten::_native_batch_norm_legit.no_stats",
        vec![Sample::new(args(vec![], Some(true)), trained)],
    );
}

#[test]
pub(super) fn group_norm() {
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
pub(super) fn safe_softmax() {
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
pub(super) fn dropout_backward() {
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
