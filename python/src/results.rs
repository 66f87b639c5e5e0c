//! Results for the shim: the backend's values in the compact form of [`Out`], in thread-local
//! buffers the shim reads right after the call.

use std::cell::RefCell;

use tpuemu_backend::ops::Value;
use tpuemu_backend::storage::StorageRef;
use tpuemu_backend::{Tensor, TpuError};

use crate::abi::{self, OK};
use crate::call::{Out, code_of_dtype, tag};

thread_local! {
    static OUTS: RefCell<Vec<Out>> = const { RefCell::new(Vec::new()) };
    static DIMS: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
}

fn push_tensor(
    t: &Tensor,
    inputs: &[StorageRef],
    made: &mut Vec<(StorageRef, usize)>,
    outs: &mut Vec<Out>,
    dims: &mut Vec<i64>,
    with_storage: bool,
) -> Result<(), TpuError> {
    let at = dims.len() as i64;
    dims.extend(t.shape().iter().map(|s| *s as i64));
    dims.extend(t.strides().iter().map(|s| *s as i64));
    let s = t.storage();
    let alias = inputs
        .iter()
        .position(|i| std::sync::Arc::ptr_eq(i, s))
        .map_or(-1, |i| i as i64);
    let same_as = made
        .iter()
        .find(|(m, _)| std::sync::Arc::ptr_eq(m, s))
        .map_or(-1, |(_, i)| *i as i64);
    let (handle, addr) = if alias < 0 && same_as < 0 && with_storage {
        made.push((s.clone(), outs.len()));
        abi::new_handle(s.clone())?
    } else {
        (std::ptr::null_mut(), 0)
    };
    outs.push(Out {
        tag: tag::TENSOR,
        dtype: code_of_dtype(t.dtype()),
        n: t.dim() as i64,
        f: 0.0,
        handle,
        addr,
        nbytes: s.bytes(),
        alias,
        same_as,
        dims: at,
        offset: t.storage_offset() as i64,
    });
    Ok(())
}

fn scalar_out(tag: i32, n: i64, f: f64) -> Out {
    Out {
        tag,
        dtype: 0,
        n,
        f,
        handle: std::ptr::null_mut(),
        addr: 0,
        nbytes: 0,
        alias: -1,
        same_as: -1,
        dims: 0,
        offset: 0,
    }
}

/// Publishes results to the shim (thread-local; valid until this thread's next call).
///
/// # Safety
/// The out pointers are valid.
pub unsafe fn publish(
    results: &[Value],
    inputs: &[StorageRef],
    with_storage: bool,
    outs_p: *mut *const Out,
    nouts_p: *mut usize,
    dims_p: *mut *const i64,
) -> i32 {
    OUTS.with(|o| {
        DIMS.with(|d| {
            let (mut outs, mut dims) = (o.borrow_mut(), d.borrow_mut());
            outs.clear();
            dims.clear();
            let mut made = Vec::new();
            if let Err(e) = push_all(
                results,
                inputs,
                &mut made,
                &mut outs,
                &mut dims,
                with_storage,
            ) {
                // The handles made so far reach no PyTorch storage: give them back.
                for o in outs.drain(..) {
                    if !o.handle.is_null() {
                        abi::release(o.handle);
                    }
                }
                return abi::status_of(&e);
            }
            // SAFETY: valid out pointers from the shim.
            unsafe {
                *outs_p = outs.as_ptr();
                *nouts_p = outs.len();
                *dims_p = dims.as_ptr();
            }
            OK
        })
    })
}

/// Appends every result to `outs` (tensors' sizes and strides to `dims`).
fn push_all(
    results: &[Value],
    inputs: &[StorageRef],
    made: &mut Vec<(StorageRef, usize)>,
    outs: &mut Vec<Out>,
    dims: &mut Vec<i64>,
    with_storage: bool,
) -> Result<(), TpuError> {
    for v in results {
        match v {
            Value::Tensor(t) => push_tensor(t, inputs, made, outs, dims, with_storage)?,
            Value::Tensors(ts) => {
                outs.push(scalar_out(tag::LIST, ts.len() as i64, 0.0));
                for t in ts {
                    push_tensor(t, inputs, made, outs, dims, with_storage)?;
                }
            }
            Value::OptTensors(ts) => {
                outs.push(scalar_out(tag::LIST, ts.len() as i64, 0.0));
                for t in ts {
                    match t {
                        Some(t) => push_tensor(t, inputs, made, outs, dims, with_storage)?,
                        None => outs.push(scalar_out(tag::NONE, 0, 0.0)),
                    }
                }
            }
            Value::None => outs.push(scalar_out(tag::NONE, 0, 0.0)),
            Value::Int(i) => outs.push(scalar_out(tag::INT, *i, 0.0)),
            Value::Float(f) => outs.push(scalar_out(tag::FLOAT, 0, *f)),
            Value::Bool(b) => outs.push(scalar_out(tag::BOOL, *b as i64, 0.0)),
            other => {
                return Err(TpuError::Device(format!(
                    "tpuemu: unexpected result kind {}",
                    other.kind()
                )));
            }
        }
    }
    Ok(())
}
