//! Pallas kernels as operators: a serialised `pallas_call` ([`tpuemu_kernels::kernels::pallas`])
//! lowered for this runtime's chip and registered as a user kernel ([`super::custom`]) under a
//! name derived from the kernel and its description, so the same kernel on the same shapes is
//! lowered once.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use tpuemu_kernels::kernels::pallas;
use tpuemu_kernels::kernels::pallas::spec::{Dt, KernelSpec};

use super::custom::{self, CustomOp, Meta};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::runtime::Runtime;

/// The namespace of lowered Pallas kernels' operators.
pub const NAMESPACE: &str = "tpuemu_pallas";

fn dtype(dt: Dt) -> DType {
    match dt {
        Dt::F32 => DType::F32,
        Dt::Bf16 => DType::BF16,
        Dt::I32 => DType::I32,
        Dt::Bool => DType::Bool,
        Dt::I8 => DType::I8,
    }
}

/// The program `json` lowers to on `rt`'s chip, as assembly text.
pub fn assembly(rt: &Runtime, json: &str) -> Result<String> {
    let spec = KernelSpec::parse(json)?;
    let core = core_of(rt)?;
    let program = pallas::build(&spec, &core)?;
    Ok(tpuemu_isa::disassemble(&program))
}

fn core_of(rt: &Runtime) -> Result<tpuemu_isa::CoreInfo> {
    rt.device()
        .topology()
        .chips
        .first()
        .map(|c| c.core.clone())
        .ok_or_else(|| TpuError::BadArgs("the device has no chips".into()))
}

/// Lowers the serialised `pallas_call` `json` for `rt`'s chip and registers it; the
/// operator's name (`tpuemu_pallas::add_kernel_1a2b..`) and its outputs' shapes and dtypes.
pub fn register(rt: &Runtime, json: &str) -> Result<(String, Vec<Meta>)> {
    let spec = KernelSpec::parse(json)?;
    let mut h = DefaultHasher::new();
    json.hash(&mut h);
    let clean: String = spec
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(48)
        .collect();
    let name = format!("{NAMESPACE}::{clean}_{:016x}", h.finish());
    // An int8 scalar-prefetch array is passed widened to int32 (one SMEM word per value).
    let metas = |ops: &[tpuemu_kernels::kernels::pallas::spec::Operand]| -> Vec<Meta> {
        ops.iter()
            .map(|o| {
                let dt = Dt::parse(&o.dtype).unwrap_or(Dt::F32);
                let dt = if o.in_smem() && dt == Dt::I8 {
                    Dt::I32
                } else {
                    dt
                };
                let shape = if o.strides.is_empty() {
                    o.shape.clone()
                } else {
                    o.hbm_shape.clone()
                };
                (shape, dtype(dt))
            })
            .collect()
    };
    spec.check()?;
    let ins = metas(&spec.operands[..spec.num_inputs]);
    let outs = metas(&spec.operands[spec.num_inputs..]);
    if custom::lookup(&name).is_some() {
        return Ok((name, outs));
    }
    let core = core_of(rt)?;
    let program = pallas::build(&spec, &core)?;
    let (kname, want, got_outs) = (spec.name.clone(), ins.clone(), outs.clone());
    custom::register(CustomOp {
        name: name.clone(),
        program: Arc::new(program),
        inputs: spec.num_inputs,
        infer: Arc::new(move |metas: &[Meta]| {
            if metas != want.as_slice() {
                return Err(TpuError::ShapeMismatch(format!(
                    "Pallas kernel `{kname}` was lowered for inputs {want:?}, called with {metas:?}"
                )));
            }
            Ok(got_outs.clone())
        }),
        scalars: Arc::new(|_| Vec::new()),
    })?;
    Ok((name, outs))
}
