//! Whole-graph compilation: the same results as eager, one launch per call, recompiles only on
//! a new signature (and says why), memory planning.

use tpuemu_backend::compile::compile;
use tpuemu_backend::{Mode, Tensor};

use crate::host::rt;

fn f(xs: &[Tensor]) -> tpuemu_backend::Result<Vec<Tensor>> {
    let (x, y) = (&xs[0], &xs[1]);
    let a = x.mul(y)?.add_scalar(1.0)?;
    let b = a.mul(&a)?.sub(x)?;
    let c = b.mul_scalar(0.5)?;
    Ok(vec![c, a])
}

#[test]
fn compiled_graph_matches_eager_with_one_launch() {
    let rt = rt(Mode::Strict);
    let xs: Vec<f32> = (0..5000).map(|i| (i as f32) * 0.01 - 20.0).collect();
    let ys: Vec<f32> = (0..5000).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let x = Tensor::from_slice(&rt, &xs, &[50, 100]).unwrap();
    let y = Tensor::from_slice(&rt, &ys, &[50, 100]).unwrap();
    let want: Vec<Vec<f32>> = f(&[x.clone(), y.clone()])
        .unwrap()
        .iter()
        .map(|t| t.to_vec::<f32>().unwrap())
        .collect();
    let mut g = compile(&rt, "f", f);
    let got = g.call(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(got[0].to_vec::<f32>().unwrap(), want[0]);
    assert_eq!(got[1].to_vec::<f32>().unwrap(), want[1]);
    rt.reset_metrics();
    let again = g.call(&[y.clone(), x.clone()]).unwrap();
    let _ = again[0].to_vec::<f32>().unwrap();
    assert_eq!(
        rt.metrics().kernels_launched,
        1,
        "{}",
        rt.metrics().report()
    );
    assert_eq!(g.compiles(), 1);
    // A new shape compiles again, and the metrics say why.
    let x2 = Tensor::from_slice(&rt, &xs[..100], &[1, 100]).unwrap();
    let y2 = Tensor::from_slice(&rt, &ys[..100], &[1, 100]).unwrap();
    let r = g.call(&[x2, y2]).unwrap();
    assert_eq!(r[0].shape(), &[1, 100]);
    assert_eq!(g.compiles(), 2);
    let m = rt.metrics();
    assert!(
        m.graph_compiles
            .keys()
            .any(|k| k.contains("input 0 shape changed from [50, 100] to [1, 100]")),
        "{:?}",
        m.graph_compiles
    );
}

#[test]
fn reading_inside_a_compiled_function_is_an_error() {
    let rt = rt(Mode::Strict);
    let x = Tensor::from_slice(&rt, &[1.0f32, 2.0], &[2]).unwrap();
    let mut g = compile(&rt, "bad", |xs: &[Tensor]| {
        let v = xs[0].to_vec::<f32>()?;
        Ok(vec![xs[0].mul_scalar(v[0] as f64)?])
    });
    let e = g.call(&[x]).unwrap_err().to_string();
    assert!(e.contains("inside a compiled function"), "{e}");
}

/// A tensor the function uploads from the host while it is captured (a constant) keeps its
/// values in the compiled graph, on every call; returned as is, it comes back unchanged.
#[test]
fn host_constants_made_during_capture_keep_their_values() {
    let rt = rt(Mode::Strict);
    let x = Tensor::from_slice(&rt, &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let rt2 = rt.clone();
    let mut g = compile(&rt, "consts", move |xs: &[Tensor]| {
        let c = Tensor::from_slice(&rt2, &[10.0f32, 20.0, 30.0, 40.0], &[4])?;
        Ok(vec![xs[0].add(&c)?, c])
    });
    for _ in 0..2 {
        let o = g.call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(o[0].to_vec::<f32>().unwrap(), [11.0, 22.0, 33.0, 44.0]);
        assert_eq!(o[1].to_vec::<f32>().unwrap(), [10.0, 20.0, 30.0, 40.0]);
    }
}
