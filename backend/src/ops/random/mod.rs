//! Random operators on the device generator: `uniform`, `normal` (all overloads), `bernoulli`,
//! `random`, `randint`, `rand`/`randn` and their `_like` forms, `exponential`, `geometric`,
//! `log_normal`, `cauchy`, `native_dropout` (and its backward) and `dropout`; the randomized
//! leaky ReLU in `rrelu.rs`.
//!
//! Every element draws two 32-bit words of Threefry-2x32-20 ([`threefry`]) keyed by the
//! stream's seed, at counter `offset + linear index` (see [`crate::rng`]). The seed and offset
//! reach the kernel as a 16-byte upload, not as constants, so repeated calls hit the kernel
//! cache. The transforms are PyTorch's CPU ones (`ATen/core/TransformationHelper.h`):
//! - uniform: `digits` random bits for a dtype of `digits` significand bits (24 for f32, 8 for
//!   bf16, 11 for f16) scaled to `[0, 1)`, then `u * (to - from) + from` in f32, rounded;
//! - normal: Box-Muller, `sqrt(-2 ln u1) * cos(2 pi u2)` with `u1, u2` in `(0, 1)` (24 bits
//!   each, offset by half a step so `ln 0` cannot happen), then `mean + std * z`;
//! - bernoulli: `u < p` with a 24-bit `u`; exponential: `-ln(1 - u) / lambda`; geometric:
//!   `ceil(ln u / ln(1 - p))`; log-normal: `exp(normal)`; cauchy: `median + sigma tan(pi (u -
//!   1/2))`;
//! - integers in `[from, to)`: `from + (w >> 1) % (to - from)` (31 random bits; ranges up to
//!   2^31, as the 32-bit integer lanes hold).
//!
//! A random value is a function of (seed, counter) only: the same in Strict, Debug,
//! DeferAndFuse and Compile, fused or not. A compiled graph replays with the generator state
//! of its capture (as a CUDA graph without a registered generator does).
//! Sharded tensors replicate (a shard would otherwise number its elements from 0).

mod threefry;

use super::Value;
use super::creation::empty;
use super::helpers::{OpScope, map_shape, shapes, write_into};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::Shapes;
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, UnOp};
use crate::layout::{Layout, broadcast_shapes};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

use threefry::{Stream, unit, word};

impl Runtime {
    /// `torch.manual_seed(seed)`: restarts the default random stream under `seed`.
    pub fn manual_seed(&self, seed: u64) {
        self.rng_state().manual_seed(seed);
    }

    /// The default stream's seed (`torch.initial_seed()`).
    pub fn initial_seed(&self) -> u64 {
        self.rng_state().seed
    }

    /// How many counters the default stream has used since its seed was set.
    pub fn rng_offset(&self) -> u64 {
        self.rng_state().offset
    }

    /// A stream's seed and next counter (`None`: the default generator; `Some(key)`: an
    /// explicit one): what `get_rng_state` returns.
    pub fn rng_stream(&self, generator: Option<u64>) -> (u64, u64) {
        self.rng_state().stream(generator)
    }

    /// Sets a stream's seed and next counter (`set_rng_state`, a generator's `manual_seed`).
    pub fn set_rng_stream(&self, generator: Option<u64>, seed: u64, offset: u64) {
        self.rng_state().set_stream(generator, seed, offset);
    }

    /// Forgets an explicit generator's stream.
    pub fn drop_rng_stream(&self, key: u64) {
        self.rng_state().drop_stream(key);
    }

    pub(crate) fn rng_state(&self) -> std::sync::MutexGuard<'_, crate::rng::RngState> {
        self.inner.rng.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reserves `n` counters of a stream and returns its four i32 operands ([`operands`]). In a
/// graph capture the upload is noted, so that each call of the compiled graph draws anew.
fn stream_inputs(rt: &Runtime, generator: Option<u64>, n: u64) -> Result<Vec<Tensor>> {
    let (seed, offset) = rt.rng_state().reserve(generator, n);
    let (base, views) = operands(rt, seed, offset)?;
    if rt.capturing() {
        rt.capture_draw(crate::runtime::CapturedDraw {
            storage: base.storage,
            generator,
            n,
        });
    }
    Ok(views)
}

/// A stream's seed and first counter (low and high words) as one upload, and that upload seen
/// as four zero-dimensional i32 views.
fn operands(rt: &Runtime, seed: u64, offset: u64) -> Result<(Tensor, Vec<Tensor>)> {
    let base = Tensor::from_bytes(rt, &stream_bytes(seed, offset), &[4], DType::I32)?;
    let views = (0..4)
        .map(|k| {
            base.with_layout(Layout {
                shape: vec![],
                strides: vec![],
                offset: k,
            })
        })
        .collect();
    Ok((base, views))
}

/// The four words a stream's upload holds.
pub(crate) fn stream_bytes(seed: u64, offset: u64) -> Vec<u8> {
    [
        seed as u32,
        (seed >> 32) as u32,
        offset as u32,
        (offset >> 32) as u32,
    ]
    .iter()
    .flat_map(|w| w.to_le_bytes())
    .collect()
}

/// What a random program gets: the builder, the element's two words and the extra inputs.
type Body<'a> = Box<dyn FnOnce(&mut ProgBuilder, [PRef; 2], &[PRef]) -> PRef + 'a>;

/// Draws one random value per element of `shape` (or of `dst`, written in place) from the
/// stream of `generator`, and computes `body` of it and of `inputs` (broadcast to the shape).
fn draw(
    op: &OpScope,
    shape: &[usize],
    generator: Option<u64>,
    inputs: &[&Tensor],
    out: DType,
    dst: Option<&Tensor>,
    body: Body,
) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let stream = stream_inputs(op.rt(), generator, n as u64)?;
    let all: Vec<&Tensor> = stream.iter().chain(inputs.iter().copied()).collect();
    let prog = |p: &mut ProgBuilder, r: &[PRef]| {
        let s = Stream {
            key: [r[0], r[1]],
            offset: [r[2], r[3]],
        };
        let w = threefry::words(p, shape, s);
        body(p, w, &r[4..])
    };
    match dst {
        Some(d) => {
            write_into(op, d, &all, prog)?;
            Ok(d.clone())
        }
        None => Ok(map_shape(op, shape, &all, &[out], |p, r| vec![prog(p, r)])?.remove(0)),
    }
}

/// Significand bits of a float dtype (how many random bits its uniform values get).
fn digits(d: DType) -> u32 {
    match d {
        DType::BF16 => 8,
        DType::F16 => 11,
        _ => 24,
    }
}

fn f32c(p: &mut ProgBuilder, v: f64) -> PRef {
    p.constant(Scalar::Float(v), DType::F32)
}

fn fbin(p: &mut ProgBuilder, op: BinOp, a: PRef, b: PRef) -> PRef {
    p.bin(op, a, b, DType::F32)
}

/// A uniform value in the open interval `(0, 1)`: 24 bits, offset by half a step.
fn open_unit(p: &mut ProgBuilder, w: PRef) -> PRef {
    let top = threefry::shr(p, w, 8);
    let f = p.cast(top, DType::F32);
    let half = f32c(p, 0.5);
    let f = fbin(p, BinOp::Add, f, half);
    let scale = f32c(p, (-24f64).exp2());
    fbin(p, BinOp::Mul, f, scale)
}

/// A standard normal value (Box-Muller) from the two words.
fn gaussian(p: &mut ProgBuilder, w: [PRef; 2]) -> PRef {
    let u1 = open_unit(p, w[0]);
    let u2 = unit(p, w[1], 24);
    let l = p.un(UnOp::Log, u1, DType::F32);
    let m2 = f32c(p, -2.0);
    let r = fbin(p, BinOp::Mul, l, m2);
    let r = p.un(UnOp::Sqrt, r, DType::F32);
    let tau = f32c(p, std::f64::consts::TAU);
    let th = fbin(p, BinOp::Mul, u2, tau);
    let c = p.un(UnOp::Cos, th, DType::F32);
    fbin(p, BinOp::Mul, r, c)
}

fn need_float(name: &str, d: DType) -> Result<()> {
    if d.is_float() {
        Ok(())
    } else {
        Err(TpuError::DtypeMismatch(format!(
            "{name} expects a floating point dtype, got {d}"
        )))
    }
}

fn bad(m: String) -> TpuError {
    TpuError::BadArgs(m)
}

/// The stream an optional `Generator` argument names.
fn generator(g: Option<&Value>) -> Option<u64> {
    match g {
        Some(Value::Generator(s)) => Some(*s),
        _ => None,
    }
}

/// Where a result goes: a new tensor like `x`, or `x` itself (in place).
#[derive(Clone, Copy)]
enum Dest<'a> {
    Like(&'a Tensor),
    Into(&'a Tensor),
}

impl<'a> Dest<'a> {
    fn tensor(self) -> &'a Tensor {
        match self {
            Dest::Like(t) | Dest::Into(t) => t,
        }
    }
    fn into(self) -> Option<&'a Tensor> {
        match self {
            Dest::Into(t) => Some(t),
            Dest::Like(_) => None,
        }
    }
}

/// `torch.Tensor.uniform_(from, to)`: values in `[from, to)`.
fn uniform(name: &str, x: Dest, from: f64, to: f64, g: Option<u64>) -> Result<Tensor> {
    let t = x.tensor();
    need_float(name, t.dtype())?;
    if from > to {
        return Err(bad(format!(
            "uniform_ expects to return a [from, to) range, but found from={from} > to={to}"
        )));
    }
    let op = OpScope::new(name, &[t])?;
    let bits = digits(t.dtype());
    let body: Body = Box::new(move |p, w, _| {
        let u = unit(p, w[0], bits);
        let span = f32c(p, to - from);
        let lo = f32c(p, from);
        let v = fbin(p, BinOp::Mul, u, span);
        fbin(p, BinOp::Add, v, lo)
    });
    draw(&op, t.shape(), g, &[], t.dtype(), x.into(), body)
}

/// Normal values: `mean + std * z`, with `mean`/`std` numbers or tensors (broadcast).
#[allow(clippy::too_many_arguments)]
fn normal(
    name: &str,
    rt: &Runtime,
    shape: &[usize],
    dtype: DType,
    mean: Result<f64, &Tensor>,
    std: Result<f64, &Tensor>,
    dst: Option<&Tensor>,
    g: Option<u64>,
) -> Result<Tensor> {
    need_float(name, dtype)?;
    if let Ok(s) = std
        && s < 0.0
    {
        return Err(bad(format!("normal expects std >= 0.0, but found std {s}")));
    }
    let ts: Vec<&Tensor> = [mean.err(), std.err()].into_iter().flatten().collect();
    let op = OpScope::on(rt, name, shapes(&ts));
    let body: Body = Box::new(move |p, w, r| {
        let z = gaussian(p, w);
        let mut k = 0;
        let mut operand = |p: &mut ProgBuilder, v: Result<f64, &Tensor>| match v {
            Ok(c) => f32c(p, c),
            Err(_) => {
                k += 1;
                p.cast(r[k - 1], DType::F32)
            }
        };
        let m = operand(p, mean);
        let s = operand(p, std);
        let v = fbin(p, BinOp::Mul, z, s);
        fbin(p, BinOp::Add, v, m)
    });
    draw(&op, shape, g, &ts, dtype, dst, body)
}

/// `bernoulli(x, p)`: 1 with probability `p` (a number or a tensor broadcast to `x`), in
/// `x`'s dtype.
fn bernoulli(name: &str, x: Dest, p: Result<f64, &Tensor>, g: Option<u64>) -> Result<Tensor> {
    let t = x.tensor();
    if let Ok(q) = p
        && !(0.0..=1.0).contains(&q)
    {
        return Err(bad(format!(
            "bernoulli_ expects p to be in [0, 1], but got p={q}"
        )));
    }
    let ts: Vec<&Tensor> = p.err().into_iter().collect();
    let op = OpScope::new(name, &[t])?;
    let body: Body = Box::new(move |b, w, r| {
        let u = unit(b, w[0], 24);
        let q = match p {
            Ok(q) => f32c(b, q),
            Err(_) => b.cast(r[0], DType::F32),
        };
        b.cmp(CmpKind::Lt, u, q, DType::F32)
    });
    draw(&op, t.shape(), g, &ts, t.dtype(), x.into(), body)
}

/// A one-parameter transform of a uniform value (`exponential`, `geometric`, `cauchy`,
/// `log_normal`), into `x`'s dtype.
fn transformed(
    name: &str,
    x: Dest,
    g: Option<u64>,
    f: impl FnOnce(&mut ProgBuilder, [PRef; 2]) -> PRef + 'static,
) -> Result<Tensor> {
    need_float(name, x.tensor().dtype())?;
    transformed_any(name, x, g, f)
}

/// [`transformed`] for a draw whose f32 value any dtype holds (integers: whole numbers).
fn transformed_any(
    name: &str,
    x: Dest,
    g: Option<u64>,
    f: impl FnOnce(&mut ProgBuilder, [PRef; 2]) -> PRef + 'static,
) -> Result<Tensor> {
    let t = x.tensor();
    let op = OpScope::new(name, &[t])?;
    let body: Body = Box::new(move |p, w, _| f(p, w));
    draw(&op, t.shape(), g, &[], t.dtype(), x.into(), body)
}

fn exponential(x: Dest, lambd: f64, g: Option<u64>) -> Result<Tensor> {
    if lambd <= 0.0 || lambd.is_nan() {
        return Err(bad(format!(
            "exponential_ expects lambda > 0.0, but found lambda={lambd}"
        )));
    }
    transformed("aten::exponential", x, g, move |p, w| {
        let u = unit(p, w[0], 24);
        let m = p.un(UnOp::Neg, u, DType::F32);
        let l = p.un(UnOp::Log1p, m, DType::F32);
        let k = f32c(p, -1.0 / lambd);
        fbin(p, BinOp::Mul, l, k)
    })
}

fn geometric(x: Dest, q: f64, g: Option<u64>) -> Result<Tensor> {
    if !(q > 0.0 && q < 1.0) {
        return Err(bad(format!(
            "geometric_ expects p to be in (0, 1), got p = {q}"
        )));
    }
    // The largest draw: the smallest open unit value is 2^-25 (ln = -17.33).
    let d = x.tensor().dtype();
    if !d.is_float() && 17.33 / -(-q).ln_1p() >= 2f64.powi(31) {
        return Err(TpuError::Unsupported(format!(
            "geometric_ with p = {q} draws values beyond the device's 32-bit integer lanes \
             in {d}; draw into a float32 tensor"
        )));
    }
    transformed_any("aten::geometric", x, g, move |p, w| {
        let u = open_unit(p, w[0]);
        let l = p.un(UnOp::Log, u, DType::F32);
        let k = f32c(p, 1.0 / (-q).ln_1p());
        let v = fbin(p, BinOp::Mul, l, k);
        p.un(UnOp::Ceil, v, DType::F32)
    })
}

fn log_normal(x: Dest, mean: f64, std: f64, g: Option<u64>) -> Result<Tensor> {
    if std <= 0.0 || std.is_nan() {
        return Err(bad(format!(
            "log_normal_ expects std > 0.0, but found std={std}"
        )));
    }
    transformed("aten::log_normal", x, g, move |p, w| {
        let z = gaussian(p, w);
        let s = f32c(p, std);
        let m = f32c(p, mean);
        let v = fbin(p, BinOp::Mul, z, s);
        let v = fbin(p, BinOp::Add, v, m);
        p.un(UnOp::Exp, v, DType::F32)
    })
}

fn cauchy(x: Dest, median: f64, sigma: f64, g: Option<u64>) -> Result<Tensor> {
    if sigma <= 0.0 || sigma.is_nan() {
        return Err(bad(format!(
            "cauchy_ expects sigma > 0.0, but found sigma={sigma}"
        )));
    }
    transformed("aten::cauchy", x, g, move |p, w| {
        let u = open_unit(p, w[0]);
        let h = f32c(p, -0.5);
        let u = fbin(p, BinOp::Add, u, h);
        let pi = f32c(p, std::f64::consts::PI);
        let a = fbin(p, BinOp::Mul, u, pi);
        let (s, c) = (
            p.un(UnOp::Sin, a, DType::F32),
            p.un(UnOp::Cos, a, DType::F32),
        );
        let tan = fbin(p, BinOp::Div, s, c);
        let k = f32c(p, sigma);
        let m = f32c(p, median);
        let v = fbin(p, BinOp::Mul, tan, k);
        fbin(p, BinOp::Add, v, m)
    })
}

/// The largest value `random_` without a bound draws for `d` (PyTorch: `2^digits` for floats,
/// the maximum for integers), or an error where it exceeds the 32-bit lanes.
fn random_max(d: DType) -> Result<i64> {
    match d {
        DType::Bool => Ok(1),
        DType::I32 => Ok(i32::MAX as i64),
        DType::I64 => Err(TpuError::Unsupported(
            "random_ of an int64 tensor without a bound draws up to 2^63 - 1, past the \
             device's 32-bit integer lanes; give `to`"
                .into(),
        )),
        d => Ok(1 << digits(d)),
    }
}

/// Integers in `[from, to)` in `x`'s dtype.
fn random_range(name: &str, x: Dest, from: i64, to: i64, g: Option<u64>) -> Result<Tensor> {
    let t = x.tensor();
    if from >= to {
        return Err(bad(format!(
            "random_ expects 'from' to be less than 'to', but got from={from} >= to={to}"
        )));
    }
    let range = (to - from) as u64;
    if range > 1 << 31 || i32::try_from(from).is_err() || i32::try_from(to - 1).is_err() {
        return Err(TpuError::Unsupported(format!(
            "random_ range [{from}, {to}) does not fit the device's 32-bit integer lanes"
        )));
    }
    let op = OpScope::new(name, &[t])?;
    let body: Body = Box::new(move |p, w, _| {
        let bits = threefry::shr(p, w[0], 1);
        let v = if range == 1 << 31 {
            bits
        } else {
            let r = word(p, range as u32);
            p.bin(BinOp::Rem, bits, r, DType::I32)
        };
        let lo = word(p, from as i32 as u32);
        p.bin(BinOp::Add, v, lo, DType::I32)
    });
    draw(&op, t.shape(), g, &[], t.dtype(), x.into(), body)
}

/// `random_(from, to)`; `to = None` draws up to the dtype's maximum (inclusive).
fn random_from(name: &str, x: Dest, from: i64, to: Option<i64>, g: Option<u64>) -> Result<Tensor> {
    let to = match to {
        Some(t) => t,
        None => random_max(x.tensor().dtype())? + 1,
    };
    random_range(name, x, from, to, g)
}

fn shape_of(size: &[i64]) -> Result<Vec<usize>> {
    size.iter()
        .map(|d| {
            usize::try_from(*d).map_err(|_| {
                bad(format!(
                    "Trying to create tensor with negative dimension {d}: {size:?}"
                ))
            })
        })
        .collect()
}

/// `torch.rand(size)`: uniform in `[0, 1)`.
pub fn rand(rt: &Runtime, size: &[usize], dtype: DType) -> Result<Tensor> {
    let x = empty(rt, size, dtype)?;
    uniform("aten::rand", Dest::Into(&x), 0.0, 1.0, None)
}

/// `torch.randn(size)`: standard normal.
pub fn randn(rt: &Runtime, size: &[usize], dtype: DType) -> Result<Tensor> {
    normal("aten::randn", rt, size, dtype, Ok(0.0), Ok(1.0), None, None)
}

/// `torch.randint(low, high, size)`.
pub fn randint(rt: &Runtime, low: i64, high: i64, size: &[usize], dtype: DType) -> Result<Tensor> {
    let x = empty(rt, size, dtype)?;
    random_range("aten::randint.low", Dest::Into(&x), low, high, None)
}

/// `x.bernoulli_(p)` / `torch.bernoulli(x, p)` as a new tensor.
pub fn bernoulli_p(x: &Tensor, p: f64) -> Result<Tensor> {
    bernoulli("aten::bernoulli.p", Dest::Like(x), Ok(p), None)
}

/// `torch.ops.aten.native_dropout(x, p, train)`: the output and the keep mask (bool).
pub fn native_dropout(x: &Tensor, p: f64, train: bool) -> Result<(Tensor, Tensor)> {
    need_float("aten::native_dropout", x.dtype())?;
    if !(0.0..=1.0).contains(&p) {
        return Err(bad(format!(
            "dropout probability has to be between 0 and 1, but got {p}"
        )));
    }
    let rt = x.runtime();
    if !train {
        let mask = super::creation::full(rt, x.shape(), Scalar::Bool(true), DType::Bool)?;
        return Ok((super::creation::clone(x)?, mask));
    }
    let keep = 1.0 - p;
    let scale = if keep == 0.0 { 0.0 } else { 1.0 / keep };
    let op = OpScope::new("aten::native_dropout", &[x])?;
    let n = x.numel();
    let stream = stream_inputs(rt, None, n as u64)?;
    let mut all: Vec<&Tensor> = stream.iter().collect();
    all.push(x);
    let d = x.dtype();
    let shape = x.shape().to_vec();
    let mut outs = map_shape(&op, &shape, &all, &[d, DType::Bool], |p, r| {
        let s = Stream {
            key: [r[0], r[1]],
            offset: [r[2], r[3]],
        };
        let w = threefry::words(p, &shape, s);
        let u = unit(p, w[0], 24);
        let k = f32c(p, keep);
        let m = p.cmp(CmpKind::Lt, u, k, DType::F32);
        // `input.mul(mask).mul_(scale)`: the product in the input's dtype, then the scale in
        // f32 (a Python number), rounded.
        let xm = p.bin(BinOp::Mul, r[4], m, d);
        let sc = f32c(p, scale);
        let o = p.bin(BinOp::Mul, xm, sc, DType::F32);
        vec![o, m]
    })?;
    let mask = outs.pop().expect("two outputs");
    Ok((outs.pop().expect("two outputs"), mask))
}

/// `native_dropout_backward(grad, mask, scale)`: `grad * mask * scale`, computed in f32 and
/// rounded once; integer and bool gradients give float32 (`scale` is a Python float), as
/// PyTorch's composite does.
pub fn native_dropout_backward(grad: &Tensor, mask: &Tensor, scale: f64) -> Result<Tensor> {
    let op = OpScope::new("aten::native_dropout_backward", &[grad, mask])?;
    let d = grad.dtype();
    let out = if d.is_float() { d } else { DType::F32 };
    let shape = broadcast_shapes(grad.shape(), mask.shape())?;
    Ok(map_shape(&op, &shape, &[grad, mask], &[out], |p, r| {
        let g = p.cast(r[0], DType::F32);
        let m = p.cast(r[1], DType::F32);
        let gm = p.bin(BinOp::Mul, g, m, DType::F32);
        let sc = f32c(p, scale);
        vec![p.bin(BinOp::Mul, gm, sc, DType::F32)]
    })?
    .remove(0))
}

/// The raw Threefry-2x32-20 words of counters `offset .. offset + n` under key `seed` (as
/// i32 bits), without touching the runtime's streams: for known-answer tests.
pub fn threefry_words(rt: &Runtime, n: usize, seed: u64, offset: u64) -> Result<[Tensor; 2]> {
    let op = OpScope::on(rt, "threefry2x32", Shapes::text(format!("[{n}]")));
    let (_, stream) = operands(rt, seed, offset)?;
    let all: Vec<&Tensor> = stream.iter().collect();
    let shape = [n];
    let mut outs = map_shape(&op, &shape, &all, &[DType::I32, DType::I32], |p, r| {
        let s = Stream {
            key: [r[0], r[1]],
            offset: [r[2], r[3]],
        };
        threefry::words(p, &shape, s).to_vec()
    })?;
    let b = outs.pop().expect("two outputs");
    Ok([outs.pop().expect("two outputs"), b])
}

pub(crate) mod defs;
pub(crate) mod rrelu;
pub(crate) mod sampling;
