//! What a foreign framework's bridge uses (`foreign`): raw byte views of storages written and
//! read back, tensors made over them, operators run on them, deferred readers ordered before a
//! write.

use std::sync::Arc;

use tpuemu_backend::foreign::RawView;
use tpuemu_backend::{DType, Runtime, Tensor};
use tpuemu_emulator::{Emulator, builtin};

fn rt() -> Runtime {
    Runtime::new(Arc::new(Emulator::new(builtin("v5e").unwrap()).unwrap())).unwrap()
}

fn view(shape: &[usize], strides: &[usize], offset: usize, elem_size: usize) -> RawView {
    RawView {
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        offset,
        elem_size,
    }
}

#[test]
fn int64_bytes_round_trip_exactly() {
    let rt = rt();
    let vals = [i64::MAX, i64::MIN, 1 << 40, -3];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let s = rt.alloc_storage(32).unwrap();
    rt.write_view(&s, &view(&[4], &[1], 0, 8), &data).unwrap();
    assert_eq!(rt.read_view(&s, &view(&[4], &[1], 0, 8)).unwrap(), data);
}

#[test]
fn strided_writes_touch_only_their_elements() {
    let rt = rt();
    let s = rt.alloc_storage(6 * 4).unwrap();
    let zeros = vec![0u8; 24];
    rt.write_view(&s, &view(&[6], &[1], 0, 4), &zeros).unwrap();
    // Column 1 of a [2, 3] row-major matrix: elements 1 and 4.
    let col: Vec<u8> = [7.0f32, 9.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    rt.write_view(&s, &view(&[2], &[3], 1, 4), &col).unwrap();
    let all = rt.read_view(&s, &view(&[6], &[1], 0, 4)).unwrap();
    let f: Vec<f32> = all
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(f, vec![0.0, 7.0, 0.0, 0.0, 9.0, 0.0]);
    // The transpose read back gathers the right elements.
    let t = rt.read_view(&s, &view(&[3, 2], &[1, 3], 0, 4)).unwrap();
    let f: Vec<f32> = t
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(f, vec![0.0, 0.0, 7.0, 9.0, 0.0, 0.0]);
}

#[test]
fn views_past_the_storage_are_errors() {
    let rt = rt();
    let s = rt.alloc_storage(16).unwrap();
    assert!(rt.read_view(&s, &view(&[5], &[1], 0, 4)).is_err());
    assert!(Tensor::from_storage(&rt, s.clone(), &[2, 2], &[2, 1], 1, DType::F32).is_err());
    let t = Tensor::from_storage(&rt, s, &[2, 2], &[1, 2], 0, DType::F32).unwrap();
    assert_eq!(t.strides(), &[1, 2]);
}

#[test]
fn operators_run_on_foreign_storages() {
    let rt = rt();
    let s = rt.alloc_storage(16).unwrap();
    let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    rt.write_view(&s, &view(&[4], &[1], 0, 4), &data).unwrap();
    let t = Tensor::from_storage(&rt, s, &[2, 2], &[1, 2], 0, DType::F32).unwrap();
    // t is the transpose of [[1, 2], [3, 4]].
    let y = tpuemu_backend::ops::call(
        &rt,
        "aten::add.Tensor",
        vec![
            tpuemu_backend::ops::Value::Tensor(t.clone()),
            tpuemu_backend::ops::Value::Tensor(t),
            tpuemu_backend::ops::Value::Int(1),
        ],
    )
    .unwrap();
    let tpuemu_backend::ops::Value::Tensor(y) = &y[0] else {
        panic!("a tensor")
    };
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0, 6.0, 4.0, 8.0]);
}

#[test]
fn deferred_readers_run_before_a_write() {
    let rt = rt();
    rt.set_mode(tpuemu_backend::Mode::DeferAndFuse).unwrap();
    let s = rt.alloc_storage(8).unwrap();
    let one: Vec<u8> = [1.0f32, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    rt.write_view(&s, &view(&[2], &[1], 0, 4), &one).unwrap();
    let t = Tensor::from_storage(&rt, s.clone(), &[2], &[1], 0, DType::F32).unwrap();
    let y = t.mul_scalar(3.0).unwrap(); // recorded, reads s
    let two: Vec<u8> = [2.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    rt.write_view(&s, &view(&[2], &[1], 0, 4), &two).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0, 3.0]);
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
}
