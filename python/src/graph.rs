//! `torch.compile(backend="tpu")`: an ATen graph from AOT autograd, serialised by
//! `tpuemu/_compile.py`, becomes one compiled program ([`tpuemu_backend::compile::compile`]
//! captures the operators the graph's interpreter calls).
//!
//! The serialised form (JSON): `{"name", "inputs": N, "nodes": [{"op", "args": [ARG]}],
//! "outputs": [REF]}` where an ARG is `{"t": REF}`, `{"ts": [REF|null]}`, `{"i": int}`,
//! `{"f": float}`, `{"b": bool}`, `{"is": [int]}`, `{"fs": [float]}`, `{"bs": [bool]}`,
//! `{"s": str}`, `{"dt": c10 dtype code}` or `null`, and a REF `[node, result, item]` names
//! result `result` of node `node` (`item` >= 0: an element of a list result); node -1 is the
//! graph's inputs.

use std::sync::{Arc, Mutex};

use serde_json::Value as Json;
use tpuemu_backend::compile::{CompiledFn, compile};
use tpuemu_backend::ops::Value;
use tpuemu_backend::{Tensor, TpuError};

use crate::abi::{ERROR, guard, set_error, status_of};
use crate::call::{Arg, Out, Unsupported, convert, dtype_of_code, publish, timed_call};
use crate::device::runtime;

type Ref = (i64, usize, i64);

enum GArg {
    T(Ref),
    Ts(Vec<Option<Ref>>),
    V(Value),
}

struct GNode {
    op: String,
    args: Vec<GArg>,
}

struct Graph {
    nodes: Vec<GNode>,
    outputs: Vec<Ref>,
}

fn bad(m: impl Into<String>) -> TpuError {
    TpuError::BadArgs(format!("tpuemu graph: {}", m.into()))
}

fn parse_ref(j: &Json) -> Result<Ref, TpuError> {
    let a = j
        .as_array()
        .filter(|a| a.len() == 3)
        .ok_or_else(|| bad("bad reference"))?;
    let n = |i: usize| a[i].as_i64().ok_or_else(|| bad("bad reference"));
    Ok((n(0)?, n(1)? as usize, n(2)?))
}

fn list<T>(j: &Json, f: impl Fn(&Json) -> Option<T>) -> Result<Vec<T>, TpuError> {
    j.as_array()
        .ok_or_else(|| bad("expected a list"))?
        .iter()
        .map(|x| f(x).ok_or_else(|| bad("bad list element")))
        .collect()
}

/// A float; infinities and NaN come as the strings Python writes (`"inf"`, `"-inf"`, `"nan"`).
fn float(j: &Json) -> Result<f64, TpuError> {
    match j {
        Json::String(s) => match s.as_str() {
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            "nan" => Ok(f64::NAN),
            _ => Err(bad(format!("bad float {s}"))),
        },
        _ => j.as_f64().ok_or_else(|| bad("bad float")),
    }
}

fn parse_arg(j: &Json) -> Result<GArg, TpuError> {
    if j.is_null() {
        return Ok(GArg::V(Value::None));
    }
    let o = j.as_object().ok_or_else(|| bad("bad argument"))?;
    let (k, v) = o.iter().next().ok_or_else(|| bad("empty argument"))?;
    Ok(match k.as_str() {
        "t" => GArg::T(parse_ref(v)?),
        "ts" => GArg::Ts(
            v.as_array()
                .ok_or_else(|| bad("bad tensor list"))?
                .iter()
                .map(|x| {
                    if x.is_null() {
                        Ok(None)
                    } else {
                        parse_ref(x).map(Some)
                    }
                })
                .collect::<Result<_, _>>()?,
        ),
        "i" => GArg::V(Value::Int(v.as_i64().ok_or_else(|| bad("bad int"))?)),
        "f" => GArg::V(Value::Float(float(v)?)),
        "b" => GArg::V(Value::Bool(v.as_bool().ok_or_else(|| bad("bad bool"))?)),
        "is" => GArg::V(Value::Ints(list(v, Json::as_i64)?)),
        "fs" => GArg::V(Value::Floats(
            v.as_array()
                .ok_or_else(|| bad("bad float list"))?
                .iter()
                .map(float)
                .collect::<Result<_, _>>()?,
        )),
        "bs" => GArg::V(Value::Bools(list(v, Json::as_bool)?)),
        "s" => GArg::V(Value::Str(
            v.as_str().ok_or_else(|| bad("bad str"))?.to_string(),
        )),
        "dt" => {
            let code = v.as_i64().ok_or_else(|| bad("bad dtype"))? as i32;
            GArg::V(Value::Dtype(dtype_of_code(code).ok_or_else(|| {
                TpuError::Unsupported(format!("dtype code {code} is not computed on the tpu"))
            })?))
        }
        other => return Err(bad(format!("unknown argument kind {other}"))),
    })
}

fn parse(spec: &str) -> Result<(String, Graph), TpuError> {
    let j: Json = serde_json::from_str(spec).map_err(|e| bad(e.to_string()))?;
    let name = j["name"].as_str().unwrap_or("graph").to_string();
    let mut nodes = Vec::new();
    for n in j["nodes"].as_array().ok_or_else(|| bad("no nodes"))? {
        let op = n["op"]
            .as_str()
            .ok_or_else(|| bad("node without op"))?
            .to_string();
        let args = n["args"]
            .as_array()
            .ok_or_else(|| bad("node without args"))?
            .iter()
            .map(parse_arg)
            .collect::<Result<_, _>>()?;
        nodes.push(GNode { op, args });
    }
    let outputs = j["outputs"]
        .as_array()
        .ok_or_else(|| bad("no outputs"))?
        .iter()
        .map(parse_ref)
        .collect::<Result<_, _>>()?;
    Ok((name, Graph { nodes, outputs }))
}

fn lookup(inputs: &[Tensor], env: &[Vec<Value>], r: Ref) -> Result<Tensor, TpuError> {
    let (node, res, item) = r;
    if node < 0 {
        return inputs
            .get(res)
            .cloned()
            .ok_or_else(|| bad("input out of range"));
    }
    let v = env
        .get(node as usize)
        .and_then(|v| v.get(res))
        .ok_or_else(|| bad(format!("reference {r:?} out of range")))?;
    match (v, item) {
        (Value::Tensor(t), -1) => Some(t.clone()),
        (Value::Tensors(ts), i) if i >= 0 => ts.get(i as usize).cloned(),
        (Value::OptTensors(ts), i) if i >= 0 => ts.get(i as usize).cloned().flatten(),
        _ => None,
    }
    .ok_or_else(|| bad(format!("reference {r:?} is not a tensor")))
}

/// Runs the graph through the backend's operators (what [`compile`] captures).
fn interpret(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, TpuError> {
    let rt = runtime()?;
    let mut env: Vec<Vec<Value>> = Vec::with_capacity(g.nodes.len());
    for n in &g.nodes {
        let mut args = Vec::with_capacity(n.args.len());
        for a in &n.args {
            args.push(match a {
                GArg::T(r) => Value::Tensor(lookup(inputs, &env, *r)?),
                GArg::Ts(rs) => {
                    let ts: Vec<Option<Tensor>> = rs
                        .iter()
                        .map(|r| r.map(|r| lookup(inputs, &env, r)).transpose())
                        .collect::<Result<_, _>>()?;
                    if ts.iter().all(Option::is_some) {
                        Value::Tensors(ts.into_iter().flatten().collect())
                    } else {
                        Value::OptTensors(ts)
                    }
                }
                GArg::V(v) => v.clone(),
            });
        }
        env.push(timed_call(&rt, &n.op, None, args)?);
    }
    g.outputs.iter().map(|r| lookup(inputs, &env, *r)).collect()
}

/// Compiled graphs by id.
static GRAPHS: Mutex<Vec<Arc<Mutex<CompiledFn>>>> = Mutex::new(Vec::new());

/// Registers a serialised graph; its id for [`call_graph`].
pub fn add_graph(spec: &str) -> Result<i64, TpuError> {
    let (name, g) = parse(spec)?;
    let rt = runtime()?;
    let g = Arc::new(g);
    let f = compile(&rt, &name, move |xs| interpret(&g, xs));
    let mut all = GRAPHS.lock().unwrap_or_else(|e| e.into_inner());
    all.push(Arc::new(Mutex::new(f)));
    Ok(all.len() as i64 - 1)
}

/// Runs compiled graph `id` on the tensors in `args` (the other parameters as in
/// [`crate::call::CallFn`]; `fargs` and `writes` are unused).
#[allow(clippy::too_many_arguments)]
pub extern "C" fn call_graph(
    id: i64,
    args: *const Arg,
    nargs: usize,
    _fargs: *const i64,
    _nfargs: usize,
    _writes: *const i64,
    _nwrites: usize,
    outs: *mut *const Out,
    nouts: *mut usize,
    dims: *mut *const i64,
) -> i32 {
    guard("call_graph", || {
        let f = {
            let all = GRAPHS.lock().unwrap_or_else(|e| e.into_inner());
            match all.get(id as usize) {
                Some(f) => f.clone(),
                None => {
                    set_error(&format!("tpuemu: no compiled graph {id}"));
                    return ERROR;
                }
            }
        };
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return status_of(&e),
        };
        // SAFETY: the shim passes nargs tensor arguments.
        let conv = match unsafe { convert(&rt, args, nargs) } {
            Ok(c) => c,
            Err(Ok(Unsupported(m))) => {
                set_error(&m);
                return crate::abi::UNSUPPORTED;
            }
            Err(Err(e)) => return status_of(&e),
        };
        let mut inputs = Vec::with_capacity(conv.values.len());
        for v in &conv.values {
            match v {
                Value::Tensor(t) => inputs.push(t.clone()),
                _ => {
                    set_error("tpuemu: a compiled graph's inputs must be tpu tensors");
                    return ERROR;
                }
            }
        }
        let r = f.lock().unwrap_or_else(|e| e.into_inner()).call(&inputs);
        match r {
            Ok(ts) => {
                let vals: Vec<Value> = ts.into_iter().map(Value::Tensor).collect();
                // SAFETY: valid out pointers.
                unsafe { publish(&vals, &conv.inputs, true, outs, nouts, dims) }
            }
            Err(e) => status_of(&e),
        }
    })
}
