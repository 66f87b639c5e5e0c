//! The host clock's charges, against sums worked out by hand from the operators each test
//! calls: a view costs `view_ns` in every mode, any other operator the mode's dispatch or
//! record cost, and tracing a graph for compilation counts as compile time.

use tpuemu_backend::compile::compile;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{HostCosts, Mode, Runtime, Tensor};

use crate::host::rt;

/// Costs that tell the charges apart: operators 1,000 ns (dispatched) or 2,000 ns (recorded),
/// views 7 ns, nothing else.
fn distinct_costs(rt: &Runtime) {
    rt.set_costs(HostCosts {
        op_dispatch_ns: 1000.0,
        view_ns: 7.0,
        launch_ns: 0.0,
        record_ns: 2000.0,
        flush_ns: 0.0,
        flush_op_ns: 0.0,
        compile_ns: 0.0,
    });
}

fn input(rt: &Runtime) -> Tensor {
    let xs: Vec<f32> = (0..32).map(|i| i as f32).collect();
    Tensor::from_slice(rt, &xs, &[4, 8]).unwrap()
}

#[test]
fn views_cost_view_ns_in_every_mode() {
    for (mode, op_ns, kind) in [
        (Mode::Strict, 1000.0, "dispatch"),
        (Mode::Debug, 1000.0, "dispatch"),
        (Mode::DeferAndFuse, 2000.0, "record"),
    ] {
        let rt = rt(mode);
        distinct_costs(&rt);
        let x = input(&rt);
        rt.sync().unwrap();
        rt.reset_metrics();
        // Five views (`reshape` of compatible strides is one), then one operator. (Host work,
        // not host time: Debug also waits for the device.)
        let v = x
            .t()
            .unwrap()
            .unsqueeze(0)
            .unwrap()
            .permute(&[0, 2, 1])
            .unwrap();
        let v = v.reshape(&[32]).unwrap().view_shape(&[8, 4]).unwrap();
        let views_ns = rt.metrics().host_busy_ns;
        let y = v.mul(&v).unwrap();
        let all_ns = rt.metrics().host_busy_ns;
        assert_eq!(views_ns, 5.0 * 7.0, "{mode:?}");
        assert_eq!(all_ns, 5.0 * 7.0 + op_ns, "{mode:?}");
        let m = rt.metrics();
        assert_eq!((m.ops, m.view_calls), (6, 5), "{mode:?}");
        // The host's work by kind: five views, one operator dispatched or recorded (launches
        // and kernel generation cost nothing here).
        let by: Vec<(&str, f64)> = m
            .host_ns_by
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        let mut want = vec![(kind, op_ns), ("view", 5.0 * 7.0)];
        want.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(by, want, "{mode:?}");
        // The views changed nothing the device computes.
        // (t then permute(0, 2, 1) restore the [4, 8] order: v is x read as [8, 4].)
        assert_eq!(y.to_vec::<f32>().unwrap()[5], 25.0, "{mode:?}");
    }
}

#[test]
fn view_operators_called_by_name_cost_view_ns() {
    let rt = rt(Mode::DeferAndFuse);
    distinct_costs(&rt);
    let x = input(&rt);
    rt.sync().unwrap();
    let (t, i, is) = (
        || Value::Tensor(x.clone()),
        Value::Int,
        |v: &[i64]| Value::Ints(v.to_vec()),
    );
    // Every view overload, with arguments PyTorch's schemas take (x is [4, 8]).
    let calls: Vec<(&str, Vec<Value>)> = vec![
        ("aten::alias", vec![t()]),
        ("aten::detach", vec![t()]),
        ("aten::lift_fresh", vec![t()]),
        ("aten::lift", vec![t()]),
        ("aten::view", vec![t(), is(&[8, 4])]),
        ("aten::_unsafe_view", vec![t(), is(&[32])]),
        ("aten::as_strided", vec![t(), is(&[2, 2]), is(&[8, 1])]),
        ("aten::expand", vec![t(), is(&[2, 4, 8])]),
        ("aten::permute", vec![t(), is(&[1, 0])]),
        ("aten::t", vec![t()]),
        ("aten::transpose.int", vec![t(), i(0), i(1)]),
        ("aten::unsqueeze", vec![t(), i(0)]),
        ("aten::squeeze", vec![t()]),
        ("aten::squeeze.dim", vec![t(), i(0)]),
        ("aten::squeeze.dims", vec![t(), is(&[0])]),
        ("aten::select.int", vec![t(), i(0), i(1)]),
        ("aten::slice.Tensor", vec![t(), i(1), i(0), i(4), i(1)]),
        ("aten::narrow", vec![t(), i(1), i(2), i(3)]),
        ("aten::diagonal", vec![t()]),
        ("aten::unfold", vec![t(), i(1), i(2), i(2)]),
        ("aten::split.Tensor", vec![t(), i(2)]),
        ("aten::unsafe_split.Tensor", vec![t(), i(2)]),
        ("aten::split_with_sizes", vec![t(), is(&[1, 3])]),
        ("aten::unsafe_split_with_sizes", vec![t(), is(&[1, 3])]),
        ("aten::unbind.int", vec![t()]),
    ];
    for (name, args) in calls {
        rt.reset_metrics();
        ops::call(&rt, name, args).unwrap_or_else(|e| panic!("{name}: {e}"));
        let m = rt.metrics();
        assert_eq!((m.view_calls, m.host_busy_ns), (1, 7.0), "{name}");
    }
}

#[test]
fn a_reshape_that_copies_is_a_view_and_a_clone() {
    let rt = rt(Mode::Strict);
    distinct_costs(&rt);
    let x = input(&rt);
    rt.sync().unwrap();
    let t0 = rt.host_time_ns();
    // A transposed [8, 4] cannot be flattened without a copy.
    let flat = x.t().unwrap().reshape(&[32]).unwrap();
    assert_eq!(rt.host_time_ns() - t0, 7.0 + 7.0 + 1000.0);
    assert_eq!(flat.to_vec::<f32>().unwrap()[1], 8.0);
}

#[test]
fn tracing_a_graph_counts_as_compile_time_once() {
    // Traced operators cost what the mode the capture started in charges.
    for (mode, op_ns) in [(Mode::Strict, 1000.0), (Mode::DeferAndFuse, 2000.0)] {
        let rt = rt(mode);
        distinct_costs(&rt);
        let x = input(&rt);
        rt.sync().unwrap();
        rt.reset_metrics();
        // Two operators and two views.
        let mut g = compile(&rt, "f", |xs: &[Tensor]| {
            let a = xs[0].mul_scalar(2.0)?.t()?;
            Ok(vec![a.add_scalar(1.0)?.unsqueeze(0)?])
        });
        let out = g.call(std::slice::from_ref(&x)).unwrap();
        // Element [0, 0, 1] is x[1, 0] * 2 + 1.
        assert_eq!(out[0].to_vec::<f32>().unwrap()[1], 8.0 * 2.0 + 1.0);
        let first = rt.metrics().compile_ns;
        assert_eq!(first, 2.0 * op_ns + 2.0 * 7.0, "{mode:?}");
        assert_eq!(
            rt.metrics().host_ns_by.get("trace"),
            Some(&first),
            "{mode:?}"
        );
        // A second call traces nothing: one call of the compiled graph, no compile time.
        rt.reset_metrics();
        g.call(std::slice::from_ref(&x)).unwrap();
        let m = rt.metrics();
        assert_eq!((m.compile_ns, m.host_busy_ns), (0.0, op_ns), "{mode:?}");
    }
}
