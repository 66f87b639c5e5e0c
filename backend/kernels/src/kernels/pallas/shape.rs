//! Shape operations of the body: broadcasts, reshapes, transposes, slices, tiles and iotas.
//! Most move nothing: they give a value another extent or shape over the same tiles.

use tpuemu_isa::ops::{CvtOp, IotaKind, MemFmt, VBinOp, VType};

use super::PallasError;
use super::body::{Body, Val, dt_of, ints};
use super::expr::{Expr, Kind};
use super::scalar::at;
use super::spec::Eqn;
use super::values::{LANES, SUB, store, two_d, two_d_merged};

impl Body<'_> {
    pub(super) fn broadcast(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let o = &eq.outs[0];
        let dt = dt_of(self.kernel, &o.dtype)?;
        let dims = ints(&eq.params, "broadcast_dimensions");
        let src = ins
            .first()
            .ok_or_else(|| PallasError::Spec("broadcast of nothing".into()))?;
        let mut a = match src {
            Val::S(..) | Val::D(..) => return Ok(vec![Val::E(self.expr_of(src, dt, &o.shape)?)]),
            Val::E(a) => a.clone(),
            _ => return Err(self.unsupported(format!("broadcasting a reference{}", at(&eq.src)))),
        };
        two_d(self.kernel, &a.shape, false)?;
        let n = o.shape.len();
        let (rows, cols) = two_d(self.kernel, &o.shape, false)?;
        let src_rank = a.shape.len();
        // Where the operand's rows and columns land: a 1-D operand is a row when it lands on
        // the last axis, a column on the second-to-last.
        let (sr, sc) = match (src_rank, n) {
            (0, _) => (1, 1),
            (1, 1) => (a.rows, a.cols),
            (1, _) => {
                let d = dims.first().copied().unwrap_or(0) as usize;
                let len = a.shape[0] as u32;
                let want = if d == n - 1 { (1, len) } else { (len, 1) };
                if len > 1 && want == (len, 1) && (a.rows, a.cols) == (1, len) {
                    // A row becoming a column: its elements read down the sublanes.
                    a = self.row_as_column(&a)?;
                }
                if len > 1 && want != (a.rows, a.cols) {
                    return Err(self.unsupported(format!(
                        "broadcasting {:?} to {:?} along {dims:?}{} (a 1-D value is a row or a \
                         column of the 2-D layout as it was computed; moving it between lanes \
                         and sublanes is not lowered: keep it 2-D, e.g. `keepdims=True`)",
                        a.shape,
                        o.shape,
                        at(&eq.src)
                    )));
                }
                want
            }
            _ if dims.len() == src_rank
                && dims[src_rank - 1] as usize == n - 1
                && dims[src_rank - 2] as usize + 2 == n =>
            {
                (a.rows, a.cols)
            }
            _ => (0, 0),
        };
        let fits = |x: u32, y: u32| x == y || x == 1;
        if sr == 0 || !fits(sr, rows) || !fits(sc, cols) {
            return Err(self.unsupported(format!(
                "broadcasting {:?} to {:?} along {dims:?}{}",
                a.shape,
                o.shape,
                at(&eq.src)
            )));
        }
        Ok(vec![Val::E(Expr::new(
            Kind::View(a),
            rows,
            cols,
            dt,
            o.shape.clone(),
        ))])
    }

    /// The values of row `a` (`[n]` laid out as `(1, n)`) as a column (`(n, 1)`): the row in
    /// VMEM, read with a sublane stride of one element and a lane stride of 0 (each tile one
    /// strided load, as Mosaic's relayout of a row into sublanes).
    fn row_as_column(&mut self, a: &std::rc::Rc<Expr>) -> Result<std::rc::Rc<Expr>, PallasError> {
        let mut row = self.materialize(a)?;
        if row.pcol != row.cols || row.base.is_some() {
            row = self.copy_arr(&row)?;
        }
        let n = row.cols;
        let col = super::values::Arr {
            stride: row.fmt.bytes(),
            prow: n,
            pcol: 1,
            rows: n,
            cols: 1,
            rep: false,
            shape: a.shape.clone(),
            ..row
        };
        let x = Expr::leaf(col);
        // It may read a reference's memory: a later store into it keeps this value first.
        self.reads.push(std::rc::Rc::downgrade(&x));
        Ok(x)
    }

    pub(super) fn reshape(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let o = &eq.outs[0];
        match ins.into_iter().next() {
            Some(Val::S(s, d)) => Ok(vec![Val::S(s, d)]),
            Some(Val::E(a)) => {
                let column = a.cols == 1 && a.rows > 1;
                let (rows, cols) = two_d_merged(self.kernel, &o.shape, column)?;
                if (rows, cols) != (a.rows, a.cols) {
                    return Err(self.unsupported(format!(
                        "reshaping {:?} to {:?}{} (only adding or removing dimensions of size 1)",
                        a.shape,
                        o.shape,
                        at(&eq.src)
                    )));
                }
                let dt = a.dt;
                Ok(vec![Val::E(Expr::new(
                    Kind::View(a),
                    rows,
                    cols,
                    dt,
                    o.shape.clone(),
                ))])
            }
            _ => Err(self.unsupported(format!("reshaping a reference{}", at(&eq.src)))),
        }
    }

    pub(super) fn transpose(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let perm = ints(&eq.params, "permutation");
        match ins.into_iter().next() {
            Some(Val::E(a)) if a.shape.len() == 2 && perm == [1, 0] => Ok(vec![Val::T(a)]),
            Some(Val::T(a)) if perm == [1, 0] => Ok(vec![Val::E(a)]),
            Some(v @ Val::S(..)) => Ok(vec![v]),
            _ => Err(self.unsupported(format!(
                "`transpose` {perm:?}{} (a 2-D transpose is lowered into a matrix product)",
                at(&eq.src)
            ))),
        }
    }

    pub(super) fn slice(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let start = ints(&eq.params, "start_indices");
        let limit = ints(&eq.params, "limit_indices");
        let o = &eq.outs[0];
        let Some(Val::E(x)) = ins.first() else {
            return Err(self.unsupported(format!("`slice` of a non-array{}", at(&eq.src))));
        };
        two_d(self.kernel, &x.shape, false)?;
        let a = self.materialize(x)?;
        let n = a.shape.len();
        if n == 0
            || start.len() != n
            || limit.len() != n
            || (n > 2 && start[..n - 2].iter().any(|&s| s != 0))
        {
            return Err(self.unsupported(format!("`slice` of {:?}{}", a.shape, at(&eq.src))));
        }
        if eq.params.get("strides").is_some_and(|s| !s.is_null()) {
            return Err(self.unsupported(format!("a strided `slice`{}", at(&eq.src))));
        }
        let row = a.rows == 1;
        let (r0, c0, rows, cols) = if n == 1 {
            let len = (limit[0] - start[0]) as u32;
            if row {
                (0, start[0], 1, len)
            } else {
                (start[0], 0, len, 1)
            }
        } else {
            (
                start[n - 2],
                start[n - 1],
                (limit[n - 2] - start[n - 2]) as u32,
                (limit[n - 1] - start[n - 1]) as u32,
            )
        };
        let r0 = if a.prow == 1 { 0 } else { r0 as u32 };
        let c0 = if a.pcol == 1 { 0 } else { c0 as u32 };
        let view = super::values::Arr {
            addr: a.addr + r0 * a.stride + c0 * a.fmt.bytes(),
            prow: if a.prow == 1 { 1 } else { rows },
            pcol: if a.pcol == 1 { 1 } else { cols },
            rows,
            cols,
            shape: o.shape.clone(),
            ..a.clone()
        };
        // A slice of a reference's memory is a read of the reference too.
        let x = Expr::leaf(view);
        self.reads.push(std::rc::Rc::downgrade(&x));
        Ok(vec![Val::E(x)])
    }

    pub(super) fn tile(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let reps = ints(&eq.params, "reps");
        let o = &eq.outs[0];
        let Some(Val::E(a)) = ins.into_iter().next() else {
            return Err(self.unsupported(format!("`tile` of a non-array{}", at(&eq.src))));
        };
        let (rr, rc) = match reps.len() {
            0 => (1, 1),
            1 => (1, reps[0] as u32),
            k if reps[..k - 2].iter().all(|&r| r == 1) => (reps[k - 2] as u32, reps[k - 1] as u32),
            _ => (0, 0),
        };
        let whole = |x: u32, t: u32, r: u32| r == 1 || x.is_multiple_of(t);
        if rr == 0 || a.shape.len() > 2 || !whole(a.rows, SUB, rr) || !whole(a.cols, LANES, rc) {
            return Err(self.unsupported(format!(
                "`tile` of {:?} by {reps:?}{} (whole (8, 128) tiles only)",
                a.shape,
                at(&eq.src)
            )));
        }
        let (rows, cols, dt) = (a.rows * rr, a.cols * rc, a.dt);
        Ok(vec![Val::E(Expr::new(
            Kind::Tile(a),
            rows,
            cols,
            dt,
            o.shape.clone(),
        ))])
    }

    pub(super) fn iota(&mut self, eq: &Eqn) -> Result<Vec<Val>, PallasError> {
        let o = &eq.outs[0];
        let dt = dt_of(self.kernel, &o.dtype)?;
        let dim = eq
            .params
            .get("dimension")
            .and_then(|v| v.as_i64())
            .unwrap_or(0) as usize;
        let n = o.shape.len();
        let (rows, cols) = two_d(self.kernel, &o.shape, false)?;
        let along_lanes = dim + 1 == n;
        if !along_lanes && dim + 2 != n {
            return Err(self.unsupported(format!("iota along dimension {dim} of {:?}", o.shape)));
        }
        // Stored along its axis only: the other one is a broadcast.
        let (sr, sc) = if along_lanes { (1, cols) } else { (rows, 1) };
        if dt == super::spec::Dt::I32 {
            // Computed in registers where used: its values per tile are known while lowering
            // (a causal mask decides whole tiles). Of extent 1 along its axis it is 0.
            let kind = if (along_lanes && cols == 1) || (!along_lanes && rows == 1) {
                Kind::Const(super::scalar::Scalar::I(0), dt)
            } else {
                Kind::Iota(along_lanes)
            };
            let x = Expr::new(kind, sr, sc, dt, o.shape.clone());
            return Ok(vec![Val::E(Expr::new(
                Kind::View(x),
                rows,
                cols,
                dt,
                o.shape.clone(),
            ))]);
        }
        let mut out = self
            .vmem
            .array(sr, sc, MemFmt::W32, dt, o.shape.clone(), "a value")?;
        // A sublane iota is the same in every lane.
        out.rep = sc == 1;
        let v = tpuemu_isa::VReg::n(0);
        for i in 0..out.ti() {
            for j in 0..out.tj() {
                let (kind, base) = if along_lanes {
                    (IotaKind::Lane, j * LANES)
                } else {
                    (IotaKind::Sub, i * SUB)
                };
                self.e.viota(kind, v);
                if base != 0 {
                    self.e.vbin(VBinOp::Add, VType::I32, v, v, base);
                }
                if dt.is_float() {
                    self.e.vcvt(CvtOp::I2F, v, v);
                }
                if dt == super::spec::Dt::Bf16 {
                    self.e.vcvt(CvtOp::Bf16, v, v);
                }
                store(self.e, v, &out, i, j, None);
            }
        }
        let mut view = out;
        view.rows = rows;
        view.cols = cols;
        Ok(vec![Val::E(Expr::leaf(view))])
    }
}
