//! DeferAndFuse's plan cache and the lowering memo: a graph (a node) seen before reuses its
//! plan (its kernel) and binds the new storages — the values are the new inputs', as Strict
//! computes them or as worked out by hand; what changes the plan (a shape, a tensor kept
//! alive, operands that alias) misses.

use tpuemu_backend::{Mode, Runtime, Tensor};

use crate::host::rt;

fn data(n: usize, seed: u32) -> Vec<f32> {
    crate::inputs::hashed(n, seed, 1)
}

/// A small forward and backward-like step: a product, its activation, a softmax and a
/// column sum, read back (one flush per step).
fn step(rt: &Runtime, w: &Tensor, x: &[f32], rows: usize) -> Vec<f32> {
    let x = Tensor::from_slice(rt, x, &[rows, 64]).unwrap();
    let h = x.mm(w).unwrap().relu().unwrap().mul_scalar(0.5).unwrap();
    let p = h.softmax(-1).unwrap();
    let s = p.mul(&h).unwrap().sum(&[0], false).unwrap();
    s.to_vec::<f32>().unwrap()
}

#[test]
fn a_training_loop_reuses_its_plan_from_the_second_step() {
    let d = rt(Mode::DeferAndFuse);
    let s = rt(Mode::Strict);
    let wd = Tensor::from_slice(&d, &data(64 * 64, 1), &[64, 64]).unwrap();
    let ws = Tensor::from_slice(&s, &data(64 * 64, 1), &[64, 64]).unwrap();
    d.sync().unwrap();
    for k in 0..4u32 {
        let x = data(16 * 64, 10 + k);
        d.reset_metrics();
        let fused = step(&d, &wd, &x, 16);
        let m = d.metrics();
        // New inputs each step: a plan bound to the last step's storages would give its values.
        assert_eq!(fused, step(&s, &ws, &x, 16), "step {k}");
        if k == 0 {
            assert!(m.plan_misses >= 1 && m.plan_hits == 0, "{}", m.report());
        } else {
            assert_eq!(m.plan_misses, 0, "step {k}: {}", m.report());
            assert!(m.plan_hits >= 1, "step {k}: {}", m.report());
            assert_eq!(m.cache_misses, 0, "step {k}: {}", m.report());
        }
    }
    // A changed shape is another graph: planned afresh, and right.
    d.reset_metrics();
    let x = data(8 * 64, 99);
    assert_eq!(step(&d, &wd, &x, 8), step(&s, &ws, &x, 8));
    let m = d.metrics();
    assert!(m.plan_misses >= 1 && m.plan_hits == 0, "{}", m.report());
}

#[test]
fn a_tensor_kept_alive_is_another_plan() {
    let d = rt(Mode::DeferAndFuse);
    let x = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    // a = x * 2 dies inside the graph (never written back) unless the caller keeps it.
    let run = |keep: bool| -> (Option<Tensor>, Vec<f32>) {
        let a = x.mul_scalar(2.0).unwrap();
        let b = a.add_scalar(1.0).unwrap();
        let kept = keep.then_some(a);
        let out = b.to_vec::<f32>().unwrap();
        (kept, out)
    };
    d.sync().unwrap();
    assert_eq!(run(false).1, [3.0, 5.0, 7.0, 9.0]);
    d.reset_metrics();
    assert_eq!(run(false).1, [3.0, 5.0, 7.0, 9.0]);
    assert_eq!((d.metrics().plan_hits, d.metrics().plan_misses), (1, 0));
    // Kept: the plan that dropped `a` would leave it unwritten.
    let (a, out) = run(true);
    assert_eq!(out, [3.0, 5.0, 7.0, 9.0]);
    assert_eq!(d.metrics().plan_misses, 1);
    assert_eq!(a.unwrap().to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);
}

#[test]
fn aliased_operands_are_told_apart() {
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let r = rt(mode);
        let x = Tensor::from_slice(&r, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let y = Tensor::from_slice(&r, &[5.0f32, 7.0, 11.0], &[3]).unwrap();
        // `x * x` first: its kernel reads one storage twice; `x * y` must not reuse that binding.
        assert_eq!(x.mul(&x).unwrap().to_vec::<f32>().unwrap(), [1.0, 4.0, 9.0]);
        assert_eq!(
            x.mul(&y).unwrap().to_vec::<f32>().unwrap(),
            [5.0, 14.0, 33.0]
        );
        assert_eq!(
            y.mul(&y).unwrap().to_vec::<f32>().unwrap(),
            [25.0, 49.0, 121.0]
        );
    }
}

#[test]
fn storage_offsets_are_arguments_of_a_remembered_tile_kernel() {
    let r = rt(Mode::Strict);
    let x = Tensor::from_slice(&r, &(0..8).map(|i| i as f32).collect::<Vec<_>>(), &[2, 4]).unwrap();
    // Rows 0 and 1 have one structure and two offsets: one kernel, each row's own values.
    let row = |i: usize| {
        tpuemu_backend::ops::layout_ops::select(&x, 0, i as i64)
            .unwrap()
            .add_scalar(10.0)
            .unwrap()
    };
    assert_eq!(row(0).to_vec::<f32>().unwrap(), [10.0, 11.0, 12.0, 13.0]);
    r.reset_metrics();
    assert_eq!(row(1).to_vec::<f32>().unwrap(), [14.0, 15.0, 16.0, 17.0]);
    assert_eq!(r.metrics().cache_misses, 0);
}
