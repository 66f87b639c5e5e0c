//! Test executors: `HostExec` implements a few overloads on the host (f64 arithmetic, rounded to
//! the output dtype, with broadcasting); `WrongExec` returns its outputs plus one.

use tpuemu_golden::{DType, Executor, HostTensor, OpCall, Value};

/// Implements `aten::add.Tensor`, `aten::mul.Tensor`, `aten::neg`, `aten::relu`, `aten::exp`,
/// `aten::mm` for same-dtype inputs.
pub struct HostExec;

pub const HOST_OPS: [&str; 6] = [
    "aten::add.Tensor",
    "aten::mul.Tensor",
    "aten::neg",
    "aten::relu",
    "aten::exp",
    "aten::mm",
];

fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        };
    }
    Ok(out)
}

/// Element `index` (row-major in `shape`) of `values` laid out in `src` (broadcast into `shape`).
fn gather(values: &[f64], src: &[usize], shape: &[usize]) -> Vec<f64> {
    let numel: usize = shape.iter().product();
    let strides = tpuemu_golden::tensor::contiguous_strides(src);
    (0..numel)
        .map(|flat| {
            let mut rem = flat;
            let mut pos = 0;
            for d in (0..shape.len()).rev() {
                let i = rem % shape[d];
                rem /= shape[d];
                let sd = d as isize - (shape.len() - src.len()) as isize;
                if sd >= 0 && src[sd as usize] != 1 {
                    pos += i * strides[sd as usize];
                }
            }
            values[pos]
        })
        .collect()
}

fn operand(v: &Value) -> Option<(Vec<f64>, Vec<usize>, Option<DType>)> {
    match v {
        Value::Tensor(t) => Some((t.to_f64_vec(), t.shape().to_vec(), Some(t.dtype()))),
        Value::Int(i) => Some((vec![*i as f64], vec![], None)),
        Value::Float(x) => Some((vec![*x], vec![], None)),
        _ => None,
    }
}

fn out_tensor(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Result<Vec<Value>, String> {
    let t = if dtype.is_float() {
        HostTensor::from_f64s(dtype, shape, values)
    } else {
        HostTensor::from_i64s(
            dtype,
            shape,
            &values.iter().map(|v| *v as i64).collect::<Vec<_>>(),
        )
    };
    t.map(|t| vec![Value::Tensor(t)]).map_err(|e| e.to_string())
}

impl Executor for HostExec {
    fn supports(&self, call: &OpCall<'_>) -> Result<(), String> {
        if !HOST_OPS.contains(&call.op) {
            return Err(format!("{} not registered", call.op));
        }
        let dtypes: Vec<DType> = call.input_tensors().iter().map(|t| t.dtype()).collect();
        if dtypes.iter().any(|d| *d != dtypes[0]) {
            return Err("mixed dtypes".into());
        }
        if dtypes.first().is_some_and(|d| *d == DType::Bool)
            || call.args.iter().any(|a| matches!(a, Value::Bool(_)))
        {
            return Err("bool not supported".into());
        }
        if dtypes.first().is_some_and(|d| !d.is_float())
            && call.args.iter().any(|a| matches!(a, Value::Float(_)))
        {
            return Err("float scalar with integer tensor (type promotion) not supported".into());
        }
        Ok(())
    }

    fn call(&mut self, call: &OpCall<'_>) -> Result<Vec<Value>, String> {
        let x = call.tensor("self")?;
        let xs = x.to_f64_vec();
        match call.op {
            "aten::neg" => out_tensor(
                x.dtype(),
                x.shape().to_vec(),
                &xs.iter().map(|v| -v).collect::<Vec<_>>(),
            ),
            "aten::relu" => out_tensor(
                x.dtype(),
                x.shape().to_vec(),
                &xs.iter().map(|v| v.max(0.0)).collect::<Vec<_>>(),
            ),
            "aten::exp" => {
                // Integer inputs promote to the default float dtype (the golden cases caught this).
                let dtype = if x.dtype().is_float() {
                    x.dtype()
                } else {
                    DType::F32
                };
                out_tensor(
                    dtype,
                    x.shape().to_vec(),
                    &xs.iter().map(|v| v.exp()).collect::<Vec<_>>(),
                )
            }
            "aten::add.Tensor" | "aten::mul.Tensor" => {
                let (ys, yshape, _) = operand(call.arg("other").ok_or("no other")?)
                    .ok_or("other: unsupported value")?;
                let alpha = match call.arg("alpha") {
                    Some(Value::Int(i)) => *i as f64,
                    Some(Value::Float(f)) => *f,
                    _ => 1.0,
                };
                let shape = broadcast_shape(x.shape(), &yshape)?;
                let a = gather(&xs, x.shape(), &shape);
                let b = gather(&ys, &yshape, &shape);
                let out: Vec<f64> = if call.op == "aten::add.Tensor" {
                    a.iter().zip(&b).map(|(p, q)| p + alpha * q).collect()
                } else {
                    a.iter().zip(&b).map(|(p, q)| p * q).collect()
                };
                out_tensor(x.dtype(), shape, &out)
            }
            "aten::mm" => {
                let y = call.tensor("mat2")?;
                let (m, k, n) = (x.shape()[0], x.shape()[1], y.shape()[1]);
                let ys = y.to_f64_vec();
                let mut out = vec![0.0; m * n];
                for i in 0..m {
                    for j in 0..n {
                        out[i * n + j] = (0..k).map(|p| xs[i * k + p] * ys[p * n + j]).sum();
                    }
                }
                out_tensor(x.dtype(), vec![m, n], &out)
            }
            other => Err(format!("{other} not implemented")),
        }
    }

    fn registered_overloads(&self) -> Vec<String> {
        HOST_OPS.iter().map(|s| s.to_string()).collect()
    }
}

/// The host executor with every float output off by one.
pub struct WrongExec;

impl Executor for WrongExec {
    fn supports(&self, call: &OpCall<'_>) -> Result<(), String> {
        HostExec.supports(call)
    }

    fn call(&mut self, call: &OpCall<'_>) -> Result<Vec<Value>, String> {
        let outs = HostExec.call(call)?;
        outs.into_iter()
            .map(|v| match v {
                Value::Tensor(t) if t.dtype().is_float() => {
                    let vals: Vec<f64> = t.to_f64_vec().iter().map(|v| v + 1.0).collect();
                    HostTensor::from_f64s(t.dtype(), t.shape().to_vec(), &vals)
                        .map(Value::Tensor)
                        .map_err(|e| e.to_string())
                }
                other => Ok(other),
            })
            .collect()
    }
}

/// The host executor with TPU matrix-unit numerics for `aten::mm`: inputs rounded to bf16 (one
/// MXU pass at DEFAULT precision), products and sums in f32.
pub struct MxuExec;

impl Executor for MxuExec {
    fn supports(&self, call: &OpCall<'_>) -> Result<(), String> {
        HostExec.supports(call)
    }

    fn call(&mut self, call: &OpCall<'_>) -> Result<Vec<Value>, String> {
        if call.op != "aten::mm" || call.tensor("self")?.dtype() != DType::F32 {
            return HostExec.call(call);
        }
        let round = |t: &HostTensor| -> Vec<f32> {
            t.to_f64_vec()
                .iter()
                .map(|v| half::bf16::from_f64(*v).to_f32())
                .collect()
        };
        let (x, y) = (call.tensor("self")?, call.tensor("mat2")?);
        let (m, k, n) = (x.shape()[0], x.shape()[1], y.shape()[1]);
        let (xs, ys) = (round(x), round(y));
        let mut out = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| xs[i * k + p] * ys[p * n + j]).sum();
            }
        }
        HostTensor::from_f32s(vec![m, n], &out)
            .map(|t| vec![Value::Tensor(t)])
            .map_err(|e| e.to_string())
    }
}
