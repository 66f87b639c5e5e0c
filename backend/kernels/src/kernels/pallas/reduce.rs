//! Reductions (`jnp.sum`, `jnp.max`, `jnp.min`) along the lanes, the sublanes or both: tiles
//! combined elementwise, then one cross-lane (`vred`) step, the result broadcast along the
//! reduced axis as the layout wants ([`super::values`]). Elements past an array's edge are
//! masked to the reduction's identity.

use std::rc::Rc;

use tpuemu_isa::VReg;
use tpuemu_isa::ops::{Axis, CvtOp, MemFmt, RedOp, VBinOp, VType};

use super::PallasError;
use super::body::{Body, Val, dt_of, ints};
use super::expr::Expr;
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
