//! Device-side checks: what PyTorch's CPU kernels refuse by looking at values (an index out of
//! range, a class target out of range, an integer division by zero), checked where the values
//! are — on the device — as CUDA's device-side assertions are, and raised where the wrong
//! value would have been read.
//!
//! An operator that must check a value computes, with its other kernels, one int32 *flag*: a
//! value that breaks the rule (the largest, when several do), or [`Check::ok`] when none does.
//! It registers the flag with `Runtime::add_check`, naming its outputs, and returns at
//! once — the good path waits for nothing. While a check is pending, an operator that reads a
//! guarded storage adds its own outputs to the check's (what is computed from a failing
//! result fails with it). Every synchronisation settles the pending checks: it reads their
//! flags (four bytes each, after the kernels it waits for anyway) and marks the storages of a
//! broken rule *failed* with the operator's own message and exception kind, naming the value.
//! Reading a failed storage raises that error — at the first read that needs it, and at every
//! later one; every other tensor stays readable. A kernel fault that a broken rule explains
//! (an out-of-range gather faults its DMA) is not reported apart. Debug mode, which waits for
//! every kernel, raises at the operator itself.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use crate::error::TpuError;
use crate::storage::{Storage, StorageRef};

/// A rule an operator's values must keep, and its flag.
pub struct Check {
    /// The operator (`aten::gather`).
    pub op: String,
    /// The flag: one int32, written by the operator's kernels.
    pub flag: StorageRef,
    /// The flag's value when every value keeps the rule.
    pub ok: i32,
    /// The error for a value that breaks it.
    pub error: Box<dyn Fn(i32) -> TpuError + Send>,
    /// The storages that fail with it: the operator's outputs and what is computed from them.
    pub outputs: Vec<Weak<Storage>>,
}

/// A check in a graph captured for compilation: its flag is a tensor of the graph, and each
/// call of the compiled graph makes a [`Check`] of the flag it wrote.
pub(crate) struct CapturedCheck {
    /// The operator.
    pub op: String,
    /// The flag's storage and layout in the captured graph (one int32).
    pub flag: StorageRef,
    pub layout: crate::layout::Layout,
    /// The flag's value when every value keeps the rule.
    pub ok: i32,
    /// The error for a value that breaks it.
    pub error: Arc<dyn Fn(i32) -> TpuError + Send + Sync>,
}

/// A storage's identity while a weak reference to it is held (its allocation cannot be reused).
fn key(s: &StorageRef) -> usize {
    Arc::as_ptr(s) as usize
}

/// The checks not yet settled, and the storages of operators that failed one.
#[derive(Default)]
pub struct Checks {
    pending: Vec<Check>,
    /// Storages pending checks guard, and which (a storage may be guarded by several: two
    /// checks of one operator, or inputs of two checked operators).
    guarded: HashMap<usize, Vec<usize>>,
    /// Failed storages and their error.
    failed: HashMap<usize, (Weak<Storage>, TpuError)>,
    /// The checks of the graph being captured.
    pub(crate) captured: Vec<CapturedCheck>,
}

impl Checks {
    /// Registers a check.
    pub fn add(&mut self, c: Check) {
        let k = self.pending.len();
        for o in &c.outputs {
            self.guarded.entry(o.as_ptr() as usize).or_default().push(k);
        }
        self.pending.push(c);
    }

    /// Whether operators' inputs must be looked at ([`Checks::taint`]): a check is pending or
    /// a storage has failed.
    #[inline]
    pub fn tracking(&self) -> bool {
        !self.guarded.is_empty() || !self.failed.is_empty()
    }

    /// An operator read `inputs` and wrote `outputs`: its outputs fail with any input's check.
    pub fn taint<'a>(
        &mut self,
        inputs: impl Iterator<Item = &'a StorageRef>,
        outputs: &[&StorageRef],
    ) {
        for i in inputs {
            if let Some(ks) = self.guarded.get(&key(i)).cloned() {
                for o in outputs {
                    let mine = self.guarded.entry(key(o)).or_default();
                    for k in ks.iter().copied() {
                        if !mine.contains(&k) {
                            mine.push(k);
                            self.pending[k].outputs.push(Arc::downgrade(o));
                        }
                    }
                }
            }
            if let Some((_, e)) = self.failed.get(&key(i)) {
                let e = e.clone();
                for o in outputs {
                    self.failed
                        .entry(key(o))
                        .or_insert_with(|| (Arc::downgrade(o), e.clone()));
                }
            }
        }
    }

    /// Whether any check waits to be settled.
    pub fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Settles every pending check, reading each flag with `read` (`None`: the flag was never
    /// written, as when an earlier kernel of the same launch faulted): the storages of a broken
    /// rule fail. Returns the broken rules' operators and errors, in the order they were called.
    pub fn settle(
        &mut self,
        mut read: impl FnMut(&StorageRef) -> Option<i32>,
    ) -> Vec<(String, TpuError)> {
        let mut broken = Vec::new();
        self.guarded.clear();
        for c in std::mem::take(&mut self.pending) {
            let Some(v) = read(&c.flag) else { continue };
            if v == c.ok {
                continue;
            }
            let e = (c.error)(v);
            for o in c.outputs {
                // The first broken rule (in the order the operators were called) is the error.
                self.failed
                    .entry(o.as_ptr() as usize)
                    .or_insert_with(|| (o, e.clone()));
            }
            broken.push((c.op, e));
        }
        self.failed.retain(|_, (s, _)| s.strong_count() > 0);
        broken
    }

    /// `s` was not computed (its launch faulted or was stopped): reading it raises `e`, unless
    /// it failed already (the first error stays).
    pub fn fail(&mut self, s: Weak<Storage>, e: TpuError) {
        if s.strong_count() > 0 {
            self.failed.entry(s.as_ptr() as usize).or_insert((s, e));
        }
    }

    /// `s` was written whole by an operator that did not read it (`zero_`, `fill_`, a copy
    /// into it, a host upload): it holds a computed value again.
    pub(crate) fn overwritten(&mut self, s: &StorageRef) {
        self.failed.remove(&key(s));
    }

    /// The error of the failed operator `s` holds the result of (or a value computed from it).
    pub fn failure_of(&self, s: &StorageRef) -> Option<TpuError> {
        self.failed.get(&key(s)).map(|(_, e)| e.clone())
    }

    /// How many failed storages are remembered (a failed storage is forgotten once dropped, at
    /// the next [`Checks::settle`]).
    pub fn failed_storages(&self) -> usize {
        self.failed.len()
    }
}
