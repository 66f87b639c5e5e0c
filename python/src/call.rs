//! Operator calls from the shim: PyTorch's boxed arguments in a compact C form ([`Arg`]), the
//! backend's results back ([`Out`]).
//!
//! The shim passes every argument of the schema, positionally (keyword-only ones too), as the
//! boxed stack holds them. A call can also name which arguments form the operator's argument
//! list (`fargs`, for an `out=` overload run as its functional overload) and which arguments
//! receive the results (`writes`: in-place and `out=` overloads, run as the functional
//! overload followed by `aten::copy_`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::storage::StorageRef;
use tpuemu_backend::{DType, Runtime, Tensor, TpuError};

use crate::abi::{self, ERROR, OK, RESIZE, UNSUPPORTED, guard, set_error, status_of};
use crate::device::runtime;
pub use crate::results::publish;

/// Argument tags.
pub mod tag {
    pub const NONE: i32 = 0;
    pub const TENSOR: i32 = 1;
    pub const INT: i32 = 2;
    pub const FLOAT: i32 = 3;
    pub const BOOL: i32 = 4;
    pub const INTS: i32 = 5;
    pub const FLOATS: i32 = 6;
    pub const BOOLS: i32 = 7;
    pub const STR: i32 = 8;
    pub const DTYPE: i32 = 9;
    pub const TENSORS: i32 = 10;
    pub const OPT_TENSORS: i32 = 11;
    /// A zero-dimensional CPU tensor (a wrapped number): `p` points to its one element.
    pub const HOST_SCALAR: i32 = 12;
    /// In results: a list of `n` entries follows.
    pub const LIST: i32 = 13;
    /// A Python number PyTorch wrapped as a 0-dim CPU tensor: `p` points to its element.
    pub const WRAPPED: i32 = 14;
    /// An explicit tpu generator: `n` is its stream's key (`abi::rng`).
    pub const GENERATOR: i32 = 15;
}

/// One argument.
#[repr(C)]
pub struct Arg {
    pub tag: i32,
    /// c10 `ScalarType` code (tensors, dtypes).
    pub dtype: i32,
    /// Int or bool value; list, string length; tensor rank.
    pub n: i64,
    pub f: f64,
    /// Tensor: storage handle (host element for HOST_SCALAR); lists: elements; str: bytes.
    pub p: *const c_void,
    pub sizes: *const i64,
    pub strides: *const i64,
    pub offset: i64,
}

/// One result.
#[repr(C)]
pub struct Out {
    pub tag: i32,
    pub dtype: i32,
    /// Int or bool value; list length; tensor rank.
    pub n: i64,
    pub f: f64,
    /// A new storage's handle (the receiver owns it), or null.
    pub handle: *mut c_void,
    pub addr: u64,
    pub nbytes: u64,
    /// The input tensor (in argument order, lists flattened) whose storage it views, or -1.
    pub alias: i64,
    /// An earlier result whose new storage it shares, or -1.
    pub same_as: i64,
    /// Sizes then strides, at this index of the dims array.
    pub dims: i64,
    pub offset: i64,
}

/// `call(op, args, nargs, fargs, nfargs, writes, nwrites, &outs, &nouts, &dims)`.
pub type CallFn = extern "C" fn(
    i64,
    *const Arg,
    usize,
    *const i64,
    usize,
    *const i64,
    usize,
    *mut *const Out,
    *mut usize,
    *mut *const i64,
) -> i32;

/// c10's `ScalarType` codes of the dtypes the backend computes with.
pub fn dtype_of_code(code: i32) -> Option<DType> {
    Some(match code {
        3 => DType::I32,
        4 => DType::I64,
        5 => DType::F16,
        6 => DType::F32,
        11 => DType::Bool,
        15 => DType::BF16,
        _ => return None,
    })
}

/// The c10 `ScalarType` code of a dtype.
pub fn code_of_dtype(d: DType) -> i32 {
    match d {
        DType::U8 => 0,
        DType::I8 => 1,
        DType::I32 => 3,
        DType::I64 => 4,
        DType::F16 => 5,
        DType::F32 => 6,
        DType::Bool => 11,
        DType::BF16 => 15,
    }
}

/// PyTorch's names of c10 codes, for messages.
fn code_name(code: i32) -> &'static str {
    const NAMES: [&str; 16] = [
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
        "complex32",
        "complex64",
        "complex128",
        "bool",
        "qint8",
        "quint8",
        "qint32",
        "bfloat16",
    ];
    NAMES.get(code as usize).copied().unwrap_or("this dtype")
}

/// Interned operator names (with the backend's definition, where it has one): by id, and ids
/// by name.
type Names = (
    Vec<(&'static str, Option<&'static ops::OpDef>)>,
    HashMap<&'static str, i64>,
);

/// Interned operator names; an id is an index.
fn names() -> &'static Mutex<Names> {
    static N: OnceLock<Mutex<Names>> = OnceLock::new();
    N.get_or_init(Default::default)
}

/// The id of an operator name (`aten::add.Tensor`); the backend decides at the first call
/// whether it has it.
pub extern "C" fn resolve(name: *const u8, len: usize) -> i64 {
    // SAFETY: the shim passes a valid string.
    let bytes = unsafe { std::slice::from_raw_parts(name, len) };
    let Ok(s) = std::str::from_utf8(bytes) else {
        return -1;
    };
    let mut n = names().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(id) = n.1.get(s) {
        return *id;
    }
    let s: &'static str = Box::leak(s.to_string().into_boxed_str());
    let id = n.0.len() as i64;
    n.0.push((s, ops::registry().get(s)));
    n.1.insert(s, id);
    id
}

/// The name of operator `id`, and the backend's definition of it.
fn name_of(id: i64) -> Option<(&'static str, Option<&'static ops::OpDef>)> {
    let n = names().lock().unwrap_or_else(|e| e.into_inner());
    n.0.get(usize::try_from(id).ok()?).copied()
}

/// Time spent inside the backend's operator calls (ns) and their count: the bridge's own
/// overhead is the rest (`tpuemu.timing()`).
pub static BACKEND_NS: AtomicU64 = AtomicU64::new(0);
/// Operator calls the bridge made.
pub static BACKEND_CALLS: AtomicU64 = AtomicU64::new(0);

/// Arguments converted for the backend, with the input storages in order (for aliasing).
pub struct Converted {
    pub values: Vec<Value>,
    pub inputs: Vec<StorageRef>,
    /// Arguments that are wrapped Python numbers (passed as scalars).
    pub wrapped: Vec<usize>,
}

/// Why a call cannot run on the backend (the shim falls back to the CPU).
pub struct Unsupported(pub String);

/// # Safety
/// `a` is a valid tensor argument from the shim.
unsafe fn tensor_of(rt: &Runtime, a: &Arg, inputs: &mut Vec<StorageRef>) -> Result<Value, Conv> {
    // An empty byte tensor has no values to compute: the workspace PyTorch's batch norm
    // returns and hands back to its backward (`reserve`, uint8 of size 0) passes.
    let empty_bytes = a.dtype == code_of_dtype(DType::U8)
        && a.tag != tag::HOST_SCALAR
        && a.n > 0
        // SAFETY: the shim passes rank-long arrays.
        && unsafe { std::slice::from_raw_parts(a.sizes, a.n as usize) }.contains(&0);
    let dtype = match dtype_of_code(a.dtype) {
        Some(d) => d,
        None if empty_bytes => DType::U8,
        None => {
            return Err(Conv::Unsupported(format!(
                "dtype {} is not computed on the tpu",
                code_name(a.dtype)
            )));
        }
    };
    if a.tag == tag::HOST_SCALAR {
        let mut bytes = vec![0u8; dtype.size()];
        // SAFETY: p points to one element of the dtype.
        unsafe { std::ptr::copy_nonoverlapping(a.p as *const u8, bytes.as_mut_ptr(), bytes.len()) };
        let t = Tensor::from_bytes(rt, &bytes, &[], dtype).map_err(Conv::Error)?;
        return Ok(Value::Tensor(t));
    }
    let nd = a.n as usize;
    let (sizes, strides) = if nd == 0 {
        (&[][..], &[][..])
    } else {
        // SAFETY: the shim passes rank-long arrays.
        unsafe {
            (
                std::slice::from_raw_parts(a.sizes, nd),
                std::slice::from_raw_parts(a.strides, nd),
            )
        }
    };
    let shape: Vec<usize> = sizes.iter().map(|s| *s as usize).collect();
    let strides: Vec<isize> = strides.iter().map(|s| *s as isize).collect();
    // SAFETY: a live handle or null.
    let storage = match unsafe { abi::storage_of(a.p) } {
        Some(s) => s,
        None => rt.alloc_storage(0).map_err(Conv::Error)?,
    };
    if dtype == DType::I64 && crate::wide::is_wide(&storage) {
        return Err(Conv::Unsupported(
            "int64 values beyond 32 bits (the device computes int64 in 32-bit lanes)".into(),
        ));
    }
    inputs.push(storage.clone());
    let t = Tensor::from_storage(rt, storage, &shape, &strides, a.offset as usize, dtype)
        .map_err(Conv::Error)?;
    Ok(Value::Tensor(t))
}

/// A wrapped Python number as a scalar.
///
/// # Safety
/// `a.p` points to one element of dtype `a.dtype`.
unsafe fn wrapped_number(a: &Arg) -> Result<Value, Conv> {
    // SAFETY: per the contract.
    Ok(unsafe {
        match a.dtype {
            7 => Value::Float(std::ptr::read_unaligned(a.p as *const f64)),
            6 => Value::Float(std::ptr::read_unaligned(a.p as *const f32) as f64),
            4 => Value::Int(std::ptr::read_unaligned(a.p as *const i64)),
            11 => Value::Bool(std::ptr::read_unaligned(a.p as *const u8) != 0),
            c => {
                return Err(Conv::Unsupported(format!(
                    "a {} number is not computed on the tpu",
                    code_name(c)
                )));
            }
        }
    })
}

enum Conv {
    Unsupported(String),
    Error(TpuError),
}

/// # Safety
/// `a` is a valid argument from the shim.
unsafe fn value_of(rt: &Runtime, a: &Arg, inputs: &mut Vec<StorageRef>) -> Result<Value, Conv> {
    let n = a.n.max(0) as usize;
    // SAFETY (all slices): the shim passes n-long arrays of the tag's element type.
    let slice = |p: *const c_void| -> &[u8] {
        if n == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(p as *const u8, n) }
        }
    };
    Ok(match a.tag {
        tag::NONE => Value::None,
        tag::TENSOR | tag::HOST_SCALAR => unsafe { tensor_of(rt, a, inputs)? },
        tag::WRAPPED => unsafe { wrapped_number(a)? },
        tag::GENERATOR => Value::Generator(a.n as u64),
        tag::INT => Value::Int(a.n),
        tag::FLOAT => Value::Float(a.f),
        tag::BOOL => Value::Bool(a.n != 0),
        tag::INTS => Value::Ints(if n == 0 {
            vec![]
        } else {
            unsafe { std::slice::from_raw_parts(a.p as *const i64, n) }.to_vec()
        }),
        tag::FLOATS => Value::Floats(if n == 0 {
            vec![]
        } else {
            unsafe { std::slice::from_raw_parts(a.p as *const f64, n) }.to_vec()
        }),
        tag::BOOLS => Value::Bools(slice(a.p).iter().map(|b| *b != 0).collect()),
        tag::STR => Value::Str(String::from_utf8_lossy(slice(a.p)).into_owned()),
        tag::DTYPE => Value::Dtype(dtype_of_code(a.n as i32).ok_or_else(|| {
            Conv::Unsupported(format!(
                "dtype {} is not computed on the tpu",
                code_name(a.n as i32)
            ))
        })?),
        tag::TENSORS | tag::OPT_TENSORS => {
            let items = if n == 0 {
                &[][..]
            } else {
                unsafe { std::slice::from_raw_parts(a.p as *const Arg, n) }
            };
            let mut ts = Vec::with_capacity(n);
            for it in items {
                ts.push(match it.tag {
                    tag::NONE => None,
                    _ => match unsafe { tensor_of(rt, it, inputs)? } {
                        Value::Tensor(t) => Some(t),
                        _ => None,
                    },
                });
            }
            if a.tag == tag::TENSORS && ts.iter().all(Option::is_some) {
                Value::Tensors(ts.into_iter().flatten().collect())
            } else {
                Value::OptTensors(ts)
            }
        }
        other => return Err(Conv::Unsupported(format!("argument kind {other}"))),
    })
}

/// Converts the shim's arguments (all of them, in order).
///
/// # Safety
/// `args` holds `nargs` valid arguments.
pub unsafe fn convert(
    rt: &Runtime,
    args: *const Arg,
    nargs: usize,
) -> Result<Converted, Result<Unsupported, TpuError>> {
    let args = if nargs == 0 {
        &[][..]
    } else {
        unsafe { std::slice::from_raw_parts(args, nargs) }
    };
    let mut inputs = Vec::new();
    let mut values = Vec::with_capacity(nargs);
    let mut wrapped = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if a.tag == tag::WRAPPED {
            wrapped.push(i);
        }
        match unsafe { value_of(rt, a, &mut inputs) } {
            Ok(v) => values.push(v),
            Err(Conv::Unsupported(m)) => return Err(Ok(Unsupported(m))),
            Err(Conv::Error(e)) => return Err(Err(e)),
        }
    }
    Ok(Converted {
        values,
        inputs,
        wrapped,
    })
}

/// The `.Scalar` sibling of a `.Tensor` overload (`aten::mul.Tensor` -> `aten::mul.Scalar`,
/// `aten::pow.Tensor_Tensor` -> `aten::pow.Tensor_Scalar`) if the backend has it.
fn scalar_sibling(name: &'static str) -> Option<&'static str> {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, Option<&'static str>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    *c.entry(name).or_insert_with(|| {
        let (base, ov) = name.split_once('.')?;
        let ov2 = if let Some(rest) = ov.strip_suffix("Tensor") {
            format!("{rest}Scalar")
        } else {
            ov.replacen("Tensor", "Scalar", 1)
        };
        let cand = format!("{base}.{ov2}");
        (cand != name && ops::registry().contains_key(cand.as_str()))
            .then(|| &*Box::leak(cand.into_boxed_str()))
    })
}

/// Wrapped Python numbers at `positions` of `values`: the operator's `.Scalar` overload takes
/// a single one as the second operand; otherwise each becomes a 0-dim tensor (float32, int64
/// or bool: the dtypes that promote as PyTorch promotes wrapped numbers).
fn bind_wrapped(
    rt: &Runtime,
    name: &'static str,
    values: &mut [Value],
    positions: &[usize],
) -> Result<&'static str, TpuError> {
    if positions == [1]
        && let Some(s) = scalar_sibling(name)
    {
        return Ok(s);
    }
    for p in positions {
        let t = match values[*p] {
            Value::Float(f) => Tensor::from_bytes(rt, &(f as f32).to_le_bytes(), &[], DType::F32)?,
            Value::Int(i) => Tensor::from_bytes(rt, &i.to_le_bytes(), &[], DType::I64)?,
            Value::Bool(b) => Tensor::from_bytes(rt, &[b as u8], &[], DType::Bool)?,
            _ => continue,
        };
        values[*p] = Value::Tensor(t);
    }
    Ok(name)
}

/// Calls a backend operator (by its definition when the caller has it), timing it.
pub fn timed_call(
    rt: &Runtime,
    name: &str,
    def: Option<&ops::OpDef>,
    args: Vec<Value>,
) -> Result<Vec<Value>, TpuError> {
    let t0 = Instant::now();
    let r = match def {
        Some(def) => ops::call_def(rt, def, args),
        None => ops::call(rt, name, args),
    };
    BACKEND_NS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    BACKEND_CALLS.fetch_add(1, Ordering::Relaxed);
    r
}

/// Writes `results` into the write targets; [`RESIZE`] when a target's shape differs.
fn write_results(
    rt: &Runtime,
    name: &str,
    results: &[Value],
    targets: &[Value],
) -> Result<i32, TpuError> {
    // A `Tensor[]` result (split_with_sizes_copy) fills a `Tensor[] out` list, element by
    // element.
    let res: Vec<&Tensor> = results
        .iter()
        .flat_map(|v| match v {
            Value::Tensor(t) => std::slice::from_ref(t).iter(),
            Value::Tensors(ts) => ts.iter(),
            _ => [].iter(),
        })
        .collect();
    let flat: Vec<Value>;
    let targets = if targets.iter().any(|t| matches!(t, Value::Tensors(_))) {
        flat = targets
            .iter()
            .flat_map(|t| match t {
                Value::Tensors(ts) => ts.iter().cloned().map(Value::Tensor).collect::<Vec<_>>(),
                other => vec![other.clone()],
            })
            .collect();
        &flat[..]
    } else {
        targets
    };
    if res.len() != targets.len() {
        return Err(TpuError::BadArgs(format!(
            "{name}: {} results for {} outputs",
            res.len(),
            targets.len()
        )));
    }
    for (r, t) in res.iter().zip(targets) {
        let Value::Tensor(t) = t else {
            return Err(TpuError::BadArgs(format!(
                "{name}: an output is not a tensor"
            )));
        };
        if t.shape() != r.shape() {
            return Ok(RESIZE);
        }
        if !r.dtype().can_cast(t.dtype()) {
            return Err(TpuError::DtypeMismatch(format!(
                "{name}: result type {} can't be cast to the desired output type {}",
                pretty(r.dtype()),
                pretty(t.dtype())
            )));
        }
    }
    for (r, t) in res.into_iter().zip(targets) {
        timed_call(
            rt,
            "aten::copy_",
            None,
            vec![t.clone(), Value::Tensor(r.clone()), Value::Bool(false)],
        )?;
    }
    Ok(OK)
}

/// PyTorch's capitalised dtype names in cast errors (`Float`, `Long`).
fn pretty(d: DType) -> &'static str {
    match d {
        DType::F32 => "Float",
        DType::F16 => "Half",
        DType::BF16 => "BFloat16",
        DType::I32 => "Int",
        DType::I64 => "Long",
        DType::Bool => "Bool",
        DType::U8 => "Byte",
        DType::I8 => "Char",
    }
}

/// # Safety
/// `p` is null or points to `n` values.
unsafe fn ints<'a>(p: *const i64, n: usize) -> &'a [i64] {
    if p.is_null() || n == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

/// Runs operator `op` (see [`CallFn`] and the module docs).
#[allow(clippy::too_many_arguments)]
pub extern "C" fn call(
    op: i64,
    args: *const Arg,
    nargs: usize,
    fargs: *const i64,
    nfargs: usize,
    writes: *const i64,
    nwrites: usize,
    outs: *mut *const Out,
    nouts: *mut usize,
    dims: *mut *const i64,
) -> i32 {
    guard("call", || {
        let Some((name, def)) = name_of(op) else {
            set_error(&format!("tpuemu: unknown operator id {op}"));
            return ERROR;
        };
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return status_of(&e),
        };
        // SAFETY: the shim passes nargs arguments and the index arrays it says.
        let conv = match unsafe { convert(&rt, args, nargs) } {
            Ok(c) => c,
            Err(Ok(Unsupported(m))) => {
                set_error(&m);
                return UNSUPPORTED;
            }
            Err(Err(e)) => return status_of(&e),
        };
        let (fargs, writes) = unsafe { (ints(fargs, nfargs), ints(writes, nwrites)) };
        let targets: Vec<Value> = writes
            .iter()
            .map(|i| conv.values.get(*i as usize).cloned().unwrap_or(Value::None))
            .collect();
        let Converted {
            values: all,
            inputs,
            wrapped,
        } = conv;
        let (mut values, positions): (Vec<Value>, Vec<usize>) = if fargs.is_empty() {
            (all, wrapped)
        } else {
            let out_dtype = match targets.first() {
                Some(Value::Tensor(t)) => Value::Dtype(t.dtype()),
                _ => Value::None,
            };
            let v = fargs
                .iter()
                .map(|i| match *i {
                    -2 => out_dtype.clone(),
                    i if i < 0 => Value::None,
                    i => all.get(i as usize).cloned().unwrap_or(Value::None),
                })
                .collect();
            let p = (0..fargs.len())
                .filter(|j| fargs[*j] >= 0 && wrapped.contains(&(fargs[*j] as usize)))
                .collect();
            (v, p)
        };
        let (name, def) = if positions.is_empty() {
            (name, def)
        } else {
            match bind_wrapped(&rt, name, &mut values, &positions) {
                // A `.Scalar` sibling is looked up by its name.
                Ok(n) if n != name => (n, None),
                Ok(n) => (n, def),
                Err(e) => return status_of(&e),
            }
        };
        if name == "aten::copy_"
            && let (Some(Value::Tensor(dst)), Some(Value::Tensor(src))) =
                (values.first(), values.get(1))
        {
            crate::wide::propagate(src.storage(), dst.storage());
        }
        let results = match timed_call(&rt, name, def, values) {
            Ok(r) => r,
            Err(e) => return status_of(&e),
        };
        if writes.is_empty() {
            // SAFETY: valid out pointers.
            return unsafe { publish(&results, &inputs, true, outs, nouts, dims) };
        }
        match write_results(&rt, name, &results, &targets) {
            // The shapes the outputs must take.
            Ok(RESIZE) => {
                let rc = unsafe { publish(&results, &[], false, outs, nouts, dims) };
                if rc == OK { RESIZE } else { rc }
            }
            Ok(_) => unsafe { publish(&[], &[], false, outs, nouts, dims) },
            Err(e) => status_of(&e),
        }
    })
}
