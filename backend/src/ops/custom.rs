//! User kernels as operators: register a program written in the assembly language or built
//! with [`tpuemu_isa::ProgramBuilder`] under a name (`mylib::fused_swiglu`) and call it like any
//! other operator — through [`super::call`] or [`call_custom`], in every mode — the way TorchTPU
//! users bring Pallas kernels.
//!
//! Calling convention of the program's arguments: the input buffers (contiguous, in call
//! order), then the output buffers (contiguous, allocated from the shapes the registration's
//! `infer` function returns), then the scalars its `scalars` function returns (from the inputs'
//! shapes; e.g. the element count). In DeferAndFuse and Compile the kernel is a node of the
//! graph like any other; it is never fused with its neighbours.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use tpuemu_isa::{ArgKind, Program};

use super::Value;
use super::helpers::OpScope;
use super::layout_ops::contiguous;
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::ir::{CustomNode, NodeKind};
use crate::tensor::Tensor;

/// A tensor's shape and dtype, what shape functions see.
pub type Meta = (Vec<usize>, DType);

/// Computes output shapes and dtypes from the inputs' (an error for inputs it cannot take).
pub type InferFn = Arc<dyn Fn(&[Meta]) -> Result<Vec<Meta>> + Send + Sync>;

/// Computes the scalar arguments from the inputs' shapes and dtypes.
pub type ScalarsFn = Arc<dyn Fn(&[Meta]) -> Vec<u32> + Send + Sync>;

/// A user kernel.
#[derive(Clone)]
pub struct CustomOp {
    /// Operator name, `namespace::name`.
    pub name: String,
    /// The kernel.
    pub program: Arc<Program>,
    /// Number of tensor inputs.
    pub inputs: usize,
    /// Output shapes and dtypes.
    pub infer: InferFn,
    /// Scalar arguments.
    pub scalars: ScalarsFn,
}

fn table() -> &'static RwLock<HashMap<String, CustomOp>> {
    static T: OnceLock<RwLock<HashMap<String, CustomOp>>> = OnceLock::new();
    T.get_or_init(|| RwLock::new(HashMap::new()))
}

/// Registers (or replaces) a user kernel. The program's argument slots must be `inputs` buffers,
/// then one buffer per output, then scalars.
pub fn register(op: CustomOp) -> Result<()> {
    if !op.name.contains("::") || op.name.starts_with("aten::") {
        return Err(TpuError::BadArgs(format!(
            "custom operator names are `namespace::name` outside `aten::`, not `{}`",
            op.name
        )));
    }
    let bufs = op
        .program
        .args
        .iter()
        .take_while(|a| a.kind == ArgKind::Buffer)
        .count();
    if bufs < op.inputs
        || op.program.args[bufs..]
            .iter()
            .any(|a| a.kind != ArgKind::Scalar)
    {
        return Err(TpuError::BadArgs(format!(
            "program `{}` must take {} input buffers, then its output buffers, then scalars",
            op.program.name, op.inputs
        )));
    }
    table()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(op.name.clone(), op);
    Ok(())
}

/// The registered user kernel `name`, if any.
pub fn lookup(name: &str) -> Option<CustomOp> {
    table()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .cloned()
}

/// Names of the registered user kernels.
pub fn names() -> Vec<String> {
    let mut v: Vec<String> = table()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .cloned()
        .collect();
    v.sort();
    v
}

/// Runs user kernel `name` on `inputs`.
pub fn call_custom(name: &str, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let op = lookup(name).ok_or_else(|| TpuError::UnknownOp(name.to_string()))?;
    if inputs.len() != op.inputs {
        return Err(TpuError::BadArgs(format!(
            "{name} takes {} tensors, {} given",
            op.inputs,
            inputs.len()
        )));
    }
    let scope = OpScope::new(name, inputs)?;
    let metas: Vec<Meta> = inputs
        .iter()
        .map(|t| (t.shape().to_vec(), t.dtype()))
        .collect();
    let outs = (op.infer)(&metas).map_err(|e| scope.err(e.to_string()))?;
    let bufs = op
        .program
        .args
        .iter()
        .take_while(|a| a.kind == ArgKind::Buffer)
        .count();
    if bufs != op.inputs + outs.len() {
        return Err(scope.err(format!(
            "the kernel takes {} buffers but {} inputs and {} outputs were given",
            bufs,
            op.inputs,
            outs.len()
        )));
    }
    let scalars = (op.scalars)(&metas);
    if scalars.len() != op.program.args.len() - bufs {
        return Err(scope.err(format!(
            "the kernel takes {} scalars, {} computed",
            op.program.args.len() - bufs,
            scalars.len()
        )));
    }
    let ins: Vec<Tensor> = inputs
        .iter()
        .map(|t| contiguous(t))
        .collect::<Result<_>>()?;
    let out: Vec<Tensor> = outs
        .iter()
        .map(|(s, d)| Tensor::empty(scope.rt(), s, *d))
        .collect::<Result<_>>()?;
    let node = CustomNode {
        program: op.program.clone(),
        scalars,
    };
    scope.submit(
        NodeKind::Custom(node),
        ins.iter().map(Tensor::view).collect(),
        out.iter().map(Tensor::view).collect(),
    )?;
    Ok(out)
}

/// Runs a user kernel through the dynamic calling convention (tensors first).
pub(super) fn call_value(name: &str, args: &[Value]) -> Result<Vec<Value>> {
    let ts: Vec<&Tensor> = args
        .iter()
        .filter_map(|v| {
            if let Value::Tensor(t) = v {
                Some(t)
            } else {
                None
            }
        })
        .collect();
    Ok(call_custom(name, &ts)?
        .into_iter()
        .map(Value::Tensor)
        .collect())
}
