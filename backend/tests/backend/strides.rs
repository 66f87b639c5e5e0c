//! Elementwise outputs are laid out as PyTorch lays them out (`x.t() + 1` is as transposed as
//! `x.t()`), and what is computed from them — copies, reshapes, reductions, matmuls, fused
//! chains, compiled graphs — reads them right in every mode.
//!
//! The expected strides are PyTorch 2.15's (`torch.randn(3, 4).t().sin().stride()` and so on,
//! printed by torch); the expected values are computed here on the host in row-major order.

use tpuemu_backend::compile::compile;
use tpuemu_backend::{Mode, Tensor};

use crate::host::{MODES, rt};

/// `[3, 4]` holding 0, 1, .., 11 / 4.
fn x34(rt: &tpuemu_backend::Runtime) -> Tensor {
    let v: Vec<f32> = (0..12).map(|i| i as f32 / 4.0).collect();
    Tensor::from_slice(rt, &v, &[3, 4]).unwrap()
}

/// The values of `x34().t()` in row-major order of its `[4, 3]` shape.
fn xt_values() -> Vec<f32> {
    let mut out = Vec::new();
    for j in 0..4 {
        for i in 0..3 {
            out.push((i * 4 + j) as f32 / 4.0);
        }
    }
    out
}

#[test]
fn unary_and_binary_outputs_keep_the_inputs_order_of_dimensions() {
    for mode in MODES {
        let rt = rt(mode);
        let xt = x34(&rt).t().unwrap();
        // torch: x.t().sin().stride() == (1, 4)
        let s = xt.sin().unwrap();
        assert_eq!(s.strides(), &[1, 4], "{mode:?}");
        let want: Vec<f32> = xt_values().iter().map(|v| v.sin()).collect();
        let got = s.to_vec::<f32>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6, "{mode:?}: {got:?} vs {want:?}");
        }
        // torch: (x.t() + y).stride() == (1, 4); (y + x.t()).stride() == (3, 1) for a
        // contiguous y of shape [4, 3]: the first input that orders the dimensions decides.
        let y = Tensor::from_slice(&rt, &[1.0f32; 12], &[4, 3]).unwrap();
        let a = xt.add(&y).unwrap();
        let b = y.add(&xt).unwrap();
        assert_eq!(a.strides(), &[1, 4], "{mode:?}");
        assert_eq!(b.strides(), &[3, 1], "{mode:?}");
        let want: Vec<f32> = xt_values().iter().map(|v| v + 1.0).collect();
        assert_eq!(a.to_vec::<f32>().unwrap(), want, "{mode:?}");
        assert_eq!(b.to_vec::<f32>().unwrap(), want, "{mode:?}");
        // torch: (x.t() + torch.ones(3)).stride() == (1, 4): a broadcast input orders nothing.
        let row = Tensor::from_slice(&rt, &[0.0f32, 10.0, 20.0], &[3]).unwrap();
        let c = xt.add(&row).unwrap();
        assert_eq!(c.strides(), &[1, 4], "{mode:?}");
        let want: Vec<f32> = xt_values()
            .iter()
            .enumerate()
            .map(|(k, v)| v + 10.0 * (k % 3) as f32)
            .collect();
        assert_eq!(c.to_vec::<f32>().unwrap(), want, "{mode:?}");
    }
}

#[test]
fn permuted_outputs_feed_reshape_reduction_and_matmul() {
    for mode in MODES {
        let rt = rt(mode);
        let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let z = Tensor::from_slice(&rt, &v, &[2, 3, 4]).unwrap();
        // torch: z.permute(2, 0, 1).mul(2).stride() == (1, 12, 4)
        let p = z.permute(&[2, 0, 1]).unwrap().mul_scalar(2.0).unwrap();
        assert_eq!(p.shape(), &[4, 2, 3]);
        assert_eq!(p.strides(), &[1, 12, 4], "{mode:?}");
        // p[c][a][b] = 2 * z[a][b][c] = 2 * (12a + 4b + c)
        let mut want = Vec::new();
        for c in 0..4 {
            for a in 0..2 {
                for b in 0..3 {
                    want.push(2.0 * (12 * a + 4 * b + c) as f32);
                }
            }
        }
        // A reshape cannot view these strides: it copies, in logical order.
        let flat = p.reshape(&[-1]).unwrap();
        assert_eq!(flat.to_vec::<f32>().unwrap(), want, "{mode:?}");
        // Sum over the last dimension: p.sum(2)[c][a] = sum over b.
        let s = p.sum(&[2], false).unwrap();
        let want_s: Vec<f32> = (0..4)
            .flat_map(|c| {
                (0..2).map(move |a| (0..3).map(|b| 2.0 * (12 * a + 4 * b + c) as f32).sum())
            })
            .collect();
        assert_eq!(s.to_vec::<f32>().unwrap(), want_s, "{mode:?}");
        // A chain of elementwise ops over the strided result, then a matmul with a ones matrix:
        // each output row sums the row of (p + 1) over its 3 columns.
        let q = p.add_scalar(1.0).unwrap().reshape(&[8, 3]).unwrap();
        let ones = Tensor::from_slice(&rt, &[1.0f32; 6], &[3, 2]).unwrap();
        let m = q.matmul(&ones).unwrap();
        let rows: Vec<f32> = want
            .chunks(3)
            .map(|r| r.iter().map(|v| v + 1.0).sum())
            .collect();
        let want_m: Vec<f32> = rows.iter().flat_map(|r| [*r, *r]).collect();
        assert_eq!(m.to_vec::<f32>().unwrap(), want_m, "{mode:?}");
    }
}

#[test]
fn a_compiled_graph_returns_pytorch_strides_and_the_eager_values() {
    let rt = rt(Mode::Strict);
    let f = |xs: &[Tensor]| -> tpuemu_backend::Result<Vec<Tensor>> {
        let e = xs[0].t()?.mul_scalar(2.0)?.add_scalar(1.0)?;
        let r = e.reshape(&[-1])?;
        Ok(vec![e, r])
    };
    let x = x34(&rt);
    let mut g = compile(&rt, "strided", f);
    let got = g.call(&[x]).unwrap();
    assert_eq!(got[0].strides(), &[1, 4]);
    let want: Vec<f32> = xt_values().iter().map(|v| v * 2.0 + 1.0).collect();
    assert_eq!(got[0].to_vec::<f32>().unwrap(), want);
    assert_eq!(got[1].to_vec::<f32>().unwrap(), want);
}

#[test]
fn elementwise_work_on_a_large_transposed_view_matches_the_host() {
    // `[2, 300, 4, 64]` seen as `[2, 4, 300, 64]` (attention heads as a view): the output keeps
    // the input's memory order. Walked in the logical order, the kernel's tiles split the heads
    // (300 x 64 rows of each head are one tile's worth), interleaved in memory: their stores
    // overlapped and the kernel faulted.
    let (b, l, h, e) = (2usize, 300usize, 4usize, 64usize);
    let n = b * l * h * e;
    let v: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 16.0).collect();
    for mode in MODES {
        let rt = rt(mode);
        let x = Tensor::from_slice(&rt, &v, &[b, l, h, e]).unwrap();
        let xt = x.transpose(1, 2).unwrap();
        let y = xt.mul(&xt).unwrap();
        assert_eq!(y.strides(), xt.strides(), "{mode:?}");
        // Read back through a contiguous copy of the transposed view: element [bi, hi, li, ei].
        let got: Vec<f32> = y.contiguous().unwrap().to_vec().unwrap();
        let mut want = Vec::with_capacity(n);
        for bi in 0..b {
            for hi in 0..h {
                for li in 0..l {
                    for ei in 0..e {
                        let x = v[((bi * l + li) * h + hi) * e + ei];
                        want.push(x * x);
                    }
                }
            }
        }
        assert_eq!(got, want, "{mode:?}");
    }
}
