//! One decoder layer on one chip's shard of the work, forward and backward, written with the
//! backend's operators as PyTorch's autograd would call them: RMSNorm, q/k/v projections
//! (grouped-query heads, optional q/k RMSNorm), rotary embedding, causal attention, output
//! projection, residual, RMSNorm, SwiGLU MLP (dense, or top-k of several experts), residual.
//!
//! Shapes are a chip's: `n` tokens (its tensor-parallel group's sequences), `heads / tp` query
//! heads, `kv_heads / tp` key/value heads, `ffn / tp` MLP columns. Attention runs in chunks of
//! one sequence and one key/value head with its query heads (`[G, S, hd]`), as a flash-attention
//! kernel's grid does; a chunk reads and writes its slice of the layer's tensors in place (a
//! fresh tensor of the slice's shape stands for the slice: same bytes, same kernels). Mixture of
//! experts assumes balanced routing: the `n * top_k` (token, expert) rows are gathered by row
//! index in expert order, each expert gets `n * top_k / experts` of them, and its outputs,
//! scaled by the routing weights, are scatter-added back (Hugging Face's Mixtral). Under
//! expert parallelism an all-to-all sends each chip the rows of its `experts / ep` experts
//! from the `ep` chips of its group (`n * top_k * ep / experts` rows an expert) and another
//! one sends the outputs back; the backward does the same with the gradients.

use tpuemu_backend::dtype::DType;
use tpuemu_backend::error::Result;
use tpuemu_backend::ops;
use tpuemu_backend::ops::matrix::attention::scaled_dot_product_attention_lse as attention_lse;
use tpuemu_backend::ops::matrix::attention_backward::flash_attention_backward;
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;

use super::ctx::{Coll, CollKind, Ctx, When};
use super::spec::StepSpec;

const BF: DType = DType::BF16;
const EPS: f64 = 1e-5;

/// Local sizes of a layer.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Tokens.
    pub n: usize,
    /// Sequences.
    pub b: usize,
    /// Sequence length.
    pub s: usize,
    /// Width.
    pub d: usize,
    /// Query heads.
    pub h: usize,
    /// Key/value heads.
    pub kv: usize,
    /// Head width.
    pub hd: usize,
    /// MLP columns (per expert).
    pub f: usize,
    /// Experts on the chip.
    pub e: usize,
    /// Experts of the model (the router's outputs).
    pub experts: usize,
    /// Tokens per expert.
    pub ne: usize,
    /// (token, expert) rows a chip dispatches: `n * top_k`.
    pub nk: usize,
}

impl Dims {
    /// A chip's sizes for `spec`.
    pub fn of(spec: &StepSpec) -> Self {
        let m = &spec.model;
        let tp = spec.par.tp;
        let n = spec.local_tokens();
        Dims {
            n,
            b: spec.local_batch(),
            s: spec.seq,
            d: m.d_model,
            h: m.heads / tp,
            kv: m.kv_heads / tp,
            hd: m.head_dim(),
            f: m.ffn / tp,
            e: spec.local_experts(),
            experts: m.experts,
            ne: if m.experts > 1 {
                (n * m.top_k * spec.par.ep).div_ceil(m.experts)
            } else {
                n
            },
            nk: n * m.top_k,
        }
    }
}

/// The weights of one layer on a chip (gathered, or resident without FSDP).
pub struct Weights {
    g1: Tensor,
    g2: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    qn: Tensor,
    kn: Tensor,
    router: Tensor,
    wg: Tensor,
    wu: Tensor,
    wd: Tensor,
}

impl Weights {
    /// Tensors of a layer's weights (the slices of a gathered flat buffer they are).
    pub fn new(rt: &Runtime, z: &Dims) -> Result<Self> {
        let e = |s: &[usize]| Tensor::empty(rt, s, BF);
        Ok(Weights {
            g1: e(&[z.d])?,
            g2: e(&[z.d])?,
            wq: e(&[z.h * z.hd, z.d])?,
            wk: e(&[z.kv * z.hd, z.d])?,
            wv: e(&[z.kv * z.hd, z.d])?,
            wo: e(&[z.d, z.h * z.hd])?,
            qn: e(&[z.hd])?,
            kn: e(&[z.hd])?,
            router: e(&[z.experts, z.d])?,
            wg: e(&[z.f, z.d])?,
            wu: e(&[z.f, z.d])?,
            wd: e(&[z.d, z.f])?,
        })
    }
}

/// What the forward keeps for the backward.
pub struct Saved {
    x: Tensor,
    h1: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn: Tensor,
    x1: Tensor,
    h2: Tensor,
    gate: Tensor,
    up: Tensor,
    act: Tensor,
    /// Each attention row's logsumexp, `[b, h, s]` f32 (flash attention keeps it, not the
    /// weights).
    lse: Tensor,
}

impl Saved {
    /// The layer's input alone (full rematerialisation keeps only it).
    pub fn into_input(self) -> Tensor {
        self.x
    }

    /// Bytes of the MLP's first products and activation (every expert's).
    pub fn mlp_bytes(&self, z: &Dims) -> u64 {
        let b = |t: &Tensor| (t.numel() * t.dtype().size()) as u64;
        (b(&self.gate) + b(&self.up) + b(&self.act)) * z.e as u64
    }

    /// Drops the MLP's first products and activation (`Remat::Mlp`): the backward recomputes
    /// them with [`recompute_mlp`].
    pub fn drop_mlp(&mut self, rt: &Runtime) -> Result<()> {
        for t in [&mut self.gate, &mut self.up, &mut self.act] {
            *t = Tensor::empty(rt, &[0], BF)?;
        }
        Ok(())
    }

    /// Bytes kept for the layer's backward.
    pub fn bytes(&self, z: &Dims) -> u64 {
        let b = |t: &Tensor| (t.numel() * t.dtype().size()) as u64;
        let dense = [
            &self.x, &self.h1, &self.q, &self.k, &self.v, &self.attn, &self.x1, &self.h2, &self.lse,
        ];
        let mut s = dense.iter().map(|t| b(t)).sum::<u64>();
        // One expert's MLP activations are held; every expert keeps its own.
        s += [&self.gate, &self.up, &self.act]
            .iter()
            .map(|t| b(t))
            .sum::<u64>()
            * z.e as u64;
        s
    }
}

fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.mm(&w.t()?)
}

/// A tensor-parallel all-reduce of the activations the matrix product just before produced
/// (nothing without tensor parallelism), overlapped with that product as a collective matmul.
fn tp_reduce(ctx: &mut Ctx, spec: &StepSpec, x: Tensor, what: &str) -> Result<Tensor> {
    match spec.dim("tp") {
        Some(d) => ctx.collective(
            Coll {
                kind: CollKind::AllReduce,
                dims: vec![d],
                when: When::Overlapped {
                    chunks: spec.par.tp,
                },
                label: what.into(),
            },
            &x,
        ),
        None => Ok(x),
    }
}

/// RMSNorm's backward through PyTorch's decomposition: `(dx, dweight)`.
fn rms_backward(dy: &Tensor, x: &Tensor, g: &Tensor) -> Result<(Tensor, Tensor)> {
    let ms = x.mul(x)?.mean(&[-1], true)?;
    let rstd = ms.add_scalar(EPS)?.rsqrt()?;
    let xhat = x.mul(&rstd)?;
    let dg = dy.mul(&xhat)?.sum(&[0], false)?;
    let dxhat = dy.mul(g)?;
    let proj = dxhat.mul(&xhat)?.mean(&[-1], true)?;
    let dx = rstd.mul(&dxhat.sub(&xhat.mul(&proj)?)?)?;
    Ok((dx, dg))
}

/// Rotary embedding of `[n, heads * hd]` by `cos`, `sin` (`[n, heads * hd]` tables, `sin`
/// carrying rotate-half's sign): `x cos + rotate_half(x) sin`, `rotate_half` swapping each
/// head's halves as Hugging Face's Llama does (two slices joined by `cat`; the sign folded into
/// `sin`). Its backward is the same work.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, hd: usize) -> Result<Tensor> {
    let [n, w] = [x.shape()[0], x.shape()[1]];
    let half = (hd / 2) as i64;
    let x3 = x.reshape(&[n as i64, (w / hd) as i64, hd as i64])?;
    let lo = ops::layout_ops::slice(&x3, 2, Some(0), Some(half), 1)?;
    let hi = ops::layout_ops::slice(&x3, 2, Some(half), None, 1)?;
    let rot = ops::data::cat(&[hi, lo], 2)?.reshape(&[n as i64, w as i64])?;
    x.mul(cos)?.add(&rot.mul(sin)?)
}

/// `[n, heads * hd]` -> `[b, heads, s, hd]` contiguous.
fn to_heads(x: &Tensor, z: &Dims, heads: usize) -> Result<Tensor> {
    x.reshape(&[z.b as i64, z.s as i64, heads as i64, z.hd as i64])?
        .permute(&[0, 2, 1, 3])?
        .contiguous()
}

/// `[b, heads, s, hd]` -> `[n, heads * hd]`.
fn from_heads(x: &Tensor, z: &Dims, heads: usize) -> Result<Tensor> {
    x.permute(&[0, 2, 1, 3])?
        .reshape(&[z.n as i64, (heads * z.hd) as i64])
}

/// Key/value heads of an attention chunk: one, or two on a chip with two TensorCores (the
/// kernel deals them to the cores) when the chip's (sequence, key/value head) pairs pair up.
fn chunk_heads(rt: &Runtime, z: &Dims) -> usize {
    let cores = rt.chip_info().cores as usize;
    if cores > 1 && rt.megacore() && (z.b * z.kv).is_multiple_of(cores) {
        cores
    } else {
        1
    }
}

/// Causal attention, chunk by chunk on the flash-attention kernel: a chunk is one sequence and
/// `c` key/value heads with their query heads (`c` from [`chunk_heads`]): `[1, c G, S, hd]`
/// queries, `[1, c, S, hd]` keys and values. The scores never reach HBM; the backward needs
/// each row's logsumexp, `[1, c G, S]` f32.
fn attention(ctx: &mut Ctx, z: &Dims) -> Result<()> {
    let rt = ctx.rt.clone();
    let c = chunk_heads(&rt, z);
    let g = z.h / z.kv;
    ctx.label("attention fwd")?;
    ctx.repeat(z.b * z.kv / c, (), |_, _, _| {
        let q = Tensor::empty(&rt, &[1, c * g, z.s, z.hd], BF)?;
        let k = Tensor::empty(&rt, &[1, c, z.s, z.hd], BF)?;
        let v = Tensor::empty(&rt, &[1, c, z.s, z.hd], BF)?;
        let (o, lse) = attention_lse(&q, &k, &v, true, None, g > 1)?;
        drop((o, lse));
        Ok(())
    })
}

/// The backward of the attention chunks: the flash-attention backward kernel, which
/// recomputes the weights from the logsumexp.
fn attention_backward(ctx: &mut Ctx, z: &Dims) -> Result<()> {
    let rt = ctx.rt.clone();
    let c = chunk_heads(&rt, z);
    let g = z.h / z.kv * c;
    ctx.label("attention bwd")?;
    ctx.repeat(z.b * z.kv / c, (), |_, _, _| {
        let e = |s: &[usize]| Tensor::empty(&rt, s, BF);
        let (q, k, v, out, dout) = (
            e(&[1, g, z.s, z.hd])?,
            e(&[1, c, z.s, z.hd])?,
            e(&[1, c, z.s, z.hd])?,
            e(&[1, g, z.s, z.hd])?,
            e(&[1, g, z.s, z.hd])?,
        );
        let lse = Tensor::empty(&rt, &[1, g, z.s], DType::F32)?;
        let grads = flash_attention_backward(&dout, &q, &k, &v, &out, &lse, 0.0, true, None, None)?;
        drop(grads);
        Ok(())
    })
}

/// Rotary tables, made once per step.
pub struct Tables {
    cos_q: Tensor,
    sin_q: Tensor,
    cos_k: Tensor,
    sin_k: Tensor,
}

impl Tables {
    /// The tables for a chip's sizes.
    pub fn new(rt: &Runtime, z: &Dims) -> Result<Self> {
        let e = |w: usize| Tensor::empty(rt, &[z.n, w], BF);
        Ok(Tables {
            cos_q: e(z.h * z.hd)?,
            sin_q: e(z.h * z.hd)?,
            cos_k: e(z.kv * z.hd)?,
            sin_k: e(z.kv * z.hd)?,
        })
    }
}

/// The layer's forward on `x` (`[n, d]`): its output and what the backward needs.
pub fn forward(
    ctx: &mut Ctx,
    spec: &StepSpec,
    w: &Weights,
    t: &Tables,
    x: Tensor,
) -> Result<(Tensor, Saved)> {
    let z = Dims::of(spec);
    let d = z.d as i64;
    ctx.label("attention projections fwd")?;
    let h1 = x.rms_norm(&[d], Some(&w.g1), Some(EPS))?;
    let mut q = linear(&h1, &w.wq)?;
    let mut k = linear(&h1, &w.wk)?;
    let v = linear(&h1, &w.wv)?;
    if spec.model.qk_norm {
        let hd = z.hd as i64;
        q = q
            .reshape(&[-1, hd])?
            .rms_norm(&[hd], Some(&w.qn), Some(EPS))?
            .reshape(&[z.n as i64, -1])?;
        k = k
            .reshape(&[-1, hd])?
            .rms_norm(&[hd], Some(&w.kn), Some(EPS))?
            .reshape(&[z.n as i64, -1])?;
    }
    let q = to_heads(&rope(&q, &t.cos_q, &t.sin_q, z.hd)?, &z, z.h)?;
    let k = to_heads(&rope(&k, &t.cos_k, &t.sin_k, z.hd)?, &z, z.kv)?;
    let v = to_heads(&v, &z, z.kv)?;
    attention(ctx, &z)?;
    let lse = Tensor::empty(&ctx.rt, &[z.b, z.h, z.s], DType::F32)?;
    ctx.label("attention output fwd")?;
    let o = Tensor::empty(&ctx.rt, &[z.b, z.h, z.s, z.hd], BF)?;
    let attn = from_heads(&o, &z, z.h)?.contiguous()?;
    let proj = tp_reduce(ctx, spec, linear(&attn, &w.wo)?, "attention output")?;
    ctx.label("mlp fwd")?;
    let x1 = x.add(&proj)?;
    let h2 = x1.rms_norm(&[d], Some(&w.g2), Some(EPS))?;
    let (gate, up, act, down) = mlp_forward(ctx, spec, &z, w, &h2)?;
    let down = tp_reduce(ctx, spec, down, "mlp output")?;
    ctx.label("residual fwd")?;
    let y = x1.add(&down)?;
    let saved = Saved {
        x,
        h1,
        q,
        k,
        v,
        attn,
        x1,
        h2,
        gate,
        up,
        act,
        lse,
    };
    Ok((y, saved))
}

/// SwiGLU's first half on `inp`: `(gate, up, silu(gate) * up)`.
fn swiglu_in(inp: &Tensor, w: &Weights) -> Result<(Tensor, Tensor, Tensor)> {
    let gate = linear(inp, &w.wg)?;
    let up = linear(inp, &w.wu)?;
    let act = gate.silu()?.mul(&up)?;
    Ok((gate, up, act))
}

/// Recomputes what [`Saved::drop_mlp`] dropped: the MLP's gate and up products and their
/// activation, from the kept MLP input (each expert's, from its dispatched rows; the token
/// exchange with the expert-parallel group runs again).
pub fn recompute_mlp(ctx: &mut Ctx, spec: &StepSpec, w: &Weights, s: &mut Saved) -> Result<()> {
    let z = Dims::of(spec);
    ctx.label("recompute mlp")?;
    if z.experts == 1 {
        (s.gate, s.up, s.act) = swiglu_in(&s.h2, w)?;
        return Ok(());
    }
    let rows = dispatch(ctx, spec, &z, &s.h2, "expert tokens (recompute)")?;
    let rt = ctx.rt.clone();
    let out = ctx.repeat(z.e, None, |_, _, _| {
        let inp = Tensor::empty(&rt, &[z.ne, z.d], BF)?;
        swiglu_in(&inp, w).map(Some)
    })?;
    drop(rows);
    let (gate, up, act) =
        out.ok_or_else(|| tpuemu_backend::TpuError::BadArgs("no experts".into()))?;
    (s.gate, s.up, s.act) = (gate, up, act);
    Ok(())
}

/// Sends rows to (or back from) the chips of their experts: an all-to-all over the
/// expert-parallel group; nothing without expert parallelism.
fn exchange(ctx: &mut Ctx, spec: &StepSpec, rows: Tensor, what: &str) -> Result<Tensor> {
    match spec.dim("ep") {
        Some(d) => ctx.collective(
            Coll {
                kind: CollKind::AllToAll,
                dims: vec![d],
                when: When::Now,
                label: what.into(),
            },
            &rows,
        ),
        None => Ok(rows),
    }
}

/// The rows of `x` (`[n, d]`) the chip's experts work on: `n * top_k` rows gathered in expert
/// order, exchanged with the expert-parallel group.
fn dispatch(ctx: &mut Ctx, spec: &StepSpec, z: &Dims, x: &Tensor, what: &str) -> Result<Tensor> {
    let idx = Tensor::empty(&ctx.rt, &[z.nk], DType::I64)?;
    let rows = x.index_select(0, &idx)?;
    exchange(ctx, spec, rows, what)
}

/// The experts' output rows (`[n * top_k, d]`) back to their tokens: exchanged with the
/// expert-parallel group, then scatter-added into `[n, d]`.
fn combine(ctx: &mut Ctx, spec: &StepSpec, z: &Dims, rows: Tensor, what: &str) -> Result<Tensor> {
    let rows = exchange(ctx, spec, rows, what)?;
    let idx = Tensor::empty(&ctx.rt, &[z.nk], DType::I64)?;
    let acc = Tensor::empty(&ctx.rt, &[z.n, z.d], BF)?;
    index_add(&acc, &idx, &rows)
}

/// SwiGLU (of every expert on the chip): `(gate, up, silu(gate) * up, down)` of one expert's
/// tokens, `down` combined back to the tokens.
fn mlp_forward(
    ctx: &mut Ctx,
    spec: &StepSpec,
    z: &Dims,
    w: &Weights,
    h2: &Tensor,
) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    if z.experts == 1 {
        let (gate, up, act) = swiglu_in(h2, w)?;
        let down = linear(&act, &w.wd)?;
        return Ok((gate, up, act, down));
    }
    // The router: each token's expert probabilities (top-k selection and balance assumed).
    drop(linear(h2, &w.router)?.softmax(-1)?);
    let rows = dispatch(ctx, spec, z, h2, "expert tokens")?;
    let rt = ctx.rt.clone();
    let out = ctx.repeat(z.e, None, |_, _, _| {
        // This expert's rows of `rows`, and its outputs written into its rows of `outs`.
        let inp = Tensor::empty(&rt, &[z.ne, z.d], BF)?;
        let (gate, up, act) = swiglu_in(&inp, w)?;
        let weight = Tensor::empty(&rt, &[z.ne, 1], BF)?;
        drop(linear(&act, &w.wd)?.mul(&weight)?);
        Ok(Some((gate, up, act)))
    })?;
    drop(rows);
    let (gate, up, act) =
        out.ok_or_else(|| tpuemu_backend::TpuError::BadArgs("no experts".into()))?;
    let outs = Tensor::empty(&rt, &[z.nk, z.d], BF)?;
    let down = combine(ctx, spec, z, outs, "expert outputs")?;
    Ok((gate, up, act, down))
}

/// `acc.index_add(0, idx, src)` (Hugging Face's Mixtral combines its experts' outputs with
/// `index_add_`): the backend has no `aten::index_add`, so the rows are scatter-added into a
/// zero table by `aten::embedding_dense_backward` (the same row index-add kernel) and added to
/// `acc`.
fn index_add(acc: &Tensor, idx: &Tensor, src: &Tensor) -> Result<Tensor> {
    let rows = ops::backward::embedding_dense_backward(src, idx, acc.shape()[0] as i64, -1, false)?;
    acc.add(&rows.to_dtype(acc.dtype())?)
}

/// One SwiGLU MLP's backward (an expert's, or the dense one): `dx` of its input `inp` from
/// `dd`, the gradient of its output; the weight gradients computed and dropped.
fn mlp_backward(dd: &Tensor, inp: &Tensor, w: &Weights, s: &Saved) -> Result<Tensor> {
    let dwd = dd.t()?.mm(&s.act)?;
    let dact = dd.mm(&w.wd)?;
    let sg = s.gate.silu()?;
    let dup = dact.mul(&sg)?;
    let dsg = dact.mul(&s.up)?;
    let dgate = ops::backward::silu_backward(&dsg, &s.gate)?;
    let dwg = dgate.t()?.mm(inp)?;
    let dwu = dup.t()?.mm(inp)?;
    drop((dwd, dwg, dwu));
    dgate.mm(&w.wg)?.add(&dup.mm(&w.wu)?)
}

/// The layer's backward: `dx` from `dy`, the weight gradients computed (and dropped: the step
/// reduces the layer's flat gradient buffer they fill).
pub fn backward(
    ctx: &mut Ctx,
    spec: &StepSpec,
    w: &Weights,
    t: &Tables,
    dy: Tensor,
    s: &Saved,
) -> Result<Tensor> {
    let z = Dims::of(spec);
    ctx.label("mlp bwd")?;
    let rt = ctx.rt.clone();
    let dh2 = if z.experts == 1 {
        mlp_backward(&dy, &s.h2, w, s)?
    } else {
        let rows = dispatch(ctx, spec, &z, &dy, "expert output grads")?;
        ctx.repeat(z.e, (), |_, _, _| {
            let e = |r: usize, c: usize| Tensor::empty(&rt, &[r, c], BF);
            let dd = e(z.ne, z.d)?.mul(&e(z.ne, 1)?)?;
            drop(mlp_backward(&dd, &e(z.ne, z.d)?, w, s)?);
            Ok(())
        })?;
        drop(rows);
        let grads = Tensor::empty(&rt, &[z.nk, z.d], BF)?;
        combine(ctx, spec, &z, grads, "expert input grads")?
    };
    let dh2 = tp_reduce(ctx, spec, dh2, "mlp input grad")?;
    ctx.label("attention output bwd")?;
    let (dx1n, dg2) = rms_backward(&dh2, &s.x1, &w.g2)?;
    let dx1 = dy.add(&dx1n)?;
    let dwo = dx1.t()?.mm(&s.attn)?;
    let dattn = dx1.mm(&w.wo)?;
    let do4 = to_heads(&dattn, &z, z.h)?;
    drop((dg2, dwo, do4));
    attention_backward(ctx, &z)?;
    ctx.label("attention projections bwd")?;
    let e = |w: usize| Tensor::empty(&rt, &[z.b, w, z.s, z.hd], BF);
    let dq = from_heads(&e(z.h)?, &z, z.h)?.contiguous()?;
    let dk = from_heads(&e(z.kv)?, &z, z.kv)?.contiguous()?;
    let dv = from_heads(&e(z.kv)?, &z, z.kv)?.contiguous()?;
    let dq = rope(&dq, &t.cos_q, &t.sin_q, z.hd)?;
    let dk = rope(&dk, &t.cos_k, &t.sin_k, z.hd)?;
    let dwq = dq.t()?.mm(&s.h1)?;
    let dwk = dk.t()?.mm(&s.h1)?;
    let dwv = dv.t()?.mm(&s.h1)?;
    let dh1 = dq.mm(&w.wq)?.add(&dk.mm(&w.wk)?)?.add(&dv.mm(&w.wv)?)?;
    drop((dwq, dwk, dwv, &s.q, &s.k, &s.v));
    let dh1 = tp_reduce(ctx, spec, dh1, "attention input grad")?;
    ctx.label("input norm bwd")?;
    let (dxn, dg1) = rms_backward(&dh1, &s.x, &w.g1)?;
    drop(dg1);
    let dx = dx1.add(&dxn)?;
    Ok(dx)
}
