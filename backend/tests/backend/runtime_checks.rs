//! Device-side checks' bookkeeping (`runtime::checks`): which storages fail, with which error,
//! when a rule breaks or a launch is not computed, and what is computed from them.

use std::sync::Arc;

use tpuemu_backend::error::TpuError;
use tpuemu_backend::runtime::checks::{Check, Checks};
use tpuemu_backend::storage::{Storage, StorageRef};

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
    assert_eq!(c.failed_storages(), 2, "a dropped storage is not kept");
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
    assert!(c.failed_storages() == 0 && !c.tracking());
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
