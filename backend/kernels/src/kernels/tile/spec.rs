//! The tile kernel's specification: a tile node with its operand layouts normalised and its
//! dims coalesced, independent of which storages it runs on (the cache key).

use crate::dtype::DType;
use crate::ir::{POp, Prog};
use crate::kernels::KernelError;
use crate::layout::Layout;

/// One operand of a tile kernel.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TileOperand {
    /// Element type.
    pub dtype: DType,
    /// Element stride along each dim of the (coalesced) iteration space; 0 where broadcast.
    pub strides: Vec<isize>,
    /// Written by the kernel.
    pub output: bool,
    /// Constant along the row dims (a per-row input or output).
    pub per_row: bool,
}

/// A tile kernel: elementwise work and row reductions over a (coalesced) iteration space.
#[derive(Clone, PartialEq, Debug)]
pub struct TileSpec {
    /// The iteration space after coalescing.
    pub shape: Vec<usize>,
    /// Trailing dims of `shape` that form the row (0 when the program does not reduce).
    pub row_dims: usize,
    /// The node's iteration space before coalescing (for `Index` coordinates).
    pub orig_shape: Vec<usize>,
    /// Inputs, then outputs.
    pub operands: Vec<TileOperand>,
    /// Number of inputs among the operands.
    pub inputs: usize,
    /// The program.
    pub prog: Prog,
}

impl TileSpec {
    /// A canonical string for kernel caching.
    pub fn key(&self) -> String {
        format!(
            "tile {:?} {} {:?} {:?} {} {}",
            self.shape,
            self.row_dims,
            self.orig_shape,
            self.operands,
            self.inputs,
            self.prog.key()
        )
    }

    /// Elements of the iteration space.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Length of a row (1 when there are no row dims).
    pub fn row_len(&self) -> usize {
        self.shape[self.shape.len() - self.row_dims..]
            .iter()
            .product()
    }
}

/// Strides of `layout` aligned to the iteration space `shape` (trailing alignment; missing
/// leading dims and size-1 dims broadcast).
pub fn aligned_strides(
    layout: &Layout,
    shape: &[usize],
    per_row_dims: usize,
) -> Result<Vec<isize>, KernelError> {
    // A per-row operand covers only the outer dims.
    let covered = shape.len() - per_row_dims;
    if layout.ndim() > covered {
        return Err(KernelError::Unsupported(format!(
            "operand of shape {:?} does not broadcast to {:?}",
            layout.shape,
            &shape[..covered]
        )));
    }
    let lead = covered - layout.ndim();
    let mut strides = vec![0isize; shape.len()];
    for (i, (&s, &st)) in layout.shape.iter().zip(&layout.strides).enumerate() {
        let d = lead + i;
        if s == shape[d] {
            strides[d] = if s == 1 { 0 } else { st };
        } else if s != 1 {
            return Err(KernelError::Unsupported(format!(
                "operand of shape {:?} does not broadcast to {:?}",
                layout.shape, shape
            )));
        }
    }
    Ok(strides)
}

/// Builds the spec of a tile node: `shape`, `row_dims`, the program, and the layouts and dtypes
/// of its inputs and outputs. Returns the spec and each operand's storage offset (elements),
/// which the kernel takes as arguments so that differently offset views share a kernel.
pub fn lower(
    shape: &[usize],
    row_dims: usize,
    prog: &Prog,
    inputs: &[(&Layout, DType)],
    outputs: &[(&Layout, DType)],
) -> Result<(TileSpec, Vec<usize>), KernelError> {
    let mut per_row_in = vec![false; inputs.len()];
    for n in &prog.nodes {
        if let POp::Input(i) = n.op {
            let i = i as usize;
            if i >= inputs.len() {
                return Err(KernelError::Unsupported(format!(
                    "program reads input {i} of {}",
                    inputs.len()
                )));
            }
            per_row_in[i] = n.per_row;
        }
    }
    // Full inputs that do not vary along the row (stride 0 on every row dim) become per-row
    // operands, and what is computed from them alone is computed once per row.
    let mut prog = prog.clone();
    prog.cse();
    let mut hoisted = vec![false; inputs.len()];
    if row_dims > 0 {
        let row_from = shape.len() - row_dims;
        for (i, (l, _)) in inputs.iter().enumerate() {
            if !per_row_in[i]
                && let Ok(st) = aligned_strides(l, shape, 0)
                && st[row_from..].iter().all(|&x| x == 0)
                && shape[row_from..].iter().product::<usize>() > 1
            {
                per_row_in[i] = true;
                hoisted[i] = true;
            }
        }
        hoist_row_invariants(&mut prog, &per_row_in);
        // Again with the per-row flags settled (a value read full and per-row is one).
        prog.cse();
        super::one_hot::fold_one_hot_sums(
            &mut prog,
            shape.len(),
            row_dims,
            shape[row_from..].iter().product(),
        );
        if super::selects::push_selects_into_rows(&mut prog) {
            hoist_row_invariants(&mut prog, &per_row_in);
            prog.cse();
        }
    }
    let prog = &prog;
    if prog.outputs.len() != outputs.len() {
        return Err(KernelError::Unsupported(format!(
            "program has {} outputs, node has {}",
            prog.outputs.len(),
            outputs.len()
        )));
    }
    let mut ops = Vec::new();
    let mut offsets = Vec::new();
    for (i, (l, d)) in inputs.iter().enumerate() {
        let pr = per_row_in[i] && row_dims > 0;
        // A hoisted operand is laid out over the whole space (stride 0 along the row).
        let align = if pr && !hoisted[i] { row_dims } else { 0 };
        ops.push(TileOperand {
            dtype: *d,
            strides: aligned_strides(l, shape, align)?,
            output: false,
            per_row: pr,
        });
        offsets.push(l.offset);
    }
    for (o, (l, d)) in prog.outputs.iter().zip(outputs) {
        let pr = prog.node(*o).per_row && row_dims > 0;
        if !pr && l.shape != shape {
            return Err(KernelError::Unsupported(format!(
                "output of shape {:?} for a {:?} iteration space",
                l.shape, shape
            )));
        }
        ops.push(TileOperand {
            dtype: *d,
            strides: aligned_strides(l, shape, if pr { row_dims } else { 0 })?,
            output: true,
            per_row: pr,
        });
        offsets.push(l.offset);
    }
    // A pure elementwise kernel may walk its space in any order: walk it in the first output's
    // memory order, so that each tile is one contiguous block of the output (walked in the
    // logical order, the tiles of a transposed output interleave in memory, and their stores
    // overlap).
    let pure = row_dims == 0 && !prog.nodes.iter().any(|n| matches!(n.op, POp::Index(_)));
    let perm = if pure {
        memory_order(shape, &ops)
    } else {
        (0..shape.len()).collect()
    };
    // Outputs in different memory orders (a fused transpose-and-copy) cannot all be walked in
    // order; when the space takes more than one tile their stores would overlap: no kernel (a
    // fused group's operators then run one by one).
    let big = shape.iter().product::<usize>() * 4 > 256 * 1024;
    if pure && big {
        let orders: Vec<Vec<usize>> = ops
            .iter()
            .filter(|o| o.output)
            .map(|o| {
                let one = [o.clone()];
                let mut v = memory_order(shape, &one);
                v.retain(|d| shape[*d] > 1);
                v
            })
            .collect();
        if orders.windows(2).any(|w| w[0] != w[1]) {
            return Err(KernelError::Unsupported(
                "outputs laid out in different orders of dimensions".into(),
            ));
        }
    }
    let pshape: Vec<usize> = perm.iter().map(|d| shape[*d]).collect();
    for o in ops.iter_mut() {
        o.strides = perm.iter().map(|d| o.strides[*d]).collect();
    }
    let (cshape, crow, cops) = coalesce(&pshape, row_dims, ops);
    Ok((
        TileSpec {
            shape: cshape,
            row_dims: crow,
            orig_shape: shape.to_vec(),
            operands: cops,
            inputs: inputs.len(),
            prog: prog.clone(),
        },
        offsets,
    ))
}

/// Marks per-row the inputs in `per_row_in` and every elementwise node whose arguments are all
/// per-row values or constants; a full output whose value became per-row is broadcast back by
/// a copy node.
fn hoist_row_invariants(prog: &mut Prog, per_row_in: &[bool]) {
    let was_per_row: Vec<bool> = prog.outputs.iter().map(|o| prog.node(*o).per_row).collect();
    for i in 0..prog.nodes.len() {
        let node = prog.nodes[i];
        let pr = match node.op {
            POp::Input(k) => per_row_in[k as usize],
            // A constant is the same in every row: computed once per row.
            POp::Const(_) => true,
            POp::Index(_) | POp::Reduce(..) | POp::ArgMax(_) | POp::ArgMin(_) => node.per_row,
            ref op => {
                let args = crate::kernels::tile::body::args(op);
                node.per_row
                    || (args.iter().all(|a| {
                        let x = &prog.nodes[*a as usize];
                        x.per_row || matches!(x.op, POp::Const(_))
                    }) && args.iter().any(|a| prog.nodes[*a as usize].per_row))
            }
        };
        prog.nodes[i].per_row = pr;
    }
    for (k, was) in was_per_row.into_iter().enumerate() {
        let o = prog.outputs[k];
        if !was && prog.node(o).per_row {
            let dt = prog.node(o).dtype;
            prog.outputs[k] = prog.push(POp::Cast(o), dt, false);
        }
    }
}

/// The dims in the first output's memory order (largest stride first; ties keep their order).
fn memory_order(shape: &[usize], ops: &[TileOperand]) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..shape.len()).collect();
    if let Some(out) = ops.iter().find(|o| o.output) {
        perm.sort_by_key(|d| std::cmp::Reverse(out.strides[*d].unsigned_abs()));
    }
    perm
}

/// Drops size-1 dims and merges neighbours whose strides chain for every operand, never across
/// the outer/row boundary. Keeps at least one dim.
fn coalesce(
    shape: &[usize],
    row_dims: usize,
    mut ops: Vec<TileOperand>,
) -> (Vec<usize>, usize, Vec<TileOperand>) {
    let boundary = shape.len() - row_dims;
    let mut dims: Vec<(usize, bool, Vec<isize>)> = Vec::new(); // (size, is_row, strides per op)
    for (d, &s) in shape.iter().enumerate() {
        if s == 1 {
            continue;
        }
        let strides: Vec<isize> = ops.iter().map(|o| o.strides[d]).collect();
        let is_row = d >= boundary;
        if let Some((ps, prow, pst)) = dims.last_mut()
            && *prow == is_row
            && pst.iter().zip(&strides).all(|(a, b)| *a == *b * s as isize)
        {
            *ps *= s;
            *pst = strides;
            continue;
        }
        dims.push((s, is_row, strides));
    }
    if dims.is_empty() {
        dims.push((1, row_dims > 0, vec![0; ops.len()]));
    }
    if row_dims > 0 && !dims.iter().any(|d| d.1) {
        dims.push((1, true, vec![0; ops.len()]));
    }
    let nrow = dims.iter().filter(|d| d.1).count();
    for (k, o) in ops.iter_mut().enumerate() {
        o.strides = dims.iter().map(|d| d.2[k]).collect();
    }
    (
        dims.iter().map(|d| d.0).collect(),
        if row_dims > 0 { nrow } else { 0 },
        ops,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ProgBuilder;

    #[test]
    fn coalesces_contiguous_and_keeps_broadcasts() {
        let mut b = ProgBuilder::new();
        let x = b.input(0, DType::F32, false);
        let y = b.input(1, DType::F32, false);
        let s = b.bin(crate::ir::BinOp::Add, x, y, DType::F32);
        b.output(s);
        let prog = b.finish();
        let x = Layout::contiguous(&[4, 5, 6]);
        let bias = Layout::contiguous(&[6]);
        let out = Layout::contiguous(&[4, 5, 6]);
        let (spec, offs) = lower(
            &[4, 5, 6],
            0,
            &prog,
            &[(&x, DType::F32), (&bias, DType::F32)],
            &[(&out, DType::F32)],
        )
        .unwrap();
        // [4,5] merge (bias stride 0 on both), 6 stays separate for the bias.
        assert_eq!(spec.shape, vec![20, 6]);
        assert_eq!(spec.operands[1].strides, vec![0, 1]);
        assert_eq!(offs, vec![0, 0, 0]);
        // Without the bias everything merges into one dim.
        let (spec, _) = lower(
            &[4, 5, 6],
            0,
            &prog,
            &[(&x, DType::F32), (&x, DType::F32)],
            &[(&out, DType::F32)],
        )
        .unwrap();
        assert_eq!(spec.shape, vec![120]);
    }

    #[test]
    fn work_on_constants_and_row_values_is_done_once_per_row() {
        // y = x * (bf16(1.0) / t[row]) with the constant cast twice (as a scalar tensor reaches
        // a fused kernel): every node but x's and y's is per-row, so the division runs once per
        // row, not once per element.
        let mut b = ProgBuilder::new();
        let x = b.input(0, DType::F32, false);
        let t = b.input(1, DType::F32, true);
        let c = b.constant(crate::dtype::Scalar::Float(1.0), DType::F32);
        let cb = b.cast(c, DType::BF16);
        let cf = b.cast(cb, DType::F32);
        let q = b.bin(crate::ir::BinOp::Div, cf, t, DType::F32);
        let y = b.bin(crate::ir::BinOp::Mul, x, q, DType::F32);
        let s = b.reduce(crate::ir::RedKind::Sum, y, DType::F32);
        b.output(s);
        let prog = b.finish();
        let (xl, tl, sl) = (
            Layout::contiguous(&[16, 256]),
            Layout::contiguous(&[16]),
            Layout::contiguous(&[16]),
        );
        let (spec, _) = lower(
            &[16, 256],
            1,
            &prog,
            &[(&xl, DType::F32), (&tl, DType::F32)],
            &[(&sl, DType::F32)],
        )
        .unwrap();
        let per_row: Vec<bool> = spec.prog.nodes.iter().map(|n| n.per_row).collect();
        assert!(per_row[q as usize] && per_row[cf as usize] && per_row[cb as usize]);
        assert!(!per_row[x as usize] && !per_row[y as usize]);
    }
}
