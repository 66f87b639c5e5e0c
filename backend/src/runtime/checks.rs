//! Device-side checks: what PyTorch's CPU kernels refuse by looking at values (an index out of
//! range, a class target out of range, an integer division by zero), checked where the values
//! are — on the device — as CUDA's device-side assertions are, and raised where the wrong
//! value would have been read.
//!
//! An operator that must check a value computes, with its other kernels, one int32 *flag*: a
//! value that breaks the rule (the largest, when several do), or [`Check::ok`] when none does.
//! It registers the flag with [`super::Runtime::add_check`], naming its outputs, and returns at
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
pub(crate) struct Check {
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
pub(crate) struct Checks {
    pending: Vec<Check>,
    /// Storages pending checks guard, and which (a storage may be guarded by several: two
    /// checks of one operator, or inputs of two checked operators).
    guarded: HashMap<usize, Vec<usize>>,
    /// Failed storages and their error.
    failed: HashMap<usize, (Weak<Storage>, TpuError)>,
    /// The checks of the graph being captured.
    pub captured: Vec<CapturedCheck>,
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
    pub fn overwritten(&mut self, s: &StorageRef) {
        self.failed.remove(&key(s));
    }

    /// The error of the failed operator `s` holds the result of (or a value computed from it).
    pub fn failure_of(&self, s: &StorageRef) -> Option<TpuError> {
        self.failed.get(&key(s)).map(|(_, e)| e.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Storage;

    fn storage() -> StorageRef {
        Arc::new(Storage::placeholder(0))
    }

    fn check(flag: &StorageRef, out: &StorageRef) -> Check {
        Check {
            op: "aten::gather".into(),
            flag: flag.clone(),
            ok: i32::MIN,
            error: Box::new(|v| TpuError::IndexOutOfRange(format!("index {v}"))),
            outputs: vec![Arc::downgrade(out)],
        }
    }

    #[test]
    fn a_storage_not_computed_fails_with_its_first_error_and_taints_what_reads_it() {
        let (out, later, gone) = (storage(), storage(), storage());
        let mut c = Checks::default();
        let (first, second) = (
            TpuError::Device("stopped".into()),
            TpuError::Device("again".into()),
        );
        c.fail(Arc::downgrade(&out), first.clone());
        c.fail(Arc::downgrade(&out), second);
        let w = Arc::downgrade(&gone);
        drop(gone);
        c.fail(w, first.clone());
        assert_eq!(c.failure_of(&out), Some(first.clone()));
        assert!(c.tracking());
        c.taint([&out].into_iter(), &[&later]);
        assert_eq!(c.failure_of(&later), Some(first));
        assert_eq!(c.failed.len(), 2, "a dropped storage is not kept");
    }

    #[test]
    fn a_broken_rule_fails_its_outputs_and_what_is_computed_from_them_only() {
        let (f1, f2, o1, o2) = (storage(), storage(), storage(), storage());
        let (derived, other) = (storage(), storage());
        let mut c = Checks::default();
        c.add(check(&f1, &o1));
        c.add(check(&f2, &o2));
        assert!(c.tracking());
        // An operator reads o2 (guarded) and writes `derived`; another reads neither.
        c.taint([&o2].into_iter(), &[&derived]);
        c.taint([&f1].into_iter(), &[&other]);
        let values = |s: &StorageRef| Some(if Arc::ptr_eq(s, &f2) { 7 } else { i32::MIN });
        let broken = c.settle(values);
        let e = TpuError::IndexOutOfRange("index 7".into());
        assert_eq!(broken, vec![("aten::gather".to_string(), e.clone())]);
        assert!(!c.any_pending());
        assert_eq!(c.failure_of(&o2), Some(e.clone()));
        assert_eq!(c.failure_of(&derived), Some(e.clone()));
        assert_eq!(c.failure_of(&o1), None);
        assert_eq!(c.failure_of(&other), None);
        // After it settled, what is computed from a failed storage fails too.
        let later = storage();
        c.taint([&derived].into_iter(), &[&later]);
        assert_eq!(c.failure_of(&later), Some(e));
        // Settled once: nothing more to raise; a failed storage is forgotten once dropped.
        assert!(c.settle(|_| Some(5)).is_empty());
        drop((o2, derived, later));
        c.settle(|_| None);
        assert!(c.failed.is_empty() && !c.tracking());
    }

    #[test]
    fn a_storage_guarded_by_two_checks_fails_with_either_and_the_first_wins() {
        let (f1, f2, out, a, b, derived) = (
            storage(),
            storage(),
            storage(),
            storage(),
            storage(),
            storage(),
        );
        let mut c = Checks::default();
        // Two checks of one operator on its output; only the second breaks.
        c.add(check(&f1, &out));
        c.add(check(&f2, &out));
        let broken = c.settle(|s| Some(if Arc::ptr_eq(s, &f2) { 3 } else { i32::MIN }));
        assert_eq!(broken.len(), 1);
        assert_eq!(
            c.failure_of(&out),
            Some(TpuError::IndexOutOfRange("index 3".into()))
        );
        // An operator reading outputs of two checked operators fails with either's rule.
        let mut c = Checks::default();
        c.add(check(&f1, &a));
        c.add(check(&f2, &b));
        c.taint([&a, &b].into_iter(), &[&derived]);
        c.settle(|s| Some(if Arc::ptr_eq(s, &f2) { 9 } else { i32::MIN }));
        assert_eq!(
            c.failure_of(&derived),
            Some(TpuError::IndexOutOfRange("index 9".into()))
        );
        // Both broken: the first registered is the error.
        let mut c = Checks::default();
        c.add(check(&f1, &a));
        c.add(check(&f2, &a));
        c.settle(|s| Some(if Arc::ptr_eq(s, &f1) { 1 } else { 2 }));
        assert_eq!(
            c.failure_of(&a),
            Some(TpuError::IndexOutOfRange("index 1".into()))
        );
    }

    #[test]
    fn a_flag_never_written_raises_nothing() {
        let (f, o) = (storage(), storage());
        let mut c = Checks::default();
        c.add(check(&f, &o));
        assert!(c.settle(|_| None).is_empty());
        assert_eq!(c.failure_of(&o), None);
    }
}
