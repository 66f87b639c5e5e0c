//! One training step on one chip: embedding, the layers forward, the output head and loss
//! (in chunks of tokens), the layers backward, the embedding's backward, and AdamW on the
//! chip's shard of every parameter — with the collectives FSDP, tensor and data parallelism
//! put between them.
//!
//! Mixed precision as usual on TPUs: bf16 weights and activations on the matrix units, f32
//! master parameters and Adam moments (sharded like the parameters), gradients reduced in bf16.
//! Under FSDP a layer's parameters are one flat buffer (padded to the group size), all-gathered
//! before the layer's forward and again before its backward (prefetched one layer ahead), its
//! gradients reduce-scattered after its backward; the embedding and the output head likewise.

use tpuemu_backend::dtype::DType;
use tpuemu_backend::error::Result;
use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;

use super::ctx::{Coll, CollKind, Ctx, When};
use super::layer::{self, Dims, Saved, Tables, Weights};
use super::spec::{Group, Remat, StepSpec};

const BF: DType = DType::BF16;
const F32: DType = DType::F32;

/// What a step's run measured besides its events.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepFacts {
    /// Bytes one layer keeps for its backward (what rematerialisation leaves).
    pub saved_per_layer: u64,
    /// Bytes of a layer's saved activations while its backward runs (all of them, recomputed
    /// or kept).
    pub layer_working: u64,
    /// Bytes of the MLP activations `Remat::Mlp` recomputes (0 otherwise).
    pub mlp_working: u64,
}

fn coll(kind: CollKind, dims: &[usize], when: When, label: &str) -> Coll {
    Coll {
        kind,
        dims: dims.to_vec(),
        when,
        label: label.into(),
    }
}

/// Largest bucket of a flat buffer one collective moves, bytes of bf16 (the whole buffer on a
/// chip). Large layers (Llama 3.1 70B's is 0.86 G parameters, 405B's 3.2 G) are gathered and
/// reduced in buckets of at most this size, one collective each, as FSDP implementations split
/// a layer by parameter; it also keeps every collective's buffers within the 31-bit addresses
/// the collective kernels use.
pub const BUCKET_BYTES: usize = 512 << 20;

/// The bucket sizes, elements, of a flat buffer of `flat` elements sharded over `k` chips:
/// equal buckets (a multiple of `k x 128` elements each) but for a smaller last one.
pub fn buckets(flat: usize, k: usize) -> Vec<usize> {
    let max = (BUCKET_BYTES / 2 / (k * 128)).max(1) * k * 128;
    let n = flat.div_ceil(max).max(1);
    let each = flat.div_ceil(n).next_multiple_of(k * 128);
    let mut out = Vec::new();
    let mut left = flat;
    while left > 0 {
        let b = each.min(left);
        out.push(b);
        left -= b;
    }
    out
}

/// All-gathers a flat parameter buffer of `flat` elements sharded over `group`, bucket by
/// bucket; `None` when it is not sharded (parameters are resident) or empty.
fn gather(ctx: &mut Ctx, group: &Group, flat: usize, label: &str) -> Result<Option<Vec<Tensor>>> {
    if group.dims.is_empty() || flat == 0 {
        return Ok(None);
    }
    let k = group.size;
    let mut out = Vec::new();
    for b in buckets(flat, k) {
        let shard = Tensor::empty(&ctx.rt, &[b / k], BF)?;
        let c = coll(CollKind::AllGather, &group.dims, When::Prefetch, label);
        out.push(ctx.collective(c, &shard)?);
    }
    Ok(Some(out))
}

/// Reduces a flat gradient buffer sharded over `group`, bucket by bucket: reduce-scatter over
/// the group, all-reduce under data parallelism.
fn reduce_grads(
    ctx: &mut Ctx,
    spec: &StepSpec,
    group: &Group,
    flat: usize,
    label: &str,
) -> Result<()> {
    if flat == 0 {
        return Ok(());
    }
    for b in buckets(flat, group.size) {
        let mut g = Tensor::empty(&ctx.rt, &[b], BF)?;
        if !group.dims.is_empty() {
            g = ctx.collective(
                coll(
                    CollKind::ReduceScatter,
                    &group.dims,
                    When::Background,
                    label,
                ),
                &g,
            )?;
        }
        if let Some(d) = spec.dim("dp") {
            ctx.collective(coll(CollKind::AllReduce, &[d], When::Background, label), &g)?;
        }
    }
    Ok(())
}

/// AdamW on `n` f32 parameters with their bf16 gradient; leaves the bf16 copy the next gather
/// sends.
fn adamw(ctx: &Ctx, n: usize) -> Result<()> {
    let e = |dt| Tensor::empty(&ctx.rt, &[n], dt);
    let (p, m, v, g) = (e(F32)?, e(F32)?, e(F32)?, e(BF)?);
    let (b1, b2, lr, wd, eps) = (0.9, 0.95, 3e-4, 0.1, 1e-8);
    let g = g.to_dtype(F32)?;
    let m = m.mul_scalar(b1)?.add(&g.mul_scalar(1.0 - b1)?)?;
    let v = v.mul_scalar(b2)?.add(&g.mul(&g)?.mul_scalar(1.0 - b2)?)?;
    let upd = m.div(&v.sqrt()?.add_scalar(eps)?)?;
    let p = p.sub(&upd.add(&p.mul_scalar(wd)?)?.mul_scalar(lr)?)?;
    drop(p.to_dtype(BF)?);
    Ok(())
}

/// `aten::nll_loss_forward` then backward of `logp` (`[c, V]` f32): the gradient of the
/// log-probabilities.
fn nll(logp: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let rt = logp.runtime().clone();
    let t = |v: &Value| match v {
        Value::Tensor(t) => Ok(t.clone()),
        _ => Err(tpuemu_backend::TpuError::BadArgs(
            "nll_loss: expected a tensor".into(),
        )),
    };
    let f = ops::call(
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
    let (loss, total) = (t(&f[0])?, t(&f[1])?);
    let one = ops::creation::scalar_tensor(&rt, 1.0.into(), loss.dtype())?;
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
    t(&g[0])
}

/// Largest slice of the output head's weight (or of the embedding's gradient) one kernel
/// takes, bytes: the kernels address operands below 2 GiB.
pub const HEAD_SLICE_BYTES: usize = (1 << 31) - 1;

/// Vocabulary slices of a `[vocab, d]` bf16 head: the fewest, dividing the vocabulary, of at
/// most [`HEAD_SLICE_BYTES`] each (one when the whole fits, or no divisor does). Only Llama
/// 3.1 405B's untied 4.2 GB head needs two.
pub fn head_slices(vocab: usize, d: usize) -> usize {
    let need = (vocab * d * 2).div_ceil(HEAD_SLICE_BYTES).max(1);
    (need..=vocab)
        .find(|k| vocab.is_multiple_of(*k) && (vocab / k) * d * 2 <= HEAD_SLICE_BYTES)
        .unwrap_or(1)
}

/// Final norm, output head and loss, forward and backward, in chunks of tokens: `dx` of the
/// last layer's output.
fn head(ctx: &mut Ctx, spec: &StepSpec, z: &Dims, x: Tensor) -> Result<Tensor> {
    let m = &spec.model;
    let vl = m.vocab / spec.par.tp;
    let gathered = if m.tied_embeddings {
        None
    } else {
        gather(ctx, &spec.param_group(), spec.table_flat(), "head weights")?
    };
    ctx.label("head and loss")?;
    let rt = ctx.rt.clone();
    // The head's weight in vocabulary slices below 2 GiB, one matrix product each (a kernel
    // addresses operands below 2 GiB: Llama 3.1 405B's untied head is 4.2 GB), their logits
    // joined for the softmax, as vocabulary-chunked heads do.
    let slices = head_slices(vl, z.d);
    let vs = vl / slices;
    let w = Tensor::empty(&rt, &[vs, z.d], BF)?;
    let g = Tensor::empty(&rt, &[z.d], BF)?;
    let hf = x.rms_norm(&[z.d as i64], Some(&g), Some(1e-5))?;
    let c = spec.loss_chunk.min(z.n);
    ctx.repeat(z.n / c, (), |ctx, _, _| {
        let h = Tensor::empty(&ctx.rt, &[c, z.d], BF)?;
        let targets = Tensor::empty(&ctx.rt, &[c], DType::I64)?;
        let logits = if slices == 1 {
            h.mm(&w.t()?)?.to_dtype(F32)?
        } else {
            let parts = (0..slices)
                .map(|_| h.mm(&w.t()?)?.to_dtype(F32))
                .collect::<Result<Vec<_>>>()?;
            ops::data::cat(&parts, 1)?
        };
        if let Some(d) = spec.dim("tp") {
            // Vocabulary-parallel softmax: the rows' maximum and sum of exponentials.
            let stats = Tensor::empty(&ctx.rt, &[c, 2], F32)?;
            ctx.collective(
                coll(CollKind::AllReduce, &[d], When::Now, "loss statistics"),
                &stats,
            )?;
        }
        let logp = logits.log_softmax(-1)?;
        let glogp = nll(&logp, &targets)?;
        let gl = ops::backward::log_softmax_backward_data(&glogp, &logp, -1, F32)?.to_dtype(BF)?;
        let mut dh: Option<Tensor> = None;
        for i in 0..slices {
            let (a, b) = ((i * vs) as i64, ((i + 1) * vs) as i64);
            let gs = ops::layout_ops::slice(&gl, 1, Some(a), Some(b), 1)?;
            let part = gs.mm(&w)?;
            dh = Some(match dh {
                Some(acc) => acc.add(&part)?,
                None => part,
            });
            drop(gs.t()?.mm(&h)?);
        }
        drop(dh);
        Ok(())
    })?;
    drop(gathered);
    let dh = Tensor::empty(&rt, &[z.n, z.d], BF)?;
    let dh = match spec.dim("tp") {
        Some(d) => ctx.collective(
            coll(CollKind::AllReduce, &[d], When::Now, "head input grad"),
            &dh,
        )?,
        None => dh,
    };
    ctx.label("final norm bwd")?;
    let ms = x.mul(&x)?.mean(&[-1], true)?;
    let rstd = ms.add_scalar(1e-5)?.rsqrt()?;
    let dx = dh.mul(&g)?.mul(&rstd)?;
    drop(hf);
    if !m.tied_embeddings {
        reduce_grads(
            ctx,
            spec,
            &spec.param_group(),
            spec.table_flat(),
            "head grads",
        )?;
    }
    Ok(dx)
}

/// What a layer keeps between its forward and backward.
enum Keep {
    All(Box<Saved>),
    /// All but the MLP's first products and activation (`Remat::Mlp`).
    Mlp(Box<Saved>),
    Input(Tensor),
}

/// Runs one training step on `ctx` (one chip's shard of it).
pub fn run(ctx: &mut Ctx, spec: &StepSpec) -> Result<StepFacts> {
    spec.check()?;
    let m = &spec.model;
    let z = Dims::of(spec);
    let vl = m.vocab / spec.par.tp;
    let rt = ctx.rt.clone();
    ctx.label("setup")?;
    let tokens = Tensor::empty(&rt, &[z.n], DType::I64)?;
    // Embedding.
    let (pg, eg) = (spec.param_group(), spec.expert_group());
    let table_g = gather(ctx, &pg, spec.table_flat(), "embedding weights")?;
    ctx.label("embedding fwd")?;
    let table = Tensor::empty(&rt, &[vl, z.d], BF)?;
    let mut x = ops::data::embedding(&table, &tokens)?;
    drop(table_g);
    if let Some(d) = spec.dim("tp") {
        x = ctx.collective(coll(CollKind::AllReduce, &[d], When::Now, "embedding"), &x)?;
    }
    // Layers forward, each in `mb` micro-batches when a per-layer operand of the whole batch
    // would pass what one kernel addresses (the layer's weights gathered once for all).
    let mb = spec.micro_batches();
    let sub = spec.with_batch(spec.batch_per_chip / mb);
    let zs = Dims::of(&sub);
    let t = Tables::new(&rt, &zs)?;
    let whole = |rt: &Runtime, x: Tensor, n: usize| -> Result<Tensor> {
        if mb == 1 {
            Ok(x)
        } else {
            drop(x);
            Tensor::empty(rt, &[n, z.d], BF)
        }
    };
    let mut keeps: Vec<Keep> = Vec::new();
    let mut facts = StepFacts {
        saved_per_layer: 0,
        layer_working: 0,
        mlp_working: 0,
    };
    let x = ctx.repeat(m.layers, x, |ctx, x, _| {
        let g = gather(ctx, &pg, spec.layer_flat(), "layer weights (fwd)")?;
        let ge = gather(ctx, &eg, spec.expert_flat(), "expert weights (fwd)")?;
        let w = Weights::new(&ctx.rt, &zs)?;
        let xs = whole(&ctx.rt, x, zs.n)?;
        let y = ctx.repeat(mb, xs, |ctx, x, _| {
            let (y, s) = layer::forward(ctx, &sub, &w, &t, x)?;
            facts.layer_working = s.bytes(&zs);
            match sub.remat {
                Remat::Full => {
                    facts.saved_per_layer = (zs.n * zs.d * 2) as u64;
                    keeps.push(Keep::Input(s.into_input()));
                }
                Remat::Mlp => {
                    let mut s = s;
                    facts.mlp_working = s.mlp_bytes(&zs);
                    facts.saved_per_layer = facts.layer_working - facts.mlp_working;
                    s.drop_mlp(&ctx.rt)?;
                    keeps.push(Keep::Mlp(Box::new(s)));
                }
                Remat::None | Remat::Attention => {
                    facts.saved_per_layer = facts.layer_working;
                    keeps.push(Keep::All(Box::new(s)));
                }
            }
            Ok(y)
        })?;
        facts.saved_per_layer *= mb as u64;
        drop((g, ge));
        whole(&ctx.rt, y, z.n)
    })?;
    let dx = head(ctx, spec, &z, x)?;
    // Layers backward.
    let dx = ctx.repeat(m.layers, dx, |ctx, dy, _| {
        let g = gather(ctx, &pg, spec.layer_flat(), "layer weights (bwd)")?;
        let ge = gather(ctx, &eg, spec.expert_flat(), "expert weights (bwd)")?;
        let w = Weights::new(&ctx.rt, &zs)?;
        let dys = whole(&ctx.rt, dy, zs.n)?;
        let dx = ctx.repeat(mb, dys, |ctx, dy, _| {
            let s = match keeps.pop() {
                Some(Keep::All(s)) => *s,
                Some(Keep::Mlp(mut s)) => {
                    layer::recompute_mlp(ctx, &sub, &w, &mut s)?;
                    *s
                }
                Some(Keep::Input(x)) => {
                    ctx.label("recompute")?;
                    layer::forward(ctx, &sub, &w, &t, x)?.1
                }
                None => return Err(tpuemu_backend::TpuError::BadArgs("no saved layer".into())),
            };
            let dx = layer::backward(ctx, &sub, &w, &t, dy, &s)?;
            drop(s);
            Ok(dx)
        })?;
        let dx = whole(&ctx.rt, dx, z.n)?;
        drop((g, ge));
        reduce_grads(ctx, spec, &eg, spec.expert_flat(), "expert grads")?;
        reduce_grads(ctx, spec, &pg, spec.layer_flat(), "layer grads")?;
        Ok(dx)
    })?;
    // Embedding backward: the rows' gradients scatter-added into the table, in the head's
    // vocabulary slices when the table is larger than one kernel addresses (each slice takes
    // its share of the tokens: balanced).
    ctx.label("embedding bwd")?;
    let slices = head_slices(vl, z.d);
    let (rows, dx) = if slices == 1 {
        (tokens, dx)
    } else {
        let n = z.n.div_ceil(slices);
        drop((tokens, dx));
        (
            Tensor::empty(&rt, &[n], DType::I64)?,
            Tensor::empty(&rt, &[n, z.d], BF)?,
        )
    };
    ctx.repeat(slices, (), |_, _, _| {
        let de = ops::call(
            &rt,
            "aten::embedding_dense_backward",
            vec![
                Value::Tensor(dx.clone()),
                Value::Tensor(rows.clone()),
                Value::Int((vl / slices) as i64),
                Value::Int(-1),
                Value::Bool(false),
            ],
        )?;
        drop(de);
        Ok(())
    })?;
    reduce_grads(ctx, spec, &pg, spec.table_flat(), "embedding grads")?;
    // Optimizer.
    ctx.wait_all()?;
    ctx.label("optimizer")?;
    ctx.repeat(m.layers, (), |ctx, _, _| {
        ctx.label("optimizer")?;
        adamw(ctx, spec.layer_flat() / pg.size)?;
        if spec.expert_flat() > 0 {
            adamw(ctx, spec.expert_flat() / eg.size)?;
        }
        Ok(())
    })?;
    ctx.label("optimizer")?;
    let tables = if m.tied_embeddings { 1 } else { 2 };
    ctx.repeat(tables, (), |ctx, _, _| {
        adamw(ctx, spec.table_flat() / pg.size)
    })?;
    ctx.boundary()?;
    Ok(facts)
}
