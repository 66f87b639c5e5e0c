//! `scaled_dot_product_attention` against a host reference: plain, causal, masked, grouped-query
//! heads, the flash variant's log-sum-exp, and errors.

use super::*;

// ---------------------------------------------------------------------------------------
// Attention.

/// Reference attention over `[batch, L, E]` x `[batch, S, E]` x `[batch, S, Ev]`.
#[allow(clippy::too_many_arguments)]
fn sdpa_ref(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    batch: usize,
    (l, s, e, ev): (usize, usize, usize, usize),
    mask: Option<&dyn Fn(usize, usize) -> Option<f64>>,
    causal: bool,
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; batch * l * ev];
    let mut lse = vec![0.0; batch * l];
    for b in 0..batch {
        for i in 0..l {
            let mut sc: Vec<f64> = (0..s)
                .map(|j| {
                    let d: f64 = (0..e)
                        .map(|x| q[(b * l + i) * e + x] * k[(b * s + j) * e + x])
                        .sum();
                    let mut x = d * scale;
                    if let Some(m) = mask {
                        match m(i, j) {
                            None => x = f64::NEG_INFINITY,
                            Some(add) => x += add,
                        }
                    }
                    if causal && j > i {
                        x = f64::NEG_INFINITY;
                    }
                    x
                })
                .collect();
            let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let shift = if mx == f64::NEG_INFINITY { 0.0 } else { mx };
            for x in sc.iter_mut() {
                *x = (*x - shift).exp();
            }
            let sum: f64 = sc.iter().sum();
            lse[b * l + i] = shift + sum.ln();
            for c in 0..ev {
                out[(b * l + i) * ev + c] = if sum == 0.0 {
                    0.0
                } else {
                    (0..s).map(|j| sc[j] / sum * v[(b * s + j) * ev + c]).sum()
                };
            }
        }
    }
    (out, lse)
}

#[test]
fn sdpa_plain_causal_and_masked() {
    let (b, h, l, s, e) = (2, 2, 7, 9, 16);
    for mode in MODES {
        let rt = rt(mode);
        rt.set_precision(MatmulPrecision::Highest);
        for dtype in [DType::F32, DType::BF16] {
            let (q, qv) = tensor(&rt, &rand(b * h * l * e, 50), &[b, h, l, e], dtype);
            let (k, kv) = tensor(&rt, &rand(b * h * s * e, 51), &[b, h, s, e], dtype);
            let (v, vv) = tensor(&rt, &rand(b * h * s * e, 52), &[b, h, s, e], dtype);
            let (rtol, atol) = if dtype == DType::BF16 {
                (3.0 * U, 3.0 * U)
            } else {
                (1e-5, 1e-5)
            };
            let scale = 1.0 / (e as f64).sqrt();
            let dims = (l, s, e, e);
            // Plain.
            let o = matrix::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None, false)
                .unwrap();
            assert_eq!((o.shape(), o.dtype()), (&[b, h, l, e][..], dtype));
            let (want, _) = sdpa_ref(&qv, &kv, &vv, b * h, dims, None, false, scale);
            assert_close(
                &o.to_f64_vec().unwrap(),
                &want,
                rtol,
                atol,
                &format!("{mode:?} {dtype} plain"),
            );
            // Causal (top-left aligned: key j <= query i).
            let o = matrix::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None, false)
                .unwrap();
            let (want, _) = sdpa_ref(&qv, &kv, &vv, b * h, dims, None, true, scale);
            assert_close(&o.to_f64_vec().unwrap(), &want, rtol, atol, "causal");
            // Bool mask [L, S] with a fully masked row (gives zeros), explicit scale.
            let keep: Vec<bool> = (0..l * s).map(|i| i / s != 3 && (i * 7) % 5 != 0).collect();
            let mask = Tensor::from_slice(&rt, &keep, &[l, s]).unwrap();
            let o = matrix::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(&mask),
                0.0,
                false,
                Some(0.5),
                false,
            )
            .unwrap();
            let f = |i: usize, j: usize| if keep[i * s + j] { Some(0.0) } else { None };
            let (want, _) = sdpa_ref(&qv, &kv, &vv, b * h, dims, Some(&f), false, 0.5);
            assert_close(&o.to_f64_vec().unwrap(), &want, rtol, atol, "bool mask");
            // Float mask broadcast over heads [B, 1, L, S].
            let mv = round(&rand(b * l * s, 53), dtype);
            let (fm, _) = tensor(&rt, &mv, &[b, 1, l, s], dtype);
            let o = matrix::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(&fm),
                0.0,
                false,
                None,
                false,
            )
            .unwrap();
            let mut want = Vec::new();
            for bh in 0..b * h {
                let bi = bh / h;
                let f = |i: usize, j: usize| Some(mv[(bi * l + i) * s + j]);
                let sl = |x: &[f64], n: usize| x[bh * n * e..(bh + 1) * n * e].to_vec();
                want.extend(
                    sdpa_ref(
                        &sl(&qv, l),
                        &sl(&kv, s),
                        &sl(&vv, s),
                        1,
                        dims,
                        Some(&f),
                        false,
                        scale,
                    )
                    .0,
                );
            }
            assert_close(&o.to_f64_vec().unwrap(), &want, rtol, atol, "float mask");
        }
    }
}

#[test]
fn sdpa_gqa_flash_logsumexp_and_errors() {
    let rt = rt(Mode::Strict);
    rt.set_precision(MatmulPrecision::Highest);
    let (hq, hk, l, s, e) = (4, 2, 3, 6, 8);
    let (q, qv) = tensor(&rt, &rand(hq * l * e, 60), &[1, hq, l, e], DType::F32);
    let (k, kv) = tensor(&rt, &rand(hk * s * e, 61), &[1, hk, s, e], DType::F32);
    let (v, vv) = tensor(&rt, &rand(hk * s * e, 62), &[1, hk, s, e], DType::F32);
    let o = matrix::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None, true).unwrap();
    assert_eq!(o.shape(), &[1, hq, l, e]);
    let mut want = Vec::new();
    for h in 0..hq {
        let kh = h / (hq / hk);
        let sl = |x: &[f64], i: usize, n: usize| x[i * n * e..(i + 1) * n * e].to_vec();
        want.extend(
            sdpa_ref(
                &sl(&qv, h, l),
                &sl(&kv, kh, s),
                &sl(&vv, kh, s),
                1,
                (l, s, e, e),
                None,
                true,
                1.0 / (e as f64).sqrt(),
            )
            .0,
        );
    }
    assert_close(&o.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "gqa");
    // The flash-attention overload also returns the rows' logsumexp.
    let (k2, kv2) = tensor(&rt, &rand(hq * s * e, 63), &[1, hq, s, e], DType::F32);
    let (v2, vv2) = tensor(&rt, &rand(hq * s * e, 64), &[1, hq, s, e], DType::F32);
    let (o, lse) =
        matrix::flash_attention_for_cpu(&q, &k2, &v2, 0.0, false, None, Some(0.3)).unwrap();
    let (want, wlse) = sdpa_ref(&qv, &kv2, &vv2, hq, (l, s, e, e), None, false, 0.3);
    assert_eq!((lse.shape(), lse.dtype()), (&[1, hq, l][..], DType::F32));
    assert_close(&o.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "flash out");
    assert_close(&lse.to_f64_vec().unwrap(), &wlse, 1e-5, 1e-5, "flash lse");
    // Errors.
    let e1 = matrix::scaled_dot_product_attention(&q, &k2, &v2, None, 0.1, false, None, false)
        .unwrap_err();
    assert!(e1.to_string().contains("dropout"), "{e1}");
    let m = Tensor::from_slice(&rt, &[true; 18], &[3, 6]).unwrap();
    let e2 = matrix::scaled_dot_product_attention(&q, &k2, &v2, Some(&m), 0.0, true, None, false)
        .unwrap_err();
    assert!(
        e2.to_string()
            .contains("Explicit attn_mask should not be set when is_causal=True"),
        "{e2}"
    );
    let kb = k2.to_dtype(DType::BF16).unwrap();
    let e3 = matrix::scaled_dot_product_attention(&q, &kb, &v2, None, 0.0, false, None, false)
        .unwrap_err();
    assert!(e3.to_string().contains("same dtype"), "{e3}");
    // Through the registry, as PyTorch passes the composite's arguments.
    let out = ops::call(
        &rt,
        "aten::scaled_dot_product_attention",
        vec![
            Value::Tensor(q.clone()),
            Value::Tensor(k2.clone()),
            Value::Tensor(v2.clone()),
            Value::None,
            Value::Float(0.0),
            Value::Bool(false),
            Value::Float(0.3),
            Value::Bool(false),
        ],
    )
    .unwrap();
    let Value::Tensor(t) = &out[0] else { panic!() };
    assert_close(&t.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "registry sdpa");
}

/// PyTorch's autograd calls the fused attention's backward with undefined tensors where the
/// forward had none to save (the bias of an unmasked call, the sequence offsets, the dropout
/// RNG state): the registry takes them as `None`, and the gradients are those of the CPU
/// path's backward on the same inputs. (A typed argument struct once required them: every
/// PyTorch training step with attention failed.)
#[test]
fn the_fused_attention_backward_takes_the_tensors_autograd_leaves_undefined() {
    let rt = rt(Mode::Strict);
    rt.set_precision(MatmulPrecision::Highest);
    let (h, l, e) = (2, 8, 16);
    let (q, _) = tensor(&rt, &rand(h * l * e, 70), &[1, h, l, e], DType::F32);
    let (k, _) = tensor(&rt, &rand(h * l * e, 71), &[1, h, l, e], DType::F32);
    let (v, _) = tensor(&rt, &rand(h * l * e, 72), &[1, h, l, e], DType::F32);
    let (g, _) = tensor(&rt, &rand(h * l * e, 73), &[1, h, l, e], DType::F32);
    let t = |x: &Tensor| Value::Tensor(x.clone());
    let fwd = ops::call(
        &rt,
        "aten::_scaled_dot_product_fused_attention_overrideable",
        vec![t(&q), t(&k), t(&v)],
    )
    .unwrap();
    let (Value::Tensor(out), Value::Tensor(lse)) = (&fwd[0], &fwd[1]) else {
        panic!("forward results: {fwd:?}")
    };
    let grads = ops::call(
        &rt,
        "aten::_scaled_dot_product_fused_attention_overrideable_backward",
        vec![
            t(&g),
            t(&q),
            t(&k),
            t(&v),
            Value::None, // attn_bias
            Value::Bools(vec![true, true, true, false]),
            t(out),
            t(lse),
            Value::None, // cum_seq_q
            Value::None, // cum_seq_k
            Value::Int(l as i64),
            Value::Int(l as i64),
            Value::Float(0.0),
            Value::Bool(false),
            Value::None, // philox_seed
            Value::None, // philox_offset
        ],
    )
    .unwrap();
    let cpu_path = ops::call(
        &rt,
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        vec![
            t(&g),
            t(&q),
            t(&k),
            t(&v),
            t(out),
            t(lse),
            Value::Float(0.0),
            Value::Bool(false),
        ],
    )
    .unwrap();
    for (i, what) in ["dq", "dk", "dv"].iter().enumerate() {
        let (Value::Tensor(a), Value::Tensor(b)) = (&grads[i], &cpu_path[i]) else {
            panic!("{what}: not a tensor")
        };
        assert_close(
            &a.to_f64_vec().unwrap(),
            &b.to_f64_vec().unwrap(),
            1e-6,
            1e-6,
            what,
        );
    }
    assert!(matches!(grads[3], Value::None), "no bias, no bias gradient");
}
