//! What a matrix-unit kernel computes: the operands' dtypes and strides, the epilogue, and
//! how each operand moves into the matrix units; built from a matmul node by [`spec_of`].

use tpuemu_isa::ops::{MxuFmt, Precision};

use crate::dtype::DType;
use crate::ir::{POp, Prog};
use crate::kernels::KernelError;
use crate::kernels::tile::{TileOperand, TileSpec};

/// How an operand moves from HBM into a matrix unit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Access {
    /// Rows are contiguous: loaded as is.
    Normal,
    /// Columns are contiguous: loaded as the transpose, fed transposed.
    Transposed,
    /// Neither: gathered element by element into the normal layout.
    Gather,
}

/// An operand's dtype and element strides over `[batch, rows, cols]`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MatOperand {
    /// Element type.
    pub dtype: DType,
    /// Element strides over `[batch, rows, cols]` (0 broadcasts).
    pub strides: [isize; 3],
}

impl MatOperand {
    /// Contiguous `[batch, rows, cols]`.
    pub fn contiguous(dtype: DType, rows: u32, cols: u32) -> Self {
        MatOperand {
            dtype,
            strides: [(rows * cols) as isize, cols as isize, 1],
        }
    }

    pub(super) fn access(&self, rows: u32, cols: u32) -> Access {
        if self.strides[2] == 1 || cols == 1 {
            Access::Normal
        } else if self.strides[1] == 1 || rows == 1 {
            Access::Transposed
        } else {
            Access::Gather
        }
    }
}

/// A matrix-unit kernel.
#[derive(Clone, PartialEq, Debug)]
pub struct MatSpec {
    /// Batch count.
    pub batch: u32,
    /// Rows of A and the output.
    pub m: u32,
    /// Columns of W and the output.
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
    /// Format the matrix units take (bf16, or f32 with passes).
    pub fmt: MxuFmt,
    /// Passes for f32.
    pub prec: Precision,
    /// `A [batch, m, k]`.
    pub a: MatOperand,
    /// `W [batch, k, n]`.
    pub w: MatOperand,
    /// Extra epilogue inputs over `[batch, m, n]`.
    pub extras: Vec<MatOperand>,
    /// The output over `[batch, m, n]`.
    pub out: MatOperand,
    /// More outputs over `[batch, m, n]`, written by the epilogue's later outputs (a product
    /// kept for the backward as well as its activation, say).
    pub extra_outs: Vec<MatOperand>,
    /// `Input(0)` is the f32 product, `Input(1 + i)` extra `i`; one output per output operand.
    /// `None` stores the product as it is (the output must then be f32).
    pub epilogue: Option<Prog>,
    /// A second product computed in the same kernel from this one's A transposed
    /// (`a^T [k, m] @ c [m, n2]`, batch 1; see [`crate::ir::TwinProduct`]): its `a` is this
    /// one's transposed, its `w` the argument after this one's extras, its output the last
    /// argument. Planned and built by [`super::pair`].
    pub twin: Option<Box<MatSpec>>,
    /// A row reduction run on each finished output tile, the product staying in VMEM (see
    /// [`crate::ir::RowEpilogue`]): its operands but the product are the arguments after the
    /// extras; the product (`out`) is not stored.
    pub rows: Option<Box<RowSpec>>,
}

/// The row reduction of a [`MatSpec`].
#[derive(Clone, PartialEq, Debug)]
pub struct RowSpec {
    /// The row program as a tile kernel over `[m, n]` would run it: its operands (inputs, then
    /// outputs) with their strides over `[m, n]`.
    pub tile: TileSpec,
    /// Which of them is the product.
    pub product: usize,
}

impl RowSpec {
    /// The operands that are arguments (all but the product), with their operand index.
    pub fn args(&self) -> impl Iterator<Item = (usize, &TileOperand)> {
        self.tile
            .operands
            .iter()
            .enumerate()
            .filter(move |(k, _)| *k != self.product)
    }
}

impl MatSpec {
    /// A canonical string for kernel caching.
    pub fn key(&self) -> String {
        format!("{:?}", self)
    }

    pub(super) fn esz(&self) -> u32 {
        self.fmt.bytes()
    }

    /// Every output, the first one first.
    pub fn outputs(&self) -> impl Iterator<Item = &MatOperand> {
        std::iter::once(&self.out).chain(&self.extra_outs)
    }

    /// Bytes of one element of every output together (as stored: f32 without an epilogue).
    pub(super) fn out_bytes(&self) -> u32 {
        if self.epilogue.is_some() {
            self.outputs().map(|o| o.dtype.size() as u32).sum()
        } else {
            4
        }
    }
}

/// Whether `prog` only converts `Input(0)` to its output dtype (the default epilogue).
pub fn is_plain_epilogue(prog: &Prog) -> bool {
    prog.outputs.len() == 1
        && prog
            .nodes
            .iter()
            .all(|n| matches!(n.op, POp::Input(0) | POp::Cast(_)))
}

/// The row reduction's spec: the row program lowered as a tile kernel over the product's
/// `[m, n]` (its inputs: the node's from `first_in`, the product inserted at its place).
fn row_spec(
    node: &crate::ir::Node,
    mm: &crate::ir::MatmulNode,
    r: &crate::ir::RowEpilogue,
    first_in: usize,
) -> Result<RowSpec, KernelError> {
    let product = r.product as usize;
    let mut ins: Vec<(&crate::layout::Layout, DType)> = node.inputs[first_in..]
        .iter()
        .map(|v| (&v.layout, v.dtype))
        .collect();
    if product > ins.len() || mm.epilogue.outputs.len() != 1 {
        return Err(KernelError::Unsupported(
            "a row epilogue reads the product as one of its inputs".into(),
        ));
    }
    ins.insert(product, (&r.product_view.layout, r.product_view.dtype));
    let outs: Vec<_> = node.outputs.iter().map(|v| (&v.layout, v.dtype)).collect();
    let (tile, _) = crate::kernels::tile::lower(&r.shape, 1, &r.prog, &ins, &outs)?;
    let (m, n) = (mm.m, mm.n);
    let p = &tile.operands[product];
    if tile.shape != [m, n]
        || tile.row_dims != 1
        || p.per_row
        || p.strides != [n as isize, 1]
        || p.dtype != r.product_view.dtype
    {
        return Err(KernelError::Unsupported(
            "a row epilogue over rows other than the product's".into(),
        ));
    }
    Ok(RowSpec { tile, product })
}

/// The plain epilogue: the f32 product converted to `dtype`.
fn cast_prog(dtype: DType) -> Prog {
    let mut b = crate::ir::ProgBuilder::new();
    let r = b.input(0, DType::F32, false);
    let r = b.cast(r, dtype);
    b.output(r);
    b.finish()
}

/// Element strides of `layout` over `[batch, m, n]` (trailing alignment; size-1 and missing
/// dims broadcast).
fn strides3(layout: &crate::layout::Layout, dims: [usize; 3]) -> Result<[isize; 3], KernelError> {
    if layout.ndim() > 3 {
        return Err(KernelError::Unsupported(format!(
            "matmul operand of shape {:?}",
            layout.shape
        )));
    }
    let lead = 3 - layout.ndim();
    let mut st = [0isize; 3];
    for (i, (&s, &x)) in layout.shape.iter().zip(&layout.strides).enumerate() {
        let d = lead + i;
        if s == dims[d] {
            st[d] = if s == 1 { 0 } else { x };
        } else if s != 1 {
            return Err(KernelError::Unsupported(format!(
                "operand of shape {:?} does not broadcast to {:?}",
                layout.shape, dims
            )));
        }
    }
    Ok(st)
}

/// The kernel spec of a matmul node, and each operand's storage offset (elements): `a`, `w`,
/// the extras, the output.
pub fn spec_of(
    node: &crate::ir::Node,
    mm: &crate::ir::MatmulNode,
    prec: Precision,
) -> Result<(MatSpec, Vec<usize>), KernelError> {
    let (b, m, n, k) = (mm.batch, mm.m, mm.n, mm.k);
    let to32 = |x: usize| {
        u32::try_from(x).map_err(|_| KernelError::TooLarge("matmul dimension above 4G".into()))
    };
    let (a, w) = (&node.inputs[0], &node.inputs[1]);
    let out = match &mm.rows {
        Some(r) => &r.product_out,
        None => node
            .outputs
            .first()
            .ok_or_else(|| KernelError::Unsupported("matmul without an output".into()))?,
    };
    let fmt = match (a.dtype, w.dtype) {
        (DType::BF16, DType::BF16) => MxuFmt::Bf16,
        (DType::F32, DType::F32) => MxuFmt::F32,
        (x, y) => {
            return Err(KernelError::Unsupported(format!(
                "matrix units take bf16 or f32 operands of one dtype, not {x} and {y}"
            )));
        }
    };
    let prec = if fmt == MxuFmt::Bf16 {
        Precision::P1
    } else {
        prec
    };
    let op = |v: &crate::ir::View, dims: [usize; 3]| -> Result<MatOperand, KernelError> {
        Ok(MatOperand {
            dtype: v.dtype,
            strides: strides3(&v.layout, dims)?,
        })
    };
    let tw = mm.twin_operands();
    let (n_in, n_out) = match &mm.rows {
        // The row program's inputs but the product follow the extras; its outputs are the
        // node's; the product is the epilogue's one output.
        Some(r) => (
            node.inputs.len().saturating_sub(r.inputs.saturating_sub(1)),
            1,
        ),
        None => (node.inputs.len() - tw, node.outputs.len() - tw),
    };
    if n_in < 2 || n_out < 1 || (mm.rows.is_some() && (tw > 0 || b != 1)) {
        return Err(KernelError::Unsupported(
            "matmul without its operands".into(),
        ));
    }
    let extras = node.inputs[2..n_in]
        .iter()
        .map(|v| op(v, [b, m, n]))
        .collect::<Result<Vec<_>, _>>()?;
    let out_op = op(out, [b, m, n])?;
    // With a row epilogue the node's outputs are the row program's: the product has no more.
    let extra_outs = if mm.rows.is_some() {
        Vec::new()
    } else {
        node.outputs[1..n_out]
            .iter()
            .map(|v| op(v, [b, m, n]))
            .collect::<Result<Vec<_>, _>>()?
    };
    if mm.epilogue.outputs.len() != n_out {
        return Err(KernelError::Unsupported(format!(
            "matmul epilogue with {} outputs for {} output operands",
            mm.epilogue.outputs.len(),
            n_out
        )));
    }
    let rows = match &mm.rows {
        None => None,
        Some(r) => Some(Box::new(row_spec(node, mm, r, n_in)?)),
    };
    let epilogue = if is_plain_epilogue(&mm.epilogue)
        && out.dtype == DType::F32
        && extras.is_empty()
        && extra_outs.is_empty()
    {
        None
    } else {
        Some(mm.epilogue.clone())
    };
    let a_op = op(a, [b, m, k])?;
    let twin = match &mm.twin {
        None => None,
        Some(t) => {
            if b != 1 {
                return Err(KernelError::Unsupported("a product pair is batch 1".into()));
            }
            let (c, p2) = (&node.inputs[n_in], &node.outputs[n_out]);
            let mut at = a_op.clone();
            at.strides.swap(1, 2);
            Some(Box::new(MatSpec {
                batch: 1,
                m: to32(k)?,
                n: to32(t.n)?,
                k: to32(m)?,
                fmt,
                prec,
                a: at,
                w: op(c, [1, m, t.n])?,
                extras: Vec::new(),
                out: op(p2, [1, k, t.n])?,
                extra_outs: Vec::new(),
                epilogue: (p2.dtype != DType::F32).then(|| cast_prog(p2.dtype)),
                twin: None,
                rows: None,
            }))
        }
    };
    let spec = MatSpec {
        batch: to32(b)?,
        m: to32(m)?,
        n: to32(n)?,
        k: to32(k)?,
        fmt,
        prec,
        a: a_op,
        w: op(w, [b, k, n])?,
        extras,
        out: out_op,
        extra_outs,
        epilogue,
        twin,
        rows,
    };
    let offsets = node
        .inputs
        .iter()
        .chain(node.outputs.iter())
        .map(|v| v.layout.offset)
        .collect();
    Ok((spec, offsets))
}
