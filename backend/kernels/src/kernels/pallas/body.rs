//! The kernel body, one grid step: a jaxpr over the blocks' references lowered to vector and
//! matrix-unit code, tile by tile (see [`super::values`] for how arrays sit in VMEM).
//!
//! Scalars known while lowering (grid indices and what is computed from them) fold
//! ([`super::scalar`]); `pl.when` (`cond`) picks its branch then; `fori_loop` with a static
//! trip count (`scan`) is unrolled, so its index is a known scalar too.

use std::collections::{HashMap, HashSet};

use tpuemu_isa::ops::{
    Axis, CmpOp, CvtOp, IotaKind, MxuFmt, Precision, RedOp, VBinOp, VType, VUnOp,
};
use tpuemu_isa::{Addr, CoreInfo, MReg, Mxu, VReg, VSrc};

use super::PallasError;
use super::scalar::{Scalar, at, fold};
use super::spec::{Atom, Dt, Eqn, Jaxpr, literal};
use super::values::{Arr, LANES, SUB, Vmem, load, store, two_d, vtype};
use crate::codegen::Emitter;

/// A value while lowering.
#[derive(Clone, Debug)]
pub enum Val {
    /// A scalar known now.
    S(Scalar, Dt),
    /// An array in VMEM.
    A(Arr),
    /// A reference to a block, a scratch buffer or an output block.
    Ref(Arr),
    /// The transpose of a 2-D array, not moved: a matrix product reads it transposed
    /// (`p.T @ v`); pointwise operations apply to it element by element.
    T(Arr),
}

const V0: VReg = VReg::n(0);
const V5: VReg = VReg::n(5);
const V6: VReg = VReg::n(6);
const V7: VReg = VReg::n(7);
const M1: MReg = MReg::n(1);
const M2: MReg = MReg::n(2);

/// The lowering of one grid step.
pub struct Body<'a> {
    /// The program.
    pub e: &'a mut Emitter,
    /// VMEM.
    pub vmem: &'a mut Vmem,
    /// The kernel's name, for errors.
    pub kernel: &'a str,
    /// This step's grid indices.
    pub ids: &'a [i64],
    /// The grid.
    pub grid: &'a [u32],
    /// The core it runs on.
    pub core: &'a CoreInfo,
}

fn dt_of(kernel: &str, s: &str) -> Result<Dt, PallasError> {
    Dt::parse(s).ok_or_else(|| PallasError::unsupported(kernel, format!("dtype {s}")))
}

fn ints(p: &serde_json::Map<String, serde_json::Value>, key: &str) -> Vec<i64> {
    p.get(key)
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
        .unwrap_or_default()
}

fn used_vars(j: &Jaxpr) -> HashSet<u32> {
    let mut u = HashSet::new();
    let mut add = |a: &Atom| {
        if let Atom::Var { v } = a {
            u.insert(*v);
        }
    };
    for e in &j.eqns {
        e.ins.iter().for_each(&mut add);
    }
    j.outvars.iter().for_each(add);
    u
}

/// Primitives run for their effect even when their results are unused.
fn effectful(prim: &str) -> bool {
    matches!(
        prim,
        "swap"
            | "cond"
            | "scan"
            | "pjit"
            | "jit"
            | "closed_call"
            | "core_call"
            | "remat"
            | "checkpoint"
            | "custom_jvp_call"
            | "custom_vjp_call"
            | "custom_vjp_call_jaxpr"
    )
}

impl Body<'_> {
    fn unsupported(&self, what: String) -> PallasError {
        PallasError::unsupported(self.kernel, what)
    }

    /// Lowers `j` on `args`; its results.
    pub fn run(&mut self, j: &Jaxpr, args: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        if args.len() != j.invars.len() {
            return Err(PallasError::Spec(format!(
                "a jaxpr of {} inputs given {}",
                j.invars.len(),
                args.len()
            )));
        }
        let mut env: HashMap<u32, Val> = j.invars.iter().map(|v| v.id).zip(args).collect();
        let used = used_vars(j);
        for eq in &j.eqns {
            if !effectful(&eq.prim) && eq.outs.iter().all(|o| !used.contains(&o.id)) {
                continue;
            }
            let ins: Vec<Val> = eq
                .ins
                .iter()
                .map(|a| self.atom(&env, a))
                .collect::<Result<_, _>>()?;
            let outs = self.eqn(eq, ins)?;
            for (o, v) in eq.outs.iter().zip(outs) {
                env.insert(o.id, v);
            }
        }
        j.outvars.iter().map(|a| self.atom(&env, a)).collect()
    }

    fn atom(&self, env: &HashMap<u32, Val>, a: &Atom) -> Result<Val, PallasError> {
        match a {
            Atom::Var { v } => env
                .get(v)
                .cloned()
                .ok_or_else(|| PallasError::Spec(format!("variable {v} used before it is set"))),
            Atom::Lit { lit, dtype } => {
                let dt = dt_of(self.kernel, dtype)?;
                let x =
                    literal(lit).ok_or_else(|| PallasError::Spec(format!("bad literal {lit}")))?;
                Ok(Val::S(Scalar::literal(x, dt), dt))
            }
        }
    }

    fn eqn(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let k = self.kernel;
        let out_dt = match eq.outs.first() {
            Some(o) if !o.is_ref => Some(dt_of(k, &o.dtype)?),
            _ => None,
        };
        // Scalars known now fold.
        if let Some(dt) = out_dt
            && eq.outs.len() == 1
            && ins.iter().all(|v| matches!(v, Val::S(..)))
            && eq.outs[0].shape.is_empty()
        {
            let s: Vec<Scalar> = ins
                .iter()
                .map(|v| match v {
                    Val::S(s, _) => *s,
                    _ => unreachable!(),
                })
                .collect();
            if let Some(r) = fold(&eq.prim, &s, dt) {
                return Ok(vec![Val::S(r, dt)]);
            }
        }
        let p = &eq.params;
        match eq.prim.as_str() {
            "program_id" | "num_programs" => {
                let axis = p.get("axis").and_then(|a| a.as_i64()).unwrap_or(0);
                let a = usize::try_from(axis)
                    .ok()
                    .filter(|a| *a < self.grid.len())
                    .ok_or_else(|| {
                        PallasError::refused(
                            k,
                            format!(
                                "{}({axis}) of a {}-dimensional grid{}",
                                eq.prim,
                                self.grid.len(),
                                at(&eq.src)
                            ),
                        )
                    })?;
                let v = if eq.prim == "program_id" {
                    self.ids[a] as i32
                } else {
                    self.grid[a] as i32
                };
                Ok(vec![Val::S(Scalar::I(v), Dt::I32)])
            }
            "pjit"
            | "jit"
            | "closed_call"
            | "core_call"
            | "remat"
            | "checkpoint"
            | "custom_jvp_call"
            | "custom_vjp_call"
            | "custom_vjp_call_jaxpr" => {
                let j = sub_jaxpr(p, "jaxpr")
                    .ok_or_else(|| PallasError::Spec(format!("`{}` without a jaxpr", eq.prim)))?;
                let n = j.invars.len();
                self.run(&j, ins.into_iter().take(n).collect())
            }
            "cond" => self.cond(eq, ins),
            "scan" => self.scan(eq, ins),
            "get" => self.get(eq, ins),
            "swap" => self.swap(eq, ins),
            "broadcast_in_dim" => self.broadcast(eq, ins),
            "reshape" | "squeeze" | "expand_dims" => self.reshape(eq, ins),
            "transpose" => self.transpose(eq, ins),
            "slice" => self.slice(eq, ins),
            "tile" => self.tile(eq, ins),
            "iota" => self.iota(eq),
            "dot_general" => self.dot(eq, ins),
            "reduce_sum" | "reduce_max" | "reduce_min" => self.reduce(eq, ins),
            _ => match out_dt {
                Some(dt) if ins.iter().any(|v| matches!(v, Val::T(_))) => {
                    // Elementwise work commutes with the transpose.
                    if !ins.iter().all(|v| matches!(v, Val::T(_) | Val::S(..))) {
                        return Err(self.unsupported(format!(
                            "`{}` of a transposed and a plain array{} (a transpose is lowered \
                             only into a matrix product)",
                            eq.prim,
                            at(&eq.src)
                        )));
                    }
                    let plain: Vec<Val> = ins
                        .into_iter()
                        .map(|v| match v {
                            Val::T(a) => Val::A(a),
                            v => v,
                        })
                        .collect();
                    let mut q = eq.clone();
                    if let Some(o) = q.outs.first_mut() {
                        o.shape.reverse();
                    }
                    let r = self.pointwise(&q, plain, dt)?;
                    Ok(r.into_iter()
                        .map(|v| match v {
                            Val::A(a) => Val::T(a),
                            v => v,
                        })
                        .collect())
                }
                Some(dt) => self.pointwise(eq, ins, dt),
                None => Err(self.unsupported(format!("`{}`{}", eq.prim, at(&eq.src)))),
            },
        }
    }

    // ---- control ----

    fn cond(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let Some(Val::S(which, _)) = ins.first() else {
            return Err(self.unsupported(format!(
                "a `pl.when`/`lax.cond` on a value computed from data{} (only conditions known \
                 from the grid indices and loop counters are lowered)",
                at(&eq.src)
            )));
        };
        let branches = eq
            .params
            .get("branches")
            .and_then(|b| b.as_array())
            .ok_or_else(|| PallasError::Spec("cond without branches".into()))?;
        let n = branches.len() as i64;
        let i = which.as_i64().clamp(0, (n - 1).max(0)) as usize;
        let j: Jaxpr = serde_json::from_value(branches[i].clone())
            .map_err(|e| PallasError::Spec(e.to_string()))?;
        self.run(&j, ins[1..].to_vec())
    }

    fn scan(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let p = &eq.params;
        let get = |key: &str| p.get(key).and_then(|v| v.as_i64()).unwrap_or(0) as usize;
        let (length, nconsts, ncarry) = (get("length"), get("num_consts"), get("num_carry"));
        let reverse = p.get("reverse").and_then(|v| v.as_bool()).unwrap_or(false);
        let j = sub_jaxpr(p, "jaxpr")
            .ok_or_else(|| PallasError::Spec("scan without a jaxpr".into()))?;
        if ins.len() != nconsts + ncarry || j.outvars.len() != ncarry || reverse {
            return Err(self.unsupported(format!(
                "a `lax.scan` over arrays or with stacked outputs{} (`fori_loop` with a static \
                 trip count is lowered, unrolled)",
                at(&eq.src)
            )));
        }
        if length > 4096 {
            return Err(self.unsupported(format!(
                "a loop of {length} iterations{} (at most 4096 are unrolled)",
                at(&eq.src)
            )));
        }
        let consts = ins[..nconsts].to_vec();
        let mut carry = ins[nconsts..].to_vec();
        for _ in 0..length {
            let mut args = consts.clone();
            args.extend(carry);
            carry = self.run(&j, args)?;
        }
        Ok(carry)
    }

    // ---- references ----

    /// The region of `r` that `eq`'s indexers select.
    fn region(&self, eq: &Eqn, r: &Arr, idx: &[Val]) -> Result<Arr, PallasError> {
        let Some(spec) = eq.params.get("idx").and_then(|v| v.as_array()) else {
            return Ok(r.clone());
        };
        if spec.is_empty() {
            return Ok(r.clone());
        }
        let n = r.shape.len();
        if spec.len() != n {
            return Err(self.unsupported(format!(
                "an indexer of {} dimensions on a {n}-dimensional reference{}",
                spec.len(),
                at(&eq.src)
            )));
        }
        let known = |v: &serde_json::Value| -> Result<i64, PallasError> {
            if let Some(i) = v.as_i64() {
                return Ok(i);
            }
            let a = v.get("arg").and_then(|a| a.as_u64()).unwrap_or(u64::MAX) as usize;
            match idx.get(a) {
                Some(Val::S(s, _)) => Ok(s.as_i64()),
                _ => Err(self.unsupported(format!(
                    "a reference indexed at a position computed from data{}",
                    at(&eq.src)
                ))),
            }
        };
        let mut shape = Vec::new();
        let mut starts = vec![0i64; n];
        let mut sizes = vec![1i64; n];
        for (d, s) in spec.iter().enumerate() {
            if let Some(i) = s.get("at") {
                starts[d] = known(i)?;
                sizes[d] = 1;
            } else {
                starts[d] = known(s.get("start").unwrap_or(&serde_json::Value::from(0)))?;
                sizes[d] = s
                    .get("size")
                    .and_then(|v| v.as_i64())
                    .unwrap_or(r.shape[d] as i64);
                if s.get("stride").and_then(|v| v.as_i64()).unwrap_or(1) != 1 {
                    return Err(
                        self.unsupported(format!("a strided slice of a reference{}", at(&eq.src)))
                    );
                }
                shape.push(sizes[d] as usize);
            }
            if starts[d] < 0 || starts[d] + sizes[d] > r.shape[d] as i64 {
                return Err(PallasError::refused(
                    self.kernel,
                    format!(
                        "out-of-bounds access: elements {}..{} of dimension {d} of a reference of shape {:?}{}",
                        starts[d],
                        starts[d] + sizes[d],
                        r.shape,
                        at(&eq.src)
                    ),
                ));
            }
        }
        if n >= 3 && starts[..n - 2].iter().any(|&s| s != 0) {
            return Err(self.unsupported(format!(
                "a reference of shape {:?} indexed in a leading dimension{}",
                r.shape,
                at(&eq.src)
            )));
        }
        let (r0, c0) = match n {
            1 => (0, starts[0]),
            _ => (starts[n - 2], starts[n - 1]),
        };
        let (rows, cols) = match n {
            1 => (1, sizes[0]),
            _ => (sizes[n - 2], sizes[n - 1]),
        };
        let column =
            n >= 2 && sizes[n - 1] == 1 && spec[n - 1].get("at").is_some() && shape.len() == 1;
        let _ = column;
        Ok(Arr {
            addr: r.addr + r0 as u32 * r.stride + c0 as u32 * r.fmt.bytes(),
            prow: rows as u32,
            pcol: cols as u32,
            rows: rows as u32,
            cols: cols as u32,
            shape,
            ..r.clone()
        })
    }

    fn get(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let Some(Val::Ref(r)) = ins.first() else {
            return Err(PallasError::Spec("get of a non-reference".into()));
        };
        let view = self.region(eq, r, &ins[1..])?;
        Ok(vec![Val::A(self.copy(&view, view.dt)?)])
    }

    fn swap(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let (Some(Val::Ref(r)), Some(v)) = (ins.first(), ins.get(1)) else {
            return Err(PallasError::Spec("swap of a non-reference".into()));
        };
        let view = self.region(eq, r, &ins[2..])?;
        // The old value, when it is used (`swap` returns it).
        let old = self.copy(&view, view.dt)?;
        let src = self.array(v, view.dt, &view.shape, false)?;
        if (src.rows != view.rows && src.rows != 1) || (src.cols != view.cols && src.cols != 1) {
            return Err(self.unsupported(format!(
                "storing a value of shape {:?} into a reference region of shape {:?}{}",
                src.shape,
                view.shape,
                at(&eq.src)
            )));
        }
        let (pr, pc) = (view.rows % SUB, view.cols % LANES);
        for i in 0..view.ti() {
            for j in 0..view.tj() {
                let rows_cut = i + 1 == view.ti() && pr != 0;
                let cols_cut = j + 1 == view.tj() && pc != 0;
                let mask = self.edge_mask(rows_cut.then_some(pr), cols_cut.then_some(pc));
                load(self.e, V0, &src, i, j);
                store(self.e, V0, &view, i, j, mask);
            }
        }
        Ok(vec![Val::A(old)])
    }

    /// M1 = the elements of a tile inside `rows` sublanes and `cols` lanes (None: all).
    fn edge_mask(&mut self, rows: Option<u32>, cols: Option<u32>) -> Option<MReg> {
        match (rows, cols) {
            (None, None) => None,
            (Some(r), None) => {
                self.e.mask_below(M1, V6, IotaKind::Sub, r);
                Some(M1)
            }
            (None, Some(c)) => {
                self.e.mask_below(M1, V6, IotaKind::Lane, c);
                Some(M1)
            }
            (Some(r), Some(c)) => {
                self.e.mask_below(M1, V6, IotaKind::Sub, r);
                self.e.mask_below(M2, V6, IotaKind::Lane, c);
                self.e.mlogic(tpuemu_isa::ops::MaskOp::And, M1, M1, M2);
                Some(M1)
            }
        }
    }

    // ---- arrays ----

    /// A dense copy of `a` in 32-bit lanes (broadcast axes stay broadcast).
    fn copy(&mut self, a: &Arr, dt: Dt) -> Result<Arr, PallasError> {
        let mut out = self.vmem.array(
            self.kernel,
            a.prow,
            a.pcol,
            tpuemu_isa::ops::MemFmt::W32,
            dt,
            a.shape.clone(),
            "a value",
        )?;
        let (ti, tj) = (a.prow.div_ceil(SUB), a.pcol.div_ceil(LANES));
        for i in 0..ti {
            for j in 0..tj {
                load(self.e, V0, a, i, j);
                store(self.e, V0, &out, i, j, None);
            }
        }
        out.rows = a.rows;
        out.cols = a.cols;
        Ok(out)
    }

    /// `v` as an array of `shape` (a known scalar is written out as one broadcast tile).
    fn array(
        &mut self,
        v: &Val,
        dt: Dt,
        shape: &[usize],
        column: bool,
    ) -> Result<Arr, PallasError> {
        match v {
            Val::A(a) => Ok(a.clone()),
            Val::Ref(_) => Err(PallasError::Spec("a reference used as a value".into())),
            Val::T(_) => Err(self.unsupported(
                "storing a transposed array (a transpose is lowered only into a matrix product)"
                    .into(),
            )),
            Val::S(s, _) => {
                let (rows, cols) = two_d(self.kernel, shape, column)?;
                let mut t = self.vmem.array(
                    self.kernel,
                    1,
                    1,
                    tpuemu_isa::ops::MemFmt::W32,
                    dt,
                    shape.to_vec(),
                    "a constant",
                )?;
                self.e.vmov(vtype(dt), V0, s.convert(dt).bits(dt));
                store(self.e, V0, &t, 0, 0, None);
                t.rows = rows;
                t.cols = cols;
                Ok(t)
            }
        }
    }

    fn broadcast(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let o = &eq.outs[0];
        let dt = dt_of(self.kernel, &o.dtype)?;
        let dims = ints(&eq.params, "broadcast_dimensions");
        let src = ins
            .first()
            .ok_or_else(|| PallasError::Spec("broadcast of nothing".into()))?;
        if let Val::S(..) = src {
            return Ok(vec![Val::A(self.array(src, dt, &o.shape, false)?)]);
        }
        let Val::A(a) = src else {
            return Err(PallasError::Spec("broadcast of a reference".into()));
        };
        let n = o.shape.len();
        let (rows, cols) = two_d(self.kernel, &o.shape, false)?;
        // Where the operand's rows and columns land.
        let (ar, ac) = (a.rows, a.cols);
        let src_rank = a.shape.len();
        let ok = match (src_rank, n) {
            (0, _) => true,
            (1, 1) => true,
            (1, _) => {
                // A row lands on the last axis, a column on the second-to-last.
                let d = dims.first().copied().unwrap_or(0) as usize;
                (d == n - 1 && ar == 1) || (d + 2 == n && ac == 1) || a.shape[0] == 1
            }
            _ => {
                dims.len() == src_rank
                    && dims[src_rank - 1] as usize == n - 1
                    && dims[src_rank - 2] as usize + 2 == n
            }
        };
        if !ok {
            return Err(self.unsupported(format!(
                "broadcasting {:?} to {:?} along {dims:?}{} (a 1-D value is a row or a column of \
                 the 2-D layout as it was computed; moving it between lanes and sublanes is not \
                 lowered: keep it 2-D, e.g. `keepdims=True`)",
                a.shape,
                o.shape,
                at(&eq.src)
            )));
        }
        let fits = |x: u32, y: u32| x == y || x == 1;
        let (sr, sc) = if src_rank == 1 && n >= 2 {
            let d = dims.first().copied().unwrap_or(0) as usize;
            let len = a.shape[0] as u32;
            if d == n - 1 { (1, len) } else { (len, 1) }
        } else {
            (ar, ac)
        };
        if !fits(sr, rows) || !fits(sc, cols) {
            return Err(self.unsupported(format!(
                "broadcasting {:?} to {:?}{}",
                a.shape,
                o.shape,
                at(&eq.src)
            )));
        }
        let mut b = a.clone();
        if sr == 1 && a.prow > 1 {
            // A 1-D row stored as a column would need a relayout; checked above.
        }
        b.rows = rows;
        b.cols = cols;
        b.shape = o.shape.clone();
        Ok(vec![Val::A(b)])
    }

    fn reshape(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let o = &eq.outs[0];
        match ins.first() {
            Some(Val::S(s, d)) => Ok(vec![Val::S(*s, *d)]),
            Some(Val::A(a)) => {
                let column = a.cols == 1 && a.rows > 1;
                let (rows, cols) = two_d(self.kernel, &o.shape, column)?;
                if (rows, cols) != (a.rows, a.cols) {
                    return Err(self.unsupported(format!(
                        "reshaping {:?} to {:?}{} (only adding or removing dimensions of size 1)",
                        a.shape,
                        o.shape,
                        at(&eq.src)
                    )));
                }
                Ok(vec![Val::A(a.with_shape(o.shape.clone()))])
            }
            _ => Err(PallasError::Spec("reshape of a reference".into())),
        }
    }

    fn transpose(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let perm = ints(&eq.params, "permutation");
        match ins.into_iter().next() {
            Some(Val::A(a)) if a.shape.len() == 2 && perm == [1, 0] => {
                let a = if a.dense() { a } else { self.copy(&a, a.dt)? };
                Ok(vec![Val::T(a)])
            }
            Some(Val::T(a)) if perm == [1, 0] => Ok(vec![Val::A(a)]),
            Some(v @ Val::S(..)) => Ok(vec![v]),
            _ => Err(self.unsupported(format!(
                "`transpose` {perm:?}{} (a 2-D transpose is lowered into a matrix product)",
                at(&eq.src)
            ))),
        }
    }

    fn slice(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let start = ints(&eq.params, "start_indices");
        let limit = ints(&eq.params, "limit_indices");
        let o = &eq.outs[0];
        let Some(Val::A(a)) = ins.first() else {
            return Err(self.unsupported(format!("`slice` of a non-array{}", at(&eq.src))));
        };
        let n = a.shape.len();
        if n == 0 || start.len() != n || limit.len() != n || (n > 2 && start[..n - 2].iter().any(|&s| s != 0)) {
            return Err(self.unsupported(format!("`slice` of {:?}{}", a.shape, at(&eq.src))));
        }
        if eq.params.get("strides").is_some_and(|s| !s.is_null()) {
            return Err(self.unsupported(format!("a strided `slice`{}", at(&eq.src))));
        }
        let (r0, c0) = if n == 1 {
            if a.rows == 1 { (0, start[0]) } else { (start[0], 0) }
        } else {
            (start[n - 2], start[n - 1])
        };
        let (rows, cols) = if n == 1 {
            let len = (limit[0] - start[0]) as u32;
            if a.rows == 1 { (1, len) } else { (len, 1) }
        } else {
            ((limit[n - 2] - start[n - 2]) as u32, (limit[n - 1] - start[n - 1]) as u32)
        };
        let r0 = if a.prow == 1 { 0 } else { r0 as u32 };
        let c0 = if a.pcol == 1 { 0 } else { c0 as u32 };
        Ok(vec![Val::A(Arr {
            addr: a.addr + r0 * a.stride + c0 * a.fmt.bytes(),
            prow: if a.prow == 1 { 1 } else { rows },
            pcol: if a.pcol == 1 { 1 } else { cols },
            rows,
            cols,
            shape: o.shape.clone(),
            ..a.clone()
        })])
    }

    fn tile(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let reps = ints(&eq.params, "reps");
        let o = &eq.outs[0];
        let Some(Val::A(a)) = ins.first() else {
            return Err(self.unsupported(format!("`tile` of a non-array{}", at(&eq.src))));
        };
        let n = a.shape.len();
        let (rr, rc) = match reps.len() {
            0 => (1, 1),
            1 => (1, reps[0] as u32),
            _ if reps[..reps.len() - 2].iter().all(|&r| r == 1) => {
                (reps[reps.len() - 2] as u32, reps[reps.len() - 1] as u32)
            }
            _ => (0, 0),
        };
        let whole = |x: u32, t: u32, r: u32| r == 1 || x % t == 0;
        if rr == 0 || n > 2 || !whole(a.rows, SUB, rr) || !whole(a.cols, LANES, rc) {
            return Err(self.unsupported(format!(
                "`tile` of {:?} by {reps:?}{} (whole (8, 128) tiles only)",
                a.shape,
                at(&eq.src)
            )));
        }
        let (rows, cols) = (a.rows * rr, a.cols * rc);
        let out = self.vmem.array(self.kernel, rows, cols, tpuemu_isa::ops::MemFmt::W32, a.dt, o.shape.clone(), "a value")?;
        for i in 0..out.ti() {
            for j in 0..out.tj() {
                load(self.e, V0, a, i % a.ti(), j % a.tj());
                store(self.e, V0, &out, i, j, None);
            }
        }
        Ok(vec![Val::A(out)])
    }

    fn iota(&mut self, eq: &Eqn) -> Result<Vec<Val>, PallasError> {
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
        let out = self.vmem.array(
            self.kernel,
            rows,
            cols,
            tpuemu_isa::ops::MemFmt::W32,
            dt,
            o.shape.clone(),
            "a value",
        )?;
        for i in 0..out.ti() {
            for j in 0..out.tj() {
                let (kind, base) = if along_lanes {
                    (IotaKind::Lane, j * LANES)
                } else {
                    (IotaKind::Sub, i * SUB)
                };
                self.e.viota(kind, V0);
                if base != 0 {
                    self.e.vbin(VBinOp::Add, VType::I32, V0, V0, base);
                }
                if dt.is_float() {
                    self.e.vcvt(CvtOp::I2F, V0, V0);
                }
                store(self.e, V0, &out, i, j, None);
            }
        }
        Ok(vec![Val::A(out)])
    }

    // ---- pointwise ----

    fn pointwise(&mut self, eq: &Eqn, ins: Vec<Val>, dt: Dt) -> Result<Vec<Val>, PallasError> {
        let prim = eq.prim.as_str();
        let in_dt = ins
            .iter()
            .map(|v| match v {
                Val::S(_, d) => *d,
                Val::A(a) | Val::Ref(a) | Val::T(a) => a.dt,
            })
            .collect::<Vec<_>>();
        let first = *in_dt.first().unwrap_or(&dt);
        let ty = vtype(first);
        let op2 = |op: VBinOp| Some(Op::Bin(op));
        let op = match prim {
            "add" => op2(VBinOp::Add),
            "sub" => op2(VBinOp::Sub),
            "mul" => op2(VBinOp::Mul),
            "div" => op2(VBinOp::Div),
            "max" => op2(VBinOp::Max),
            "min" => op2(VBinOp::Min),
            "rem" => op2(VBinOp::Rem),
            "pow" if first.is_float() => op2(VBinOp::Pow),
            "and" if !first.is_float() => op2(VBinOp::And),
            "or" if !first.is_float() => op2(VBinOp::Or),
            "xor" if !first.is_float() => op2(VBinOp::Xor),
            "shift_left" if first == Dt::I32 => op2(VBinOp::Shl),
            "shift_right_arithmetic" if first == Dt::I32 => op2(VBinOp::Sra),
            "shift_right_logical" if first == Dt::I32 => op2(VBinOp::Shr),
            "neg" => Some(Op::Un(VUnOp::Neg)),
            "abs" => Some(Op::Un(VUnOp::Abs)),
            "sign" => Some(Op::Un(VUnOp::Sign)),
            "floor" => Some(Op::Un(VUnOp::Floor)),
            "ceil" => Some(Op::Un(VUnOp::Ceil)),
            "round" if eq.params.get("rounding_method").and_then(|v| v.as_i64()) == Some(1) => {
                Some(Op::Un(VUnOp::Round))
            }
            "not" if first == Dt::Bool => Some(Op::NotBool),
            "not" if first == Dt::I32 => Some(Op::Un(VUnOp::Not)),
            "exp" => Some(Op::Un(VUnOp::Exp)),
            "exp2" => Some(Op::Exp2),
            "log" => Some(Op::Un(VUnOp::Log)),
            "log1p" => Some(Op::Un(VUnOp::Log1p)),
            "expm1" => Some(Op::Un(VUnOp::Expm1)),
            "sqrt" => Some(Op::Un(VUnOp::Sqrt)),
            "rsqrt" => Some(Op::Un(VUnOp::Rsqrt)),
            "tanh" => Some(Op::Un(VUnOp::Tanh)),
            "logistic" => Some(Op::Un(VUnOp::Sigmoid)),
            "erf" => Some(Op::Un(VUnOp::Erf)),
            "sin" => Some(Op::Un(VUnOp::Sin)),
            "cos" => Some(Op::Un(VUnOp::Cos)),
            "square" => Some(Op::Square),
            "integer_pow" => eq
                .params
                .get("y")
                .and_then(|v| v.as_i64())
                .map(|y| Op::IntPow(y as i32)),
            "eq" => Some(Op::Cmp(CmpOp::Eq)),
            "ne" => Some(Op::Cmp(CmpOp::Ne)),
            "lt" => Some(Op::Cmp(CmpOp::Lt)),
            "le" => Some(Op::Cmp(CmpOp::Le)),
            "gt" => Some(Op::Cmp(CmpOp::Gt)),
            "ge" => Some(Op::Cmp(CmpOp::Ge)),
            "select_n" if ins.len() == 3 => Some(Op::Select),
            "convert_element_type" => Some(Op::Convert),
            "copy" | "copy_p" | "optimization_barrier" => Some(Op::Copy),
            _ => None,
        };
        let Some(op) = op else {
            return Err(self.unsupported(format!(
                "`{prim}` on {}{}",
                in_dt
                    .iter()
                    .map(|d| format!("{d:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                at(&eq.src)
            )));
        };
        if matches!(op, Op::Un(u) if !u.supports(ty)) {
            return Err(self.unsupported(format!("`{prim}` on {first:?}{}", at(&eq.src))));
        }
        let o = &eq.outs[0];
        // The result's extent: the operands' (equal, or 1 where broadcast).
        let mut rows = 1;
        let mut cols = 1;
        for v in &ins {
            if let Val::A(a) = v {
                rows = rows.max(a.rows);
                cols = cols.max(a.cols);
            }
        }
        for v in &ins {
            if let Val::A(a) = v
                && ((a.rows != rows && a.rows != 1) || (a.cols != cols && a.cols != 1))
            {
                return Err(self.unsupported(format!(
                    "`{prim}` of arrays laid out as {}x{} and {rows}x{cols}{} (a 1-D value \
                     is a row or a column as it was computed)",
                    a.rows,
                    a.cols,
                    at(&eq.src)
                )));
            }
        }
        let (er, ec) = two_d(self.kernel, &o.shape, rows > 1 && cols == 1)?;
        if (er, ec) != (rows, cols) && !(ins.iter().all(|v| matches!(v, Val::S(..)))) {
            return Err(self.unsupported(format!(
                "`{prim}` producing {:?}{}",
                o.shape,
                at(&eq.src)
            )));
        }
        let (rows, cols) = (er, ec);
        let out = self.vmem.array(
            self.kernel,
            rows,
            cols,
            tpuemu_isa::ops::MemFmt::W32,
            dt,
            o.shape.clone(),
            "a value",
        )?;
        for i in 0..out.ti() {
            for j in 0..out.tj() {
                // Operands: the first in v1 always, the others in v2.. or as immediates.
                let mut src = Vec::new();
                for (k, v) in ins.iter().enumerate() {
                    let reg = VReg::n(1 + k as u8);
                    match v {
                        Val::A(a) => {
                            load(self.e, reg, a, i, j);
                            src.push(VSrc::V(reg));
                        }
                        Val::S(s, d) => {
                            let bits = s.convert(*d).bits(*d);
                            if k == 0 || (matches!(op, Op::Select) && k == 2) {
                                self.e.vmov(vtype(*d), reg, bits);
                                src.push(VSrc::V(reg));
                            } else {
                                src.push(VSrc::Imm(bits));
                            }
                        }
                        Val::Ref(_) | Val::T(_) => {
                            return Err(PallasError::Spec("a reference used as a value".into()));
                        }
                    }
                }
                self.emit(op, ty, first, dt, &src)?;
                let round = dt == Dt::Bf16 && !matches!(op, Op::Copy | Op::Select | Op::Cmp(_));
                if round && !(matches!(op, Op::Convert) && first == Dt::Bf16) {
                    self.e.vcvt(CvtOp::Bf16, V0, V0);
                }
                store(self.e, V0, &out, i, j, None);
            }
        }
        Ok(vec![Val::A(out)])
    }

    /// Computes `op` of `src` (the first is a register) into v0.
    fn emit(
        &mut self,
        op: Op,
        ty: VType,
        from: Dt,
        to: Dt,
        src: &[VSrc],
    ) -> Result<(), PallasError> {
        let reg = |s: &VSrc| match s {
            VSrc::V(v) => *v,
            _ => VReg::n(1),
        };
        let a = reg(&src[0]);
        let e = &mut *self.e;
        match op {
            Op::Bin(b) => {
                e.vbin(b, ty, V0, a, src[1]);
            }
            Op::Un(u) => {
                e.vun(u, ty, V0, a);
            }
            Op::NotBool => {
                e.vbin(VBinOp::Xor, VType::I32, V0, a, 1u32);
            }
            Op::Exp2 => {
                e.vbin(
                    VBinOp::Mul,
                    VType::F32,
                    V0,
                    a,
                    std::f32::consts::LN_2.to_bits(),
                );
                e.vun(VUnOp::Exp, VType::F32, V0, V0);
            }
            Op::Square => {
                e.vbin(VBinOp::Mul, ty, V0, a, a);
            }
            Op::IntPow(y) => {
                let one = if ty == VType::F32 {
                    1.0f32.to_bits()
                } else {
                    1
                };
                e.vmov(ty, V0, one);
                e.vmov(ty, V5, a);
                let mut n = y.unsigned_abs();
                while n > 0 {
                    if n & 1 == 1 {
                        e.vbin(VBinOp::Mul, ty, V0, V0, V5);
                    }
                    n >>= 1;
                    if n > 0 {
                        e.vbin(VBinOp::Mul, ty, V5, V5, V5);
                    }
                }
                if y < 0 {
                    if ty != VType::F32 {
                        return Err(
                            self.unsupported("an integer raised to a negative power".into())
                        );
                    }
                    e.vmov(VType::F32, V5, 1.0f32.to_bits());
                    e.vbin(VBinOp::Div, VType::F32, V0, V5, V0);
                }
            }
            Op::Cmp(c) => {
                e.vcmp(c, ty, M1, a, src[1]);
                e.vmov(VType::I32, V7, 1u32);
                e.vsel(VType::I32, V0, M1, V7, 0u32);
            }
            Op::Select => {
                // select_n(which, case0, case1): case1 where `which` is set.
                e.vcmp(CmpOp::Ne, VType::I32, M1, a, 0u32);
                let c1 = reg(&src[2]);
                e.vsel(vtype(to), V0, M1, c1, src[1]);
            }
            Op::Copy => {
                e.vmov(ty, V0, a);
            }
            Op::Convert => match (from.is_float(), to) {
                (true, Dt::F32) | (true, Dt::Bf16) => {
                    e.vmov(VType::F32, V0, a);
                }
                (true, Dt::I32) => {
                    e.vcvt(CvtOp::F2I, V0, a);
                }
                (false, Dt::F32) | (false, Dt::Bf16) => {
                    e.vcvt(CvtOp::I2F, V0, a);
                }
                (false, Dt::I32) => {
                    e.vmov(VType::I32, V0, a);
                }
                (f, Dt::Bool) => {
                    let t = if f { VType::F32 } else { VType::I32 };
                    e.vcmp(CmpOp::Ne, t, M1, a, 0u32);
                    e.vmov(VType::I32, V7, 1u32);
                    e.vsel(VType::I32, V0, M1, V7, 0u32);
                }
            },
        }
        Ok(())
    }

    // ---- reductions ----

    fn reduce(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let o = &eq.outs[0];
        let dt = dt_of(self.kernel, &o.dtype)?;
        let a = match ins.first() {
            Some(Val::A(a)) => a.clone(),
            Some(Val::S(s, d)) => return Ok(vec![Val::S(*s, *d)]),
            _ => return Err(PallasError::Spec("reduction of a reference".into())),
        };
        let axes = ints(&eq.params, "axes");
        let n = a.shape.len();
        let mut over_rows = false;
        let mut over_cols = false;
        for ax in &axes {
            let ax = *ax as usize;
            if n >= 2 && ax + 1 == n || (n == 1 && a.rows == 1) {
                over_cols = true;
            } else if n >= 2 && ax + 2 == n || (n == 1 && a.cols == 1) {
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
        let out = self.vmem.array(
            self.kernel,
            rows,
            cols,
            tpuemu_isa::ops::MemFmt::W32,
            dt,
            o.shape.clone(),
            "a value",
        )?;
        let (ti, tj) = (a.ti(), a.tj());
        let (pr, pc) = (a.rows % SUB, a.cols % LANES);
        let outer_i = if over_rows { 1 } else { ti };
        let outer_j = if over_cols { 1 } else { tj };
        for oi in 0..outer_i {
            for oj in 0..outer_j {
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
                let mut first = true;
                for &i in &is {
                    for &j in &js {
                        let cut_r = over_rows && a.prow > 1 && i + 1 == ti && pr != 0;
                        let cut_c = over_cols && a.pcol > 1 && j + 1 == tj && pc != 0;
                        let dst = if first { V0 } else { VReg::n(1) };
                        load(self.e, dst, &a, i, j);
                        if let Some(m) = self.edge_mask(cut_r.then_some(pr), cut_c.then_some(pc)) {
                            self.e.vsel(ty, dst, m, dst, ident);
                        }
                        if !first {
                            self.e.vbin(bin, ty, V0, V0, VReg::n(1));
                        }
                        first = false;
                    }
                }
                // Rows of a broadcast column are copies: a sum over them scales.
                if over_cols && a.pcol == 1 && red == RedOp::Add && a.cols > 1 {
                    let k = if ty == VType::F32 {
                        (a.cols as f32).to_bits()
                    } else {
                        a.cols
                    };
                    self.e.vbin(VBinOp::Mul, ty, V0, V0, k);
                } else if over_cols && a.pcol > 1 {
                    self.e.vred(red, ty, Axis::Lane, V0, V0);
                }
                if over_rows && a.prow == 1 && red == RedOp::Add && a.rows > 1 {
                    let k = if ty == VType::F32 {
                        (a.rows as f32).to_bits()
                    } else {
                        a.rows
                    };
                    self.e.vbin(VBinOp::Mul, ty, V0, V0, k);
                } else if over_rows && a.prow > 1 {
                    self.e.vred(red, ty, Axis::Sub, V0, V0);
                }
                if dt == Dt::Bf16 {
                    self.e.vcvt(CvtOp::Bf16, V0, V0);
                }
                store(self.e, V0, &out, oi, oj, None);
            }
        }
        Ok(vec![Val::A(out)])
    }

    // ---- matrix products ----

    fn dot(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let k = self.kernel;
        let o = &eq.outs[0];
        let dt = dt_of(k, &o.dtype)?;
        let lc = ints(&eq.params, "lhs_contract");
        let rc = ints(&eq.params, "rhs_contract");
        let batch = ints(&eq.params, "lhs_batch");
        let arr = |v: Option<&Val>| match v {
            Some(Val::A(a)) => Some((a.clone(), false)),
            Some(Val::T(a)) => Some((a.clone(), true)),
            _ => None,
        };
        let (Some((l, lt)), Some((r, rt))) = (arr(ins.first()), arr(ins.get(1))) else {
            return Err(self.unsupported(format!("a matrix product of constants{}", at(&eq.src))));
        };
        let (l, r) = (&l, &r);
        if !batch.is_empty()
            || l.shape.len() != 2
            || r.shape.len() != 2
            || lc.len() != 1
            || rc.len() != 1
        {
            return Err(self.unsupported(format!(
                "`dot_general` of {:?} and {:?} contracting {lc:?} and {rc:?}{} (2-D operands, \
                 one contracting dimension, no batch dimensions)",
                l.shape,
                r.shape,
                at(&eq.src)
            )));
        }
        if !l.dt.is_float() || !r.dt.is_float() {
            return Err(self.unsupported(format!("an integer matrix product{}", at(&eq.src))));
        }
        // A transposed operand's contracting dimension is the other one of what is stored.
        let lhs_t = (lc[0] == 0) != lt;
        let rhs_t = (rc[0] == 1) != rt;
        let l = if l.dense() {
            l.clone()
        } else {
            self.copy(l, l.dt)?
        };
        let r = if r.dense() {
            r.clone()
        } else {
            self.copy(r, r.dt)?
        };
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
        if kk != kr {
            return Err(PallasError::Spec(format!(
                "dot_general of {m}x{kk} and {kr}x{n}"
            )));
        }
        // bf16 operands take one pass (exact); float32 as `precision` says, Mosaic's default
        // (None or DEFAULT) taken as float32-exact.
        let bf = l.dt == Dt::Bf16 && r.dt == Dt::Bf16;
        let prec = if bf {
            Precision::P1
        } else {
            match eq.params.get("precision").and_then(|v| v.as_str()) {
                Some("HIGH") => Precision::P3,
                Some("BF16") => Precision::P1,
                _ => Precision::P6,
            }
        };
        let out = self.vmem.array(
            k,
            m,
            n,
            tpuemu_isa::ops::MemFmt::W32,
            Dt::F32,
            o.shape.clone(),
            "a matrix product",
        )?;
        let (ar, ac) = (self.core.mxu_rows.max(8), self.core.mxu_cols.max(8));
        let units = self.core.mxus.max(1);
        let ntiles: Vec<u32> = (0..n.div_ceil(ac)).collect();
        for group in ntiles.chunks(units as usize) {
            for k0 in (0..kk).step_by(ar as usize) {
                let kc = ar.min(kk - k0);
                for (u, &nt) in group.iter().enumerate() {
                    let n0 = nt * ac;
                    let nc = ac.min(n - n0);
                    let mx = Mxu::n(u as u8);
                    // Weights: K x N from rhs (rows k, columns n), or its transpose.
                    let (w_addr, w_stride) = if rhs_t {
                        (r.addr + n0 * r.stride + k0 * 4, r.stride)
                    } else {
                        (r.addr + k0 * r.stride + n0 * 4, r.stride)
                    };
                    let (rk, rn, rs) = (
                        self.e.konst(kc as i32),
                        self.e.konst(nc as i32),
                        self.e.konst(w_stride as i32),
                    );
                    self.e
                        .mxu_lw(mx, MxuFmt::F32, rhs_t, Addr::abs(w_addr as i32), rk, rn, rs);
                    let a_addr = if lhs_t {
                        l.addr + k0 * l.stride
                    } else {
                        l.addr + k0 * 4
                    };
                    let (rm, ls) = (self.e.konst(m as i32), self.e.konst(l.stride as i32));
                    self.e.mxu_mm(
                        mx,
                        MxuFmt::F32,
                        lhs_t,
                        prec,
                        Addr::abs(a_addr as i32),
                        rm,
                        ls,
                    );
                }
                for (u, &nt) in group.iter().enumerate() {
                    let n0 = nt * ac;
                    let (rm, os) = (self.e.konst(m as i32), self.e.konst(out.stride as i32));
                    self.e.mxu_pop(
                        Mxu::n(u as u8),
                        k0 > 0,
                        Addr::abs((out.addr + n0 * 4) as i32),
                        rm,
                        os,
                    );
                }
            }
        }
        if dt == Dt::F32 {
            return Ok(vec![Val::A(out)]);
        }
        // A bf16 result: rounded once.
        let res = self.vmem.array(
            k,
            m,
            n,
            tpuemu_isa::ops::MemFmt::W32,
            dt,
            o.shape.clone(),
            "a value",
        )?;
        for i in 0..out.ti() {
            for j in 0..out.tj() {
                load(self.e, V0, &out, i, j);
                self.e.vcvt(CvtOp::Bf16, V0, V0);
                store(self.e, V0, &res, i, j, None);
            }
        }
        Ok(vec![Val::A(res)])
    }
}

/// A pointwise operation.
#[derive(Clone, Copy, Debug)]
enum Op {
    Bin(VBinOp),
    Un(VUnOp),
    NotBool,
    Exp2,
    Square,
    IntPow(i32),
    Cmp(CmpOp),
    Select,
    Convert,
    Copy,
}

fn sub_jaxpr(p: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<Jaxpr> {
    serde_json::from_value(p.get(key)?.clone()).ok()
}
