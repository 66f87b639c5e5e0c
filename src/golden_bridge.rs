//! The backend as a golden-case [`Executor`]: each ATen call of a case runs through the
//! backend's operator registry on an emulated chip, in the requested mode.

use std::sync::Arc;

use tpuemu_backend::ops::{self, OpImpl, Value as BValue, registry};
use tpuemu_backend::{DType, Mode, Runtime, Tensor, TpuError};
use tpuemu_emulator::{ChipPreset, Emulator};
use tpuemu_golden::tensor::{DType as GDType, HostTensor};
use tpuemu_golden::value::Value as GValue;
use tpuemu_golden::{Executor, Link, NEEDS_VALUES, OpCall};

/// Runs golden calls on the backend.
pub struct BackendExecutor {
    rt: Runtime,
    /// Compile mode: each call is compiled as a one-operator graph and run as one program.
    compile: bool,
}

impl BackendExecutor {
    /// An executor on a fresh emulated chip of `preset`, in `mode`.
    pub fn new(preset: ChipPreset, mode: tpuemu_golden::Mode) -> Result<Self, String> {
        Self::on(Emulator::new(preset).map_err(|e| e.to_string())?, mode)
    }

    /// An executor on `emu` (a fresh emulator, with its run limits set), in `mode`.
    pub fn on(emu: Emulator, mode: tpuemu_golden::Mode) -> Result<Self, String> {
        let emu = Arc::new(emu);
        let rt = if mode == tpuemu_golden::Mode::Meta {
            Runtime::shapes(emu, 0)
        } else {
            Runtime::new(emu)
        }
        .map_err(|e| e.to_string())?;
        let m = match mode {
            tpuemu_golden::Mode::Strict
            | tpuemu_golden::Mode::Compile
            | tpuemu_golden::Mode::Meta => Mode::Strict,
            tpuemu_golden::Mode::Debug => Mode::Debug,
            tpuemu_golden::Mode::Defer => Mode::DeferAndFuse,
        };
        rt.set_mode(m).map_err(|e| e.to_string())?;
        Ok(BackendExecutor {
            rt,
            compile: mode == tpuemu_golden::Mode::Compile,
        })
    }

    /// The runtime (for metrics).
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

fn dtype(d: GDType) -> Result<DType, String> {
    Ok(match d {
        GDType::F32 => DType::F32,
        GDType::BF16 => DType::BF16,
        GDType::F16 => DType::F16,
        GDType::I64 => DType::I64,
        GDType::I32 => DType::I32,
        GDType::Bool => DType::Bool,
        GDType::U8 => DType::U8,
        GDType::I8 => DType::I8,
        other => return Err(format!("{} is not a TPU dtype", other.name())),
    })
}

fn gdtype(d: DType) -> GDType {
    match d {
        DType::F32 => GDType::F32,
        DType::BF16 => GDType::BF16,
        DType::F16 => GDType::F16,
        DType::I64 => GDType::I64,
        DType::I32 => GDType::I32,
        DType::Bool => GDType::Bool,
        DType::U8 => GDType::U8,
        DType::I8 => GDType::I8,
    }
}

fn upload(rt: &Runtime, t: &HostTensor) -> Result<Tensor, String> {
    let d = dtype(t.dtype())?;
    Tensor::from_strided_bytes(rt, t.storage_bytes(), d, t.shape(), t.strides(), t.offset())
        .map_err(|e| e.to_string())
}

/// A tensor's values; on a shapes-only runtime, zeros of its dtype and shape (the runner
/// compares dtypes and shapes only).
fn download(t: &Tensor) -> Result<HostTensor, String> {
    let bytes = if t.runtime().shapes_only() {
        vec![0u8; t.numel() * t.dtype().size()]
    } else {
        t.to_bytes().map_err(|e| e.to_string())?
    };
    HostTensor::new(gdtype(t.dtype()), t.shape().to_vec(), bytes).map_err(|e| e.to_string())
}

fn to_backend(rt: &Runtime, v: &GValue) -> Result<BValue, String> {
    Ok(match v {
        GValue::None => BValue::None,
        GValue::Layout(s) => BValue::Layout(s.clone()),
        // Generated cases ran on the CPU: the device they name is this one here.
        GValue::Device(_) => BValue::Device("tpu".into()),
        GValue::MemoryFormat(s) => BValue::MemoryFormat(
            ops::MemoryFormat::from_name(s).ok_or_else(|| format!("unknown memory format {s}"))?,
        ),
        GValue::Bool(b) => BValue::Bool(*b),
        GValue::Int(i) => BValue::Int(*i),
        GValue::Float(f) => BValue::Float(*f),
        GValue::Str(s) => BValue::Str(s.clone()),
        GValue::Dtype(d) => BValue::Dtype(dtype(*d)?),
        GValue::IntList(l) => BValue::Ints(l.clone()),
        GValue::FloatList(l) => BValue::Floats(l.clone()),
        GValue::BoolList(l) => BValue::Bools(l.clone()),
        GValue::Tensor(t) => BValue::Tensor(upload(rt, t)?),
        GValue::TensorList(ts) => {
            BValue::Tensors(ts.iter().map(|t| upload(rt, t)).collect::<Result<_, _>>()?)
        }
        GValue::OptionalTensorList(ts) => BValue::OptTensors(
            ts.iter()
                .map(|t| t.as_ref().map(|t| upload(rt, t)).transpose())
                .collect::<Result<_, _>>()?,
        ),
    })
}

fn to_golden(v: &BValue) -> Result<GValue, String> {
    Ok(match v {
        BValue::Tensor(t) => GValue::Tensor(download(t)?),
        BValue::None => GValue::None,
        BValue::Tensors(ts) => {
            GValue::TensorList(ts.iter().map(download).collect::<Result<_, _>>()?)
        }
        BValue::OptTensors(ts) => GValue::OptionalTensorList(
            ts.iter()
                .map(|t| t.as_ref().map(download).transpose())
                .collect::<Result<_, _>>()?,
        ),
        BValue::Int(i) => GValue::Int(*i),
        BValue::Float(f) => GValue::Float(*f),
        BValue::Bool(b) => GValue::Bool(*b),
        BValue::Ints(l) => GValue::IntList(l.clone()),
        BValue::Floats(l) => GValue::FloatList(l.clone()),
        BValue::Bools(l) => GValue::BoolList(l.clone()),
        BValue::Dtype(d) => GValue::Dtype(gdtype(*d)),
        BValue::Str(s) => GValue::Str(s.clone()),
        BValue::MemoryFormat(f) => GValue::MemoryFormat(f.name().to_string()),
        BValue::Layout(s) => GValue::Layout(s.clone()),
        BValue::Device(s) => GValue::Device(s.clone()),
        BValue::Generator(_) => return Err("an operator returned a generator".into()),
    })
}

impl Executor for BackendExecutor {
    fn supports(&self, call: &OpCall<'_>) -> Result<(), String> {
        let def = registry()
            .get(call.op)
            .ok_or_else(|| format!("{} not registered", call.op))?;
        for v in call.args {
            if let GValue::Dtype(d) = v {
                dtype(*d)?;
            }
        }
        // An operator's dtypes are those of the values it computes: an integer tensor after a
        // floating one is an index (pivots, targets, lengths), which the operator checks itself.
        let mut floating = false;
        for t in call.input_tensors() {
            let d = dtype(t.dtype())?;
            let index = floating && matches!(d, DType::I32 | DType::I64);
            floating |= d.is_float();
            if !index && !def.dtypes.contains(&d) && def.implementation != OpImpl::View {
                return Err(format!("{} not supported by {}", d.name(), call.op));
            }
        }
        Ok(())
    }

    fn call(&mut self, call: &OpCall<'_>) -> Result<Vec<GValue>, String> {
        self.sequence(std::slice::from_ref(call), &[Vec::new()])
            .pop()
            .unwrap_or_else(|| Err("no result".into()))
    }

    fn call_chain(
        &mut self,
        calls: &[OpCall<'_>],
        links: &[Vec<Link>],
    ) -> Vec<Result<Vec<GValue>, String>> {
        self.sequence(calls, links)
    }

    fn registered_overloads(&self) -> Vec<String> {
        registry().keys().map(|k| k.to_string()).collect()
    }
}

/// An argument of a call in a sequence: a value, or an earlier call's output.
#[derive(Clone)]
enum Arg {
    Value(BValue),
    /// Output `output` (element `item`) of call `call`, for list element `elem` of the argument.
    Linked(Vec<(Option<usize>, Link)>, BValue),
}

/// Runs a sequence of calls on the device, passing outputs on where the case links them;
/// nothing is read back until the end, so DeferAndFuse records the whole sequence. `Err` for
/// the first call that fails (and every call after it).
fn run_sequence(
    rt: &Runtime,
    ops: &[String],
    args: &[Vec<Arg>],
    mut input: impl FnMut(&BValue) -> Result<BValue, String>,
) -> Vec<Result<Vec<BValue>, String>> {
    let mut outs: Vec<Result<Vec<BValue>, String>> = Vec::with_capacity(ops.len());
    for (i, (op, call_args)) in ops.iter().zip(args).enumerate() {
        let r = (|| {
            let mut vals = Vec::with_capacity(call_args.len());
            for a in call_args {
                vals.push(match a {
                    Arg::Value(v) => input(v)?,
                    Arg::Linked(links, template) => linked(&outs, links, template)?,
                });
            }
            ops::call(rt, op, vals).map_err(|e| match e {
                TpuError::NeedsValues(_) => format!("{NEEDS_VALUES}{e}"),
                e => e.to_string(),
            })
        })();
        let failed = r.is_err();
        outs.push(r);
        if failed {
            while outs.len() < ops.len() {
                outs.push(Err(format!("not run: call {i} ({op}) failed")));
            }
            break;
        }
    }
    outs
}

/// An argument built from earlier outputs: the tensor (or list elements) they name, which must
/// have the shape PyTorch's had.
fn linked(
    outs: &[Result<Vec<BValue>, String>],
    links: &[(Option<usize>, Link)],
    template: &BValue,
) -> Result<BValue, String> {
    let get = |l: &Link| -> Result<Tensor, String> {
        let out = match outs.get(l.call) {
            Some(Ok(o)) => o,
            _ => return Err(format!("call {} has no output to pass on", l.call)),
        };
        let t = match (out.get(l.output), l.output_item) {
            (Some(BValue::Tensor(t)), None) => Some(t),
            (Some(BValue::Tensors(ts)), Some(i)) => ts.get(i),
            (Some(BValue::OptTensors(ts)), Some(i)) => ts.get(i).and_then(|t| t.as_ref()),
            _ => None,
        };
        t.cloned()
            .ok_or_else(|| format!("output {} of call {} is not a tensor", l.output, l.call))
    };
    let check = |t: Tensor, want: &Tensor| -> Result<Tensor, String> {
        if t.shape() == want.shape() {
            Ok(t)
        } else {
            Err(format!(
                "an earlier call's output has shape {:?} where PyTorch's had {:?}",
                t.shape(),
                want.shape()
            ))
        }
    };
    Ok(match template {
        BValue::Tensor(want) => BValue::Tensor(check(get(&links[0].1)?, want)?),
        BValue::Tensors(ws) => {
            let mut ts = ws.clone();
            for (item, l) in links {
                let i = item.ok_or("a list argument linked without an element")?;
                ts[i] = check(get(l)?, &ws[i])?;
            }
            BValue::Tensors(ts)
        }
        BValue::OptTensors(ws) => {
            let mut ts = ws.clone();
            for (item, l) in links {
                let i = item.ok_or("a list argument linked without an element")?;
                let want = ws[i].as_ref().ok_or("a link to an absent list element")?;
                ts[i] = Some(check(get(l)?, want)?);
            }
            BValue::OptTensors(ts)
        }
        _ => return Err("a link on an argument that is not a tensor".into()),
    })
}

/// The tensors of a value, in order.
fn tensors_of(v: &BValue) -> Vec<Tensor> {
    match v {
        BValue::Tensor(t) => vec![t.clone()],
        BValue::Tensors(ts) => ts.clone(),
        BValue::OptTensors(ts) => ts.iter().flatten().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `v` with its tensors taken in order from `next`.
fn refill(v: &BValue, next: &mut impl Iterator<Item = Tensor>) -> Result<BValue, String> {
    let mut take = || next.next().ok_or_else(|| "missing tensor".to_string());
    Ok(match v {
        BValue::Tensor(_) => BValue::Tensor(take()?),
        BValue::Tensors(ts) => {
            BValue::Tensors(ts.iter().map(|_| take()).collect::<Result<_, _>>()?)
        }
        BValue::OptTensors(ts) => BValue::OptTensors(
            ts.iter()
                .map(|t| t.as_ref().map(|_| take()).transpose())
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// Runs a sequence as one compiled graph: the unlinked tensor arguments are the graph's inputs,
/// every call's tensor outputs its outputs; other values are baked in.
fn run_compiled(
    rt: &Runtime,
    ops: &[String],
    args: &[Vec<Arg>],
) -> Result<Vec<Vec<BValue>>, String> {
    use std::sync::Mutex;
    let mut inputs: Vec<Tensor> = Vec::new();
    for a in args.iter().flatten() {
        if let Arg::Value(v) = a {
            inputs.extend(tensors_of(v));
        }
    }
    let structure: Arc<Mutex<Option<Vec<Vec<BValue>>>>> = Arc::new(Mutex::new(None));
    let (s2, rt2) = (structure.clone(), rt.clone());
    let (ops2, args2) = (ops.to_vec(), args.to_vec());
    let name = ops.first().cloned().unwrap_or_default();
    let mut f = tpuemu_backend::compile::compile(rt, &name, move |xs: &[Tensor]| {
        let mut next = xs.iter().cloned();
        let outs = run_sequence(&rt2, &ops2, &args2, |v| refill(v, &mut next));
        let outs: Vec<Vec<BValue>> = outs
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(tpuemu_backend::TpuError::BadArgs)?;
        let flat: Vec<Tensor> = outs.iter().flatten().flat_map(tensors_of).collect();
        *s2.lock().unwrap_or_else(|e| e.into_inner()) = Some(outs);
        Ok(flat)
    });
    let flat = f.call(&inputs).map_err(|e| e.to_string())?;
    let structure = structure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or("compiled call: the graph was not captured")?;
    let mut next = flat.into_iter();
    structure
        .iter()
        .map(|call| call.iter().map(|v| refill(v, &mut next)).collect())
        .collect()
}

impl BackendExecutor {
    /// Runs `calls` (linked by `links`) in this executor's mode and reads every output back.
    fn sequence(
        &mut self,
        calls: &[OpCall<'_>],
        links: &[Vec<Link>],
    ) -> Vec<Result<Vec<GValue>, String>> {
        let ops: Vec<String> = calls.iter().map(|c| c.op.to_string()).collect();
        let mut args: Vec<Vec<Arg>> = Vec::with_capacity(calls.len());
        for (c, ls) in calls.iter().zip(links) {
            let mut a = Vec::with_capacity(c.args.len());
            for (j, v) in c.args.iter().enumerate() {
                let mine: Vec<(Option<usize>, Link)> = ls
                    .iter()
                    .filter(|l| l.arg == j)
                    .map(|l| (l.item, *l))
                    .collect();
                let v = match to_backend(&self.rt, v) {
                    Ok(v) => v,
                    Err(e) => return vec![Err(e); calls.len()],
                };
                a.push(if mine.is_empty() {
                    Arg::Value(v)
                } else {
                    Arg::Linked(mine, v)
                });
            }
            args.push(a);
        }
        let outs: Vec<Result<Vec<BValue>, String>> = if self.compile {
            match run_compiled(&self.rt, &ops, &args) {
                Ok(o) => o.into_iter().map(Ok).collect(),
                // An operator whose output shape depends on the values (`nonzero`,
                // `masked_select`, `unique`, ...) cannot be part of a graph: torch.compile
                // breaks the graph there and runs it eagerly, and so does this.
                Err(e) if e.contains("read to host inside a compiled function") => {
                    run_sequence(&self.rt, &ops, &args, |v| Ok(v.clone()))
                }
                Err(e) => vec![Err(e); calls.len()],
            }
        } else {
            run_sequence(&self.rt, &ops, &args, |v| Ok(v.clone()))
        };
        outs.into_iter()
            .map(|o| o.and_then(|vs| vs.iter().map(to_golden).collect()))
            .collect()
    }
}
