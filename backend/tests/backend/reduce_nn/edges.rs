//! Empty reductions, errors, and the argument lists PyTorch passes, through the registry.

use super::*;

#[test]
fn empty_reductions() {
    for mode in MODES {
        let rt = rt(mode);
        let (x, _) = tensor(&rt, &[], &[3, 0], DType::F32);
        // Reducing the empty dim: values for no elements.
        check(
            &x.sum(&[1], false).unwrap(),
            &[0.0; 3],
            &[3],
            DType::F32,
            "sum empty",
        );
        check(
            &x.sum_all().unwrap(),
            &[0.0],
            &[],
            DType::F32,
            "sum_all empty",
        );
        check(
            &x.mean(&[1], true).unwrap(),
            &[f64::NAN; 3],
            &[3, 1],
            DType::F32,
            "mean empty",
        );
        check(&x.prod().unwrap(), &[1.0], &[], DType::F32, "prod empty");
        check(
            &x.var(&[1], 1.0, false).unwrap(),
            &[f64::NAN; 3],
            &[3],
            DType::F32,
            "var empty",
        );
        // Reducing a non-empty dim of an empty tensor: an empty result.
        check(
            &x.amax(&[0], false).unwrap(),
            &[],
            &[0],
            DType::F32,
            "amax outer empty",
        );
        check(
            &x.sum(&[0], true).unwrap(),
            &[],
            &[1, 0],
            DType::F32,
            "sum outer empty",
        );
        let (vals, idx) = x.max_dim(0, false).unwrap();
        check(&vals, &[], &[0], DType::F32, "max.dim outer empty");
        check(&idx, &[], &[0], DType::I64, "max.dim indices outer empty");
        // No identity: PyTorch's errors.
        let e = x.amax(&[1], false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "IndexError: amax(): Expected reduction dim 1 to have non-zero size."
        );
        let e = x.amax(&[], false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("amax(): Expected reduction dim to be specified"),
            "{e}"
        );
        assert!(x.max_dim(-1, false).is_err());
        let e = x.argmax(None, false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("argmax(): Expected reduction dim to be specified"),
            "{e}"
        );
        assert!(x.argmax(Some(1), false).is_err());
        assert!(ops::reduce::max_all(&x).is_err());
        // Softmax of an empty tensor is empty.
        check(
            &x.softmax(1).unwrap(),
            &[],
            &[3, 0],
            DType::F32,
            "softmax empty",
        );
    }
}

#[test]
fn reduction_errors() {
    let rt = rt(Mode::Strict);
    let (x, _) = tensor(&rt, &data(6, 1), &[2, 3], DType::F32);
    assert!(matches!(x.sum(&[2], false), Err(TpuError::BadDim(_))));
    assert!(
        x.sum(&[1, -1], false)
            .unwrap_err()
            .to_string()
            .contains("appears multiple times")
    );
    let (i, _) = tensor(&rt, &[1.0, 2.0], &[2], DType::I64);
    let e = i.mean(&[0], false).unwrap_err().to_string();
    assert_eq!(
        e,
        "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Long"
    );
    let e = ops::reduce::mean(&x, &[0], false, Some(DType::I32))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Optional dtype must be either a floating point"),
        "{e}"
    );
    // An int input with a float dtype is fine.
    let m = ops::reduce::mean(&i, &[0], false, Some(DType::F32)).unwrap();
    check(&m, &[1.5], &[], DType::F32, "int mean dtype=f32");
    let (b, _) = tensor(&rt, &[1.0, 0.0], &[2], DType::Bool);
    assert!(b.argmax(None, false).is_err());
    assert!(x.argmax(Some(2), false).is_err());
}

/// The golden cases' argument lists, through the registry.
#[test]
fn dynamic_calls_with_pytorch_argument_lists() {
    let rt = rt(Mode::DeferAndFuse);
    let (x, xv) = tensor(&rt, &data(24, 4), &[2, 3, 4], DType::F32);
    let one = |name: &str, args: Vec<Value>| -> Tensor {
        match ops::call(&rt, name, args).unwrap().remove(0) {
            Value::Tensor(t) => t,
            other => panic!("{name}: {other:?}"),
        }
    };
    let xt = || Value::Tensor(x.clone());
    let total = sum(&xv);
    let s = one(
        "aten::sum.dim_IntList",
        vec![xt(), Value::None, Value::Bool(false), Value::None],
    );
    check(&s, &[total], &[], DType::F32, "sum dim=None");
    let s = one(
        "aten::sum.dim_IntList",
        vec![
            xt(),
            Value::Ints(vec![0, 1, 2]),
            Value::Bool(true),
            Value::Dtype(DType::F32),
        ],
    );
    check(&s, &[total], &[1, 1, 1], DType::F32, "sum all keepdim");
    check(
        &one("aten::sum", vec![xt(), Value::None]),
        &[total],
        &[],
        DType::F32,
        "aten::sum",
    );
    let m = one(
        "aten::mean.dim",
        vec![
            xt(),
            Value::Ints(vec![-1, -2]),
            Value::Bool(true),
            Value::None,
        ],
    );
    let want: Vec<f64> = ref_rows(&xv, &[2, 3, 4], &[1, 2])
        .iter()
        .map(|r| sum(r) / 12.0)
        .collect();
    check(&m, &want, &[2, 1, 1], DType::F32, "mean.dim");
    check(
        &one("aten::mean", vec![xt(), Value::None]),
        &[total / 24.0],
        &[],
        DType::F32,
        "mean",
    );
    let a = one(
        "aten::amax",
        vec![xt(), Value::Ints(vec![]), Value::Bool(false)],
    );
    check(&a, &[nan_max(&xv)], &[], DType::F32, "amax dim=[]");
    let v = one(
        "aten::var.correction",
        vec![xt(), Value::None, Value::None, Value::Bool(false)],
    );
    check(&v, &[variance(&xv, 1.0)], &[], DType::F32, "var defaults");
    let v = one(
        "aten::var.correction",
        vec![
            xt(),
            Value::Ints(vec![0]),
            Value::Int(0),
            Value::Bool(false),
        ],
    );
    let want: Vec<f64> = ref_rows(&xv, &[2, 3, 4], &[0])
        .iter()
        .map(|r| variance(r, 0.0))
        .collect();
    check(&v, &want, &[3, 4], DType::F32, "var dim=[0] correction=0");
    let out = ops::call(
        &rt,
        "aten::max.dim",
        vec![xt(), Value::Int(1), Value::Bool(false)],
    )
    .unwrap();
    assert_eq!(out.len(), 2);
    let a = one("aten::argmax", vec![xt(), Value::None, Value::Bool(false)]);
    check(&a, &[first_argmax(&xv)], &[], DType::I64, "argmax None");
    let p = one("aten::prod", vec![xt(), Value::None]);
    check(&p, &[xv.iter().product()], &[], DType::F32, "prod");
    let y = one(
        "aten::_softmax",
        vec![xt(), Value::Int(-1), Value::Bool(false)],
    );
    assert_eq!(y.shape(), &[2, 3, 4]);
    let out = ops::call(
        &rt,
        "aten::native_layer_norm",
        vec![
            xt(),
            Value::Ints(vec![4]),
            Value::None,
            Value::None,
            Value::Float(1e-5),
        ],
    )
    .unwrap();
    assert_eq!(out.len(), 3);
    let r = one(
        "aten::rms_norm",
        vec![xt(), Value::Ints(vec![4]), Value::None, Value::None],
    );
    assert_eq!(r.shape(), &[2, 3, 4]);
    for name in [
        "aten::sum",
        "aten::sum.dim_IntList",
        "aten::mean.dim",
        "aten::amax",
        "aten::amin",
        "aten::max.dim",
        "aten::argmax",
        "aten::var.correction",
        "aten::prod",
        "aten::_softmax",
        "aten::_log_softmax",
        "aten::native_layer_norm",
        "aten::rms_norm",
        "aten::nll_loss_forward",
    ] {
        let def = ops::registry().get(name).unwrap();
        assert!(
            def.schema.to_string().starts_with(name),
            "{name}: {}",
            def.schema
        );
    }
}
