//! How the rules compare and re-express views, and splice one program into another.

use std::collections::HashMap;

use crate::ir::{MatmulNode, POp, PRef, Prog, View};
use crate::kernels::tile::spec::aligned_strides;
use crate::layout::Layout;

/// Maps `prog`'s inputs through `map` (input index -> prog ref in `into`) and appends its nodes.
/// With `per_row`, every appended node is marked constant along the row (a per-row map merged
/// into a reduction's group). Returns the refs of `prog`'s outputs in `into`.
pub(super) fn append_prog(
    into: &mut Prog,
    prog: &Prog,
    map: &HashMap<u32, PRef>,
    per_row: bool,
) -> Vec<PRef> {
    let mut remap: Vec<PRef> = Vec::with_capacity(prog.nodes.len());
    for n in &prog.nodes {
        let r = |x: PRef| remap[x as usize];
        let new = match n.op {
            POp::Input(i) => {
                remap.push(map[&i]);
                continue;
            }
            op => op.map_args(r),
        };
        remap.push(into.push(new, n.dtype, n.per_row || per_row));
    }
    prog.outputs.iter().map(|o| remap[*o as usize]).collect()
}

/// How many leading dims of `nshape` are the outer (non-row) dims of `shape`, when `nshape` is
/// those dims (`keepdim=False`) or those dims followed by size-1 row dims (`keepdim=True`).
pub(super) fn outer_dims(shape: &[usize], row_dims: usize, nshape: &[usize]) -> Option<usize> {
    let outer = &shape[..shape.len() - row_dims];
    if nshape == outer
        || (nshape.len() == shape.len()
            && &nshape[..outer.len()] == outer
            && nshape[outer.len()..].iter().all(|&d| d == 1))
    {
        Some(outer.len())
    } else {
        None
    }
}

/// `v`, an operand of a node iterating over `nshape` (the group's outer dims, see
/// [`outer_dims`]), as a per-row operand of the group over `shape`.
pub(super) fn per_row_view(
    v: &View,
    shape: &[usize],
    row_dims: usize,
    nshape: &[usize],
) -> Option<View> {
    let k = outer_dims(shape, row_dims, nshape)?;
    let strides = aligned_strides(&v.layout, nshape, 0).ok()?;
    let layout = Layout {
        shape: nshape[..k].to_vec(),
        strides: strides[..k].to_vec(),
        offset: v.layout.offset,
    };
    Some(View {
        storage: v.storage.clone(),
        layout,
        dtype: v.dtype,
    })
}

/// Whether two per-row operands over `shape` address the same elements.
pub(super) fn same_layout_per_row(a: &View, b: &View, shape: &[usize], rows: usize) -> bool {
    a.dtype == b.dtype
        && a.layout.offset == b.layout.offset
        && matches!(
            (aligned_strides(&a.layout, shape, rows), aligned_strides(&b.layout, shape, rows)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// Whether two views read the same elements of the same storage the same way.
pub(super) fn same_view(a: &View, b: &View) -> bool {
    a.storage.id() == b.storage.id() && a.dtype == b.dtype && a.layout == b.layout
}

/// Whether two layouts address the same elements in the same order.
pub(super) fn same_elements(a: &Layout, b: &Layout) -> bool {
    a.is_contiguous() && b.is_contiguous() && a.offset == b.offset && a.numel() == b.numel()
}

/// Whether `read` (a consumer's view over `shape`) reads the per-row values `written` (a
/// producer's per-row output over the outer dims) broadcast along the row.
pub(super) fn same_per_row(written: &View, read: &View, shape: &[usize], rows: usize) -> bool {
    if written.layout.offset != read.layout.offset {
        return false;
    }
    let (Ok(w), Ok(r)) = (
        aligned_strides(&written.layout, shape, rows),
        aligned_strides(&read.layout, shape, 0),
    ) else {
        return false;
    };
    w == r
}

/// Whether a matmul over `[batch, m, n]` can take an elementwise epilogue over `shape`: the
/// same elements, the same last dim.
pub(super) fn epilogue_shape(mm: &MatmulNode, shape: &[usize]) -> bool {
    let numel: usize = shape.iter().product();
    numel == mm.batch * mm.m * mm.n && shape.last() == Some(&mm.n)
}

/// `v`, an operand of an elementwise node over `nshape` (a shape of the product's elements),
/// as an operand over the product's `[batch, m, n]`: broadcast to `nshape`, then viewed as
/// `[batch, m, n]` (PyTorch's `view` rule; `None` where no strides can express it).
pub(super) fn in_product_space(v: &View, nshape: &[usize], mm: &MatmulNode) -> Option<View> {
    let layout = v
        .layout
        .broadcast_to(nshape)
        .ok()?
        .view_as(&[mm.batch, mm.m, mm.n])?;
    Some(View {
        storage: v.storage.clone(),
        layout,
        dtype: v.dtype,
    })
}
