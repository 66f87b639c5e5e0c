//! Choosing the tiles of a matmul kernel with a small cost model of the chip.
//!
//! Every candidate tiling that fits three quarters of VMEM is scored by an estimate of its time:
//! the larger of matrix-unit time and HBM time, plus what cannot overlap (the first slices'
//! load before any matmul can start, the last tile's store after the last one ends). The
//! estimate follows the streamed schedule of [`super::build`]:
//! - matrix-unit time: each step feeds `ceil(tk / R) x ceil(tn / C)` weight tiles, dealt over
//!   the units by column; a weight tile streams `tm` rows (at least `R` cycles: the weight load);
//! - HBM bytes: an A block is loaded once per output tile, or once per row of tiles when K fits
//!   one slice (consecutive tiles share it); a W block once per output tile, or once in all when
//!   there is a single column of tiles and one slice; outputs and epilogue inputs once.
//!
//! Large tiles raise arithmetic intensity (`tm * tn / (tm + tn)` FLOPs per byte for bf16),
//! wide tiles keep every matrix unit busy, and small problems get tiles small enough that the
//! exposed first load and last store stay short.

use tpuemu_isa::ChipInfo;

use super::{KernelError, MatSpec};

/// How to tile a [`MatSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatPlan {
    /// Output tile rows.
    pub tm: u32,
    /// Output tile columns.
    pub tn: u32,
    /// K slice.
    pub tk: u32,
    /// Everything in VMEM first (SCALE-Sim parity; batch 1, contiguous, no epilogue).
    pub resident: bool,
}

impl MatPlan {
    /// VMEM bytes the plan needs.
    pub fn vmem_bytes(&self, spec: &MatSpec) -> u64 {
        let e = spec.esz() as u64;
        let (m, n, k) = (spec.m as u64, spec.n as u64, spec.k as u64);
        if self.resident {
            return (m * k + k * n) * e + m * n * 4;
        }
        let (tm, tn, tk) = (self.tm as u64, self.tn as u64, self.tk as u64);
        let tile = tm * tn;
        let extras: u64 = spec.extras.iter().map(|x| x.dtype.size() as u64).sum();
        let out = if spec.epilogue.is_some() {
            spec.out_bytes() as u64
        } else {
            0
        };
        // A row epilogue's operands: a tile each, or a row's value for each tile row.
        let rows: u64 = spec
            .rows
            .iter()
            .flat_map(|r| r.args())
            .map(|(_, o)| {
                let esz = o.dtype.size() as u64;
                if o.per_row { tm * esz } else { tile * esz }
            })
            .sum();
        2 * (tm * tk * e + tk * tn * e) + 2 * tile * 4 + 2 * tile * (extras + out) + 2 * rows
    }

    /// Output tiles per batch entry along M and N, and K slices.
    fn counts(&self, spec: &MatSpec) -> (u64, u64, u64) {
        (
            spec.m.div_ceil(self.tm) as u64,
            spec.n.div_ceil(self.tn) as u64,
            spec.k.div_ceil(self.tk) as u64,
        )
    }
}

/// Cycles a step costs beyond its matrix-unit or HBM time (see [`estimate_seconds`]).
const STEP_OVERHEAD_CYCLES: f64 = 200.0;

fn round_up(x: u32, to: u32) -> u32 {
    x.div_ceil(to) * to
}

/// The estimated seconds of `plan` on `chip` (see the module docs).
pub fn estimate_seconds(spec: &MatSpec, plan: &MatPlan, chip: &ChipInfo) -> f64 {
    let core = &chip.core;
    let (r, c, units) = (
        core.mxu_rows as u64,
        core.mxu_cols as u64,
        core.mxus.max(1) as u64,
    );
    let (tiles_m, tiles_n, slices) = plan.counts(spec);
    let (tm, tn, tk) = (plan.tm as u64, plan.tn as u64, plan.tk as u64);
    let (m, n, k) = (spec.m as u64, spec.n as u64, spec.k as u64);
    let (tm, tn, tk) = (tm.min(m), tn.min(n), tk.min(k));
    let batch = spec.batch as u64;
    let e = spec.esz() as u64;
    let out_e = spec.out_bytes() as u64;
    let extras: u64 = spec.extras.iter().map(|x| x.dtype.size() as u64).sum();
    let passes = spec.prec.passes() as u64;
    let clock = core.clock_hz.max(1.0);
    let bw = chip.hbm_bytes_per_s.max(1.0);
    let latency = chip.hbm_latency_ns * 1e-9;
    let steps = batch * tiles_m * tiles_n * slices;
    // A step: its matrix-unit work, or its loads (issued one step ahead, so their latency
    // and transfer hide behind the previous step's work), or its share of all HBM traffic.
    let folds_per_unit = tk.div_ceil(r) * tn.div_ceil(c).div_ceil(units);
    let mxu_step = (folds_per_unit * tm.max(r) * passes) as f64 / clock;
    let a_loads = batch * tiles_m * if slices == 1 { 1 } else { tiles_n * slices };
    let w_loads = batch
        * tiles_n
        * slices
        * if slices == 1 && tiles_n == 1 {
            1
        } else {
            tiles_m
        };
    let load_bytes = (a_loads * tm * tk + w_loads * tk * tn) * e;
    let store_bytes = batch * m * n * (out_e + extras);
    let hbm_step = (load_bytes + store_bytes) as f64 / steps as f64 / bw;
    let load_step = latency + hbm_step;
    // The epilogue converts each output tile on the vector unit (about four cycles per 8 x 128
    // register); it runs under the next tile's matmuls, except the last tile's.
    let epi = if spec.epilogue.is_some() {
        ((tm * tn).div_ceil(1024) * 4) as f64 / clock
    } else {
        0.0
    };
    // Each step also waits on its semaphore and issues its commands (calibrated against the
    // emulator: about 200 cycles that overlap nothing).
    let step = mxu_step.max(load_step) + STEP_OVERHEAD_CYCLES / clock;
    // Exposed: the first step's loads and the last tile's store.
    let first = latency + ((tm * tk + tk * tn) * e) as f64 / bw;
    let last = latency + (tm * tn * out_e) as f64 / bw;
    steps as f64 * step + epi + first + last
}

/// The estimated seconds of `plan` for a product with a row epilogue, but for the row
/// program's vector work, which is the same for every tiling and does not overlap the matrix
/// units: the drain of a tile is one long run of vector instructions, and the front end can
/// queue only a few matrix-unit commands ahead of it (`costs.mxu_queue_depth`; measured on the
/// demo's language-model head: tiles of 128 rows 81.9 us, one tile of 512 rows 72.8 us). What
/// remains is the matrix units' time (or HBM's) and the first slices' load, among the tilings
/// that read W once (K in one slice, or all rows in one tile: the whole width of W is the
/// largest operand; re-reading it was 4 us faster on that head, for 8 MiB more).
fn rows_estimate(spec: &MatSpec, plan: &MatPlan, chip: &ChipInfo) -> f64 {
    let core = &chip.core;
    let (r, c, units) = (
        core.mxu_rows.max(1) as u64,
        core.mxu_cols.max(1) as u64,
        core.mxus.max(1) as u64,
    );
    let (tiles_m, _, slices) = plan.counts(spec);
    let (m, n, k) = (spec.m as u64, spec.n as u64, spec.k as u64);
    let (tm, tn, tk) = (
        (plan.tm as u64).min(m),
        (plan.tn as u64).min(n),
        (plan.tk as u64).min(k),
    );
    let e = spec.esz() as u64;
    let clock = core.clock_hz.max(1.0);
    let bw = chip.hbm_bytes_per_s.max(1.0);
    let latency = chip.hbm_latency_ns * 1e-9;
    let folds = tk.div_ceil(r) * tn.div_ceil(c).div_ceil(units);
    let mxu = (tiles_m * slices * folds * tm.max(r) * spec.prec.passes() as u64) as f64 / clock;
    // W (the whole width) is read once: K in one slice, or one row of tiles.
    if slices > 1 && tiles_m > 1 {
        return f64::INFINITY;
    }
    let loads = ((m * k + k * n) * e) as f64 / bw;
    let first = latency + ((tm * tk + tk * tn) * e) as f64 / bw;
    mxu.max(loads) + first
}

/// Sizes worth trying for a tile side: the whole (rounded) extent, and powers of two from
/// `unit` up to `max` below it.
fn candidates(extent: u32, unit: u32, max: u32) -> Vec<u32> {
    // In 64 bits: an extent near 2^32 rounded up to the unit must not wrap to a zero tile.
    let whole = (extent as u64).div_ceil(unit as u64) * unit as u64;
    let mut v = Vec::new();
    if whole <= max as u64 {
        v.push(whole as u32);
    }
    let mut t = unit.next_power_of_two().max(unit);
    while (t as u64) < whole && t <= max {
        v.push(round_up(t, unit));
        t *= 2;
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Chooses the tiling with the smallest estimated time among those that fit three quarters of
/// VMEM (ties go to fewer steps, then to less VMEM).
pub fn plan(spec: &MatSpec, chip: &ChipInfo, resident: bool) -> Result<MatPlan, KernelError> {
    let core = &chip.core;
    if spec.m == 0 || spec.n == 0 || spec.k == 0 || spec.batch == 0 {
        return Err(KernelError::Unsupported(
            "matmul with an empty dimension".into(),
        ));
    }
    if spec.twin.is_some() {
        return super::pair::plan(spec, chip);
    }
    let budget = core.vmem_bytes * 3 / 4;
    if resident {
        let p = MatPlan {
            tm: spec.m,
            tn: spec.n,
            tk: spec.k,
            resident: true,
        };
        if p.vmem_bytes(spec) > budget {
            return Err(KernelError::TooLarge(format!(
                "the resident GEMM needs {} bytes of VMEM; the core has {}",
                p.vmem_bytes(spec),
                core.vmem_bytes
            )));
        }
        return Ok(p);
    }
    let (r, c) = (core.mxu_rows.max(1), core.mxu_cols.max(1));
    // A row epilogue sees whole rows: one tile spans the product's width, its row pitch the
    // rows body's (a multiple of 128).
    let tns = if spec.rows.is_some() {
        let whole = spec.n.next_multiple_of(c);
        if whole != spec.n.next_multiple_of(128) {
            return Err(KernelError::Unsupported(
                "a row epilogue needs rows padded as the vector unit pads them".into(),
            ));
        }
        vec![whole]
    } else {
        candidates(spec.n, c, 2048.max(c))
    };
    let mut best: Option<(f64, u64, u64, MatPlan)> = None;
    for &tm in &candidates(spec.m, 8, 2048) {
        for &tn in &tns {
            for &tk in &candidates(spec.k, r, 2048.max(r)) {
                let p = MatPlan {
                    tm,
                    tn,
                    tk,
                    resident: false,
                };
                let vmem = p.vmem_bytes(spec);
                if vmem > budget {
                    continue;
                }
                let t = if spec.rows.is_some() {
                    rows_estimate(spec, &p, chip)
                } else {
                    estimate_seconds(spec, &p, chip)
                };
                let (tiles_m, tiles_n, slices) = p.counts(spec);
                let steps = tiles_m * tiles_n * slices;
                let better = match &best {
                    None => true,
                    Some((bt, bs, bv, _)) => {
                        // Within 0.1% counts as a tie.
                        if t < bt * 0.999 {
                            true
                        } else if t <= bt * 1.001 {
                            (steps, vmem) < (*bs, *bv)
                        } else {
                            false
                        }
                    }
                };
                if better {
                    best = Some((t, steps, vmem, p));
                }
            }
        }
    }
    best.map(|b| b.3).ok_or_else(|| {
        KernelError::TooLarge("even the smallest matmul tiles do not fit VMEM".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_candidates_never_wrap_to_zero() {
        for extent in [u32::MAX, u32::MAX - 7, (1 << 31) + 1, 1] {
            for unit in [8, 128, 256] {
                let c = candidates(extent, unit, 2048);
                assert!(!c.is_empty(), "{extent} {unit}");
                assert!(
                    c.iter().all(|&t| t > 0 && t <= 2048 && t % unit == 0),
                    "{extent} {unit}: {c:?}"
                );
            }
        }
        assert_eq!(candidates(100, 8, 2048), vec![8, 16, 32, 64, 104]);
    }
}
