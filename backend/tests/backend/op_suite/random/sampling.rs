//! Sampling: `multinomial` (with and without replacement) against its law, `randperm` a
//! permutation with no order left, the integer `geometric_`, and the refusals PyTorch's CPU
//! kernels make, with their messages.

use super::*;

fn tensor(rt: &Runtime, v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_f64s(rt, v.iter().copied(), v.len(), shape, DType::F32).expect("tensor")
}

/// Counts of each category within five standard errors of `n p_k` (binomial), and none of a
/// zero-probability category.
fn frequencies(what: &str, x: &[f64], p: &[f64]) {
    let total: f64 = p.iter().sum();
    let mut counts = vec![0usize; p.len()];
    for v in x {
        assert!(
            v.fract() == 0.0 && *v >= 0.0 && (*v as usize) < p.len(),
            "{what}: {v}"
        );
        counts[*v as usize] += 1;
    }
    let n = x.len() as f64;
    for (k, c) in counts.iter().enumerate() {
        let q = p[k] / total;
        let (e, sd) = (n * q, (n * q * (1.0 - q)).sqrt());
        assert!(
            (*c as f64 - e).abs() <= 5.0 * sd.max(0.5),
            "{what}: {counts:?} against {p:?}"
        );
    }
}

#[test]
pub(super) fn multinomial_law() {
    let rt = strict();
    rt.manual_seed(11);
    let p = [0.1, 0.0, 0.2, 0.3, 0.4];
    // With replacement: two rows, the second certain.
    let mut two = p.to_vec();
    two.extend([0.0, 0.0, 1.0, 0.0, 0.0]);
    let probs = tensor(&rt, &two, &[2, 5]);
    let r = call(
        &rt,
        "aten::multinomial",
        vec![
            Value::Tensor(probs),
            Value::Int(N as i64),
            Value::Bool(true),
        ],
    );
    assert_eq!((r[0].shape(), r[0].dtype()), (&[2, N][..], DType::I64));
    let v = r[0].to_f64_vec().expect("v");
    frequencies("with replacement", &v[..N], &p);
    assert!(v[N..].iter().all(|c| *c == 2.0), "a certain category");
    // Without replacement: each row a draw of distinct categories, the first in proportion
    // to the weights (unnormalised), and one sample (argmax).
    let w = [1.0, 2.0, 3.0, 4.0];
    let rows = 4096;
    let many: Vec<f64> = (0..rows).flat_map(|_| w).collect();
    let probs = tensor(&rt, &many, &[rows, 4]);
    for k in [4, 1] {
        let r = call(
            &rt,
            "aten::multinomial",
            vec![
                Value::Tensor(probs.clone()),
                Value::Int(k),
                Value::Bool(false),
            ],
        );
        assert_eq!(r[0].shape(), &[rows, k as usize]);
        let v = r[0].to_f64_vec().expect("v");
        let first: Vec<f64> = v.chunks(k as usize).map(|c| c[0]).collect();
        frequencies("without replacement, first draw", &first, &w);
        for row in v.chunks(k as usize) {
            let mut s = row.to_vec();
            s.sort_by(f64::total_cmp);
            s.dedup();
            assert_eq!(s.len(), k as usize, "distinct categories: {row:?}");
        }
    }
    // A zero weight is never drawn without replacement while others remain.
    let probs = tensor(&rt, &[0.0, 1.0, 1.0], &[3]);
    let r = one(
        &rt,
        "aten::multinomial",
        vec![Value::Tensor(probs), Value::Int(2), Value::Bool(false)],
    );
    assert!(!r.contains(&0.0), "{r:?}");
}

#[test]
pub(super) fn randperm_law() {
    let rt = strict();
    rt.manual_seed(12);
    let r = call(&rt, "aten::randperm", vec![Value::Int(N as i64)]);
    assert_eq!(r[0].dtype(), DType::I64);
    let v = r[0].to_f64_vec().expect("v");
    let mut s = v.clone();
    s.sort_by(f64::total_cmp);
    assert!(
        s.iter().enumerate().all(|(i, x)| *x == i as f64),
        "a permutation"
    );
    // No order left: the rank correlation of position and value is that of independent
    // draws (within five standard errors, 1 / sqrt(n - 1)).
    let n = N as f64;
    let m = (n - 1.0) / 2.0;
    let cov: f64 = v
        .iter()
        .enumerate()
        .map(|(i, x)| (i as f64 - m) * (x - m))
        .sum();
    let r = cov / (n * (n * n - 1.0) / 12.0);
    assert!(r.abs() < 5.0 / (n - 1.0).sqrt(), "correlation {r}");
    // The same seed, the same permutation; in another dtype, the same order of draws.
    rt.manual_seed(12);
    let again = call(
        &rt,
        "aten::randperm.generator",
        vec![Value::Int(N as i64), Value::None, Value::Dtype(DType::F32)],
    );
    assert_eq!(again[0].dtype(), DType::F32);
    assert_eq!(again[0].to_f64_vec().expect("v"), v);
    assert!(call(&rt, "aten::randperm", vec![Value::Int(0)])[0].shape() == [0]);
}

#[test]
pub(super) fn integer_geometric() {
    let rt = strict();
    rt.manual_seed(13);
    let x = zeros(&rt, N, DType::I64);
    call(
        &rt,
        "aten::geometric_",
        vec![Value::Tensor(x.clone()), Value::Float(0.25)],
    );
    let v = x.to_f64_vec().expect("v");
    assert!(v.iter().all(|k| k.fract() == 0.0 && *k >= 1.0));
    // Mean 1 / p = 4, variance (1 - p) / p^2 = 12.
    moments("geometric int64", &v, 4.0, 12.0, 10.0);
    let e = ops::call(
        &rt,
        "aten::geometric_",
        vec![Value::Tensor(x), Value::Float(1e-12)],
    )
    .expect_err("beyond 32 bits");
    assert!(e.to_string().contains("32-bit"), "{e}");
}

#[test]
pub(super) fn sampling_errors() {
    let rt = strict();
    let p = |v: &[f64], s: &[usize]| Value::Tensor(tensor(&rt, v, s));
    for (args, part) in [
        (
            vec![p(&[0.5, 0.5], &[2]), Value::Int(0), Value::Bool(true)],
            "n_sample <= 0",
        ),
        (
            vec![p(&[0.5, 0.5], &[2]), Value::Int(3), Value::Bool(false)],
            "without replacement",
        ),
        (
            vec![p(&[0.5, -0.5], &[2]), Value::Int(1), Value::Bool(false)],
            "element < 0",
        ),
        (
            vec![p(&[0.5, f64::NAN], &[2]), Value::Int(1), Value::Bool(true)],
            "infinity or NaN",
        ),
        (
            vec![
                p(&[1.0, 1.0, 0.0, 0.0], &[2, 2]),
                Value::Int(1),
                Value::Bool(true),
            ],
            "sum of probabilities <= 0",
        ),
        (
            vec![p(&[1.0; 8], &[2, 2, 2]), Value::Int(1), Value::Bool(true)],
            "1 or 2 dim",
        ),
    ] {
        let e = ops::call(&rt, "aten::multinomial", args)
            .expect_err("refused")
            .to_string();
        assert!(e.contains(part), "{e}");
    }
    let e = ops::call(&rt, "aten::randperm", vec![Value::Int(-1)]).expect_err("negative");
    assert!(e.to_string().contains("non-negative"), "{e}");
    let e = ops::call(
        &rt,
        "aten::randperm.generator",
        vec![Value::Int(300), Value::None, Value::Dtype(DType::I8)],
    )
    .expect_err("int8");
    assert!(e.to_string().contains("not exact"), "{e}");
}
