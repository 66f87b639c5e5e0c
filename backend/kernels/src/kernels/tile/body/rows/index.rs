//! Coordinates (`Index` nodes) in the rows layout: for a row dim, from the column index (the
//! position in the row, row-major over the row dims); for an outer dim, from the flat index of
//! each sublane's row.

use tpuemu_isa::VReg;
use tpuemu_isa::ops::{IotaKind, VBinOp, VType};

use super::super::{Ctx, coordinate};
use crate::kernels::KernelError;

/// Whether the coordinate of dim `d` is the flat column index itself (the only row dim, or the
/// first of them with nothing after it: no division or remainder).
pub(super) fn column_is_index(cx: &Ctx, d: usize) -> bool {
    let shape = cx.orig_shape;
    d < shape.len() && d == cx.row_start && shape[d + 1..].iter().product::<usize>() == 1
}

/// A new register with the coordinate of dim `d`, `(index / inner) % size`, from the column
/// index `col` (row dims) or the group's first row (outer dims).
pub(super) fn emit_row_index(cx: &mut Ctx, d: usize, col: VReg) -> Result<VReg, KernelError> {
    let shape = cx.orig_shape;
    if d >= shape.len() {
        return Err(KernelError::Unsupported(format!(
            "coordinate of dim {d} of a {}-dim iteration space",
            shape.len()
        )));
    }
    let v = cx.va.take()?;
    if d < cx.row_start && shape[d] == 1 {
        cx.e.vmov(VType::I32, v, 0u32);
        return Ok(v);
    }
    let (first, end) = if d < cx.row_start {
        // Row r of the group is sublane r: flat row index = group base + sublane.
        let Some(base) = cx.row_base else {
            cx.va.give(v);
            return Err(KernelError::Unsupported(
                "coordinates of an outer dim without a row index".into(),
            ));
        };
        cx.e.viota(IotaKind::Sub, v);
        cx.e.vbin(VBinOp::Add, VType::I32, v, v, base);
        (0, cx.row_start)
    } else {
        cx.e.vmov(VType::I32, v, col);
        (cx.row_start, shape.len())
    };
    let inner: usize = shape[d + 1..end].iter().product();
    coordinate(cx.e, v, inner, (d > first).then_some(shape[d]));
    Ok(v)
}
