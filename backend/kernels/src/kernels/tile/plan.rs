//! The tiling of a tile kernel: which dims a tile covers, the loop levels over the rest, and
//! the DMA descriptor that moves one operand tile.
//!
//! A tile covers the trailing dims of the iteration space from some dim `f` on, plus a block of
//! `B` indices of dim `f - 1` (the last block may be shorter: the tail). The dims before
//! `f - 1` and the blocks of dim `f - 1` are the loop levels. Tiles aim at about 256 KiB per
//! operand buffer, within half of VMEM for all buffers, and at most four DMA dimensions.

use tpuemu_isa::dma::{DmaDescriptor, MAX_DMA_DIMS};

use super::spec::TileSpec;
use crate::codegen::hbm_vmem_desc;
use crate::kernels::KernelError;

/// A loop level: a dim, how many steps, and how many indices per step.
#[derive(Clone, Copy, Debug)]
pub(super) struct Level {
    /// The dim it walks.
    pub dim: usize,
    /// Steps.
    pub count: u32,
    /// Indices of the dim per step.
    pub step: u32,
}

/// The tiling of a spec.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    /// First fully covered dim.
    pub f: usize,
    /// Block of dim `f - 1` per tile (1 when `f == 0`).
    pub block: u32,
    /// Size of the last block (== block when it divides).
    pub tail: u32,
    /// Loop levels, outermost first.
    pub levels: Vec<Level>,
    /// Rows layout (with reductions) or dense.
    pub rows: bool,
    /// Row length and padded row length (rows layout).
    pub len: u32,
    pub pitch: u32,
}

impl Plan {
    /// Tiles in all.
    pub(super) fn tiles(&self) -> u64 {
        self.levels.iter().map(|l| l.count as u64).product()
    }
}

/// Elements of a full (per_row: per-row) operand tile with `block` indices of the blocked dim,
/// as laid out in VMEM.
pub(super) fn vmem_elems(spec: &TileSpec, p: &Plan, block: u32, per_row: bool) -> u64 {
    let n = spec.shape.len();
    let outer_end = if p.rows { n - spec.row_dims } else { n };
    let inner: u64 = spec.shape[p.f.min(outer_end)..outer_end]
        .iter()
        .map(|d| *d as u64)
        .product();
    let rows = if p.f > 0 { block as u64 * inner } else { inner };
    if !p.rows {
        return rows;
    }
    let rows8 = rows.div_ceil(8) * 8;
    if per_row {
        rows8
    } else {
        rows8 * p.pitch as u64
    }
}

/// Tiles a kernel aims for at least (see [`choose_plan`]).
const MIN_TILES: u64 = 4;

/// The tiling of a tile kernel: trailing outer dims whole while a tile stays near 256 KiB per
/// operand buffer (and within `budget` bytes of VMEM, double-buffered), and at least
/// [`MIN_TILES`] row tiles of 32 KiB or more where the data allows.
pub(super) fn choose_plan(spec: &TileSpec, budget: u64) -> Result<Plan, KernelError> {
    let n = spec.shape.len();
    let rows = spec.row_dims > 0;
    let len: u64 = if rows { spec.row_len() as u64 } else { 1 };
    let pitch = if rows { len.div_ceil(128) * 128 } else { 1 };
    // Bytes of VMEM per unit of the tile, both buffers, summed over operands.
    let bytes_per = |elems: &dyn Fn(bool) -> u64| -> u64 {
        spec.operands
            .iter()
            .map(|o| 2 * elems(o.per_row) * o.dtype.size() as u64)
            .sum()
    };
    let outer_end = if rows { n - spec.row_dims } else { n };
    // Greedy: include trailing outer dims while the tile stays under the target.
    let target_elems: u64 = if rows { 8 } else { 1 };
    let per_row_unit = bytes_per(&|pr| if rows { if pr { 1 } else { pitch } } else { 1 });
    let max_units = (budget / per_row_unit.max(1)).max(1);
    // Aim for ~256 KiB per operand buffer, capped by the budget.
    let max_elem = spec
        .operands
        .iter()
        .map(|o| o.dtype.size() as u64)
        .max()
        .unwrap_or(4);
    let aim_units = ((256 * 1024 / max_elem) / if rows { pitch } else { 1 }).max(target_elems);
    // Rows: at least MIN_TILES tiles where each still holds 32 KiB per operand buffer: the
    // first tile's load and the last tile's stores overlap nothing, so a tile of half the data
    // (an RMSNorm backward over 512 rows of 512 in two tiles) leaves half the kernel exposed.
    // Elementwise tiles compute too briefly to hide a tile's load latency: more of them made
    // the block's (1.4 MiB) 0.3 us slower each, so they keep the 256 KiB aim.
    let all_units: u64 = spec.shape[..outer_end].iter().map(|d| *d as u64).product();
    let floor_units = ((32 * 1024 / max_elem) / if rows { pitch } else { 1 }).max(target_elems);
    let aim_units = if rows {
        aim_units.min((all_units / MIN_TILES).max(floor_units))
    } else {
        aim_units
    };
    let units_cap = max_units.min(aim_units.max(target_elems));
    if rows && max_units < 8 {
        return Err(KernelError::TooLarge(format!(
            "rows of {len} elements do not fit VMEM ({} bytes per 8 rows, budget {budget})",
            per_row_unit * 8
        )));
    }
    let row_desc_dims = if rows { spec.row_dims } else { 0 };
    let mut f = outer_end;
    let mut units: u64 = 1;
    let mut block: u64 = 1;
    loop {
        if f == 0 {
            break;
        }
        let d = spec.shape[f - 1] as u64;
        let dims_used = row_desc_dims + (outer_end - f) + 1;
        if units * d <= units_cap && dims_used < MAX_DMA_DIMS {
            units *= d;
            f -= 1;
            continue;
        }
        block = (units_cap / units).clamp(1, d);
        break;
    }
    let (f, block) = if f == 0 { (0, 1) } else { (f, block) };
    // A tile's descriptor: the blocked dim and the outer dims after it, or every outer dim
    // when the tile covers them all, and the row dims (see `descriptor`).
    let tile_dims = if f > 0 {
        row_desc_dims + (outer_end - f) + 1
    } else {
        row_desc_dims + outer_end
    };
    if tile_dims > MAX_DMA_DIMS {
        return Err(KernelError::Unsupported(format!(
            "tile needs {tile_dims} DMA dimensions (at most {MAX_DMA_DIMS})"
        )));
    }
    let mut levels: Vec<Level> = (0..f.saturating_sub(1))
        .map(|d| Level {
            dim: d,
            count: spec.shape[d] as u32,
            step: 1,
        })
        .collect();
    let mut tail = block as u32;
    if f > 0 {
        let d = spec.shape[f - 1] as u64;
        let count = d.div_ceil(block);
        tail = (d - (count - 1) * block) as u32;
        levels.push(Level {
            dim: f - 1,
            count: count as u32,
            step: block as u32,
        });
    }
    if levels.is_empty() {
        levels.push(Level {
            dim: 0,
            count: 1,
            step: 0,
        });
    }
    Ok(Plan {
        f,
        block: block as u32,
        tail,
        levels,
        rows,
        len: len as u32,
        pitch: pitch as u32,
    })
}

/// DMA descriptor moving one tile of operand `k` (`block` indices of the blocked dim), HBM to
/// VMEM (`to_vmem`) or back.
pub(super) fn descriptor(
    spec: &TileSpec,
    p: &Plan,
    k: usize,
    block: u32,
    to_vmem: bool,
) -> DmaDescriptor {
    let o = &spec.operands[k];
    let esz = o.dtype.size() as i64;
    let n = spec.shape.len();
    let outer_end = if p.rows { n - spec.row_dims } else { n };
    // Tile dims, outermost first, with their VMEM strides (elements).
    let mut dims: Vec<(u32, i64, i64)> = Vec::new(); // (count, hbm stride, vmem stride)
    let first = p.f.saturating_sub(1);
    let tile_dims: Vec<usize> = (first..n)
        .filter(|d| !(o.per_row && *d >= outer_end))
        .collect();
    let mut vstride = vec![0i64; n];
    let mut acc: i64 = 1;
    for &d in tile_dims.iter().rev() {
        // The innermost outer dim steps over padded rows.
        if p.rows && d < outer_end && !o.per_row && (d + 1 == outer_end) {
            acc = p.pitch as i64;
        }
        vstride[d] = acc;
        let count = if d == first && p.f > 0 {
            block
        } else {
            spec.shape[d] as u32
        };
        acc *= count as i64;
    }
    for &d in &tile_dims {
        let count = if d == first && p.f > 0 {
            block
        } else {
            spec.shape[d] as u32
        };
        if count == 1 {
            continue;
        }
        dims.push((count, o.strides[d] as i64 * esz, vstride[d] * esz));
    }
    if dims.is_empty() {
        dims.push((1, 0, 0));
    }
    hbm_vmem_desc(esz as u32, &dims, to_vmem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ir::{ProgBuilder, RedKind};
    use crate::kernels::tile::spec::lower;
    use crate::layout::Layout;

    /// The spec of a full sum of `x` (`[2, 2, 3, 3, 3]` seen in `layout`).
    fn full_sum(layout: &Layout) -> TileSpec {
        let mut b = ProgBuilder::new();
        let x = b.input(0, DType::F32, false);
        let s = b.reduce(RedKind::Sum, x, DType::F32);
        b.output(s);
        let prog = b.finish();
        let out = Layout::contiguous(&[1]);
        lower(
            &[1, 2, 2, 3, 3, 3],
            5,
            &prog,
            &[(layout, DType::F32)],
            &[(&out, DType::F32)],
        )
        .unwrap()
        .0
    }

    #[test]
    fn a_row_beyond_four_dma_dims_is_refused_not_planned() {
        // `x[:, :2, :3, :3, :3]` of a [2, 3, 5, 5, 5] tensor: five runs of memory that do not
        // chain. Planned, its descriptor had five dims and the DMA engine faulted at run time.
        let base = Layout::contiguous(&[2, 3, 5, 5, 5]);
        let window = Layout {
            shape: vec![2, 2, 3, 3, 3],
            strides: base.strides.clone(),
            offset: 0,
        };
        let spec = full_sum(&window);
        assert_eq!(spec.row_dims, 5);
        let e = choose_plan(&spec, 8 << 20).unwrap_err();
        assert!(e.to_string().contains("5 DMA dimensions"), "{e}");
        // The same values contiguous: one row dim, planned.
        let spec = full_sum(&Layout::contiguous(&[2, 2, 3, 3, 3]));
        assert_eq!(spec.row_dims, 1);
        let p = choose_plan(&spec, 8 << 20).unwrap();
        assert!(descriptor(&spec, &p, 0, p.block, true).dims.len() <= MAX_DMA_DIMS);
    }
}
