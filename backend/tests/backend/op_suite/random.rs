//! Random operators: the generator against Random123's published known-answer vectors, every
//! distribution against its law (moments within four standard errors, Kolmogorov-Smirnov
//! distance below the 0.1% critical value `1.95 / sqrt(n)`), and determinism: the same seed
//! gives the same bits in every mode, fused or not.
//!
//! The samples are deterministic (a fixed seed), so these tests do not flake; a wrong
//! transform, a wrong bit selection or a reused counter moves a statistic far past its bound.

use tpuemu_backend::compile::compile;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Runtime, Tensor};

use super::harness::{MODES, SuiteMode, ints, runtime};

#[path = "random/sampling.rs"]
mod sampling;
#[path = "random/streams.rs"]
mod streams;
use sampling::{integer_geometric, multinomial_law, randperm_law};
use streams::{dropout, generators};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::uniform", uniform_law),
    ("aten::uniform_", uniform_law),
    ("aten::rand", uniform_law),
    ("aten::rand.generator", generators),
    ("aten::rand_like", uniform_law),
    ("aten::normal_functional", normal_law),
    ("aten::normal_", normal_law),
    ("aten::normal.Tensor_float", normal_overloads),
    ("aten::normal.float_Tensor", normal_overloads),
    ("aten::normal.Tensor_Tensor", normal_overloads),
    ("aten::normal.float_float", normal_overloads),
    ("aten::randn", normal_law),
    ("aten::randn.generator", generators),
    ("aten::randn_like", normal_law),
    ("aten::bernoulli", bernoulli_law),
    ("aten::bernoulli.p", bernoulli_law),
    ("aten::bernoulli.Tensor", bernoulli_law),
    ("aten::bernoulli_.float", bernoulli_law),
    ("aten::bernoulli_.Tensor", bernoulli_law),
    ("aten::exponential", transforms_law),
    ("aten::exponential_", transforms_law),
    ("aten::geometric", transforms_law),
    ("aten::geometric_", integer_geometric),
    ("aten::log_normal", transforms_law),
    ("aten::log_normal_", transforms_law),
    ("aten::cauchy", transforms_law),
    ("aten::cauchy_", transforms_law),
    ("aten::random", integers_law),
    ("aten::random_", integers_law),
    ("aten::random.from", integers_law),
    ("aten::random_.from", integers_law),
    ("aten::random.to", integers_law),
    ("aten::random_.to", integers_law),
    ("aten::randint", integers_law),
    ("aten::randint.generator", generators),
    ("aten::randint.low", integers_law),
    ("aten::randint.low_generator", generators),
    ("aten::randint_like", integers_law),
    ("aten::randint_like.low_dtype", integers_law),
    ("aten::native_dropout", dropout),
    ("aten::native_dropout_backward", dropout),
    ("aten::dropout", dropout),
    ("aten::rrelu_with_noise", rrelu_law),
    ("aten::rrelu_with_noise_", rrelu_law),
    ("aten::rrelu_with_noise_functional", rrelu_law),
    ("aten::rrelu_with_noise_backward", rrelu_law),
    ("aten::multinomial", multinomial_law),
    ("aten::randperm", randperm_law),
    ("aten::randperm.generator", randperm_law),
];

/// Samples per distribution test.
const N: usize = 1 << 14;

fn strict() -> Runtime {
    runtime(SuiteMode::Strict)
}

fn call(rt: &Runtime, op: &str, args: Vec<Value>) -> Vec<Tensor> {
    ops::call(rt, op, args)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
        .into_iter()
        .map(|v| match v {
            Value::Tensor(t) => t,
            other => panic!("{op} returned {other:?}"),
        })
        .collect()
}

fn one(rt: &Runtime, op: &str, args: Vec<Value>) -> Vec<f64> {
    call(rt, op, args)[0].to_f64_vec().expect("values")
}

fn zeros(rt: &Runtime, n: usize, d: DType) -> Tensor {
    Tensor::from_f64s(rt, std::iter::repeat_n(0.0, n), n, &[n], d).expect("tensor")
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    (
        m,
        x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1.0),
    )
}

/// Checks mean and variance against the law's (`var` of the law; the variance's standard
/// error is taken as `var * sqrt(2 / n)` times `kurt_factor` for heavier tails).
fn moments(what: &str, x: &[f64], mean: f64, var: f64, kurt_factor: f64) {
    let n = x.len() as f64;
    let (m, v) = mean_var(x);
    assert!(
        (m - mean).abs() < 4.0 * (var / n).sqrt(),
        "{what}: mean {m}, law {mean}"
    );
    assert!(
        (v - var).abs() < 4.0 * kurt_factor * var * (2.0 / n).sqrt(),
        "{what}: variance {v}, law {var}"
    );
}

/// The Kolmogorov-Smirnov distance of `x` from the continuous law `cdf`, checked against the
/// 0.1% critical value.
fn ks(what: &str, x: &[f64], cdf: impl Fn(f64) -> f64) {
    let mut s = x.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    let d = s
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let f = cdf(*v);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max);
    assert!(d < 1.95 / n.sqrt(), "{what}: KS distance {d}");
}

/// `erfc` (Numerical Recipes' Chebyshev fit, fractional error below 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let c = [
        -1.26551223,
        1.00002368,
        0.37409196,
        0.09678418,
        -0.18628806,
        0.27886807,
        -1.13520398,
        1.48851587,
        -0.82215223,
        0.17087277,
    ];
    let poly = c.iter().rev().fold(0.0, |acc, k| acc * t + k);
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

fn phi(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Threefry-2x32-20 known answers from Random123's `kat_vectors`
/// (`threefry2x32 20 ctr0 ctr1 key0 key1 out0 out1`): all zeros, all ones, digits of pi.
const KAT: [([u32; 2], [u32; 2], [u32; 2]); 3] = [
    ([0, 0], [0, 0], [0x6b20_0159, 0x99ba_4efe]),
    (
        [0xffff_ffff, 0xffff_ffff],
        [0xffff_ffff, 0xffff_ffff],
        [0x1cb9_96fc, 0xbb00_2be7],
    ),
    (
        [0x243f_6a88, 0x85a3_08d3],
        [0x1319_8a2e, 0x0370_7344],
        [0xc492_3a9c, 0x483d_f7a0],
    ),
];

fn join(w: [u32; 2]) -> u64 {
    w[0] as u64 | (w[1] as u64) << 32
}

fn words(rt: &Runtime, n: usize, seed: u64, offset: u64) -> Vec<[u32; 2]> {
    let [a, b] = ops::random::threefry_words(rt, n, seed, offset).expect("threefry");
    let (a, b) = (a.to_vec::<i32>().expect("a"), b.to_vec::<i32>().expect("b"));
    a.iter()
        .zip(&b)
        .map(|(x, y)| [*x as u32, *y as u32])
        .collect()
}

#[test]
fn threefry_known_answers() {
    for mode in [SuiteMode::Strict, SuiteMode::Debug, SuiteMode::DeferAndFuse] {
        let rt = runtime(mode);
        for (ctr, key, want) in KAT {
            // Element 2 of a call starting two counters early: the counter is `offset + 2`.
            let got = words(&rt, 3, join(key), join(ctr).wrapping_sub(2));
            assert_eq!(got[2], want, "{mode:?}: ctr {ctr:x?} key {key:x?}");
        }
        // The all-zero counter reached by a 64-bit carry: offset 2^64 - 1, element 1.
        let got = words(&rt, 2, 0, u64::MAX);
        assert_eq!(
            got[1], KAT[0].2,
            "{mode:?}: carry into the high counter word"
        );
    }
}

#[test]
fn rrelu_law() {
    // x alternates -1 - i/N (negative) and i/N; training: negatives scaled by slopes uniform in
    // [0.1, 0.4) written into noise, the rest unchanged with noise 1; the functional form draws
    // the same slopes from the same seed without writing; evaluation scales by the mean slope;
    // the backward is grad * noise (training) or leaky_relu's (evaluation).
    let rt = strict();
    let xs: Vec<f32> = (0..N)
        .map(|i| {
            let f = i as f32 / N as f32;
            if i % 2 == 0 { -1.0 - f } else { f }
        })
        .collect();
    let x = Tensor::from_slice(&rt, &xs, &[N]).expect("x");
    let lohi = |training: bool| vec![Value::Float(0.1), Value::Float(0.4), Value::Bool(training)];
    let noise = zeros(&rt, N, DType::F32);
    rt.manual_seed(5);
    let mut args = vec![Value::Tensor(x.clone()), Value::Tensor(noise.clone())];
    args.extend(lohi(true));
    let y = call(&rt, "aten::rrelu_with_noise", args.clone())[0]
        .to_f64_vec()
        .expect("y");
    let nz = noise.to_f64_vec().expect("noise");
    let mut slopes = Vec::new();
    for i in 0..N {
        let xi = xs[i] as f64;
        if xi <= 0.0 {
            assert!((0.1..0.4).contains(&nz[i]), "slope {}", nz[i]);
            assert_eq!(y[i], (xs[i] * nz[i] as f32) as f64);
            slopes.push(nz[i]);
        } else {
            assert_eq!((y[i], nz[i]), (xi, 1.0));
        }
    }
    ks("rrelu slopes", &slopes, |v| {
        ((v - 0.1) / 0.3).clamp(0.0, 1.0)
    });
    rt.manual_seed(5);
    let f = call(&rt, "aten::rrelu_with_noise_functional", args.clone());
    assert_eq!(f[0].to_f64_vec().expect("y"), y);
    assert_eq!(f[1].to_f64_vec().expect("noise"), nz);
    rt.manual_seed(5);
    let inplace = Tensor::from_slice(&rt, &xs, &[N]).expect("x");
    let mut ia = args.clone();
    ia[0] = Value::Tensor(inplace.clone());
    call(&rt, "aten::rrelu_with_noise_", ia);
    assert_eq!(inplace.to_f64_vec().expect("in place"), y);
    let mut ev = vec![Value::Tensor(x.clone()), Value::Tensor(noise.clone())];
    ev.extend(lohi(false));
    let e = one(&rt, "aten::rrelu_with_noise", ev);
    for i in 0..N {
        let want = if xs[i] > 0.0 { xs[i] } else { xs[i] * 0.25 };
        assert_eq!(e[i], want as f64);
    }
    let grad = Tensor::from_slice(&rt, &vec![3.0f32; N], &[N]).expect("grad");
    for training in [true, false] {
        let mut b = vec![
            Value::Tensor(grad.clone()),
            Value::Tensor(x.clone()),
            Value::Tensor(noise.clone()),
        ];
        b.extend(lohi(training));
        b.push(Value::Bool(false));
        let g = one(&rt, "aten::rrelu_with_noise_backward", b.clone());
        let out = zeros(&rt, N, DType::F32);
        b.push(Value::Tensor(out.clone()));
        call(&rt, "aten::rrelu_with_noise_backward.out", b);
        assert_eq!(out.to_f64_vec().expect("out"), g);
        for i in 0..N {
            let slope = if xs[i] > 0.0 {
                1.0
            } else if training {
                nz[i] as f32
            } else {
                0.25
            };
            assert_eq!(g[i], (3.0 * slope) as f64, "training {training}");
        }
    }
}

#[test]
fn uniform_law() {
    let rt = strict();
    rt.manual_seed(1);
    let x = one(&rt, "aten::rand", vec![ints(&[N as i64])]);
    assert!(x.iter().all(|v| (0.0..1.0).contains(v)));
    moments("rand", &x, 0.5, 1.0 / 12.0, 1.0);
    ks("rand", &x, |v| v.clamp(0.0, 1.0));
    // uniform_ writes into its argument: [-2, 3).
    let t = zeros(&rt, N, DType::F32);
    let r = call(
        &rt,
        "aten::uniform_",
        vec![
            Value::Tensor(t.clone()),
            Value::Float(-2.0),
            Value::Float(3.0),
        ],
    );
    assert!(r[0].shares_storage(&t));
    let y = t.to_f64_vec().expect("values");
    assert!(y.iter().all(|v| (-2.0..3.0).contains(v)));
    ks("uniform_(-2, 3)", &y, |v| ((v + 2.0) / 5.0).clamp(0.0, 1.0));
    // bf16 draws 8 bits: multiples of 2^-8 in [0, 1), each of the 256 about equally often.
    let b = one(
        &rt,
        "aten::uniform",
        vec![Value::Tensor(zeros(&rt, N, DType::BF16))],
    );
    let mut counts = [0usize; 256];
    for v in &b {
        let k = v * 256.0;
        assert!(
            k.fract() == 0.0 && (0.0..256.0).contains(&k),
            "bf16 value {v}"
        );
        counts[k as usize] += 1;
    }
    let e = N as f64 / 256.0;
    assert!(
        counts
            .iter()
            .all(|c| (*c as f64 - e).abs() < 5.0 * e.sqrt())
    );
    // rand_like keeps shape and dtype.
    let like = call(
        &rt,
        "aten::rand_like",
        vec![Value::Tensor(zeros(&rt, 8, DType::F16))],
    );
    assert_eq!(
        (like[0].shape(), like[0].dtype()),
        (&[8usize][..], DType::F16)
    );
}

#[test]
fn normal_law() {
    let rt = strict();
    rt.manual_seed(2);
    let z = one(&rt, "aten::randn", vec![ints(&[N as i64])]);
    moments("randn", &z, 0.0, 1.0, 1.0);
    ks("randn", &z, phi);
    let t = zeros(&rt, N, DType::F32);
    call(
        &rt,
        "aten::normal_",
        vec![
            Value::Tensor(t.clone()),
            Value::Float(3.0),
            Value::Float(0.5),
        ],
    );
    let y = t.to_f64_vec().expect("values");
    ks("normal_(3, 0.5)", &y, |v| phi((v - 3.0) / 0.5));
    let f = one(
        &rt,
        "aten::normal_functional",
        vec![
            Value::Tensor(zeros(&rt, N, DType::BF16)),
            Value::Float(-1.0),
            Value::Float(2.0),
        ],
    );
    moments("normal_functional bf16", &f, -1.0, 4.0, 1.0);
    let like = one(
        &rt,
        "aten::randn_like",
        vec![Value::Tensor(zeros(&rt, N, DType::F32))],
    );
    ks("randn_like", &like, phi);
}

#[test]
fn normal_overloads() {
    let rt = strict();
    rt.manual_seed(3);
    // Per-element means and stds: (x - mean) / std is standard normal.
    let means: Vec<f64> = (0..N).map(|i| (i % 7) as f64 - 3.0).collect();
    let stds: Vec<f64> = (0..N).map(|i| 0.5 + (i % 5) as f64).collect();
    let m = Tensor::from_f64s(&rt, means.iter().copied(), N, &[N], DType::F32).expect("m");
    let s = Tensor::from_f64s(&rt, stds.iter().copied(), N, &[N], DType::F32).expect("s");
    let tt = one(
        &rt,
        "aten::normal.Tensor_Tensor",
        vec![Value::Tensor(m.clone()), Value::Tensor(s.clone())],
    );
    let zs: Vec<f64> = (0..N).map(|i| (tt[i] - means[i]) / stds[i]).collect();
    ks("normal.Tensor_Tensor", &zs, phi);
    let tf = one(
        &rt,
        "aten::normal.Tensor_float",
        vec![Value::Tensor(m), Value::Float(2.0)],
    );
    let zs: Vec<f64> = (0..N).map(|i| (tf[i] - means[i]) / 2.0).collect();
    ks("normal.Tensor_float", &zs, phi);
    let ft = one(
        &rt,
        "aten::normal.float_Tensor",
        vec![Value::Float(1.0), Value::Tensor(s)],
    );
    let zs: Vec<f64> = (0..N).map(|i| (ft[i] - 1.0) / stds[i]).collect();
    ks("normal.float_Tensor", &zs, phi);
    let ff = call(
        &rt,
        "aten::normal.float_float",
        vec![Value::Float(5.0), Value::Float(0.25), ints(&[128, 128])],
    );
    assert_eq!(
        (ff[0].shape(), ff[0].dtype()),
        (&[128usize, 128][..], DType::F32)
    );
    let v = ff[0].to_f64_vec().expect("values");
    ks("normal.float_float", &v, |x| phi((x - 5.0) / 0.25));
}

#[test]
fn bernoulli_law() {
    let rt = strict();
    rt.manual_seed(4);
    let n = N as f64;
    let b = one(
        &rt,
        "aten::bernoulli.p",
        vec![Value::Tensor(zeros(&rt, N, DType::F32)), Value::Float(0.3)],
    );
    assert!(b.iter().all(|v| *v == 0.0 || *v == 1.0));
    let k = b.iter().sum::<f64>();
    assert!(
        (k - 0.3 * n).abs() < 4.0 * (n * 0.3 * 0.7).sqrt(),
        "{k} ones"
    );
    // p from a tensor: 0 and 1 give exactly 0 and 1, 0.5 about half.
    let ps: Vec<f64> = (0..N).map(|i| [0.0, 1.0, 0.5][i % 3]).collect();
    let p = Tensor::from_f64s(&rt, ps.iter().copied(), N, &[N], DType::F32).expect("p");
    for (op, args) in [
        (
            "aten::bernoulli.Tensor",
            vec![
                Value::Tensor(zeros(&rt, N, DType::Bool)),
                Value::Tensor(p.clone()),
            ],
        ),
        ("aten::bernoulli", vec![Value::Tensor(p.clone())]),
    ] {
        let b = one(&rt, op, args);
        let half: Vec<f64> = (0..N).filter(|i| i % 3 == 2).map(|i| b[i]).collect();
        for i in 0..N {
            if i % 3 < 2 {
                assert_eq!(b[i], ps[i], "{op} at p = {}", ps[i]);
            }
        }
        let h = half.len() as f64;
        let k = half.iter().sum::<f64>();
        assert!(
            (k - 0.5 * h).abs() < 4.0 * (h * 0.25).sqrt(),
            "{op}: {k} of {h}"
        );
    }
    // In-place forms write their argument (int32 here: any dtype holds 0/1).
    let t = zeros(&rt, N, DType::I32);
    call(
        &rt,
        "aten::bernoulli_.float",
        vec![Value::Tensor(t.clone()), Value::Float(0.9)],
    );
    let k = t.to_f64_vec().expect("values").iter().sum::<f64>();
    assert!((k - 0.9 * n).abs() < 4.0 * (n * 0.09).sqrt(), "{k} ones");
    let t = zeros(&rt, N, DType::F32);
    call(
        &rt,
        "aten::bernoulli_.Tensor",
        vec![Value::Tensor(t.clone()), Value::Tensor(p)],
    );
    let v = t.to_f64_vec().expect("values");
    assert!((0..N).filter(|i| i % 3 < 2).all(|i| v[i] == ps[i]));
    // The `out=` form derived from `bernoulli`.
    let e = Tensor::empty(&rt, &[0], DType::F32).unwrap();
    let r = call(
        &rt,
        "aten::bernoulli.out",
        vec![
            Value::Tensor(zeros(&rt, 6, DType::F32)),
            Value::None,
            Value::Tensor(e),
        ],
    );
    assert_eq!(r[0].shape(), &[6]);
}

#[test]
fn transforms_law() {
    let rt = strict();
    rt.manual_seed(5);
    let x = |d| Value::Tensor(zeros(&rt, N, d));
    let e = one(
        &rt,
        "aten::exponential",
        vec![x(DType::F32), Value::Float(2.0)],
    );
    moments("exponential(2)", &e, 0.5, 0.25, 2.0);
    ks("exponential(2)", &e, |v| 1.0 - (-2.0 * v.max(0.0)).exp());
    let t = zeros(&rt, N, DType::F32);
    call(&rt, "aten::exponential_", vec![Value::Tensor(t.clone())]);
    ks("exponential_", &t.to_f64_vec().expect("v"), |v| {
        1.0 - (-v.max(0.0)).exp()
    });
    // Geometric(p): integers >= 1, P(X = k) = (1 - p)^(k - 1) p: mean 1/p, var (1 - p)/p^2.
    for op in ["aten::geometric", "aten::geometric_"] {
        let t = zeros(&rt, N, DType::F32);
        let g = one(&rt, op, vec![Value::Tensor(t), Value::Float(0.25)]);
        assert!(g.iter().all(|v| *v >= 1.0 && v.fract() == 0.0));
        moments(op, &g, 4.0, 12.0, 2.5);
    }
    for op in ["aten::log_normal", "aten::log_normal_"] {
        let l = one(
            &rt,
            op,
            vec![x(DType::F32), Value::Float(1.0), Value::Float(0.5)],
        );
        let logs: Vec<f64> = l.iter().map(|v| v.ln()).collect();
        ks(op, &logs, |v| phi((v - 1.0) / 0.5));
    }
    for op in ["aten::cauchy", "aten::cauchy_"] {
        let c = one(
            &rt,
            op,
            vec![x(DType::F32), Value::Float(2.0), Value::Float(3.0)],
        );
        ks(op, &c, |v| {
            0.5 + ((v - 2.0) / 3.0).atan() / std::f64::consts::PI
        });
    }
    let t = zeros(&rt, 4, DType::F32);
    call(
        &rt,
        "aten::exponential_",
        vec![Value::Tensor(t.clone()), Value::Float(1.0)],
    );
    assert!(t.to_f64_vec().expect("v").iter().all(|v| *v >= 0.0));
}

/// Counts of each integer in `[lo, hi)` are within five standard errors of uniform.
fn uniform_ints(what: &str, x: &[f64], lo: i64, hi: i64) {
    let k = (hi - lo) as usize;
    let mut counts = vec![0usize; k];
    for v in x {
        assert!(
            v.fract() == 0.0 && *v >= lo as f64 && *v < hi as f64,
            "{what}: {v}"
        );
        counts[(*v as i64 - lo) as usize] += 1;
    }
    let e = x.len() as f64 / k as f64;
    let sd = (e * (1.0 - 1.0 / k as f64)).sqrt();
    assert!(
        counts.iter().all(|c| (*c as f64 - e).abs() < 5.0 * sd),
        "{what}: {counts:?}"
    );
}

#[test]
fn integers_law() {
    let rt = strict();
    rt.manual_seed(6);
    let r = call(
        &rt,
        "aten::randint.low",
        vec![Value::Int(-3), Value::Int(5), ints(&[N as i64])],
    );
    assert_eq!(r[0].dtype(), DType::I64);
    uniform_ints("randint.low", &r[0].to_f64_vec().expect("v"), -3, 5);
    let r = one(
        &rt,
        "aten::randint",
        vec![Value::Int(10), ints(&[N as i64])],
    );
    uniform_ints("randint", &r, 0, 10);
    let like = |d| Value::Tensor(zeros(&rt, N, d));
    let r = one(
        &rt,
        "aten::randint_like",
        vec![like(DType::I32), Value::Int(3)],
    );
    uniform_ints("randint_like", &r, 0, 3);
    let r = one(
        &rt,
        "aten::randint_like.low_dtype",
        vec![like(DType::F32), Value::Int(-2), Value::Int(2)],
    );
    uniform_ints("randint_like.low_dtype", &r, -2, 2);
    for (op, args, lo, hi) in [
        (
            "aten::random.from",
            vec![Value::Int(7), Value::Int(13)],
            7,
            13,
        ),
        (
            "aten::random_.from",
            vec![Value::Int(-4), Value::Int(0)],
            -4,
            0,
        ),
        ("aten::random.to", vec![Value::Int(6)], 0, 6),
        ("aten::random_.to", vec![Value::Int(2)], 0, 2),
    ] {
        let mut a = vec![like(DType::I64)];
        a.extend(args);
        uniform_ints(op, &one(&rt, op, a), lo, hi);
    }
    // Without a bound: bool draws {0, 1}, bf16 [0, 2^8], float32 integers up to 2^24.
    uniform_ints(
        "random(bool)",
        &one(&rt, "aten::random", vec![like(DType::Bool)]),
        0,
        2,
    );
    let b = one(&rt, "aten::random_", vec![like(DType::BF16)]);
    assert!(
        b.iter()
            .all(|v| v.fract() == 0.0 && (0.0..=256.0).contains(v))
    );
    let f = one(&rt, "aten::random", vec![like(DType::F32)]);
    let top = (1u64 << 24) as f64;
    assert!(
        f.iter()
            .all(|v| v.fract() == 0.0 && (0.0..=top).contains(v))
    );
    moments("random(f32)", &f, top / 2.0, top * top / 12.0, 1.0);
    let f = one(
        &rt,
        "aten::random.from",
        vec![like(DType::I32), Value::Int(5), Value::None],
    );
    assert!(f.iter().all(|v| *v >= 5.0 && *v <= i32::MAX as f64));
}

#[test]
fn errors() {
    let rt = strict();
    let x = || Value::Tensor(zeros(&rt, 4, DType::F32));
    let i = || Value::Tensor(zeros(&rt, 4, DType::I64));
    for (op, args, part) in [
        (
            "aten::uniform",
            vec![x(), Value::Float(2.0), Value::Float(1.0)],
            "from=2 > to=1",
        ),
        (
            "aten::normal_",
            vec![x(), Value::Float(0.0), Value::Float(-1.0)],
            "std >= 0.0",
        ),
        ("aten::bernoulli.p", vec![x(), Value::Float(1.5)], "[0, 1]"),
        ("aten::random", vec![i()], "int64"),
        (
            "aten::random.to",
            vec![x(), Value::Int(0)],
            "less than 'to'",
        ),
        ("aten::normal_functional", vec![i()], "floating point"),
        (
            "aten::randint",
            vec![Value::Int(1 << 40), ints(&[2])],
            "32-bit",
        ),
        (
            "aten::native_dropout",
            vec![x(), Value::Float(1.5), Value::Bool(true)],
            "between 0 and 1",
        ),
    ] {
        let e = ops::call(&rt, op, args).expect_err(op).to_string();
        assert!(e.contains(part), "{op}: {e}");
    }
}
