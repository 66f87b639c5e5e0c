//! Building blocks for operator implementations: the operator scope, elementwise maps with
//! broadcasting, row reductions, and node submission.

use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{Node, NodeKind, OpTag, PRef, Prog, ProgBuilder, Shapes, View};
use crate::layout::{Layout, broadcast_shapes, wrap_dim};
use crate::runtime::{Call, Runtime};
use crate::tensor::Tensor;
use tpuemu_isa::dma::MAX_DMA_DIMS;

/// The lane-precision type an operation on `d` computes in (f32 for floats, i32 for the
/// rest: the vector unit's 32-bit lanes).
pub(crate) fn compute(d: DType) -> DType {
    if d.is_float() { DType::F32 } else { DType::I32 }
}

/// An operator call in progress: charges dispatch time on entry, closes its trace span on drop.
pub struct OpScope {
    rt: Runtime,
    tag: OpTag,
}

impl OpScope {
    /// Opens the call of `name` on `inputs`' runtime; all tensors must share it.
    pub fn new(name: &str, inputs: &[&Tensor]) -> Result<OpScope> {
        let rt = same_runtime(name, inputs)?;
        Ok(Self::on(&rt, name, shapes(inputs)))
    }

    /// Opens the call of view operator `name` on `inputs`' runtime: charged as a view
    /// (`HostCosts::view_ns`), whatever the mode.
    pub fn view(name: &str, inputs: &[&Tensor]) -> Result<OpScope> {
        let rt = same_runtime(name, inputs)?;
        Ok(Self::open(&rt, name, shapes(inputs), Call::View))
    }

    /// Opens the call of `name` on `rt` with a description of its inputs.
    pub fn on(rt: &Runtime, name: &str, shapes: Shapes) -> OpScope {
        Self::open(rt, name, shapes, Call::Op)
    }

    fn open(rt: &Runtime, name: &str, shapes: Shapes, call: Call) -> OpScope {
        let tag = rt.begin_op(name, shapes, call);
        OpScope {
            rt: rt.clone(),
            tag,
        }
    }

    /// The runtime.
    pub fn rt(&self) -> &Runtime {
        &self.rt
    }

    /// The operator's tag.
    pub fn tag(&self) -> &OpTag {
        &self.tag
    }

    /// Wraps an error with the operator's name.
    pub fn err(&self, message: impl Into<String>) -> TpuError {
        TpuError::InOp {
            op: self.tag.name.to_string(),
            message: message.into(),
        }
    }

    /// Submits a node of this operator. An int64 constant the device's 32-bit lanes cannot
    /// hold (a number from the user: `x * 2**40`, `full(2**40)`, `clamp(max=2**40)` on int64)
    /// is refused as unsupported (the bridge runs such a call on the CPU, exactly), never
    /// truncated.
    pub fn submit(&self, kind: NodeKind, inputs: Vec<View>, outputs: Vec<View>) -> Result<()> {
        if let NodeKind::Tile { prog, .. } = &kind {
            check_wide_constants(&self.tag.name, prog)?;
        }
        self.rt.submit(Node {
            kind,
            inputs,
            outputs,
            op: self.tag.clone(),
        })
    }
}

/// The first int64 constant of `prog` that 32 bits cannot hold, as an error of operator `op`.
fn check_wide_constants(op: &str, prog: &crate::ir::Prog) -> Result<()> {
    let fits = |v: f64| (i32::MIN as f64..=i32::MAX as f64).contains(&v);
    for n in &prog.nodes {
        let v = match (n.dtype, n.op) {
            (DType::I64, crate::ir::POp::Const(Scalar::Int(v))) if !fits(v as f64) => v as f64,
            (DType::I64, crate::ir::POp::Const(Scalar::Float(v))) if !fits(v.trunc()) => v,
            _ => continue,
        };
        return Err(TpuError::Unsupported(format!(
            "{op}: the int64 value {v} needs more than 32 bits, and the tpu computes int64 in \
             32-bit lanes"
        )));
    }
    Ok(())
}

impl Drop for OpScope {
    fn drop(&mut self) {
        self.rt.end_op(&self.tag);
    }
}

/// `[[2, 3], [3]]` for error messages and traces (kept as numbers until shown).
pub fn shapes(inputs: &[&Tensor]) -> Shapes {
    let words = inputs.iter().map(|t| t.shape().len() + 2).sum();
    Shapes::of(words, inputs.iter().map(|t| (t.shape(), t.dtype())))
}

/// The runtime all tensors live on.
pub fn same_runtime(op: &str, inputs: &[&Tensor]) -> Result<Runtime> {
    let first = inputs
        .first()
        .ok_or_else(|| TpuError::BadArgs(format!("{op}: no tensor arguments")))?;
    for t in &inputs[1..] {
        if !t.runtime().same(first.runtime()) {
            return Err(TpuError::DeviceMismatch(format!(
                "{op}: Expected all tensors to be on the same device, but found tensors on different TPU runtimes"
            )));
        }
    }
    Ok(first.runtime().clone())
}

/// A factory's `size` as a shape; PyTorch's error for a negative dimension.
pub(crate) fn shape_of(size: &[i64]) -> Result<Vec<usize>> {
    size.iter()
        .map(|d| {
            usize::try_from(*d).map_err(|_| {
                TpuError::BadArgs(format!(
                    "Trying to create tensor with negative dimension {d}: {size:?}"
                ))
            })
        })
        .collect()
}

/// Elementwise work over the broadcast of `inputs`: `f` gets each input's program node (in the
/// input's dtype) and returns one node per output; outputs are new tensors of `out_dtypes`
/// (values are converted to them), laid out as PyTorch's `TensorIterator` lays out the output of
/// an elementwise operation ([`crate::layout::elementwise_layout`]: `x.t() + 1` is as transposed
/// as `x.t()`). Operators that need a contiguous result (copies they go on to `view`) use
/// [`map_contiguous`].
pub fn map(
    op: &OpScope,
    inputs: &[&Tensor],
    out_dtypes: &[DType],
    f: impl FnOnce(&mut ProgBuilder, &[PRef]) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    let shape = broadcast_all(inputs)?;
    let out_layout = if inputs.is_empty() {
        Layout::contiguous(&shape)
    } else if inputs
        .iter()
        .all(|t| t.shape() == shape.as_slice() && t.layout().is_contiguous())
    {
        // What `elementwise_layout` gives contiguous operands of the result's shape.
        Layout::contiguous_from(shape)
    } else {
        let layouts: Vec<&Layout> = inputs.iter().map(|t| t.layout()).collect();
        crate::layout::elementwise_layout(&shape, &layouts)
    };
    map_into_layout(op, out_layout, inputs, out_dtypes, f)
}

/// The shape `inputs` broadcast to.
fn broadcast_all(inputs: &[&Tensor]) -> Result<Vec<usize>> {
    let Some((first, rest)) = inputs.split_first() else {
        return Ok(Vec::new());
    };
    let mut shape = first.shape().to_vec();
    for t in rest {
        // Operands of one shape, the common case, broadcast to it without a new list.
        if t.shape() != shape.as_slice() {
            shape = broadcast_shapes(&shape, t.shape())?;
        }
    }
    Ok(shape)
}

/// Like [`map`] over an explicit iteration `shape` (inputs must broadcast to it).
pub fn map_shape(
    op: &OpScope,
    shape: &[usize],
    inputs: &[&Tensor],
    out_dtypes: &[DType],
    f: impl FnOnce(&mut ProgBuilder, &[PRef]) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    map_into_layout(op, Layout::contiguous(shape), inputs, out_dtypes, f)
}

/// Like [`map`] with contiguous outputs whatever the inputs' layouts (`contiguous()`,
/// `clone(memory_format=torch.contiguous_format)`).
pub fn map_contiguous(
    op: &OpScope,
    inputs: &[&Tensor],
    out_dtypes: &[DType],
    f: impl FnOnce(&mut ProgBuilder, &[PRef]) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    let shape = broadcast_all(inputs)?;
    map_into_layout(op, Layout::contiguous(&shape), inputs, out_dtypes, f)
}

/// The body of [`map_shape`]: outputs of `out_layout` (dense, offset 0).
pub(crate) fn map_into_layout(
    op: &OpScope,
    out_layout: Layout,
    inputs: &[&Tensor],
    out_dtypes: &[DType],
    f: impl FnOnce(&mut ProgBuilder, &[PRef]) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    let mut b = ProgBuilder::new();
    let refs: Vec<PRef> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(i as u32, t.dtype(), false))
        .collect();
    let outs = f(&mut b, &refs);
    if outs.len() != out_dtypes.len() {
        return Err(op.err("internal: program outputs do not match the output dtypes"));
    }
    for (o, d) in outs.iter().zip(out_dtypes) {
        let r = b.cast(*o, *d);
        b.output(r);
    }
    let prog = b.finish();
    let shape = &out_layout.shape;
    let views = inputs
        .iter()
        .map(|t| Ok(t.view_as(t.layout().broadcast_to(shape)?)))
        .collect::<Result<Vec<_>>>()?;
    let node = NodeKind::Tile {
        shape: shape.clone(),
        row_dims: 0,
        prog,
    };
    let out: Vec<Tensor> = match out_dtypes {
        [d] => vec![Tensor::empty_dense(op.rt(), out_layout, *d)?],
        _ => out_dtypes
            .iter()
            .map(|d| Tensor::empty_dense(op.rt(), out_layout.clone(), *d))
            .collect::<Result<_>>()?,
    };
    let out_views = out.iter().map(Tensor::view).collect();
    op.submit(node, views, out_views)?;
    Ok(out)
}

/// Writes `value` (a program over `inputs`, broadcast to `dst`'s shape) into the existing
/// tensor `dst` (in-place operators: `copy_`, `fill_`, slices of `cat`).
pub fn write_into(
    op: &OpScope,
    dst: &Tensor,
    inputs: &[&Tensor],
    f: impl FnOnce(&mut ProgBuilder, &[PRef]) -> PRef,
) -> Result<()> {
    let shape = dst.shape().to_vec();
    let mut b = ProgBuilder::new();
    let refs: Vec<PRef> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(i as u32, t.dtype(), false))
        .collect();
    let o = f(&mut b, &refs);
    let o = b.cast(o, dst.dtype());
    b.output(o);
    let views = inputs
        .iter()
        .map(|t| Ok(t.view_as(t.layout().broadcast_to(&shape)?)))
        .collect::<Result<Vec<_>>>()?;
    op.submit(
        NodeKind::Tile {
            shape,
            row_dims: 0,
            prog: b.finish(),
        },
        views,
        vec![dst.view()],
    )
}

/// Normalises a list of dims (negative allowed, duplicates rejected); an empty list means all
/// dims when `empty_is_all`.
pub fn dims_of(dims: &[i64], ndim: usize, empty_is_all: bool) -> Result<Vec<usize>> {
    if dims.is_empty() && empty_is_all {
        return Ok((0..ndim).collect());
    }
    let mut out = Vec::new();
    for &d in dims {
        let d = wrap_dim(d, ndim)?;
        if out.contains(&d) {
            return Err(TpuError::BadArgs(format!(
                "dim {d} appears multiple times in the list of dims"
            )));
        }
        out.push(d);
    }
    out.sort_unstable();
    Ok(out)
}

/// The row dims (from `outer` on, size-1 dims left out) after which at least one of `layouts`
/// does not continue in one run of memory: where a tile kernel's row cannot be merged into
/// fewer DMA dims.
fn row_breaks(layouts: &[&Layout], outer: usize) -> Vec<usize> {
    let Some(first) = layouts.first() else {
        return Vec::new();
    };
    let dims: Vec<usize> = (outer..first.shape.len())
        .filter(|&d| first.shape[d] > 1)
        .collect();
    dims.windows(2)
        .filter(|w| {
            layouts
                .iter()
                .any(|l| l.strides[w[0]] != l.strides[w[1]] * l.shape[w[1]] as isize)
        })
        .map(|w| w[0])
        .collect()
}

/// A reduction over `dims` of `inputs` (all of `x`'s shape, broadcast): the reduced dims are
/// moved last and form the row. `f` gets the inputs' program nodes (full values) and returns the
/// outputs: per-row values (shape of the kept dims, with size-1 dims for `keepdim`) or full
/// values (shape of `x`), as `per_row_out` says, converted to `out_dtypes`.
#[allow(clippy::too_many_arguments)]
pub fn rows(
    op: &OpScope,
    x_shape: &[usize],
    dims: &[usize],
    keepdim: bool,
    inputs: &[&Tensor],
    per_row_inputs: &[bool],
    out: &[(DType, bool)],
    f: impl FnOnce(&mut ProgBuilder, &[PRef]) -> Vec<PRef>,
) -> Result<Vec<Tensor>> {
    let n = x_shape.len();
    let kept: Vec<usize> = (0..n).filter(|d| !dims.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(dims.iter()).copied().collect();
    let iter_shape: Vec<usize> = perm.iter().map(|d| x_shape[*d]).collect();
    let outer: Vec<usize> = kept.iter().map(|d| x_shape[*d]).collect();
    let mut b = ProgBuilder::new();
    let mut views = Vec::new();
    let mut refs = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        let pr = per_row_inputs.get(i).copied().unwrap_or(false);
        let mut v = t.view();
        if pr {
            // A per-row input is given over the kept dims.
            v.layout = t.layout().broadcast_to(&outer)?;
        } else {
            let full = t.layout().broadcast_to(x_shape)?;
            v.layout = full.permute(&perm.iter().map(|d| *d as i64).collect::<Vec<_>>())?;
        }
        refs.push(b.input(i as u32, t.dtype(), pr));
        views.push(v);
    }
    let full_views: Vec<&Layout> = views
        .iter()
        .enumerate()
        .filter(|(i, _)| !per_row_inputs.get(*i).copied().unwrap_or(false))
        .map(|(_, v)| &v.layout)
        .collect();
    if row_breaks(&full_views, kept.len()).len() + 1 >= MAX_DMA_DIMS {
        // A rows kernel moves a block of rows in one DMA descriptor of at most MAX_DMA_DIMS
        // dims: a row spread over that many runs of memory (a window of a window, a broadcast
        // inside the row) is copied in the row's order first, one run each.
        for (i, v) in views.iter_mut().enumerate() {
            let pr = per_row_inputs.get(i).copied().unwrap_or(false);
            if !pr && !row_breaks(&[&v.layout], kept.len()).is_empty() {
                let c = inputs[i].with_layout(v.layout.clone());
                *v = map_shape(op, &iter_shape, &[&c], &[c.dtype()], |_, r| vec![r[0]])?
                    .remove(0)
                    .view();
            }
        }
    }
    let outs = f(&mut b, &refs);
    if outs.len() != out.len() {
        return Err(op.err("internal: program outputs do not match the outputs"));
    }
    let mut tensors = Vec::new();
    let mut out_views = Vec::new();
    for (o, (d, per_row)) in outs.iter().zip(out) {
        let r = b.cast(*o, *d);
        b.output(r);
        if *per_row {
            let t = Tensor::empty(op.rt(), &outer, *d)?;
            out_views.push(t.view());
            let shape: Vec<usize> = if keepdim {
                (0..n)
                    .map(|i| if dims.contains(&i) { 1 } else { x_shape[i] })
                    .collect()
            } else {
                outer.clone()
            };
            let layout = t
                .layout()
                .view_as(&shape)
                .ok_or_else(|| op.err("internal: keepdim view"))?;
            tensors.push(t.with_layout(layout));
        } else {
            // A full output: written in the permuted order, seen in the original order.
            let t = Tensor::empty(op.rt(), &iter_shape, *d)?;
            out_views.push(t.view());
            let mut inv = vec![0i64; n];
            for (i, p) in perm.iter().enumerate() {
                inv[*p] = i as i64;
            }
            tensors.push(t.with_layout(t.layout().permute(&inv)?));
        }
    }
    let row_dims = dims.len();
    op.submit(
        NodeKind::Tile {
            shape: iter_shape,
            row_dims,
            prog: b.finish(),
        },
        views,
        out_views,
    )?;
    Ok(tensors)
}

/// A fresh contiguous tensor with the same shape and dtype.
pub fn empty_like(t: &Tensor) -> Result<Tensor> {
    Tensor::empty(t.runtime(), t.shape(), t.dtype())
}

/// Checks that `layout`'s element count matches, for views.
pub fn same_numel(op: &OpScope, a: &Layout, shape: &[usize]) -> Result<()> {
    let n: usize = shape.iter().product();
    if a.numel() != n {
        return Err(op.err(format!(
            "shape {shape:?} is invalid for input of size {}",
            a.numel()
        )));
    }
    Ok(())
}

/// The default program: identity (for matmul epilogues).
pub fn identity_prog(out: DType) -> Prog {
    let mut b = ProgBuilder::new();
    let x = b.input(0, DType::F32, false);
    let y = b.cast(x, out);
    b.output(y);
    b.finish()
}
