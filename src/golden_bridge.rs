//! The backend as a golden-case [`Executor`]: each ATen call of a case runs through the
//! backend's operator registry on an emulated chip, in the requested mode.

use std::sync::Arc;

use tpuemu_backend::ops::{self, OpImpl, Value as BValue, registry};
use tpuemu_backend::{DType, Mode, Runtime, Tensor};
use tpuemu_emulator::{ChipPreset, Emulator};
use tpuemu_golden::tensor::{DType as GDType, HostTensor};
use tpuemu_golden::value::Value as GValue;
use tpuemu_golden::{Executor, OpCall};

/// Runs golden calls on the backend.
pub struct BackendExecutor {
    rt: Runtime,
    /// Compile mode: each call is compiled as a one-operator graph and run as one program.
    compile: bool,
}

impl BackendExecutor {
    /// An executor on a fresh emulated chip of `preset`, in `mode`.
    pub fn new(preset: ChipPreset, mode: tpuemu_golden::Mode) -> Result<Self, String> {
        let emu = Emulator::new(preset).map_err(|e| e.to_string())?;
        let rt = Runtime::new(Arc::new(emu)).map_err(|e| e.to_string())?;
        let m = match mode {
            tpuemu_golden::Mode::Strict | tpuemu_golden::Mode::Compile => Mode::Strict,
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
    }
}

fn upload(rt: &Runtime, t: &HostTensor) -> Result<Tensor, String> {
    let d = dtype(t.dtype())?;
    Tensor::from_strided_bytes(rt, t.storage_bytes(), d, t.shape(), t.strides(), t.offset())
        .map_err(|e| e.to_string())
}

fn download(t: &Tensor) -> Result<HostTensor, String> {
    let bytes = t.to_bytes().map_err(|e| e.to_string())?;
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
        for t in call.input_tensors() {
            let d = dtype(t.dtype())?;
            if !def.dtypes.contains(&d) && def.implementation != OpImpl::View {
                return Err(format!("{} not supported by {}", d.name(), call.op));
            }
        }
        Ok(())
    }

    fn call(&mut self, call: &OpCall<'_>) -> Result<Vec<GValue>, String> {
        let args = call
            .args
            .iter()
            .map(|v| to_backend(&self.rt, v))
            .collect::<Result<Vec<_>, _>>()?;
        let out = if self.compile {
            compiled_call(&self.rt, call.op, args)?
        } else {
            ops::call(&self.rt, call.op, args).map_err(|e| e.to_string())?
        };
        out.iter().map(to_golden).collect()
    }

    fn registered_overloads(&self) -> Vec<String> {
        registry().keys().map(|k| k.to_string()).collect()
    }
}

/// Runs `op` on `args` as a compiled one-operator graph: the tensor arguments are the graph's
/// inputs, everything else is baked in; outputs come back in the operator's structure
/// (non-tensor outputs are the values the capture computed).
fn compiled_call(rt: &Runtime, op: &str, args: Vec<BValue>) -> Result<Vec<BValue>, String> {
    use std::sync::Mutex;
    // The tensors, in argument order, and the arguments with their tensors taken out.
    let mut inputs: Vec<Tensor> = Vec::new();
    for a in &args {
        match a {
            BValue::Tensor(t) => inputs.push(t.clone()),
            BValue::Tensors(ts) => inputs.extend(ts.iter().cloned()),
            BValue::OptTensors(ts) => inputs.extend(ts.iter().flatten().cloned()),
            _ => {}
        }
    }
    let template = Arc::new(args);
    let shape: Arc<Mutex<Option<Vec<BValue>>>> = Arc::new(Mutex::new(None));
    let (t2, s2, name, rt2) = (template.clone(), shape.clone(), op.to_string(), rt.clone());
    let mut f = tpuemu_backend::compile::compile(rt, op, move |xs: &[Tensor]| {
        let mut next = xs.iter().cloned();
        let mut take = || {
            next.next().ok_or_else(|| {
                tpuemu_backend::TpuError::BadArgs("compiled call: missing input".into())
            })
        };
        let mut args = Vec::with_capacity(t2.len());
        for a in t2.iter() {
            args.push(match a {
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
            });
        }
        let out = ops::call(&rt2, &name, args)?;
        let mut flat = Vec::new();
        for v in &out {
            match v {
                BValue::Tensor(t) => flat.push(t.clone()),
                BValue::Tensors(ts) => flat.extend(ts.iter().cloned()),
                BValue::OptTensors(ts) => flat.extend(ts.iter().flatten().cloned()),
                _ => {}
            }
        }
        *s2.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
        Ok(flat)
    });
    let flat = f.call(&inputs).map_err(|e| e.to_string())?;
    let structure = shape
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or("compiled call: the graph was not captured")?;
    let mut next = flat.into_iter();
    let mut take = || {
        next.next()
            .ok_or("compiled call: missing output".to_string())
    };
    let mut out = Vec::with_capacity(structure.len());
    for v in structure {
        out.push(match v {
            BValue::Tensor(_) => BValue::Tensor(take()?),
            BValue::Tensors(ts) => {
                BValue::Tensors(ts.iter().map(|_| take()).collect::<Result<_, _>>()?)
            }
            BValue::OptTensors(ts) => BValue::OptTensors(
                ts.iter()
                    .map(|t| t.as_ref().map(|_| take()).transpose())
                    .collect::<Result<_, _>>()?,
            ),
            other => other,
        });
    }
    Ok(out)
}
