//! Regions of references: what a chain of indexers (`ref.at[h].at[page]`, `pl.ds(i * 8, 8)`)
//! selects in a VMEM, SMEM or HBM reference, with positions known while lowering or computed
//! while running ([`Pos`]), and the VMEM region it is as an array ([`Body::region_of`]).

use std::rc::Rc;

use super::PallasError;
use super::body::{Body, Val};
use super::scalar::at;
use super::spec::Eqn;
use super::values::{Arr, SUB, Sr};

/// A position along one dimension of a reference: known while lowering, or computed.
#[derive(Clone, Debug)]
pub enum Pos {
    /// Known.
    S(i64),
    /// In a scalar register.
    D(Rc<Sr>),
}

impl Pos {
    /// The position if known.
    pub fn known(&self) -> Option<i64> {
        match self {
            Pos::S(x) => Some(*x),
            Pos::D(_) => None,
        }
    }
}

/// The chain of indexers at `p` (`{"idx": [...], "then": [[...], ...]}`): the first, then
/// those applied to its result.
pub(super) fn indexers(p: Option<&serde_json::Value>) -> Vec<Vec<serde_json::Value>> {
    let dims = |v: Option<&serde_json::Value>| -> Vec<serde_json::Value> {
        v.and_then(|v| v.as_array()).cloned().unwrap_or_default()
    };
    let Some(p) = p else { return Vec::new() };
    let mut out = vec![dims(p.get("idx"))];
    if let Some(more) = p.get("then").and_then(|v| v.as_array()) {
        out.extend(more.iter().map(|m| dims(Some(m))));
    }
    out
}

impl Body<'_> {
    /// The region of `r` that `eq`'s indexers select (`params.idx`, then `params.then` for
    /// chained ones; computed positions are operands after the reference and value, `idx`).
    pub(super) fn region(&mut self, eq: &Eqn, r: &Arr, idx: &[Val]) -> Result<Arr, PallasError> {
        let chain = indexers(Some(&serde_json::Value::Object(eq.params.clone())));
        self.region_of(eq, r, &chain, idx)
    }

    /// The positions a chain of indexers selects in an array of `shape`: (start, size, kept)
    /// per dimension (`kept`: a slice, not an integer index). `args` resolves computed
    /// positions. Known positions are checked against the array.
    pub(super) fn positions(
        &mut self,
        eq: &Eqn,
        shape: &[usize],
        chain: &[Vec<serde_json::Value>],
        args: &[Val],
    ) -> Result<Vec<(Pos, i64, bool)>, PallasError> {
        let mut out: Vec<(Pos, i64, bool)> =
            shape.iter().map(|&d| (Pos::S(0), d as i64, true)).collect();
        for spec in chain.iter().filter(|s| !s.is_empty()) {
            let kept: Vec<usize> = (0..out.len()).filter(|&d| out[d].2).collect();
            if spec.len() != kept.len() {
                return Err(self.unsupported(format!(
                    "an indexer of {} dimensions on a {}-dimensional reference{}",
                    spec.len(),
                    kept.len(),
                    at(&eq.src)
                )));
            }
            let pos_of = |v: &serde_json::Value| -> Result<Pos, PallasError> {
                if let Some(i) = v.as_i64() {
                    return Ok(Pos::S(i));
                }
                let a = v.get("arg").and_then(|a| a.as_u64()).unwrap_or(u64::MAX) as usize;
                match args.get(a) {
                    Some(Val::S(s, _)) => Ok(Pos::S(s.as_i64())),
                    Some(Val::D(r, _)) => Ok(Pos::D(r.clone())),
                    _ => Err(PallasError::Spec(format!(
                        "an index operand {a} that is not a scalar"
                    ))),
                }
            };
            for (s, &d) in spec.iter().zip(&kept) {
                let (start, size, keep) = if let Some(i) = s.get("at") {
                    (pos_of(i)?, 1, false)
                } else {
                    if s.get("stride").and_then(|v| v.as_i64()).unwrap_or(1) != 1 {
                        return Err(self.unsupported(format!(
                            "a strided slice of a reference{}",
                            at(&eq.src)
                        )));
                    }
                    let start = pos_of(s.get("start").unwrap_or(&serde_json::Value::from(0)))?;
                    let size = s.get("size").and_then(|v| v.as_i64()).unwrap_or(out[d].1);
                    (start, size, true)
                };
                if let Some(st) = start.known()
                    && (st < 0 || st + size > out[d].1)
                {
                    return Err(PallasError::refused(
                        self.kernel,
                        format!(
                            "out-of-bounds access: elements {st}..{} of dimension {d} of a \
                             reference of shape {shape:?}{}",
                            st + size,
                            at(&eq.src)
                        ),
                    ));
                }
                let sum = self.add_pos(&out[d].0, &start)?;
                out[d] = (sum, size, keep);
            }
        }
        Ok(out)
    }

    /// The region of VMEM reference `r` that `chain` selects.
    pub(super) fn region_of(
        &mut self,
        eq: &Eqn,
        r: &Arr,
        chain: &[Vec<serde_json::Value>],
        args: &[Val],
    ) -> Result<Arr, PallasError> {
        let nlead = r.shape.len().saturating_sub(2);
        let lead: usize = r.shape[..nlead].iter().product();
        if chain.iter().all(|s| s.is_empty()) && lead <= 1 {
            return Ok(r.clone());
        }
        let pos = self.positions(eq, &r.shape, chain, args)?;
        let n = pos.len();
        // Leading dimensions pick 2-D arrays of a stack: one, or several in a row when the
        // stack's arrays follow each other without padding (they are then one taller array).
        let stacked_rows = n >= 3 && r.slab == r.rows * r.stride;
        let mut terms: Vec<(Pos, i64)> = Vec::new();
        let mut slab_stride = vec![0i64; nlead];
        for d in (0..nlead).rev() {
            slab_stride[d] = if d + 1 == nlead {
                r.slab as i64
            } else {
                slab_stride[d + 1] * r.shape[d + 1] as i64
            };
        }
        let mut multi = None;
        for (d, (start, size, _)) in pos.iter().enumerate().take(nlead) {
            if *size != 1 {
                let inner_full = pos[d + 1..n - 1]
                    .iter()
                    .zip(&r.shape[d + 1..n - 1])
                    .all(|((s, z, _), &full)| s.known() == Some(0) && *z == full as i64);
                if !stacked_rows || multi.is_some() || !inner_full {
                    return Err(self.unsupported(format!(
                        "a slice of {size} along leading dimension {d} of a reference of shape \
                         {:?}{} (index the leading dimensions, or keep the stacked arrays' rows \
                         a multiple of 8 so that they read as one array)",
                        r.shape,
                        at(&eq.src)
                    )));
                }
                multi = Some(d);
            }
            terms.push((start.clone(), slab_stride[d]));
        }
        let shape: Vec<usize> = pos.iter().filter(|p| p.2).map(|p| p.1 as usize).collect();
        let (rows, cols) = match n {
            1 => (1, pos[0].1),
            _ => (pos[n - 2].1, pos[n - 1].1),
        };
        // Several arrays of the stack read as one: their rows one after another.
        let rows = match multi {
            Some(d) => pos[d..n - 1].iter().map(|p| p.1).product(),
            None => rows,
        };
        if n == 1 {
            terms.push((pos[0].0.clone(), r.fmt.bytes() as i64));
        } else {
            terms.push((pos[n - 2].0.clone(), r.stride as i64));
            terms.push((pos[n - 1].0.clone(), r.fmt.bytes() as i64));
        }
        let two =
            multi.is_some() || shape.len() <= 2 || shape[..shape.len() - 2].iter().all(|&d| d == 1);
        if !two {
            return Err(self.unsupported(format!(
                "a region of shape {shape:?} of a reference{}",
                at(&eq.src)
            )));
        }
        let mut addr = r.addr as i64;
        let mut dynamic: Vec<(Rc<Sr>, i64)> = Vec::new();
        for (p, k) in terms {
            match p {
                Pos::S(x) => addr += x * k,
                Pos::D(reg) => dynamic.push((reg, k)),
            }
        }
        let (base, span) = if dynamic.is_empty() && r.base.is_none() {
            (None, 0)
        } else {
            if let Some(b) = &r.base {
                dynamic.push((b.clone(), 1));
            }
            // It may start anywhere in the reference.
            let total = (lead.max(1) as u32) * r.slab.max(r.rows.div_ceil(SUB) * SUB * r.stride);
            let span = (r.addr + total + r.span).saturating_sub(addr.max(0) as u32);
            let (mut b, extra) = self.scaled_sum(&dynamic)?;
            addr += extra;
            if addr < 0 {
                // `pl.ds(i - 1, n)` of an array at the start of VMEM: the constant goes into
                // the register.
                let t = self.sreg()?;
                self.e.sadd(t.reg, b.reg, addr as i32);
                b = t;
                addr = 0;
            }
            (Some(b), span)
        };
        Ok(Arr {
            addr: u32::try_from(addr).map_err(|_| {
                PallasError::refused(
                    self.kernel,
                    format!("a region before the reference's start{}", at(&eq.src)),
                )
            })?,
            prow: rows as u32,
            pcol: cols as u32,
            rows: rows as u32,
            cols: cols as u32,
            shape,
            slab: 0,
            base,
            span,
            ..r.clone()
        })
    }
}
