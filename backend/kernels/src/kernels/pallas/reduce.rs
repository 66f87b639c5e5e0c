//! Reductions (`jnp.sum`, `jnp.max`, `jnp.min`) along the lanes, the sublanes or both: tiles
//! combined elementwise, then one cross-lane (`vred`) step, the result broadcast along the
//! reduced axis as the layout wants ([`super::values`]). Elements past an array's edge are
//! masked to the reduction's identity.
//!
//! A value that is stored because it is used more than once has its later row reductions
//! computed in the pass that stores it ([`Body::keep_fused`]): attention's scores are stored
//! once and their row maximum needs no second pass over them; when the value's only other use
//! is a cast to bfloat16 (the probabilities fed to the matrix unit), only the cast is stored.

use std::collections::HashMap;
use std::rc::Rc;

use tpuemu_isa::VReg;
use tpuemu_isa::ops::{Axis, CvtOp, MemFmt, RedOp, VBinOp, VType};

use super::PallasError;
use super::body::{Body, Val, dt_of, ints};
use super::expr::{Expr, Kind};
use super::spec::{Dt, Eqn};
use super::values::{LANES, SUB, store, vtype};

/// Accumulators of a reduction, one output tile's after another's so that one tile's final
/// cross-lane step overlaps the next tile's loads (the pool of [`super::expr`] starts above).
const ACCS: [VReg; 4] = [VReg::n(0), VReg::n(1), VReg::n(2), VReg::n(3)];

impl Body<'_> {
    pub(super) fn reduce(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let o = &eq.outs[0];
        let dt = dt_of(self.kernel, &o.dtype)?;
        let a: Rc<Expr> = match ins.into_iter().next() {
            Some(Val::E(a)) => a,
            Some(v @ Val::S(..)) => return Ok(vec![v]),
            _ => return Err(PallasError::Spec("reduction of a reference".into())),
        };
        super::values::two_d(self.kernel, &a.shape, false)?;
        let axes = ints(&eq.params, "axes");
        let n = a.shape.len();
        let mut over_rows = false;
        let mut over_cols = false;
        for &ax in &axes {
            let ax = ax as usize;
            if n == 1 {
                // A 1-D value is a row or a column.
                if a.rows == 1 {
                    over_cols = true;
                } else {
                    over_rows = true;
                }
            } else if ax + 1 == n {
                over_cols = true;
            } else if ax + 2 == n {
                over_rows = true;
            }
        }
        let (red, ident_f, ident_i) = match eq.prim.as_str() {
            "reduce_sum" => (RedOp::Add, 0.0f32, 0i32),
            "reduce_max" => (RedOp::Max, f32::NEG_INFINITY, i32::MIN),
            _ => (RedOp::Min, f32::INFINITY, i32::MAX),
        };
        let ty = vtype(a.dt);
        let ident = if ty == VType::F32 {
            ident_f.to_bits()
        } else {
            ident_i as u32
        };
        let bin = match red {
            RedOp::Add => VBinOp::Add,
            RedOp::Max => VBinOp::Max,
            RedOp::Min => VBinOp::Min,
        };
        let rows = if over_rows { 1 } else { a.rows };
        let cols = if over_cols { 1 } else { a.cols };
        let mut out = self
            .vmem
            .array(rows, cols, MemFmt::W32, dt, o.shape.clone(), "a value")?;
        // A reduction along the lanes leaves its result in every lane.
        out.rep = cols == 1;
        let (ti, tj) = (a.ti(), a.tj());
        let (pr, pc) = (a.rows % SUB, a.cols % LANES);
        let mut nth = 0;
        for oi in 0..if over_rows { 1 } else { ti } {
            for oj in 0..if over_cols { 1 } else { tj } {
                let acc = ACCS[nth % ACCS.len()];
                nth += 1;
                let is: Vec<u32> = if over_rows {
                    (0..ti).collect()
                } else {
                    vec![oi]
                };
                let js: Vec<u32> = if over_cols {
                    (0..tj).collect()
                } else {
                    vec![oj]
                };
                let tiles: Vec<(u32, u32)> = is
                    .iter()
                    .flat_map(|&i| js.iter().map(move |&j| (i, j)))
                    .collect();
                // Each group of tiles is combined as a tree (shorter dependency chains), then
                // into the accumulator; a single group stays in its own register.
                let mut running: Option<VReg> = None;
                let mut rest = &tiles[..];
                while !rest.is_empty() {
                    let regs = self.tile_regs(&a, &rest[..rest.len().min(4)])?;
                    for (&r, &(i, j)) in regs.iter().zip(rest) {
                        let cut_r = over_rows && a.rows > 1 && i + 1 == ti && pr != 0;
                        let cut_c = over_cols && a.cols > 1 && j + 1 == tj && pc != 0;
                        if let Some(m) = self.edge_mask(cut_r.then_some(pr), cut_c.then_some(pc)) {
                            self.e.vsel(ty, r, m, r, ident);
                        }
                    }
                    let mut live = regs.clone();
                    while live.len() > 1 {
                        let mut next = Vec::with_capacity(live.len().div_ceil(2));
                        for pair in live.chunks(2) {
                            if let [x, y] = pair {
                                self.e.vbin(bin, ty, *x, *x, *y);
                            }
                            next.push(pair[0]);
                        }
                        live = next;
                    }
                    let r = live[0];
                    running = Some(match running {
                        None if regs.len() == rest.len() => r,
                        None => {
                            self.e.vmov(ty, acc, r);
                            acc
                        }
                        Some(_) => {
                            self.e.vbin(bin, ty, acc, acc, r);
                            acc
                        }
                    });
                    rest = &rest[regs.len()..];
                }
                let Some(mut src) = running else {
                    return Err(PallasError::Spec("a reduction of no tiles".into()));
                };
                // A row (column) of one is every sublane (lane) the same: nothing to reduce.
                if over_cols && a.cols > 1 {
                    self.e.vred(red, ty, Axis::Lane, acc, src);
                    src = acc;
                }
                if over_rows && a.rows > 1 {
                    self.e.vred(red, ty, Axis::Sub, acc, src);
                    src = acc;
                }
                if dt == Dt::Bf16 {
                    self.e.vcvt(CvtOp::Bf16, src, src);
                }
                store(self.e, src, &out, oi, oj, None);
            }
        }
        Ok(vec![Val::E(Expr::leaf(out))])
    }
}

/// A scratch register of the fused pass (the accumulators are [`ACCS`]).
const MASKED: VReg = VReg::n(2);

impl Body<'_> {
    /// Stores `x` (used `n` times; `later`: the equations after this one that read it) in one
    /// pass that also computes its later reductions along the lanes (at most two), their
    /// results put in `ahead` under those equations' indices; if its one other use is a cast
    /// to bfloat16, the cast is stored instead of `x`. False when there is nothing to fuse
    /// (the caller stores `x` as usual).
    pub(super) fn keep_fused(
        &mut self,
        x: &Rc<Expr>,
        later: &[(usize, &Eqn)],
        n: usize,
        ahead: &mut HashMap<usize, Val>,
    ) -> Result<bool, PallasError> {
        let simple = match &x.kind {
            Kind::Leaf(_) | Kind::Const(..) | Kind::Dyn(..) | Kind::Iota(_) => true,
            Kind::View(a) => a.stored().is_some(),
            _ => false,
        };
        let rank = x.shape.len();
        // A row of four tiles or more is evaluated four tiles at a time (narrower rows would
        // lose the interleaving of tiles that a pass over the whole array has).
        if simple
            || x.stored().is_some()
            || x.tj() < 4
            || rank == 0
            || super::values::two_d(self.kernel, &x.shape, false).is_err()
        {
            return Ok(false);
        }
        let lane_reduction = |e: &Eqn| {
            matches!(e.prim.as_str(), "reduce_sum" | "reduce_max" | "reduce_min")
                && e.ins.len() == 1
                && ints(&e.params, "axes") == [rank as i64 - 1]
        };
        let reds: Vec<(usize, &Eqn)> = later
            .iter()
            .filter(|(_, e)| lane_reduction(e))
            .copied()
            .collect();
        if reds.is_empty() || reds.len() > 2 {
            return Ok(false);
        }
        let others: Vec<(usize, &Eqn)> = later
            .iter()
            .filter(|(_, e)| !lane_reduction(e))
            .copied()
            .collect();
        let cast = match others.as_slice() {
            [(k, e)]
                if reds.len() + 1 == n
                    && x.dt == Dt::F32
                    && e.prim == "convert_element_type"
                    && e.outs.first().is_some_and(|o| o.dtype == "bfloat16") =>
            {
                Some((*k, e.outs[0].shape.clone()))
            }
            _ => None,
        };
        let (rows, cols) = (x.rows, x.cols);
        let whole = match &cast {
            None => {
                Some(
                    self.vmem
                        .array(rows, cols, MemFmt::W32, x.dt, x.shape.clone(), "a value")?,
                )
            }
            Some(_) => None,
        };
        let cast_arr = match &cast {
            Some((_, shape)) => Some(self.vmem.array(
                rows,
                cols,
                MemFmt::Bf16,
                Dt::Bf16,
                shape.clone(),
                "a value",
            )?),
            None => None,
        };
        let ty = vtype(x.dt);
        let mut outs = Vec::with_capacity(reds.len());
        for (_, e) in &reds {
            let o = &e.outs[0];
            let dt = dt_of(self.kernel, &o.dtype)?;
            let mut out = self
                .vmem
                .array(rows, 1, MemFmt::W32, dt, o.shape.clone(), "a value")?;
            out.rep = true;
            let (red, ident) = match e.prim.as_str() {
                "reduce_sum" if ty == VType::F32 => (RedOp::Add, 0.0f32.to_bits()),
                "reduce_sum" => (RedOp::Add, 0),
                "reduce_max" if ty == VType::F32 => (RedOp::Max, f32::NEG_INFINITY.to_bits()),
                "reduce_max" => (RedOp::Max, i32::MIN as u32),
                _ if ty == VType::F32 => (RedOp::Min, f32::INFINITY.to_bits()),
                _ => (RedOp::Min, i32::MAX as u32),
            };
            outs.push((out, red, ident, dt));
        }
        let (ti, tj) = (x.ti(), x.tj());
        let pc = cols % LANES;
        for i in 0..ti {
            let row: Vec<(u32, u32)> = (0..tj).map(|j| (i, j)).collect();
            let mut first = true;
            let mut rest = &row[..];
            while !rest.is_empty() {
                let regs = self.tile_regs(x, &rest[..rest.len().min(4)])?;
                for (&r, &(i, j)) in regs.iter().zip(rest) {
                    if let Some(a) = &whole {
                        store(self.e, r, a, i, j, None);
                    }
                    if let Some(a) = &cast_arr {
                        // The store rounds to bfloat16, as the cast does.
                        store(self.e, r, a, i, j, None);
                    }
                    for (m, (_, red, ident, _)) in outs.iter().enumerate() {
                        let src = match self.edge_mask(None, (j + 1 == tj && pc != 0).then_some(pc))
                        {
                            Some(mask) => {
                                self.e.vsel(ty, MASKED, mask, r, *ident);
                                MASKED
                            }
                            None => r,
                        };
                        let bin = match red {
                            RedOp::Add => VBinOp::Add,
                            RedOp::Max => VBinOp::Max,
                            RedOp::Min => VBinOp::Min,
                        };
                        if first {
                            self.e.vmov(ty, ACCS[m], src);
                        } else {
                            self.e.vbin(bin, ty, ACCS[m], ACCS[m], src);
                        }
                    }
                    first = false;
                }
                rest = &rest[regs.len()..];
            }
            for (m, (out, red, _, dt)) in outs.iter().enumerate() {
                self.e.vred(*red, ty, Axis::Lane, ACCS[m], ACCS[m]);
                if *dt == Dt::Bf16 {
                    self.e.vcvt(CvtOp::Bf16, ACCS[m], ACCS[m]);
                }
                store(self.e, ACCS[m], out, i, 0, None);
            }
        }
        if let Some(a) = whole {
            self.set_stored(x, a);
        }
        for ((k, _), (out, ..)) in reds.iter().zip(outs) {
            ahead.insert(*k, Val::E(Expr::leaf(out)));
        }
        if let (Some((k, _)), Some(a)) = (cast, cast_arr) {
            ahead.insert(k, Val::E(Expr::leaf(a)));
        }
        Ok(true)
    }
}
