//! `jnp.dot` / `lax.dot_general` of two 2-D arrays on the matrix units: the product is split
//! into weight tiles of the array's size (K x N), spread over the core's matrix units, each
//! streaming the M rows of the left operand (a share of them when units would be idle) and
//! popping (accumulating over K) into an f32 result. Products take the units in turn, so one
//! issued while another drains runs beside it. A transposed operand (a contraction over its first dimension, or `x.T`) is read
//! transposed by the matrix unit, never moved. Operands still in a block's bf16 buffer are
//! read there; others are stored in f32 first.

use std::rc::Rc;

use tpuemu_isa::ops::{CvtOp, MemFmt, MxuFmt, Precision};
use tpuemu_isa::{Mxu, VReg};

use super::PallasError;
use super::body::{Body, Val, dt_of, ints};
use super::expr::Expr;
use super::scalar::at;
use super::spec::{Dt, Eqn};
use super::values::{Arr, store};

impl Body<'_> {
    /// `x` in VMEM in a format the matrix unit reads: its bf16 block when `bf16` allows.
    fn mxu_operand(&mut self, x: &Rc<Expr>, bf16: bool) -> Result<Arr, PallasError> {
        if let Some(a) = x.stored()
            && a.dense()
            && (a.fmt == MemFmt::W32 || (bf16 && a.fmt == MemFmt::Bf16))
        {
            return Ok(a);
        }
        let a = self.materialize(x)?;
        if a.dense() {
            return Ok(a);
        }
        self.copy_arr(&a)
    }

    pub(super) fn dot(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let k = self.kernel;
        let o = &eq.outs[0];
        let dt = dt_of(k, &o.dtype)?;
        let lc = ints(&eq.params, "lhs_contract");
        let rc = ints(&eq.params, "rhs_contract");
        let batch = ints(&eq.params, "lhs_batch");
        let arr = |v: Option<&Val>| match v {
            Some(Val::E(a)) => Some((a.clone(), false)),
            Some(Val::T(a)) => Some((a.clone(), true)),
            _ => None,
        };
        let (Some((lx, lt)), Some((rx, rt))) = (arr(ins.first()), arr(ins.get(1))) else {
            return Err(self.unsupported(format!("a matrix product of constants{}", at(&eq.src))));
        };
        drop(ins);
        if !batch.is_empty()
            || lx.shape.len() != 2
            || rx.shape.len() != 2
            || lc.len() != 1
            || rc.len() != 1
        {
            return Err(self.unsupported(format!(
                "`dot_general` of {:?} and {:?} contracting {lc:?} and {rc:?}{} (2-D operands, \
                 one contracting dimension, no batch dimensions)",
                lx.shape,
                rx.shape,
                at(&eq.src)
            )));
        }
        if !lx.dt.is_float() || !rx.dt.is_float() {
            return Err(self.unsupported(format!("an integer matrix product{}", at(&eq.src))));
        }
        // bf16 operands take one pass (exact); float32 as `precision` says, Mosaic's default
        // (None or DEFAULT) taken as float32-exact (six bf16 passes).
        let bf = lx.dt == Dt::Bf16 && rx.dt == Dt::Bf16;
        let prec = if bf {
            Precision::P1
        } else {
            match eq.params.get("precision").and_then(|v| v.as_str()) {
                Some("HIGH") => Precision::P3,
                Some("BF16") => Precision::P1,
                _ => Precision::P6,
            }
        };
        let mut l = self.mxu_operand(&lx, bf)?;
        let mut r = self.mxu_operand(&rx, bf)?;
        // Both operands in one format.
        if l.fmt != r.fmt {
            if l.fmt == MemFmt::Bf16 {
                l = self.copy_arr(&l)?;
            } else {
                r = self.copy_arr(&r)?;
            }
        }
        let fmt = if l.fmt == MemFmt::Bf16 {
            MxuFmt::Bf16
        } else {
            MxuFmt::F32
        };
        let esz = fmt.bytes();
        // A transposed operand's contracting dimension is the other one of what is stored.
        let lhs_t = (lc[0] == 0) != lt;
        let rhs_t = (rc[0] == 1) != rt;
        let (m, kk) = if lhs_t {
            (l.cols, l.rows)
        } else {
            (l.rows, l.cols)
        };
        let (kr, n) = if rhs_t {
            (r.cols, r.rows)
        } else {
            (r.rows, r.cols)
        };
        if m == 0 || n == 0 || kk == 0 {
            return Err(self.unsupported(format!(
                "a matrix product with an empty dimension{}",
                at(&eq.src)
            )));
        }
        if kk != kr {
            return Err(PallasError::Spec(format!(
                "dot_general of {m}x{kk} and {kr}x{n}"
            )));
        }
        let out = self.vmem.array(
            m,
            n,
            MemFmt::W32,
            Dt::F32,
            o.shape.clone(),
            "a matrix product",
        )?;
        let (ar, ac) = (self.core.mxu_rows.max(8), self.core.mxu_cols.max(8));
        let units = self.core.mxus.max(1) as usize;
        let nt_count = n.div_ceil(ac);
        let kchunks = kk.div_ceil(ar);
        // Matrix units left idle by few column tiles share the K chunks (each streams its
        // chunks, the partial products accumulated into the result in chunk order), then the
        // rows (each streams its share of M through the same weight tile).
        let split = if nt_count as usize >= units {
            1
        } else {
            (units as u32 / nt_count).min(kchunks).max(1)
        };
        let per = nt_count * split;
        let rsplit = if (per as usize) < units {
            (units as u32 / per).min(m / 8).max(1)
        } else {
            1
        };
        let share = m.div_ceil(rsplit).next_multiple_of(8);
        let rows: Vec<(u32, u32)> = (0..rsplit)
            .map(|g| (g * share, share.min(m.saturating_sub(g * share))))
            .filter(|&(_, c)| c > 0)
            .collect();
        let jobs: Vec<(u32, u32, (u32, u32))> = (0..nt_count)
            .flat_map(|nt| (0..split).map(move |g| (nt, g)))
            .flat_map(|(nt, g)| rows.iter().map(move |&r| (nt, g, r)))
            .collect();
        let rounds = kchunks.div_ceil(split);
        let first = self.next_mxu as usize % units;
        self.next_mxu = ((first + jobs.len().min(units)) % units) as u32;
        let unit = |u: usize| Mxu::n(((first + u) % units) as u8);
        // (When K or the rows are shared, all jobs fit one group of units.)
        for group in jobs.chunks(units) {
            for round in 0..rounds {
                for (u, &(nt, g, (r0, rc))) in group.iter().enumerate() {
                    let kidx = g + round * split;
                    if kidx >= kchunks {
                        continue;
                    }
                    let (k0, n0) = (kidx * ar, nt * ac);
                    let (kc, nc) = (ar.min(kk - k0), ac.min(n - n0));
                    let mx = unit(u);
                    // Weights: K x N of the right operand, or read transposed.
                    let w_addr = if rhs_t {
                        r.at(n0 * r.stride + k0 * esz)
                    } else {
                        r.at(k0 * r.stride + n0 * esz)
                    };
                    let (rk, rn, rs) = (
                        self.e.konst(kc as i32),
                        self.e.konst(nc as i32),
                        self.e.konst(r.stride as i32),
                    );
                    self.e.mxu_lw(mx, fmt, rhs_t, w_addr, rk, rn, rs);
                    let a_addr = if lhs_t {
                        l.at(k0 * l.stride + r0 * esz)
                    } else {
                        l.at(r0 * l.stride + k0 * esz)
                    };
                    let (rm, ls) = (self.e.konst(rc as i32), self.e.konst(l.stride as i32));
                    self.e.mxu_mm(mx, fmt, lhs_t, prec, a_addr, rm, ls);
                }
                // Popped in chunks of rows, so that units adding into the same rows take
                // turns chunk by chunk (a pipeline) rather than each waiting for all of the
                // previous one's rows.
                for c0 in (0..share).step_by(ar as usize) {
                    for (u, &(nt, g, (r0, rc))) in group.iter().enumerate() {
                        let kidx = g + round * split;
                        if kidx >= kchunks || c0 >= rc {
                            continue;
                        }
                        let rm = self.e.konst(ar.min(rc - c0) as i32);
                        let os = self.e.konst(out.stride as i32);
                        let dst = out.at((r0 + c0) * out.stride + nt * ac * 4);
                        self.e.mxu_pop(unit(u), kidx > 0, dst, rm, os);
                    }
                }
            }
        }
        if dt == Dt::F32 {
            return Ok(vec![Val::E(Expr::leaf(out))]);
        }
        // A bf16 result: rounded once.
        let v = VReg::n(0);
        let res = self
            .vmem
            .array(m, n, MemFmt::W32, dt, o.shape.clone(), "a value")?;
        for i in 0..out.ti() {
            for j in 0..out.tj() {
                super::values::load(self.e, v, &out, i, j);
                self.e.vcvt(CvtOp::Bf16, v, v);
                store(self.e, v, &res, i, j, None);
            }
        }
        Ok(vec![Val::E(Expr::leaf(res))])
    }
}
