//! User kernels as operators: an assembly kernel registered as `mylib::fused_swiglu`, called
//! like any other operator in every mode.

use std::sync::Arc;

use tpuemu_backend::ops::custom::{self, CustomOp};
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Mode, Tensor};

use crate::host::rt;

fn register() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/swiglu.s"))
        .unwrap();
    let program = tpuemu_isa::assemble(&src).unwrap();
    custom::register(CustomOp {
        name: "mylib::fused_swiglu".into(),
        program: Arc::new(program),
        inputs: 2,
        infer: Arc::new(|ins| {
            if ins[0] != ins[1] || ins[0].1 != DType::F32 {
                return Err(tpuemu_backend::TpuError::BadArgs(
                    "fused_swiglu takes two f32 tensors of one shape".into(),
                ));
            }
            Ok(vec![ins[0].clone()])
        }),
        scalars: Arc::new(|ins| vec![ins[0].0.iter().product::<usize>() as u32]),
    })
    .unwrap();
}

#[test]
fn custom_kernel_runs_in_every_mode() {
    register();
    let n = 3000;
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 1500.0) / 300.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 + (i % 7) as f32).collect();
    for mode in [Mode::Strict, Mode::Debug, Mode::DeferAndFuse] {
        let rt = rt(mode);
        let x = Tensor::from_slice(&rt, &xs, &[30, 100]).unwrap();
        let y = Tensor::from_slice(&rt, &ys, &[30, 100]).unwrap();
        // The inputs may be produced by other (fused) operators first.
        let x2 = x.mul_scalar(1.0).unwrap();
        let out = ops::call(
            &rt,
            "mylib::fused_swiglu",
            vec![Value::Tensor(x2), Value::Tensor(y.clone())],
        )
        .unwrap();
        let Value::Tensor(out) = &out[0] else {
            panic!()
        };
        let got = out.to_vec::<f32>().unwrap();
        for i in 0..n {
            let s = 1.0 / (1.0 + libm::expf(-xs[i]));
            assert_eq!(
                got[i].to_bits(),
                (s * xs[i] * ys[i]).to_bits(),
                "{mode:?} element {i}"
            );
        }
        let bad = Tensor::from_slice(&rt, &[1.0f32; 4], &[4]).unwrap();
        assert!(custom::call_custom("mylib::fused_swiglu", &[&x, &bad]).is_err());
    }
    assert!(custom::names().contains(&"mylib::fused_swiglu".to_string()));
}
