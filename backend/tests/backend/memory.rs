//! Device memory is real: a tensor's bytes are reserved in the chip's HBM by the call that makes
//! it, and a request that does not fit fails there, with what was asked and what is free.

use std::sync::Arc;

use tpuemu_backend::{DType, Mode, Runtime, Tensor, TpuError};
use tpuemu_emulator::{Emulator, builtin};

const GIB: u64 = 1 << 30;

fn runtime(preset: tpuemu_emulator::ChipPreset, mode: Mode) -> Runtime {
    let rt = Runtime::new(Arc::new(Emulator::new(preset).unwrap())).unwrap();
    rt.set_mode(mode).unwrap();
    rt
}

#[test]
fn the_tensor_that_does_not_fit_fails_at_its_own_call() {
    // TPU v5e has 16 GB (16 x 10^9 bytes) of HBM per chip (Google Cloud's v5e page): fourteen
    // 1 GiB tensors (15,032,385,536 bytes) fit, and the fifteenth must fail when it is made,
    // not at its first write, with 16e9 - 14 x 2^30 = 967,614,464 bytes free.
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let rt = runtime(builtin("v5e").unwrap(), mode);
        let gib = [(GIB / 4) as usize];
        let mut held: Vec<Tensor> = (0..14)
            .map(|_| Tensor::empty(&rt, &gib, DType::F32).unwrap())
            .collect();
        assert_eq!(rt.memory_reserved(), 14 * GIB);
        let e = Tensor::empty(&rt, &gib, DType::F32).unwrap_err();
        assert!(matches!(e, TpuError::OutOfMemory(_)), "{mode:?}: {e}");
        let text = e.to_string();
        assert!(text.contains("Tried to allocate 1.00 GiB"), "{text}");
        // 16e9 bytes = 14.90 GiB in PyTorch's allocator words.
        assert!(text.contains("total capacity of 14.90 GiB"), "{text}");
        assert!(text.contains("(967614464 bytes) is free"), "{text}");
        // What a dropped tensor held can be taken again.
        held.pop();
        assert_eq!(rt.memory_reserved(), 13 * GIB);
        held.push(Tensor::empty(&rt, &gib, DType::F32).unwrap());
        drop(held);
        assert_eq!(rt.memory_reserved(), 0);
    }
}

#[test]
fn a_shape_whose_size_overflows_is_refused_at_the_call() {
    let rt = runtime(builtin("v5e").unwrap(), Mode::Strict);
    let e = Tensor::empty(&rt, &[usize::MAX / 2, 4], DType::F32).unwrap_err();
    assert!(matches!(e, TpuError::OutOfMemory(_)), "{e}");
    assert_eq!(rt.memory_reserved(), 0);
}

#[test]
fn deferred_intermediates_are_freed_by_running_the_recording_when_memory_runs_short() {
    // A 1 MiB chip and 256 KiB tensors: a chain `y = y + 1` holds at most three at once in
    // Strict (x, y and the new y), but a DeferAndFuse recording keeps every intermediate until
    // it runs; when the next one does not fit, the recording runs and frees them.
    let mut p = builtin("v5e").unwrap();
    p.hbm_bytes = 1 << 20;
    let n = (1 << 18) / 4;
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let rt = runtime(p.clone(), mode);
        let x = Tensor::from_slice(&rt, &vec![1.0f32; n], &[n]).unwrap();
        let mut y = x.clone();
        for _ in 0..10 {
            y = y.add_scalar(1.0).unwrap();
        }
        let v = y.to_vec::<f32>().unwrap();
        assert!(v.iter().all(|&e| e == 11.0), "{mode:?}");
        let flushes = rt.metrics().flushes;
        assert_eq!(
            flushes.contains_key("memory"),
            mode == Mode::DeferAndFuse,
            "{mode:?}: {flushes:?}"
        );
    }
}
