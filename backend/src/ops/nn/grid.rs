//! `grid_sampler_2d`: every output position samples the input at the grid's (x, y), with
//! bilinear, nearest or bicubic interpolation and zeros, border or reflection padding.
//!
//! One rows kernel over `[N, C, Ho, Wo, H·W]`: the row is the whole input plane, the grid's two
//! coordinates are per-row inputs, and the program computes the sample's taps (their positions
//! after PyTorch's unnormalisation, padding and reflection rules, and their weights) and sums
//! `weight·x` over the plane elements a tap lands on. The work grows with `H·W` per output (a
//! gather on the host side of a TPU would not); it is exact, not fast.

use super::F;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, PRef, ProgBuilder, RedKind, UnOp};
use crate::layout::Layout;
use crate::ops::helpers::{OpScope, map_shape, rows};
use crate::tensor::Tensor;

const I: DType = DType::I32;

fn f(p: &mut ProgBuilder, v: f64) -> PRef {
    p.constant(Scalar::Float(v), F)
}

fn bin(p: &mut ProgBuilder, op: BinOp, a: PRef, b: PRef) -> PRef {
    p.bin(op, a, b, F)
}

/// PyTorch's `grid_sampler_unnormalize`.
fn unnormalize(p: &mut ProgBuilder, c: PRef, size: usize, align: bool) -> PRef {
    let one = f(p, 1.0);
    let c1 = bin(p, BinOp::Add, c, one);
    if align {
        let k = f(p, (size as f64 - 1.0) / 2.0);
        bin(p, BinOp::Mul, c1, k)
    } else {
        let s = f(p, size as f64);
        let m = bin(p, BinOp::Mul, c1, s);
        let m = bin(p, BinOp::Sub, m, one);
        let h = f(p, 0.5);
        bin(p, BinOp::Mul, m, h)
    }
}

/// `clip_coordinates`: into `[0, size - 1]`.
fn clip(p: &mut ProgBuilder, c: PRef, size: usize) -> PRef {
    let zero = f(p, 0.0);
    let hi = f(p, size as f64 - 1.0);
    let c = bin(p, BinOp::Max, c, zero);
    bin(p, BinOp::Min, c, hi)
}

/// `reflect_coordinates(c, twice_low, twice_high)`.
fn reflect(p: &mut ProgBuilder, c: PRef, twice_low: i64, twice_high: i64) -> PRef {
    if twice_low == twice_high {
        return f(p, 0.0);
    }
    let min = f(p, twice_low as f64 / 2.0);
    let span = f(p, (twice_high - twice_low) as f64 / 2.0);
    let d = bin(p, BinOp::Sub, c, min);
    let d = p.un(UnOp::Abs, d, F);
    let extra = bin(p, BinOp::Rem, d, span);
    let q = bin(p, BinOp::Div, d, span);
    let flips = p.un(UnOp::Floor, q, F);
    let two = f(p, 2.0);
    let half = bin(p, BinOp::Div, flips, two);
    let hf = p.un(UnOp::Floor, half, F);
    let even2 = bin(p, BinOp::Mul, hf, two);
    let even = p.cmp(CmpKind::Eq, flips, even2, F);
    let a = bin(p, BinOp::Add, extra, min);
    let b = bin(p, BinOp::Sub, span, extra);
    let b = bin(p, BinOp::Add, b, min);
    p.select(even, a, b, F)
}

/// The padding mode applied to a coordinate (`compute_coordinates`).
fn pad_coord(p: &mut ProgBuilder, c: PRef, size: usize, padding: i64, align: bool) -> PRef {
    match padding {
        1 => clip(p, c, size),
        2 => {
            let s = size as i64;
            let r = if align {
                reflect(p, c, 0, 2 * (s - 1))
            } else {
                reflect(p, c, -1, 2 * s - 1)
            };
            clip(p, r, size)
        }
        _ => c,
    }
}

/// The weight `w` where the tap `(ty, tx)` (f32 coordinates holding integers) lands on the row
/// element `(h, w)` and is inside the input, else 0.
#[allow(clippy::too_many_arguments)]
fn tap(
    p: &mut ProgBuilder,
    ty: PRef,
    tx: PRef,
    h: PRef,
    w: PRef,
    wt: PRef,
    hs: usize,
    ws: usize,
) -> PRef {
    let yi = p.cast(ty, I);
    let xi = p.cast(tx, I);
    let zero = f(p, 0.0);
    // Inside: 0 <= t <= size - 1 (checked on the float coordinate, as PyTorch's `within_bounds_2d`).
    let hmax = f(p, hs as f64 - 1.0);
    let wmax = f(p, ws as f64 - 1.0);
    let c1 = p.cmp(CmpKind::Ge, ty, zero, F);
    let c2 = p.cmp(CmpKind::Le, ty, hmax, F);
    let c3 = p.cmp(CmpKind::Ge, tx, zero, F);
    let c4 = p.cmp(CmpKind::Le, tx, wmax, F);
    let e1 = p.cmp(CmpKind::Eq, yi, h, I);
    let e2 = p.cmp(CmpKind::Eq, xi, w, I);
    let mut all = p.cast(c1, I);
    for c in [c2, c3, c4, e1, e2] {
        let ci = p.cast(c, I);
        all = p.bin(BinOp::And, all, ci, I);
    }
    let hit = p.cast(all, DType::Bool);
    p.select(hit, wt, zero, F)
}

fn cubic(p: &mut ProgBuilder, t: PRef) -> [PRef; 4] {
    let a = -0.75;
    let one = f(p, 1.0);
    let two = f(p, 2.0);
    let far = |p: &mut ProgBuilder, x: PRef| {
        let ac = f(p, a);
        let r = bin(p, BinOp::Mul, ac, x);
        let c5 = f(p, 5.0 * a);
        let r = bin(p, BinOp::Sub, r, c5);
        let r = bin(p, BinOp::Mul, r, x);
        let c8 = f(p, 8.0 * a);
        let r = bin(p, BinOp::Add, r, c8);
        let r = bin(p, BinOp::Mul, r, x);
        let c4 = f(p, 4.0 * a);
        bin(p, BinOp::Sub, r, c4)
    };
    let near = |p: &mut ProgBuilder, x: PRef| {
        let a2 = f(p, a + 2.0);
        let r = bin(p, BinOp::Mul, a2, x);
        let a3 = f(p, a + 3.0);
        let r = bin(p, BinOp::Sub, r, a3);
        let r = bin(p, BinOp::Mul, r, x);
        let r = bin(p, BinOp::Mul, r, x);
        let one = f(p, 1.0);
        bin(p, BinOp::Add, r, one)
    };
    let t1 = bin(p, BinOp::Add, t, one);
    let u = bin(p, BinOp::Sub, one, t);
    let u2 = bin(p, BinOp::Sub, two, t);
    [far(p, t1), near(p, t), near(p, u), far(p, u2)]
}

/// `torch.grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)`.
pub fn grid_sampler_2d(
    x: &Tensor,
    grid: &Tensor,
    interpolation: i64,
    padding: i64,
    align: bool,
) -> Result<Tensor> {
    let name = "aten::grid_sampler_2d";
    let op = OpScope::new(name, &[x, grid])?;
    if x.dim() != 4 || grid.dim() != 4 || grid.shape()[3] != 2 || grid.shape()[0] != x.shape()[0] {
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: expected 4-D input and a [N, H, W, 2] grid with the same batch size, but got input {:?} and grid {:?}",
            x.shape(),
            grid.shape()
        )));
    }
    if !(0..=2).contains(&interpolation) || !(0..=2).contains(&padding) {
        return Err(TpuError::BadArgs(format!(
            "{name}: interpolation_mode {interpolation} or padding_mode {padding} is not one of 0, 1, 2"
        )));
    }
    if x.dtype() != grid.dtype() {
        return Err(TpuError::DtypeMismatch(format!(
            "{name}: expected input and grid to have the same dtype, but input has {} and grid has {}",
            x.dtype().name(),
            grid.dtype().name()
        )));
    }
    let (n, c, hs, ws) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (ho, wo) = (grid.shape()[1], grid.shape()[2]);
    let dt = x.dtype();
    let out_shape = [n, c, ho, wo];
    if n * c * ho * wo == 0 || hs * ws == 0 {
        return Ok(map_shape(&op, &out_shape, &[], &[dt], |p, _| {
            vec![p.constant(Scalar::Int(0), dt)]
        })?
        .remove(0));
    }
    let shape = vec![n, c, ho, wo, hs, ws];
    let xl = x.layout();
    let xv = x.with_layout(Layout {
        shape: shape.clone(),
        strides: vec![
            xl.strides[0],
            xl.strides[1],
            0,
            0,
            xl.strides[2],
            xl.strides[3],
        ],
        offset: xl.offset,
    });
    let gl = grid.layout();
    let coord = |k: usize| {
        grid.with_layout(Layout {
            shape: vec![n, c, ho, wo],
            strides: vec![gl.strides[0], 0, gl.strides[1], gl.strides[2]],
            offset: (gl.offset as isize + k as isize * gl.strides[3]) as usize,
        })
    };
    let (gx, gy) = (coord(0), coord(1));
    let y = rows(
        &op,
        &shape,
        &[4, 5],
        false,
        &[&xv, &gx, &gy],
        &[false, true, true],
        &[(dt, true)],
        |p, r| {
            let h = p.index(4);
            let w = p.index(5);
            let gxf = p.cast(r[1], F);
            let gyf = p.cast(r[2], F);
            let ix = unnormalize(p, gxf, ws, align);
            let iy = unnormalize(p, gyf, hs, align);
            let v = p.cast(r[0], F);
            let weight = match interpolation {
                0 | 1 => {
                    let ix = pad_coord(p, ix, ws, padding, align);
                    let iy = pad_coord(p, iy, hs, padding, align);
                    if interpolation == 1 {
                        let rx = p.un(UnOp::Round, ix, F);
                        let ry = p.un(UnOp::Round, iy, F);
                        let one = f(p, 1.0);
                        tap(p, ry, rx, h, w, one, hs, ws)
                    } else {
                        let x0 = p.un(UnOp::Floor, ix, F);
                        let y0 = p.un(UnOp::Floor, iy, F);
                        let one = f(p, 1.0);
                        let x1 = bin(p, BinOp::Add, x0, one);
                        let y1 = bin(p, BinOp::Add, y0, one);
                        let fx1 = bin(p, BinOp::Sub, x1, ix);
                        let fx0 = bin(p, BinOp::Sub, ix, x0);
                        let fy1 = bin(p, BinOp::Sub, y1, iy);
                        let fy0 = bin(p, BinOp::Sub, iy, y0);
                        let nw = bin(p, BinOp::Mul, fx1, fy1);
                        let ne = bin(p, BinOp::Mul, fx0, fy1);
                        let sw = bin(p, BinOp::Mul, fx1, fy0);
                        let se = bin(p, BinOp::Mul, fx0, fy0);
                        let a = tap(p, y0, x0, h, w, nw, hs, ws);
                        let b = tap(p, y0, x1, h, w, ne, hs, ws);
                        let c_ = tap(p, y1, x0, h, w, sw, hs, ws);
                        let d = tap(p, y1, x1, h, w, se, hs, ws);
                        let ab = bin(p, BinOp::Add, a, b);
                        let cd = bin(p, BinOp::Add, c_, d);
                        bin(p, BinOp::Add, ab, cd)
                    }
                }
                _ => {
                    // Bicubic: the unpadded coordinate's 4x4 neighbourhood, each tap padded.
                    let x0 = p.un(UnOp::Floor, ix, F);
                    let y0 = p.un(UnOp::Floor, iy, F);
                    let tx = bin(p, BinOp::Sub, ix, x0);
                    let ty = bin(p, BinOp::Sub, iy, y0);
                    let cx = cubic(p, tx);
                    let cy = cubic(p, ty);
                    let mut acc = f(p, 0.0);
                    for (a, wy) in cy.iter().enumerate() {
                        let oy = f(p, a as f64 - 1.0);
                        let yy = bin(p, BinOp::Add, y0, oy);
                        let yy = pad_coord(p, yy, hs, padding, align);
                        for (b, wx) in cx.iter().enumerate() {
                            let ox = f(p, b as f64 - 1.0);
                            let xx = bin(p, BinOp::Add, x0, ox);
                            let xx = pad_coord(p, xx, ws, padding, align);
                            let wt = bin(p, BinOp::Mul, *wy, *wx);
                            let t = tap(p, yy, xx, h, w, wt, hs, ws);
                            acc = bin(p, BinOp::Add, acc, t);
                        }
                    }
                    acc
                }
            };
            let prod = bin(p, BinOp::Mul, weight, v);
            vec![p.reduce(RedKind::Sum, prod, F)]
        },
    )?
    .remove(0);
    Ok(y)
}
