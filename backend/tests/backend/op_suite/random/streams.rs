//! Random streams: dropout's mask and scale, determinism of the same seed in every mode
//! (fused, compiled), and explicit generators.

use super::*;

#[test]
pub(super) fn dropout() {
    let rt = strict();
    rt.manual_seed(7);
    let xs: Vec<f64> = (0..N).map(|i| 1.0 + (i % 11) as f64 * 0.375).collect();
    let x = Tensor::from_f64s(&rt, xs.iter().copied(), N, &[N], DType::F32).expect("x");
    let r = call(
        &rt,
        "aten::native_dropout",
        vec![
            Value::Tensor(x.clone()),
            Value::Float(0.25),
            Value::Bool(true),
        ],
    );
    assert_eq!(r[1].dtype(), DType::Bool);
    let (out, mask) = (r[0].to_f64_vec().expect("o"), r[1].to_f64_vec().expect("m"));
    let n = N as f64;
    let kept = mask.iter().sum::<f64>();
    assert!(
        (kept - 0.75 * n).abs() < 4.0 * (n * 0.1875).sqrt(),
        "{kept} kept"
    );
    let scale = (1.0f64 / 0.75) as f32;
    for i in 0..N {
        // PyTorch: `input.mul(mask).mul_(scale)` in f32.
        let want = (xs[i] as f32 * mask[i] as f32 * scale) as f64;
        assert_eq!(out[i], want, "element {i}");
    }
    // Evaluation: the input and an all-true mask.
    let r = call(
        &rt,
        "aten::native_dropout",
        vec![
            Value::Tensor(x.clone()),
            Value::Float(0.25),
            Value::Bool(false),
        ],
    );
    assert_eq!(r[0].to_f64_vec().expect("o"), xs);
    assert!(r[1].to_f64_vec().expect("m").iter().all(|v| *v == 1.0));
    // Backward: grad * mask * scale.
    let g = call(
        &rt,
        "aten::native_dropout_backward",
        vec![
            Value::Tensor(x.clone()),
            Value::Tensor(r[1].clone()),
            Value::Float(0.5),
        ],
    );
    let gv = g[0].to_f64_vec().expect("g");
    assert!((0..N).all(|i| gv[i] == xs[i] * 0.5));
    let d = one(
        &rt,
        "aten::dropout",
        vec![Value::Tensor(x), Value::Float(0.5), Value::Bool(true)],
    );
    let zeros = d.iter().filter(|v| **v == 0.0).count() as f64;
    assert!(
        (zeros - 0.5 * n).abs() < 4.0 * (n * 0.25).sqrt(),
        "{zeros} dropped"
    );
    assert!((0..N).all(|i| d[i] == 0.0 || d[i] == xs[i] * 2.0));
}

/// Two fresh runtimes seeded alike, a runtime reseeded, and every mode give the same bits; a
/// second call continues the stream (new values); fusion does not change a value.
#[test]
pub(super) fn determinism() {
    let draw = |rt: &Runtime| {
        let a = one(rt, "aten::rand", vec![ints(&[64, 33])]);
        let b = one(rt, "aten::randn", vec![ints(&[100])]);
        (a, b)
    };
    let rt = strict();
    rt.manual_seed(42);
    let want = draw(&rt);
    assert_eq!(rt.rng_offset(), 64 * 33 + 100);
    assert_ne!(
        draw(&rt).0,
        want.0,
        "a second call must continue the stream"
    );
    rt.manual_seed(42);
    assert_eq!(draw(&rt), want, "manual_seed restarts the stream");
    let second = draw(&rt);
    for mode in MODES {
        let rt = runtime(mode);
        rt.manual_seed(42);
        let got = if mode == SuiteMode::Compile {
            let rt2 = rt.clone();
            let mut g = compile(&rt, "random", move |_: &[Tensor]| {
                let a = call(&rt2, "aten::rand", vec![ints(&[64, 33])]);
                let b = call(&rt2, "aten::randn", vec![ints(&[100])]);
                Ok(vec![a[0].clone(), b[0].clone()])
            });
            let o = g.call(&[]).expect("compiled");
            // A second call of the compiled graph draws anew, the values the operators'
            // second eager call draws (not its capture's again).
            let o2 = g.call(&[]).expect("compiled again");
            let again = (
                o2[0].to_f64_vec().expect("a"),
                o2[1].to_f64_vec().expect("b"),
            );
            assert_eq!(again, second, "a compiled graph's second call");
            assert_eq!(rt.rng_offset(), 2 * (64 * 33 + 100));
            (o[0].to_f64_vec().expect("a"), o[1].to_f64_vec().expect("b"))
        } else {
            draw(&rt)
        };
        assert_eq!(got, want, "{mode:?}");
    }
    // Fused with its consumer (DeferAndFuse): rand + 1 is the unfused value + 1.
    let rt = runtime(SuiteMode::DeferAndFuse);
    rt.manual_seed(42);
    let a = call(&rt, "aten::rand", vec![ints(&[64, 33])]);
    let s = one(
        &rt,
        "aten::add.Scalar",
        vec![Value::Tensor(a[0].clone()), Value::Int(1)],
    );
    let plus: Vec<f64> = want.0.iter().map(|v| (*v as f32 + 1.0) as f64).collect();
    assert_eq!(s, plus);
}

/// An explicit generator has its own stream, keyed by its seed.
#[test]
pub(super) fn generators() {
    let rt = strict();
    let gen_draw = |rt: &Runtime| {
        let g = Value::Generator(9);
        let a = one(
            rt,
            "aten::rand.generator",
            vec![ints(&[N as i64]), g.clone()],
        );
        let b = one(
            rt,
            "aten::randn.generator",
            vec![ints(&[N as i64]), g.clone()],
        );
        let c = one(
            rt,
            "aten::randint.generator",
            vec![Value::Int(4), ints(&[N as i64]), g.clone()],
        );
        let d = one(
            rt,
            "aten::randint.low_generator",
            vec![Value::Int(2), Value::Int(6), ints(&[N as i64]), g],
        );
        (a, b, c, d)
    };
    let (a, b, c, d) = gen_draw(&rt);
    assert_eq!(rt.rng_offset(), 0, "the default stream is untouched");
    ks("rand.generator", &a, |v| v.clamp(0.0, 1.0));
    ks("randn.generator", &b, phi);
    uniform_ints("randint.generator", &c, 0, 4);
    uniform_ints("randint.low_generator", &d, 2, 6);
    let other = strict();
    assert_eq!(
        gen_draw(&other).0,
        a,
        "the same generator seed, the same stream"
    );
    // As in PyTorch, `torch.manual_seed(9)` and `torch.Generator().manual_seed(9)` start the
    // same sequence.
    other.manual_seed(9);
    assert_eq!(one(&other, "aten::rand", vec![ints(&[N as i64])]), a);
}
