//! Matrix products on the matrix units: `mm`, `bmm`, `addmm`, `baddbmm`, `dot`, `mv`, and
//! `matmul` with PyTorch's broadcasting rules (in `matmul.rs`); scaled dot-product attention
//! lives in [`attention`].
//!
//! Every product is one [`NodeKind::Matmul`] node over 3-D views `[batch, m, k] @ [batch, k,
//! n]` (any strides: transposed operands are fed transposed, nothing is copied), with an
//! epilogue that turns the f32 product into the output: `addmm`/`baddbmm` fold `beta * self +
//! alpha * product` into it, so each is one kernel. Numerics, as on a TPU:
//! - bf16 operands: exact products, f32 accumulation, one rounding to bf16 at the end (what
//!   PyTorch's CPU kernels compute, up to the accumulation order);
//! - f32 operands: the runtime's [`MatmulPrecision`](crate::MatmulPrecision) (DEFAULT is one
//!   bf16 pass, HIGH three, HIGHEST six: about f32 accuracy);
//! - f16 operands are converted to f32 first and the result is rounded back to f16 by the
//!   epilogue;
//! - int32 and int64 operands run on the vector unit, exact (`integer.rs`: the matrix units
//!   have no integer path); bool operands are not supported.

pub mod attention;
pub mod attention_backward;
mod flash;
pub(crate) mod grouped;
mod integer;
mod matmul;

use super::aten;
use super::helpers::{OpScope, map_shape};
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, MatmulNode, NodeKind, PRef, ProgBuilder};
use crate::layout::Layout;
use crate::ops::sharding::{Sharding, Special};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

pub use attention::{flash_attention_for_cpu, scaled_dot_product_attention};
pub(crate) use matmul::batch_operands;
pub use matmul::matmul;

/// PyTorch's `TypeMeta` name of a dtype, as `dtype()` prints in C++ error messages.
pub(crate) fn meta_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::BF16 => "c10::BFloat16",
        DType::F16 => "c10::Half",
        DType::U8 => "unsigned char",
        DType::I8 => "signed char",
        DType::I32 => "int",
        DType::I64 => "long int",
        DType::Bool => "bool",
    }
}

/// The error for integer and bool products.
fn no_int(name: &str, d: DType) -> TpuError {
    TpuError::Unsupported(format!(
        "{name}: {} matrix products are not supported on TPU (the matrix units take bfloat16 and float32; convert the operands with .to(torch.float32))",
        d.name()
    ))
}

/// Operands as the matrix units take them (both of dtype `a.dtype()`): bf16 and f32 as they
/// are, f16 converted to f32; integers are rejected.
fn mxu_operands(name: &str, a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
    match a.dtype() {
        DType::F32 | DType::BF16 => Ok((a.clone(), b.clone())),
        DType::F16 => Ok((a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?)),
        d => Err(no_int(name, d)),
    }
}

/// The epilogue that stores the product as it is.
fn plain(_: &mut ProgBuilder, prod: PRef, _: &[PRef]) -> PRef {
    prod
}

/// `out[b] = epilogue(a[b] @ w[b], extras...)` as one matrix-unit node: `a [batch, m, k]` and
/// `w [batch, k, n]` are 3-D views of one dtype (bf16 or f32), `extras` broadcast to `[batch,
/// m, n]` (at most 3 dims). `epilogue` gets the f32 product and the extras' program nodes and
/// returns the value converted to `out`. An empty inner dimension gives `epilogue(0, ...)`.
pub(crate) fn product(
    op: &OpScope,
    a: &Tensor,
    w: &Tensor,
    out: DType,
    extras: &[&Tensor],
    epilogue: impl FnOnce(&mut ProgBuilder, PRef, &[PRef]) -> PRef,
) -> Result<Tensor> {
    let precision = op.rt().precision();
    product_at(op, a, w, out, extras, epilogue, precision)
}

/// [`product`] at a given precision for f32 operands (instead of the runtime's setting).
pub(crate) fn product_at(
    op: &OpScope,
    a: &Tensor,
    w: &Tensor,
    out: DType,
    extras: &[&Tensor],
    epilogue: impl FnOnce(&mut ProgBuilder, PRef, &[PRef]) -> PRef,
    precision: crate::ir::MatmulPrecision,
) -> Result<Tensor> {
    let (batch, m, k) = (a.shape()[0], a.shape()[1], a.shape()[2]);
    let n = w.shape()[2];
    if w.shape()[0] != batch || w.shape()[1] != k || a.dtype() != w.dtype() {
        return Err(op.err(format!(
            "internal: matrix operands {:?}:{} and {:?}:{}",
            a.shape(),
            a.dtype(),
            w.shape(),
            w.dtype()
        )));
    }
    let shape = [batch, m, n];
    if k == 0 {
        return Ok(map_shape(op, &shape, extras, &[out], |p, r| {
            let zero = p.constant(Scalar::Float(0.0), DType::F32);
            vec![epilogue(p, zero, r)]
        })?
        .remove(0));
    }
    let mut b = ProgBuilder::new();
    let prod = b.input(0, DType::F32, false);
    let xs: Vec<PRef> = extras
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(1 + i as u32, t.dtype(), false))
        .collect();
    let r = epilogue(&mut b, prod, &xs);
    let r = b.cast(r, out);
    b.output(r);
    let o = Tensor::empty(op.rt(), &shape, out)?;
    let mut inputs = vec![a.view(), w.view()];
    inputs.extend(extras.iter().map(|t| t.view()));
    op.submit(
        NodeKind::Matmul(MatmulNode {
            batch,
            m,
            n,
            k,
            precision,
            epilogue: b.finish(),
            twin: None,
            rows: None,
        }),
        inputs,
        vec![o.view()],
    )?;
    Ok(o)
}

/// `t` seen through `f(layout)` (an internal view: no operator call).
fn relayout(t: &Tensor, f: impl FnOnce(&Layout) -> Result<Layout>) -> Result<Tensor> {
    Ok(t.with_layout(f(t.layout())?))
}

/// A fresh contiguous tensor seen with another shape of the same size.
fn reshaped(t: &Tensor, shape: &[usize]) -> Tensor {
    t.with_layout(Layout::contiguous(shape))
}

/// `torch.mm(a, b)`: `[m, k] @ [k, n]`.
pub fn mm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Mm::NAME, &[a, b])?;
    if a.dim() != 2 {
        return Err(TpuError::BadArgs("self must be a matrix".into()));
    }
    if b.dim() != 2 {
        return Err(TpuError::BadArgs("mat2 must be a matrix".into()));
    }
    check_inner(a, b)?;
    same_dtype_mm(a, b)?;
    let (x, y) = mxu_operands(Mm::NAME, a, b)?;
    let (m, n) = (a.shape()[0], b.shape()[1]);
    let r = product(
        &op,
        &relayout(&x, |l| l.unsqueeze(0))?,
        &relayout(&y, |l| l.unsqueeze(0))?,
        a.dtype(),
        &[],
        plain,
    )?;
    Ok(reshaped(&r, &[m, n]))
}

/// "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)".
fn check_inner(a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape()[1] != b.shape()[0] {
        return Err(TpuError::ShapeMismatch(format!(
            "mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})",
            a.shape()[0],
            a.shape()[1],
            b.shape()[0],
            b.shape()[1]
        )));
    }
    Ok(())
}

/// PyTorch's CPU `mm` dtype check.
fn same_dtype_mm(a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "expected m1 and m2 to have the same dtype, but got: {} != {}",
            meta_name(a.dtype()),
            meta_name(b.dtype())
        )));
    }
    Ok(())
}

/// PyTorch's CPU `bmm` dtype check.
fn same_dtype_bmm(a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "expected scalar type {} but found {}",
            a.dtype().scalar_type_name(),
            b.dtype().scalar_type_name()
        )));
    }
    Ok(())
}

/// `torch.bmm(a, b)`: `[b, m, k] @ [b, k, n]`.
pub fn bmm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Bmm::NAME, &[a, b])?;
    check_bmm(a, b)?;
    same_dtype_bmm(a, b)?;
    let (x, y) = mxu_operands(Bmm::NAME, a, b)?;
    product(&op, &x, &y, a.dtype(), &[], plain)
}

fn check_bmm(a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dim() != 3 {
        return Err(TpuError::BadArgs("batch1 must be a 3D tensor".into()));
    }
    if b.dim() != 3 {
        return Err(TpuError::BadArgs("batch2 must be a 3D tensor".into()));
    }
    let (bs, k) = (a.shape()[0], a.shape()[2]);
    if b.shape()[0] != bs || b.shape()[1] != k {
        return Err(TpuError::ShapeMismatch(format!(
            "Expected size for first two dimensions of batch2 tensor to be: [{bs}, {k}] but got: [{}, {}].",
            b.shape()[0],
            b.shape()[1]
        )));
    }
    Ok(())
}

/// The `beta * self + alpha * product` epilogue (`self` ignored when `beta` is 0, as PyTorch
/// does, even where it holds NaN).
fn add_epilogue(
    beta: Scalar,
    alpha: Scalar,
) -> impl FnOnce(&mut ProgBuilder, PRef, &[PRef]) -> PRef {
    move |p, prod, xs| {
        let f = DType::F32;
        let mut r = prod;
        if alpha.to_f64() != 1.0 {
            let k = p.constant(alpha, f);
            r = p.bin(BinOp::Mul, r, k, f);
        }
        if let Some(&s) = xs.first() {
            let mut s = p.cast(s, f);
            if beta.to_f64() != 1.0 {
                let k = p.constant(beta, f);
                s = p.bin(BinOp::Mul, s, k, f);
            }
            r = p.bin(BinOp::Add, r, s, f);
        }
        r
    }
}

/// `torch.addmm(self, mat1, mat2, beta=beta, alpha=alpha)`: `beta * self + alpha * (mat1 @
/// mat2)` in one kernel (`self` broadcasts to `[m, n]`).
pub fn addmm(
    self_: &Tensor,
    mat1: &Tensor,
    mat2: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    let op = OpScope::new(Addmm::NAME, &[self_, mat1, mat2])?;
    if self_.dtype() != mat2.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "self and mat2 must have the same dtype, but got {} and {}",
            self_.dtype().scalar_type_name(),
            mat2.dtype().scalar_type_name()
        )));
    }
    if mat1.dtype() != mat2.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "mat1 and mat2 must have the same dtype, but got {} and {}",
            mat1.dtype().scalar_type_name(),
            mat2.dtype().scalar_type_name()
        )));
    }
    for (t, what) in [(mat1, "mat1"), (mat2, "mat2")] {
        if t.dim() != 2 {
            return Err(TpuError::BadArgs(format!(
                "{what} must be a matrix, got {}-D tensor",
                t.dim()
            )));
        }
    }
    check_inner(mat1, mat2)?;
    let (m, n) = (mat1.shape()[0], mat2.shape()[1]);
    let bias = relayout(self_, |l| l.broadcast_to(&[m, n])?.unsqueeze(0))?;
    let (x, y) = mxu_operands(Addmm::NAME, mat1, mat2)?;
    let extras: Vec<&Tensor> = if beta.to_f64() == 0.0 {
        vec![]
    } else {
        vec![&bias]
    };
    let r = product(
        &op,
        &relayout(&x, |l| l.unsqueeze(0))?,
        &relayout(&y, |l| l.unsqueeze(0))?,
        mat1.dtype(),
        &extras,
        add_epilogue(beta, alpha),
    )?;
    Ok(reshaped(&r, &[m, n]))
}

/// `torch.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)`: `beta * self + alpha *
/// (batch1 @ batch2)` in one kernel (`self` broadcasts to `[b, m, n]`).
pub fn baddbmm(
    self_: &Tensor,
    batch1: &Tensor,
    batch2: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    let op = OpScope::new(Baddbmm::NAME, &[self_, batch1, batch2])?;
    check_bmm(batch1, batch2)?;
    let shape = [batch1.shape()[0], batch1.shape()[1], batch2.shape()[2]];
    let bias = relayout(self_, |l| l.broadcast_to(&shape))?;
    if self_.dtype() != batch1.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "Input dtypes must be the same, got: input {}, batch1: {}, batch2: {}",
            meta_name(self_.dtype()),
            meta_name(batch1.dtype()),
            meta_name(batch2.dtype())
        )));
    }
    same_dtype_bmm(batch1, batch2)?;
    let (x, y) = mxu_operands(Baddbmm::NAME, batch1, batch2)?;
    let extras: Vec<&Tensor> = if beta.to_f64() == 0.0 {
        vec![]
    } else {
        vec![&bias]
    };
    product(
        &op,
        &x,
        &y,
        batch1.dtype(),
        &extras,
        add_epilogue(beta, alpha),
    )
}

/// `torch.dot(a, b)` of two vectors: a 0-dim tensor.
pub fn dot(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Dot::NAME, &[a, b])?;
    if a.dim() != 1 || b.dim() != 1 {
        return Err(TpuError::BadArgs(format!(
            "1D tensors expected, but got {}D and {}D tensors",
            a.dim(),
            b.dim()
        )));
    }
    if a.dtype() != b.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "dot : expected both vectors to have same dtype, but found {} and {}",
            a.dtype().scalar_type_name(),
            b.dtype().scalar_type_name()
        )));
    }
    let (ka, kb) = (a.numel(), b.numel());
    if ka != kb {
        return Err(TpuError::ShapeMismatch(format!(
            "inconsistent tensor size, expected tensor [{ka}] and src [{kb}] to have the same number of elements, but got {ka} and {kb} elements respectively"
        )));
    }
    let (x, y) = mxu_operands(Dot::NAME, a, b)?;
    // [1, 1, k] @ [1, k, 1].
    let r = product(
        &op,
        &relayout(&x, |l| l.unsqueeze(0)?.unsqueeze(0))?,
        &relayout(&y, |l| l.unsqueeze(1)?.unsqueeze(0))?,
        a.dtype(),
        &[],
        plain,
    )?;
    Ok(reshaped(&r, &[]))
}

/// `torch.mv(mat, vec)`: `[m, k] @ [k]`.
pub fn mv(mat: &Tensor, vec: &Tensor) -> Result<Tensor> {
    let op = OpScope::new(Mv::NAME, &[mat, vec])?;
    if mat.dim() != 2 || vec.dim() != 1 {
        return Err(TpuError::BadArgs(format!(
            "vector + matrix @ vector expected, got 1, {}, {}",
            mat.dim(),
            vec.dim()
        )));
    }
    let (m, k) = (mat.shape()[0], mat.shape()[1]);
    if vec.shape()[0] != k {
        return Err(TpuError::ShapeMismatch(format!(
            "size mismatch, got input ({m}), mat ({m}x{k}), vec ({})",
            vec.shape()[0]
        )));
    }
    same_dtype_mm(mat, vec)?;
    let (x, y) = mxu_operands(Mv::NAME, mat, vec)?;
    let r = product(
        &op,
        &relayout(&x, |l| l.unsqueeze(0))?,
        &relayout(&y, |l| l.unsqueeze(1)?.unsqueeze(0))?,
        mat.dtype(),
        &[],
        plain,
    )?;
    Ok(reshaped(&r, &[m]))
}

impl Tensor {
    /// `self.mm(mat2)`.
    pub fn mm(&self, mat2: &Tensor) -> Result<Tensor> {
        mm(self, mat2)
    }

    /// `self.bmm(mat2)`.
    pub fn bmm(&self, mat2: &Tensor) -> Result<Tensor> {
        bmm(self, mat2)
    }

    /// `self.dot(other)`.
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        dot(self, other)
    }

    /// `self.mv(vec)`.
    pub fn mv(&self, vec: &Tensor) -> Result<Tensor> {
        mv(self, vec)
    }
}

/// A two-operand product: the vector-unit path (`integer.rs`) when the first operand is an
/// integer tensor, else the matrix units.
fn by_dtype(
    rt: &Runtime,
    a: &Tensor,
    b: &Tensor,
    int: fn(&Runtime, &Tensor, &Tensor) -> Result<Tensor>,
    float: fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if a.dtype().is_int() {
        int(rt, a, b)
    } else {
        float(a, b)
    }
}

/// `addmm`/`baddbmm` on the matrix units: `(self, factor1, factor2, beta, alpha)`.
type AddProduct = fn(&Tensor, &Tensor, &Tensor, Scalar, Scalar) -> Result<Tensor>;

/// Their vector-unit forms (`integer.rs`), which take the runtime too.
type IntAddProduct = fn(&Runtime, &Tensor, &Tensor, &Tensor, Scalar, Scalar) -> Result<Tensor>;

/// An `addmm`-like product of `[self, factor1, factor2]`: the vector-unit path when the first
/// factor is an integer tensor, else the matrix units.
fn add_by_dtype(
    rt: &Runtime,
    [s, x, y]: [&Tensor; 3],
    beta: Scalar,
    alpha: Scalar,
    int: IntAddProduct,
    float: AddProduct,
) -> Result<Tensor> {
    if x.dtype().is_int() {
        int(rt, s, x, y, beta, alpha)
    } else {
        float(s, x, y, beta, alpha)
    }
}

// The registered overloads: one `#[aten]` function each (the struct comes from the schema).

#[aten("aten::mm", dtypes = DType::NUMERIC, shard = Sharding::Special(Special::Mm))]
fn mm_op(rt: &Runtime, a: Mm<'_>) -> Result<Tensor> {
    by_dtype(rt, a.self_, a.mat2, integer::mm, mm)
}

#[aten("aten::bmm", dtypes = DType::NUMERIC, shard = Sharding::Special(Special::Bmm))]
fn bmm_op(rt: &Runtime, a: Bmm<'_>) -> Result<Tensor> {
    by_dtype(rt, a.self_, a.mat2, integer::bmm, bmm)
}

#[aten("aten::addmm", dtypes = DType::NUMERIC, shard = Sharding::Special(Special::Addmm))]
fn addmm_op(rt: &Runtime, a: Addmm<'_>) -> Result<Tensor> {
    let ts = [a.self_, a.mat1, a.mat2];
    add_by_dtype(rt, ts, a.beta, a.alpha, integer::addmm, addmm)
}

#[aten("aten::baddbmm", dtypes = DType::NUMERIC, shard = Sharding::Special(Special::Baddbmm))]
fn baddbmm_op(rt: &Runtime, a: Baddbmm<'_>) -> Result<Tensor> {
    let ts = [a.self_, a.batch1, a.batch2];
    add_by_dtype(rt, ts, a.beta, a.alpha, integer::baddbmm, baddbmm)
}

#[aten("aten::dot", dtypes = DType::NUMERIC, shard = Sharding::Special(Special::Dot))]
fn dot_op(rt: &Runtime, a: Dot<'_>) -> Result<Tensor> {
    by_dtype(rt, a.self_, a.tensor, integer::dot, dot)
}

#[aten("aten::mv", dtypes = DType::NUMERIC, shard = Sharding::Special(Special::Mv))]
fn mv_op(rt: &Runtime, a: Mv<'_>) -> Result<Tensor> {
    by_dtype(rt, a.self_, a.vec, integer::mv, mv)
}
