//! The backend end to end on the emulator: tensors, a few operators, the modes.

use crate::host::rt;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Mode, Scalar, Tensor};

#[test]
fn add_broadcast_and_promotion() {
    for mode in [Mode::Strict, Mode::Debug, Mode::DeferAndFuse] {
        let rt = rt(mode);
        let a = Tensor::from_slice(&rt, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
        let b = Tensor::from_slice(&rt, &[10i64, 20, 30], &[3]).unwrap();
        let c = a.add(&b).unwrap();
        assert_eq!(c.dtype(), DType::F32);
        assert_eq!(c.shape(), &[2, 3]);
        assert_eq!(
            c.to_vec::<f32>().unwrap(),
            vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0],
            "{mode:?}"
        );
        let d = c.mul_scalar(0.5).unwrap().sub(&a).unwrap();
        assert_eq!(
            d.to_vec::<f32>().unwrap(),
            vec![4.5, 9.0, 13.5, 3.0, 7.5, 12.0]
        );
    }
}

#[test]
fn views_and_noncontiguous_inputs() {
    let rt = rt(Mode::Strict);
    let a =
        Tensor::from_slice(&rt, &(0..12).map(|x| x as f32).collect::<Vec<_>>(), &[3, 4]).unwrap();
    let t = a.t().unwrap();
    assert!(!t.is_contiguous());
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        vec![0.0, 4.0, 8.0, 1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0, 7.0, 11.0]
    );
    let s = t.add(&t).unwrap();
    assert_eq!(s.shape(), &[4, 3]);
    assert_eq!(s.to_vec::<f32>().unwrap()[..3], [0.0, 8.0, 16.0]);
}

#[test]
fn dynamic_calls_by_overload_name() {
    let rt = rt(Mode::Strict);
    let a = Tensor::from_slice(&rt, &[1.0f32, -2.0, 3.0], &[3]).unwrap();
    let out = ops::call(
        &rt,
        "aten::add.Tensor",
        vec![
            Value::Tensor(a.clone()),
            Value::Tensor(a.clone()),
            Value::Int(3),
        ],
    )
    .unwrap();
    let Value::Tensor(t) = &out[0] else { panic!() };
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![4.0, -8.0, 12.0]);
    let gt = ops::call(
        &rt,
        "aten::gt.Scalar",
        vec![Value::Tensor(a.clone()), Value::Float(0.0)],
    )
    .unwrap();
    let Value::Tensor(g) = &gt[0] else { panic!() };
    assert_eq!(g.dtype(), DType::Bool);
    assert_eq!(g.to_vec::<bool>().unwrap(), vec![true, false, true]);
    assert!(ops::call(&rt, "aten::nope", vec![]).is_err());
    let e = ops::call(&rt, "aten::add.Tensor", vec![Value::Tensor(a.clone())]).unwrap_err();
    assert!(
        e.to_string()
            .contains("aten::add.Tensor(): missing required argument 'other'"),
        "{e}"
    );
    // Keyword arguments and defaults come from PyTorch's schema.
    let out = ops::call_kw(
        &rt,
        "aten::sub.Tensor",
        vec![Value::Tensor(a.clone()), Value::Tensor(a.clone())],
        vec![("alpha".into(), Value::Int(2))],
    )
    .unwrap();
    let Value::Tensor(t) = &out[0] else { panic!() };
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![-1.0, 2.0, -3.0]);
    let e = ops::call_kw(
        &rt,
        "aten::neg",
        vec![Value::Tensor(a)],
        vec![("beta".into(), Value::Int(1))],
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("unexpected keyword argument 'beta'"),
        "{e}"
    );
}

#[test]
fn shape_errors_read_like_pytorch() {
    let rt = rt(Mode::Strict);
    let a = Tensor::from_slice(&rt, &[1.0f32; 6], &[2, 3]).unwrap();
    let b = Tensor::from_slice(&rt, &[1.0f32; 4], &[4]).unwrap();
    let e = a.add(&b).unwrap_err().to_string();
    assert!(e.contains("must match the size of tensor b"), "{e}");
}

#[test]
fn factories_and_bf16() {
    let rt = rt(Mode::Strict);
    let z =
        ops::creation::arange(&rt, Scalar::Int(0), Scalar::Int(5), Scalar::Int(1), None).unwrap();
    assert_eq!(z.dtype(), DType::I64);
    assert_eq!(z.to_vec::<i64>().unwrap(), vec![0, 1, 2, 3, 4]);
    let x = Tensor::from_slice(&rt, &[1.0f32, 2.0, 3.0], &[3])
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let y = x.mul_scalar(1.0 / 3.0).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    let got = y.to_vec::<f32>().unwrap();
    let want: Vec<f32> = [1.0f32, 2.0, 3.0]
        .iter()
        .map(|v| half::bf16::from_f32(v * (1.0f32 / 3.0)).to_f32())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn defer_fuses_an_elementwise_chain_into_one_kernel() {
    let rt = rt(Mode::DeferAndFuse);
    let a = Tensor::from_slice(&rt, &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    rt.reset_metrics();
    let b = a
        .mul_scalar(2.0)
        .unwrap()
        .add_scalar(1.0)
        .unwrap()
        .mul(&a)
        .unwrap();
    assert_eq!(rt.metrics().kernels_launched, 0);
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![3.0, 10.0, 21.0, 36.0]);
    let m = rt.metrics();
    assert_eq!(m.kernels_launched, 1, "{}", m.report());
    assert_eq!(m.flushes.get("read to host"), Some(&1));
}
