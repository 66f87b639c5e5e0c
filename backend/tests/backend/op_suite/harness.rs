//! Runs one sample of one operator in every mode and compares it with the reference.
//!
//! A [`Sample`] is an operator call in schema order — tensor arguments as host values with a
//! [`Placement`] in device memory, the rest as [`Value`]s — and what the reference says it
//! gives: output values with a tolerance, or an error. [`check`] draws samples from a strategy
//! (a fixed seed per operator, so every run sees the same samples) and runs each through
//! `ops::call` in Strict, Debug and DeferAndFuse, and through a whole-graph
//! [`compile`](tpuemu_backend::compile::compile) of the call (Compile). Each run also checks
//! that no input was written (unless the operator is in-place) and that no call panics.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use tpuemu_backend::compile::compile;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, MatmulPrecision, Mode, Runtime, Scalar, Tensor, TpuError};
use tpuemu_emulator::{Emulator, builtin};

use super::reference::{HostTensor, indices};

#[path = "harness/derived.rs"]
mod derived;
use derived::verify_derived;

/// Samples per operator: enough to meet every shape class a few times, few enough that the
/// whole suite takes a few seconds on two cores. `OP_SUITE_CASES=N` asks for more (a deeper
/// local search: the seeds stay fixed, so a run with N samples repeats).
pub const CASES: u32 = 64;

/// How the suite runs an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuiteMode {
    /// Eager, asynchronous launches.
    Strict,
    /// Eager, each operator waits for its kernels.
    Debug,
    /// Recorded, fused and run at the read.
    DeferAndFuse,
    /// The call as a whole-graph compiled function (on a Strict runtime).
    Compile,
}

/// Every mode the project has.
pub const MODES: [SuiteMode; 4] = [
    SuiteMode::Strict,
    SuiteMode::Debug,
    SuiteMode::DeferAndFuse,
    SuiteMode::Compile,
];

/// A runtime on an emulated v5e in `mode`.
pub fn runtime(mode: SuiteMode) -> Runtime {
    let emu = Emulator::new(builtin("v5e").expect("v5e preset")).expect("emulator");
    let rt = Runtime::new(Arc::new(emu)).expect("runtime");
    rt.set_mode(match mode {
        SuiteMode::Strict | SuiteMode::Compile => Mode::Strict,
        SuiteMode::Debug => Mode::Debug,
        SuiteMode::DeferAndFuse => Mode::DeferAndFuse,
    })
    .expect("mode");
    rt
}

/// Where an input's elements sit in its storage: the storage holds the dims in the order
/// `perm` (outermost first), `steps[d]` apart along dim `d`, after `offset` unused elements;
/// an `expanded` dim has stride 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// Memory order of the dims, outermost first.
    pub perm: Vec<usize>,
    /// Distance between neighbours along each dim, in units of the dense stride.
    pub steps: Vec<usize>,
    /// Elements before element `[0, ...]`.
    pub offset: usize,
    /// Dims of stride 0.
    pub expanded: Vec<bool>,
}

impl Placement {
    /// Row-major contiguous.
    pub fn contiguous(n: usize) -> Placement {
        Placement {
            perm: (0..n).collect(),
            steps: vec![1; n],
            offset: 0,
            expanded: vec![false; n],
        }
    }

    /// Strides (in elements) for `shape` and the storage length they need.
    pub fn strides(&self, shape: &[usize]) -> (Vec<usize>, usize) {
        let n = shape.len();
        let mut dense = vec![0usize; n];
        let mut acc = 1usize;
        for &d in self.perm.iter().rev() {
            dense[d] = acc;
            let padded = if self.expanded[d] {
                1
            } else {
                shape[d] * self.steps[d]
            };
            acc *= padded.max(1);
        }
        let strides: Vec<usize> = (0..n)
            .map(|d| {
                if self.expanded[d] {
                    0
                } else {
                    dense[d] * self.steps[d]
                }
            })
            .collect();
        (strides, self.offset + acc)
    }
}

/// A tensor argument: its values and where they sit.
#[derive(Clone, Debug)]
pub struct Input {
    /// The logical values.
    pub host: HostTensor,
    /// The layout in device memory.
    pub place: Placement,
}

impl Input {
    /// A contiguous input holding `host`.
    pub fn plain(host: HostTensor) -> Input {
        let n = host.dim();
        Input {
            host,
            place: Placement::contiguous(n),
        }
    }
}

/// One argument in schema order.
#[derive(Clone, Debug)]
pub enum Arg {
    /// `Tensor`.
    T(Input),
    /// `Tensor[]`.
    Ts(Vec<Input>),
    /// `Tensor?[]`.
    OptTs(Vec<Option<Input>>),
    /// Anything else (never a tensor).
    V(Value),
}

/// How close an output must be: `|got - want| <= atol + rtol * |want| + extra[i]`, with NaN
/// equal to NaN and infinities exact (`torch.testing.assert_close(equal_nan=True)`).
#[derive(Clone, Debug)]
pub struct Tol {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Per-element error bound on top (from the operator's numerics), if any.
    pub extra: Option<Vec<f64>>,
}

impl Tol {
    /// `torch.testing`'s defaults for `dtype`: f32 1.3e-6/1e-5, bf16 1.6e-2/1e-5, f16
    /// 1e-3/1e-5, integers and bool exact.
    pub fn of(dtype: DType) -> Tol {
        let (rtol, atol) = match dtype {
            DType::F32 => (1.3e-6, 1e-5),
            DType::BF16 => (1.6e-2, 1e-5),
            DType::F16 => (1e-3, 1e-5),
            _ => (0.0, 0.0),
        };
        Tol {
            rtol,
            atol,
            extra: None,
        }
    }

    /// Adds a per-element bound.
    pub fn with_extra(mut self, extra: Vec<f64>) -> Tol {
        self.extra = Some(extra);
        self
    }
}

/// One expected output.
#[derive(Clone, Debug)]
pub enum Out {
    /// Values within a tolerance.
    Close(HostTensor, Tol),
    /// Only shape and dtype (the values are unspecified, as `torch.empty`'s).
    Meta(Vec<usize>, DType),
}

impl Out {
    /// Values within `torch.testing`'s default tolerance for their dtype.
    pub fn close(t: HostTensor) -> Out {
        let tol = Tol::of(t.dtype);
        Out::Close(t, tol)
    }

    /// Values that must match exactly.
    pub fn exact(t: HostTensor) -> Out {
        Out::Close(
            t,
            Tol {
                rtol: 0.0,
                atol: 0.0,
                extra: None,
            },
        )
    }
}

/// What a call gives.
#[derive(Clone, Debug)]
pub enum Want {
    /// These outputs, in order (a `Tensor[]` result is flattened).
    Outputs(Vec<Out>),
    /// An error whose message contains every one of these.
    Error(Vec<String>),
}

/// An operator call and its expected result.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Arguments in schema order.
    pub args: Vec<Arg>,
    /// What the reference says.
    pub want: Want,
    /// The matmul precision to run under (the runtime's default, DEFAULT, when `None`).
    pub precision: Option<MatmulPrecision>,
}

impl Sample {
    /// A call expected to give `outs`.
    pub fn new(args: Vec<Arg>, outs: Vec<Out>) -> Sample {
        Sample {
            args,
            want: Want::Outputs(outs),
            precision: None,
        }
    }

    /// A call expected to fail with a message containing each of `parts`.
    pub fn error(args: Vec<Arg>, parts: &[&str]) -> Sample {
        Sample {
            args,
            want: Want::Error(parts.iter().map(|s| s.to_string()).collect()),
            precision: None,
        }
    }

    /// The same call under a matmul precision (`None`: the runtime's default).
    pub fn at(mut self, p: Option<MatmulPrecision>) -> Sample {
        self.precision = p;
        self
    }
}

/// Shorthands for arguments.
pub fn t(i: Input) -> Arg {
    Arg::T(i)
}

/// A contiguous tensor argument.
pub fn tp(h: HostTensor) -> Arg {
    Arg::T(Input::plain(h))
}

/// A non-tensor argument.
pub fn v(x: Value) -> Arg {
    Arg::V(x)
}

/// An `int[]` argument.
pub fn ints<T: Copy + TryInto<i64>>(xs: &[T]) -> Value
where
    T::Error: std::fmt::Debug,
{
    Value::Ints(xs.iter().map(|x| (*x).try_into().unwrap()).collect())
}

/// An optional `ScalarType` argument (`None` where absent).
pub fn dtype_arg(d: Option<DType>) -> Value {
    d.map_or(Value::None, Value::Dtype)
}

/// A `Scalar` argument: the Python number `s`.
pub fn scalar_value(s: Scalar) -> Value {
    match s {
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Int(i),
        Scalar::Float(f) => Value::Float(f),
    }
}

/// An optional tensor argument (`None` where absent).
pub fn opt_tensor(x: Option<Input>) -> Arg {
    match x {
        Some(i) => t(i),
        None => v(Value::None),
    }
}

/// `dtype` as bytes of its device format.
fn encode(values: &[f64], dtype: DType) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.size());
    for &v in values {
        match dtype {
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f64(v).to_le_bytes()),
            DType::F16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::Bool => out.push((v != 0.0) as u8),
            DType::U8 => out.push(v as i64 as u8),
            DType::I8 => out.push(v as i64 as i8 as u8),
        }
    }
    out
}

/// A value no operator computes here, for the storage elements outside an input's view.
fn sentinel(dtype: DType) -> f64 {
    match dtype {
        DType::Bool => 1.0,
        d if d.is_float() => -777.0,
        _ => -77.0,
    }
}

/// Uploads an input as the view its placement describes.
pub fn materialize(rt: &Runtime, x: &Input) -> Result<Tensor, TpuError> {
    let shape = &x.host.shape;
    let (strides, len) = x.place.strides(shape);
    let mut storage = vec![sentinel(x.host.dtype); len];
    for (flat, idx) in indices(shape).enumerate() {
        let pos = x.place.offset + idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>();
        storage[pos] = x.host.data[flat];
    }
    let bytes = encode(&storage, x.host.dtype);
    Tensor::from_strided_bytes(rt, &bytes, x.host.dtype, shape, &strides, x.place.offset)
}

/// A call's arguments with tensors as positions in a flat input list.
#[derive(Clone, Debug)]
enum Slot {
    T(usize),
    Ts(Vec<usize>),
    OptTs(Vec<Option<usize>>),
    V(Value),
}

fn slots(args: &[Arg]) -> (Vec<Slot>, Vec<&Input>) {
    let mut inputs = Vec::new();
    let mut out = Vec::new();
    for a in args {
        out.push(match a {
            Arg::T(x) => {
                inputs.push(x);
                Slot::T(inputs.len() - 1)
            }
            Arg::Ts(xs) => Slot::Ts(
                xs.iter()
                    .map(|x| {
                        inputs.push(x);
                        inputs.len() - 1
                    })
                    .collect(),
            ),
            Arg::OptTs(xs) => Slot::OptTs(
                xs.iter()
                    .map(|x| {
                        x.as_ref().map(|x| {
                            inputs.push(x);
                            inputs.len() - 1
                        })
                    })
                    .collect(),
            ),
            Arg::V(v) => Slot::V(v.clone()),
        });
    }
    (out, inputs)
}

fn bind(slots: &[Slot], xs: &[Tensor]) -> Vec<Value> {
    slots
        .iter()
        .map(|s| match s {
            Slot::T(i) => Value::Tensor(xs[*i].clone()),
            Slot::Ts(is) => Value::Tensors(is.iter().map(|i| xs[*i].clone()).collect()),
            Slot::OptTs(is) => {
                Value::OptTensors(is.iter().map(|i| i.map(|i| xs[i].clone())).collect())
            }
            Slot::V(v) => v.clone(),
        })
        .collect()
}

fn flatten(outs: Vec<Value>) -> Vec<Tensor> {
    outs.into_iter()
        .flat_map(|o| match o {
            Value::Tensor(t) => vec![t],
            Value::Tensors(ts) => ts,
            _ => vec![],
        })
        .collect()
}

/// Runs `op` with `sample`'s arguments in `mode`: the output tensors and the input tensors.
fn run(
    rt: &Runtime,
    mode: SuiteMode,
    op: &'static str,
    sample: &Sample,
) -> Result<(Vec<Tensor>, Vec<Tensor>), TpuError> {
    let (slots, inputs) = slots(&sample.args);
    let xs = inputs
        .iter()
        .map(|x| materialize(rt, x))
        .collect::<Result<Vec<_>, _>>()?;
    let outs = if mode == SuiteMode::Compile {
        let rt2 = rt.clone();
        let mut g = compile(rt, op, move |xs: &[Tensor]| {
            Ok(flatten(ops::call(&rt2, op, bind(&slots, xs))?))
        });
        g.call(&xs)?
    } else {
        flatten(ops::call(rt, op, bind(&slots, &xs))?)
    };
    Ok((outs, xs))
}

/// Whether `got` matches `want` within `tol` (NaN matches NaN, infinities must be equal).
pub fn close(got: f64, want: f64, tol: &Tol, i: usize) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    let extra = tol.extra.as_ref().map_or(0.0, |e| e[i]);
    (got - want).abs() <= tol.atol + tol.rtol * want.abs() + extra
}

fn compare(i: usize, got: &Tensor, want: &Out) -> Result<(), String> {
    let (shape, dtype) = match want {
        Out::Close(h, _) => (&h.shape, h.dtype),
        Out::Meta(s, d) => (s, *d),
    };
    if got.shape() != shape.as_slice() || got.dtype() != dtype {
        return Err(format!(
            "output {i}: got shape {:?} {}, want {shape:?} {dtype}",
            got.shape(),
            got.dtype()
        ));
    }
    let Out::Close(h, tol) = want else {
        return Ok(());
    };
    let g = got.to_f64_vec().map_err(|e| format!("output {i}: {e}"))?;
    let mut bad = Vec::new();
    for (k, (a, e)) in g.iter().zip(&h.data).enumerate() {
        if !close(*a, *e, tol, k) {
            bad.push(k);
        }
    }
    if let Some(&k) = bad.first() {
        let extra = tol.extra.as_ref().map_or(0.0, |e| e[k]);
        return Err(format!(
            "output {i} ({} of {} elements differ): element {k} {:?}: got {}, want {} (rtol {}, atol {}, extra {extra:e}, shape {:?}, {})",
            bad.len(),
            g.len(),
            super::reference::unravel(k, shape),
            g[k],
            h.data[k],
            tol.rtol,
            tol.atol,
            shape,
            dtype
        ));
    }
    Ok(())
}

/// Checks that an input still holds its values.
fn unchanged(i: usize, got: &Tensor, want: &HostTensor) -> Result<(), String> {
    let g = got.to_f64_vec().map_err(|e| format!("input {i}: {e}"))?;
    for (k, (a, e)) in g.iter().zip(&want.data).enumerate() {
        if !(a == e || a.is_nan() && e.is_nan()) {
            return Err(format!(
                "input {i} was written: element {k} is {a}, was {e}"
            ));
        }
    }
    Ok(())
}

/// Runs one sample in one mode and checks it.
pub fn verify(rt: &Runtime, mode: SuiteMode, op: &'static str, s: &Sample) -> Result<(), String> {
    let old = rt.precision();
    if let Some(p) = s.precision {
        rt.set_precision(p);
    }
    let r = catch_unwind(AssertUnwindSafe(|| verify_inner(rt, mode, op, s)));
    rt.set_precision(old);
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("PANIC: {msg}"))
        }
    }
}

fn verify_inner(rt: &Runtime, mode: SuiteMode, op: &'static str, s: &Sample) -> Result<(), String> {
    let result = run(rt, mode, op, s);
    match (&s.want, result) {
        (Want::Error(parts), Ok((outs, _))) => {
            // A device fault surfaces when the outputs are read.
            for o in &outs {
                if let Err(e) = o.to_f64_vec() {
                    return error_matches(&e, parts);
                }
            }
            Err(format!(
                "expected an error containing {parts:?}, got {} output(s)",
                outs.len()
            ))
        }
        (Want::Error(parts), Err(e)) => error_matches(&e, parts),
        (Want::Outputs(_), Err(e)) => Err(format!("unexpected error: {e}")),
        (Want::Outputs(want), Ok((outs, xs))) => {
            if outs.len() != want.len() {
                return Err(format!("{} outputs, want {}", outs.len(), want.len()));
            }
            for (i, (g, w)) in outs.iter().zip(want).enumerate() {
                compare(i, g, w)?;
            }
            // In-place overloads (`copy_`, `fill_.Scalar`) write their first argument.
            if !op.split('.').next().is_some_and(|base| base.ends_with('_')) {
                let (_, inputs) = slots(&s.args);
                for (i, (x, h)) in xs.iter().zip(inputs).enumerate() {
                    unchanged(i, x, &h.host)?;
                }
            }
            for d in ops::registry().values() {
                if d.derived_from() == Some(op) && mode != SuiteMode::Compile {
                    verify_derived(rt, d, s, want).map_err(|e| format!("{}: {e}", d.name))?;
                }
            }
            Ok(())
        }
    }
}

fn error_matches(e: &TpuError, parts: &[String]) -> Result<(), String> {
    let msg = e.to_string();
    match parts.iter().find(|p| !msg.contains(p.as_str())) {
        Some(p) => Err(format!("error {msg:?} does not contain {p:?}")),
        None => Ok(()),
    }
}

/// A fixed seed per operator (FNV-1a of the name), so that runs are reproducible whatever
/// `PROPTEST_RNG_SEED` says.
fn seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The runner: `cases` samples, a fixed seed, no persistence files, short shrinking.
pub fn runner(name: &str, cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed(name)),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    })
}

/// Draws [`CASES`] samples (or `OP_SUITE_CASES`) of `op` from `strategy` and checks each in
/// every mode.
pub fn check(op: &'static str, strategy: impl Strategy<Value = Sample>) {
    let cases = std::env::var("OP_SUITE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CASES);
    check_n(op, cases, strategy)
}

/// With `OP_SUITE_TRACE` set, prints a line per sample: the operator, whether an error is
/// expected, and the arguments (tensors as shape and dtype).
fn trace(op: &str, s: &Sample) {
    if std::env::var_os("OP_SUITE_TRACE").is_none() {
        return;
    }
    let args: Vec<String> = s
        .args
        .iter()
        .map(|a| match a {
            Arg::T(x) => format!("{:?}:{}", x.host.shape, x.host.dtype.name()),
            Arg::Ts(xs) => format!("{} tensors", xs.len()),
            Arg::OptTs(xs) => format!("{} optional tensors", xs.len()),
            Arg::V(v) => format!("{v:?}"),
        })
        .collect();
    let kind = if matches!(s.want, Want::Error(_)) {
        "error"
    } else {
        "ok"
    };
    eprintln!("{op} [{kind}] {}", args.join(", "));
}

/// [`check`] with `cases` samples.
pub fn check_n(op: &'static str, cases: u32, strategy: impl Strategy<Value = Sample>) {
    let rts: Vec<(SuiteMode, Runtime)> = MODES.iter().map(|m| (*m, runtime(*m))).collect();
    let mut r = runner(op, cases);
    let result = r.run(&strategy, |s| {
        trace(op, &s);
        for (mode, rt) in &rts {
            verify(rt, *mode, op, &s).map_err(|e| TestCaseError::fail(format!("{mode:?}: {e}")))?;
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{op}: {e}");
    }
}

/// Checks fixed samples (edge cases a strategy rarely draws) in every mode.
pub fn check_samples(op: &'static str, samples: Vec<Sample>) {
    let rts: Vec<(SuiteMode, Runtime)> = MODES.iter().map(|m| (*m, runtime(*m))).collect();
    for (k, s) in samples.iter().enumerate() {
        for (mode, rt) in &rts {
            if let Err(e) = verify(rt, *mode, op, s) {
                panic!("{op}: sample {k} in {mode:?}: {e}\n{s:?}");
            }
        }
    }
}
