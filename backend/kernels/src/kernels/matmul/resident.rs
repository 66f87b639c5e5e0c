//! The resident schedule (SCALE-Sim parity): all of A and W into VMEM, every fold in turn, the
//! result back to HBM. One contiguous GEMM, no epilogue.

use super::{Access, Ctx, Side, tile_desc};
use crate::kernels::KernelError;

/// Emits the whole schedule.
pub(super) fn emit(cx: &mut Ctx) -> Result<(), KernelError> {
    let s = cx.spec;
    if s.batch != 1
        || s.epilogue.is_some()
        || s.a.access(s.m, s.k) != Access::Normal
        || s.w.access(s.k, s.n) != Access::Normal
    {
        return Err(KernelError::Unsupported(
            "the resident schedule takes one contiguous GEMM".into(),
        ));
    }
    let (m, n, k, esz) = (s.m, s.n, s.k, s.esz());
    let (r, c, nmxu) = (
        cx.chip.core.mxu_rows,
        cx.chip.core.mxu_cols,
        cx.chip.core.mxus,
    );
    let a_v = 0u32;
    let b_v = a_v + m * k * esz;
    let c_v = b_v + k * n * esz;
    cx.e.mark_begin("load operands");
    let da = tile_desc(esz, m, k, s.a.strides[1], s.a.strides[2], k, true);
    let db = tile_desc(esz, k, n, s.w.strides[1], s.w.strides[2], n, true);
    cx.dma(
        Side::Vmem(a_v as i32),
        Side::Hbm {
            slot: cx.slots.a,
            off: 0,
        },
        &da,
        0,
    )?;
    cx.dma(
        Side::Vmem(b_v as i32),
        Side::Hbm {
            slot: cx.slots.w,
            off: 0,
        },
        &db,
        1,
    )?;
    cx.wait(0, da.bytes());
    cx.wait(1, db.bytes());
    cx.e.mark_end();
    cx.e.mark_begin("folds");
    for (jt, j) in (0..n).step_by(c as usize).enumerate() {
        let mxu = (jt as u32 % nmxu) as u8;
        for kk in (0..k).step_by(r as usize) {
            let (kr, nc) = ((k - kk).min(r), (n - j).min(c));
            cx.fold(
                mxu,
                (b_v + (kk * n + j) * esz, kr, nc, n * esz, false),
                (a_v + kk * esz, m, k * esz, false),
                (c_v + j * 4, n * 4),
                kk > 0,
            );
        }
    }
    cx.e.mark_end();
    cx.e.mark_begin("store result");
    let dc = tile_desc(4, m, n, s.out.strides[1], s.out.strides[2], n, false);
    let out_slot = cx.slots.out0;
    cx.dma(
        Side::Hbm {
            slot: out_slot,
            off: 0,
        },
        Side::Vmem(c_v as i32),
        &dc,
        2,
    )?;
    cx.wait(2, dc.bytes());
    cx.e.mark_end();
    Ok(())
}
