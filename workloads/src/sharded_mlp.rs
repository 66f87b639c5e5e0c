//! The MLP training step over DTensors, and its data-parallel, tensor-parallel (Megatron) and
//! fully-sharded (FSDP) forms; the same step on one chip for comparison.
//!
//! The model: `h = x @ w1 + b1`, `a = gelu(h)`, `logits = a @ w2 + b2`, mean cross-entropy
//! (`log_softmax` + `nll_loss`), the gradients of the four parameters, and one SGD update
//! (`p - lr * grad`). Weights are `[in, out]`, so that a column-parallel layer shards
//! dimension 1 and a row-parallel one dimension 0. [`step`] is written once with DTensor
//! operators; how it is parallel is only a matter of placements:
//!
//! | form | batch `x`, targets | `w1`, `b1` | `w2`, `b2` | communication |
//! |---|---|---|---|---|
//! | [`Parallel::Data`] | `Shard(0)` | `Replicate` | `Replicate` | gradients come out `Partial` and are all-reduced; the mean loss divides by the all-reduced total weight |
//! | [`Parallel::Tensor`] | `Replicate` | `Shard(1)`, `Shard(0)` (column parallel) | `Shard(0)`, `Replicate` (row parallel) | the logits come out `Partial` and are all-reduced (Megatron's one all-reduce forward); every gradient comes out sharded like its parameter |
//! | [`Parallel::FullyShard`] | `Shard(0)` | `Shard(0)` | `Shard(0)` | parameters all-gathered before use, gradients reduce-scattered back to `Shard(0)` |

use crate::MlpConfig;
use tpuemu_backend::dtype::{DType, Scalar};
use tpuemu_backend::error::Result;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;
use tpuemu_dtensor::api::{DTensor, distribute_f64s};
use tpuemu_dtensor::mesh::DeviceMesh;
use tpuemu_dtensor::ops::{DValue, call, call1};
use tpuemu_dtensor::placement::Placement;

/// Learning rate of the SGD update.
pub const LR: f64 = 0.1;

/// Host values of a batch and the parameters (deterministic).
#[derive(Clone, Debug)]
pub struct MlpData {
    /// Sizes.
    pub cfg: MlpConfig,
    /// `[batch, d_in]`.
    pub x: Vec<f64>,
    /// `[batch]` class ids.
    pub targets: Vec<f64>,
    /// `[d_in, hidden]`.
    pub w1: Vec<f64>,
    /// `[hidden]`.
    pub b1: Vec<f64>,
    /// `[hidden, classes]`.
    pub w2: Vec<f64>,
    /// `[classes]`.
    pub b2: Vec<f64>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn normal(&mut self, n: usize, std: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let u = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                let v = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
            })
            .collect()
    }
}

impl MlpData {
    /// Random parameters and a batch from `seed`.
    pub fn new(cfg: MlpConfig, seed: u64) -> Self {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        MlpData {
            x: r.normal(cfg.batch * cfg.d_in, 1.0),
            targets: (0..cfg.batch)
                .map(|_| (r.next() % cfg.classes as u64) as f64)
                .collect(),
            w1: r.normal(cfg.d_in * cfg.hidden, 1.0 / (cfg.d_in as f64).sqrt()),
            b1: r.normal(cfg.hidden, 0.1),
            w2: r.normal(cfg.hidden * cfg.classes, 1.0 / (cfg.hidden as f64).sqrt()),
            b2: r.normal(cfg.classes, 0.1),
            cfg,
        }
    }

    /// `(values, shape, dtype)` of x, targets, w1, b1, w2, b2.
    fn parts(&self) -> Vec<(&[f64], Vec<usize>, DType)> {
        let c = &self.cfg;
        vec![
            (&self.x[..], vec![c.batch, c.d_in], c.dtype),
            (&self.targets[..], vec![c.batch], DType::I64),
            (&self.w1[..], vec![c.d_in, c.hidden], c.dtype),
            (&self.b1[..], vec![c.hidden], c.dtype),
            (&self.w2[..], vec![c.hidden, c.classes], c.dtype),
            (&self.b2[..], vec![c.classes], c.dtype),
        ]
    }

    /// x, targets, w1, b1, w2, b2 on one runtime.
    pub fn tensors(&self, rt: &Runtime) -> Result<Vec<Tensor>> {
        self.parts()
            .into_iter()
            .map(|(v, s, d)| Tensor::from_f64s(rt, v.iter().copied(), v.len(), &s, d))
            .collect()
    }

    /// x, targets, w1, b1, w2, b2 distributed as `form` asks along mesh dimension `dim`
    /// (replicated along the others).
    pub fn distribute(
        &self,
        mesh: &DeviceMesh,
        form: Parallel,
        dim: usize,
    ) -> Result<Vec<DTensor>> {
        self.parts()
            .into_iter()
            .zip(form.placements())
            .map(|((v, s, d), p)| {
                let mut ps = vec![Placement::Replicate; mesh.ndim()];
                ps[dim] = p;
                distribute_f64s(mesh, v, &s, d, &ps)
            })
            .collect()
    }
}

/// How the step is parallel (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Parallel {
    /// Data parallel.
    Data,
    /// Megatron tensor parallel.
    Tensor,
    /// Fully sharded data parallel.
    FullyShard,
}

impl Parallel {
    /// Placements of x, targets, w1, b1, w2, b2 along the parallel mesh dimension.
    pub fn placements(self) -> [Placement; 6] {
        use Placement::{Replicate as R, Shard};
        match self {
            Parallel::Data => [Shard(0), Shard(0), R, R, R, R],
            Parallel::Tensor => [R, R, Shard(1), Shard(0), Shard(0), R],
            Parallel::FullyShard => [Shard(0), Shard(0), Shard(0), Shard(0), Shard(0), Shard(0)],
        }
    }

    /// `dp`, `tp`, `fsdp`.
    pub fn name(self) -> &'static str {
        match self {
            Parallel::Data => "dp",
            Parallel::Tensor => "tp",
            Parallel::FullyShard => "fsdp",
        }
    }
}

fn t(v: &DValue) -> Result<DTensor> {
    v.tensor()
        .cloned()
        .ok_or_else(|| tpuemu_backend::TpuError::Device("expected a DTensor".into()))
}

/// Forward and backward of the MLP on DTensors `[x, targets, w1, b1, w2, b2]`; returns
/// `[loss, dw1, db1, dw2, db2]`. `logits_to` redistributes the logits before the loss (tensor
/// parallel: all-reduce).
pub fn step(xs: &[DTensor], logits_to: Option<&[Placement]>) -> Result<Vec<DTensor>> {
    let [x, targets, w1, b1, w2, b2] = xs else {
        return Err(tpuemu_backend::TpuError::BadArgs(
            "mlp step: expected x, targets, w1, b1, w2, b2".into(),
        ));
    };
    let mesh = x.mesh().clone();
    let dt = x.dtype();
    let h = b1.addmm(x, w1)?;
    let a = h.gelu("none")?;
    let mut logits = b2.addmm(&a, w2)?;
    if let Some(p) = logits_to {
        logits = logits.redistribute(p)?;
    }
    let logp = logits.log_softmax(-1)?;
    let nll = call(
        &mesh,
        "aten::nll_loss_forward",
        vec![
            logp.clone().into(),
            targets.clone().into(),
            Value::None.into(),
            Value::Int(1).into(),
            Value::Int(-100).into(),
        ],
    )?;
    let (loss, total) = (t(&nll[0])?, t(&nll[1])?);
    let one = call1(
        &mesh,
        "aten::scalar_tensor",
        vec![Value::Float(1.0).into(), Value::Dtype(loss.dtype()).into()],
    )?;
    let g = call1(
        &mesh,
        "aten::nll_loss_backward",
        vec![
            one.into(),
            logp.clone().into(),
            targets.clone().into(),
            Value::None.into(),
            Value::Int(1).into(),
            Value::Int(-100).into(),
            total.into(),
        ],
    )?;
    let gl = call1(
        &mesh,
        "aten::_log_softmax_backward_data",
        vec![
            g.into(),
            logp.into(),
            Value::Int(-1).into(),
            Value::Dtype(dt).into(),
        ],
    )?;
    let dw2 = a.t()?.mm(&gl)?;
    let db2 = gl.sum(&[0], false)?;
    let ga = gl.mm(&w2.t()?)?;
    let gh = call1(
        &mesh,
        "aten::gelu_backward",
        vec![ga.into(), h.into(), Value::Str("none".into()).into()],
    )?;
    let dw1 = x.t()?.mm(&gh)?;
    let db1 = gh.sum(&[0], false)?;
    Ok(vec![loss, dw1, db1, dw2, db2])
}

/// The step in `form` on inputs distributed by [`MlpData::distribute`] along mesh dimension
/// `dim`: gathers FSDP's parameters first, all-reduces the logits for tensor parallelism,
/// brings the gradients to their parameters' placements (all-reduce for data parallel,
/// reduce-scatter for FSDP) and updates the parameters; returns `[loss, w1', b1', w2', b2',
/// dw1, db1, dw2, db2]`.
pub fn parallel_step(form: Parallel, dim: usize, xs: &[DTensor]) -> Result<Vec<DTensor>> {
    let mesh = xs[0].mesh().clone();
    let with = |p: Placement| {
        let mut ps = vec![Placement::Replicate; mesh.ndim()];
        ps[dim] = p;
        ps
    };
    let rep = vec![Placement::Replicate; mesh.ndim()];
    let mut ins = xs.to_vec();
    if form == Parallel::FullyShard {
        for p in &mut ins[2..] {
            *p = p.redistribute(&rep)?;
        }
    }
    let logits = (form == Parallel::Tensor).then(|| rep.clone());
    let out = step(&ins, logits.as_deref())?;
    let params = form.placements();
    let mut grads = Vec::new();
    for (g, p) in out[1..].iter().zip(&params[2..]) {
        grads.push(g.redistribute(&with(*p))?);
    }
    let mut res = vec![out[0].clone()];
    for (p, g) in xs[2..].iter().zip(&grads) {
        res.push(p.sub(&g.mul_scalar(LR)?)?);
    }
    res.extend(grads);
    Ok(res)
}

/// The same step on one chip, with plain tensors `[x, targets, w1, b1, w2, b2]`; returns what
/// [`step`] returns.
pub fn reference_step(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let [x, targets, w1, b1, w2, b2] = xs else {
        return Err(tpuemu_backend::TpuError::BadArgs(
            "mlp step: expected x, targets, w1, b1, w2, b2".into(),
        ));
    };
    let rt = x.runtime().clone();
    let dt = x.dtype();
    let one_s = Scalar::Int(1);
    let h = ops::matrix::addmm(b1, x, w1, one_s, one_s)?;
    let a = h.gelu("none")?;
    let logits = ops::matrix::addmm(b2, &a, w2, one_s, one_s)?;
    let logp = logits.log_softmax(-1)?;
    let tv = |v: &Value| match v {
        Value::Tensor(t) => Ok(t.clone()),
        _ => Err(tpuemu_backend::TpuError::Device("expected a tensor".into())),
    };
    let nll = ops::call(
        &rt,
        "aten::nll_loss_forward",
        vec![
            Value::Tensor(logp.clone()),
            Value::Tensor(targets.clone()),
            Value::None,
            Value::Int(1),
            Value::Int(-100),
        ],
    )?;
    let (loss, total) = (tv(&nll[0])?, tv(&nll[1])?);
    let one = crate::one(&rt, loss.dtype())?;
    let g = ops::call(
        &rt,
        "aten::nll_loss_backward",
        vec![
            Value::Tensor(one),
            Value::Tensor(logp.clone()),
            Value::Tensor(targets.clone()),
            Value::None,
            Value::Int(1),
            Value::Int(-100),
            Value::Tensor(total),
        ],
    )?;
    let gl = ops::backward::log_softmax_backward_data(&tv(&g[0])?, &logp, -1, dt)?;
    let dw2 = a.t()?.mm(&gl)?;
    let db2 = gl.sum(&[0], false)?;
    let ga = gl.mm(&w2.t()?)?;
    let gh = ops::backward::gelu_backward(&ga, &h, "none")?;
    let dw1 = x.t()?.mm(&gh)?;
    let db1 = gh.sum(&[0], false)?;
    let grads = [dw1, db1, dw2, db2];
    let mut out = vec![loss];
    for (p, g) in [w1, b1, w2, b2].into_iter().zip(&grads) {
        out.push(p.sub(&g.mul_scalar(LR)?)?);
    }
    out.extend(grads);
    Ok(out)
}
