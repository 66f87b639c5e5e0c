//! `im2col` and `col2im` as operators (`aten::im2col`, `aten::col2im`, 2-D windows only):
//! the same column copy and column sum that `conv.rs` lowers convolutions to, exposed on their
//! own, with the argument checks of PyTorch's `F.unfold` and `F.fold`.

use super::conv::{materialize_if_needed, reshape, to_usize, unbatch, zeros_plus_bias};
use super::window::{Window, col2im, im2col, materialize, per_dim};
use crate::error::{Result, TpuError};
use crate::ops::helpers::OpScope;
use crate::tensor::Tensor;

/// The 2-D window of `im2col`/`col2im` over spatial size `input`.
fn window_2d(
    name: &str,
    input: &[usize],
    kernel: &[i64],
    dilation: &[i64],
    padding: &[i64],
    stride: &[i64],
) -> Result<Window> {
    let k = to_usize(
        name,
        "kernel_size",
        &per_dim(name, "kernel_size", kernel, 2, 1)?,
        1,
    )?;
    let d = to_usize(
        name,
        "dilation",
        &per_dim(name, "dilation", dilation, 2, 1)?,
        1,
    )?;
    let p = to_usize(
        name,
        "padding",
        &per_dim(name, "padding", padding, 2, 0)?,
        0,
    )?;
    let s = to_usize(name, "stride", &per_dim(name, "stride", stride, 2, 1)?, 1)?;
    Window::new(input, &k, &s, &p, &d, false).ok_or_else(|| {
        TpuError::BadArgs(format!(
            "{name}: Given input with spatial size {input:?}, kernel_size={k:?}, dilation={d:?}, padding={p:?}, calculated shape of the array of sliding blocks is non-positive"
        ))
    })
}

/// `torch.ops.aten.im2col(x, kernel_size, dilation, padding, stride)` (`F.unfold`):
/// `[N, C, H, W]` to `[N, C·kh·kw, L]`, one tile kernel over the windows' view.
pub fn im2col_op(
    x: &Tensor,
    kernel: &[i64],
    dilation: &[i64],
    padding: &[i64],
    stride: &[i64],
) -> Result<Tensor> {
    let name = "aten::im2col";
    let op = OpScope::new(name, &[x])?;
    let (xb, was) = if x.dim() == 3 {
        (x.with_layout(x.layout().unsqueeze(0)?), true)
    } else if x.dim() == 4 {
        (x.clone(), false)
    } else {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected 3D or 4D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions, but got: {:?}",
            x.shape()
        )));
    };
    let w = window_2d(name, &xb.shape()[2..], kernel, dilation, padding, stride)?;
    let (n, c) = (xb.shape()[0], xb.shape()[1]);
    let cols = im2col(&op, &xb, &w)?;
    let r = reshape(&cols, &[n, c * w.k_numel(), w.out_numel()])?;
    unbatch(r, was)
}

/// `torch.ops.aten.col2im(cols, output_size, kernel_size, dilation, padding, stride)`
/// (`F.fold`): `[N, C·kh·kw, L]` summed into `[N, C, H, W]` ([`col2im`]: one tile kernel per
/// kernel offset, f32 accumulation).
pub fn col2im_op(
    cols: &Tensor,
    output_size: &[i64],
    kernel: &[i64],
    dilation: &[i64],
    padding: &[i64],
    stride: &[i64],
) -> Result<Tensor> {
    let name = "aten::col2im";
    let op = OpScope::new(name, &[cols])?;
    let (cb, was) = if cols.dim() == 2 {
        (cols.with_layout(cols.layout().unsqueeze(0)?), true)
    } else if cols.dim() == 3 {
        (cols.clone(), false)
    } else {
        return Err(TpuError::BadArgs(format!(
            "{name}: Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for input, but got: {:?}",
            cols.shape()
        )));
    };
    let out = to_usize(
        name,
        "output_size",
        &per_dim(name, "output_size", output_size, 2, 1)?,
        1,
    )?;
    let w = window_2d(name, &out, kernel, dilation, padding, stride)?;
    let kp = w.k_numel();
    let (n, ck, l) = (cb.shape()[0], cb.shape()[1], cb.shape()[2]);
    if kp == 0 || !ck.is_multiple_of(kp) || l != w.out_numel() {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: Expected size of input's dimension 1 to be divisible by the product of kernel_size ({kp}) and dimension 2 to match the calculated number of sliding blocks {}, but got input of size {:?}",
            w.out_numel(),
            cols.shape()
        )));
    }
    let c = ck / kp;
    let mut shape = vec![n, c];
    shape.extend_from_slice(&w.k);
    shape.extend_from_slice(&w.out);
    let cc = materialize_if_needed(&op, &cb)?;
    let cv = reshape(&cc, &shape)?;
    let mut oshape = vec![n, c];
    oshape.extend_from_slice(&out);
    let r = if n * c == 0 {
        zeros_plus_bias(&op, &oshape, None, cols.dtype())?
    } else {
        let acc = col2im(&op, &cv, &w)?;
        materialize(&op, &acc, cols.dtype())?
    };
    unbatch(r, was)
}
