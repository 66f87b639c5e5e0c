//! Value checks of operators, run on the device ([`crate::runtime`]'s `checks`): an operator
//! asks that every element of an integer tensor lie in a range, and the broken rule is raised
//! at the next synchronisation with the operator's message, as PyTorch's CPU kernels raise it.

use std::sync::{Arc, OnceLock};

use super::helpers::{OpScope, map_shape, rows};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind};
use crate::runtime::checks::{CapturedCheck, Check};
use crate::runtime::{Mode, Runtime};
use crate::tensor::Tensor;

/// Where the user's program called the operator being run (`file:line`), from a front end
/// that knows (the Python bridge installs one): named by a check's error, which may be raised
/// far from the call.
static CALL_SITE: OnceLock<fn() -> Option<String>> = OnceLock::new();

/// Installs the front end's call-site finder (once; later calls are ignored).
pub fn set_call_site(f: fn() -> Option<String>) {
    let _ = CALL_SITE.set(f);
}

/// `e` with the call site appended to its message.
fn at_site(e: TpuError, site: &Option<String>) -> TpuError {
    let Some(site) = site else { return e };
    match e {
        TpuError::IndexOutOfRange(m) => {
            TpuError::IndexOutOfRange(format!("{m} (called at {site})"))
        }
        TpuError::BadArgs(m) => TpuError::BadArgs(format!("{m} (called at {site})")),
        other => other,
    }
}

/// Checks on the device that every element of the integer tensor `values` lies in
/// `lo..hi`; else the operator fails with `error(v)` for the largest value `v` out of range.
/// Call it before the kernels that use `values`, and give the operator's outputs to
/// [`Pending::guards`]: the broken rule is raised at the next synchronisation (at once in
/// Debug mode, which waits for every kernel) and the outputs stay failed. Costs two small
/// kernels (fused with the operator's in DeferAndFuse) and, at that synchronisation, a 4-byte
/// read. A meta runtime runs, times and keeps the check as any other but has no value to read
/// (it never fails); a shapes-only runtime runs nothing; in a graph captured for compilation
/// the check is part of the graph (its flag an output of the compiled program, checked after
/// each call: `compile`).
pub(crate) fn check_range(
    op: &OpScope,
    values: &Tensor,
    lo: i64,
    hi: i64,
    error: impl Fn(i32) -> TpuError + Send + Sync + 'static,
) -> Result<Pending> {
    check_range_except(op, values, lo, hi, None, error)
}

/// [`check_range`], with one value outside the range also allowed (`except`: a loss's
/// `ignore_index`).
pub(crate) fn check_range_except(
    op: &OpScope,
    values: &Tensor,
    lo: i64,
    hi: i64,
    except: Option<i64>,
    error: impl Fn(i32) -> TpuError + Send + Sync + 'static,
) -> Result<Pending> {
    let (lo, hi) = (clamp_i32(lo), clamp_i32(hi));
    check_values(
        op,
        values,
        move |p, v| {
            let i = DType::I32;
            let lo = p.constant(Scalar::Int(lo), i);
            let hi = p.constant(Scalar::Int(hi), i);
            let ge = p.cmp(CmpKind::Ge, v, lo, i);
            let lt = p.cmp(CmpKind::Lt, v, hi, i);
            let mut ok = p.bin(BinOp::And, ge, lt, i);
            if let Some(e) = except.and_then(|e| i32::try_from(e).ok()) {
                let e = p.constant(Scalar::Int(e as i64), i);
                let is = p.cmp(CmpKind::Eq, v, e, i);
                ok = p.bin(BinOp::Or, ok, is, i);
            }
            ok
        },
        error,
    )
}

/// Checks on the device that every element `v` (as int32) of the integer tensor `values`
/// keeps the rule `keeps(v)` builds (a nonzero int32 where it holds); else the operator fails
/// with `error(v)` for the largest value that breaks it. As [`check_range`] otherwise.
pub(crate) fn check_values(
    op: &OpScope,
    values: &Tensor,
    keeps: impl FnOnce(&mut ProgBuilder, PRef) -> PRef,
    error: impl Fn(i32) -> TpuError + Send + Sync + 'static,
) -> Result<Pending> {
    check_flag(
        op,
        values,
        |p, v| {
            let i = DType::I32;
            let v = p.cast(v, i);
            let ok = keeps(p, v);
            // i32::MIN means "none": a value of exactly i32::MIN reports as MIN + 1.
            let floor = p.constant(Scalar::Int(i32::MIN as i64 + 1), i);
            (ok, p.bin(BinOp::Max, v, floor, i))
        },
        error,
    )
}

/// Checks on the device that no element of the floating tensor `values` lies in one of
/// `refused` (half-open ranges `lo..hi`; NaN lies in none); else the operator fails with
/// `error()`.
pub(crate) fn check_float_ranges(
    op: &OpScope,
    values: &Tensor,
    refused: &[(f64, f64)],
    error: impl Fn() -> TpuError + Send + Sync + 'static,
) -> Result<Pending> {
    let refused = refused.to_vec();
    check_flag(
        op,
        values,
        move |p, v| {
            let (f, i) = (DType::F32, DType::I32);
            let v = p.cast(v, f);
            let mut ok = p.constant(Scalar::Int(1), i);
            for (lo, hi) in refused {
                let lo = p.constant(Scalar::Float(lo), f);
                let hi = p.constant(Scalar::Float(hi), f);
                let ge = p.cmp(CmpKind::Ge, v, lo, f);
                let lt = p.cmp(CmpKind::Lt, v, hi, f);
                let inside = p.bin(BinOp::And, ge, lt, i);
                let zero = p.constant(Scalar::Int(0), i);
                let outside = p.cmp(CmpKind::Eq, inside, zero, i);
                ok = p.bin(BinOp::And, ok, outside, i);
            }
            (ok, p.constant(Scalar::Int(1), i))
        },
        move |_| error(),
    )
}

/// Checks of at most this many elements take one rows kernel (the whole tensor as one row);
/// larger ones write their flags and reduce them in chunks.
const CHECK_IN_ONE_ROW: usize = 1 << 16;

/// The check's kernel: `rule(v)` gives, per element, whether it keeps the rule and the int32
/// to report if not (never `i32::MIN`); the flag is the largest reported.
fn check_flag(
    op: &OpScope,
    values: &Tensor,
    rule: impl FnOnce(&mut ProgBuilder, PRef) -> (PRef, PRef),
    error: impl Fn(i32) -> TpuError + Send + Sync + 'static,
) -> Result<Pending> {
    let rt = op.rt();
    if values.numel() == 0 || !rt.checks_values() {
        return Ok(Pending(None));
    }
    let i = DType::I32;
    let none = Scalar::Int(i32::MIN as i64);
    // One rows kernel over every element (a zero-dimensional tensor as a row of one): the
    // largest value that breaks the rule.
    let x = if values.dim() == 0 {
        values.with_layout(values.layout().unsqueeze(0)?)
    } else {
        values.clone()
    };
    let all: Vec<usize> = (0..x.dim()).collect();
    let flag = if x.numel() > CHECK_IN_ONE_ROW {
        // A row this long does not fit VMEM (a million int32 flags): the flags, then the
        // registered `amax`, which reduces a large tensor in chunks (`reduce/split.rs`).
        let flagged = map_shape(op, x.shape(), &[&x], &[i], |p, r| {
            let (ok, shown) = rule(p, r[0]);
            let none = p.constant(none, i);
            vec![p.select(ok, none, shown, i)]
        })?
        .remove(0);
        let dims: Vec<i64> = all.iter().map(|&d| d as i64).collect();
        super::compose::op(
            rt,
            "aten::amax",
            vec![
                super::Value::Tensor(flagged),
                super::Value::Ints(dims),
                super::Value::Bool(false),
            ],
        )?
    } else {
        rows(
            op,
            x.shape(),
            &all,
            false,
            &[&x],
            &[false],
            &[(i, true)],
            |p, r| {
                let (ok, shown) = rule(p, r[0]);
                let none = p.constant(none, i);
                let flagged = p.select(ok, none, shown, i);
                vec![p.reduce(RedKind::Max, flagged, i)]
            },
        )?
        .remove(0)
    };
    let name = op.tag().name.to_string();
    let site = CALL_SITE.get().and_then(|f| f());
    let error = move |v| at_site(super::name_the_op(&name, error(v)), &site);
    if rt.capturing() {
        // Part of a graph being compiled: each call of the compiled graph checks its flag.
        rt.capture_check(CapturedCheck {
            op: op.tag().name.to_string(),
            flag: flag.storage().clone(),
            layout: flag.layout().clone(),
            ok: i32::MIN,
            error: Arc::new(error),
        });
        return Ok(Pending(None));
    }
    let check = Check {
        op: op.tag().name.to_string(),
        flag: flag.storage().clone(),
        ok: i32::MIN,
        error: Box::new(error),
        outputs: Vec::new(),
    };
    if rt.mode() == Mode::Debug {
        // Debug waits for every kernel: the operator fails here, before it uses the values.
        rt.check_now(check)?;
        return Ok(Pending(None));
    }
    Ok(Pending(Some(check)))
}

/// A value check waiting for the operator's outputs.
#[must_use = "a check is registered by `guards`"]
pub(crate) struct Pending(Option<Check>);

impl Pending {
    /// No check (nothing to check, or checked already).
    pub fn none() -> Self {
        Pending(None)
    }

    /// Registers the check; `outputs` fail with the operator when a value breaks its rule.
    pub fn guards(self, rt: &Runtime, outputs: &[&Tensor]) {
        if let Some(mut c) = self.0 {
            c.outputs = outputs
                .iter()
                .map(|t| Arc::downgrade(t.storage()))
                .collect();
            rt.add_check(c);
        }
    }
}

/// Whether the operator's values are checked on the device (not on a shapes-only or meta
/// runtime, nor in a captured graph).
pub(crate) fn checks_on(op: &OpScope) -> bool {
    op.rt().checks_values()
}

/// A bound as the device's 32-bit lanes hold it.
fn clamp_i32(v: i64) -> i64 {
    v.clamp(i32::MIN as i64 + 1, i32::MAX as i64)
}
