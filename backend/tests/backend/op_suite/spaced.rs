//! `linspace` against `start + (end - start) * i / (steps - 1)` in f64: float32 within
//! `torch.testing`'s tolerance, both ends exact (ATen computes the second half from `end`),
//! integer dtypes exact (drawn with a whole step); `steps` 0 and 1 give an empty tensor and `[start]`.

use proptest::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Out, Sample, check, v};
use super::reference::HostTensor;

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[("aten::linspace", linspace)];

#[test]
fn linspace() {
    check(
        "aten::linspace",
        (
            -50i64..50,
            -50i64..50,
            0i64..70,
            prop::sample::select(vec![DType::F32, DType::I32, DType::I64]),
        )
            .prop_map(|(s, e, n, d)| {
                // Integer dtypes: a whole step (ATen's double arithmetic is then exact too).
                let (s, e) = if d.is_float() {
                    (s as f64 * 0.75, e as f64 * 1.25)
                } else {
                    (s as f64, (s + (e % 4) * (n - 1).max(0)) as f64)
                };
                let vals: Vec<f64> = (0..n)
                    .map(|i| {
                        if n == 1 {
                            s
                        } else {
                            s + (e - s) * i as f64 / (n - 1) as f64
                        }
                    })
                    .collect();
                let want = HostTensor::new(&[n as usize], d, vals);
                let out = if d.is_float() {
                    Out::close(want)
                } else {
                    Out::exact(want)
                };
                let args = vec![
                    v(Value::Float(s)),
                    v(Value::Float(e)),
                    v(Value::Int(n)),
                    v(Value::Dtype(d)),
                ];
                Sample::new(args, vec![out])
            }),
    );
}
