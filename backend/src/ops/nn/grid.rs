//! `grid_sampler_2d` and `grid_sampler_3d`: every output position samples the input at the
//! grid's (x, y) or (x, y, z), with bilinear (trilinear), nearest or bicubic (tricubic)
//! interpolation and zeros, border or reflection padding.
//!
//! Four kernels: the input copied channels-last (a table of `[N·(D·)H·W, C]` rows); a tile
//! kernel over `[N, (Do,) Ho, Wo, taps]` computing each tap's row (after PyTorch's
//! unnormalisation, padding and reflection rules; taps outside the input get weight 0) and
//! weight (1 tap for nearest, 4 bilinear, 8 trilinear, 16 bicubic, 64 tricubic); the row-gather
//! kernel; and a rows kernel summing `weight·row` over the taps.
//!
//! Registered for float32 only: PyTorch's CPU kernel computes bfloat16 and float16 grids in
//! their own precision step by step (the golden cases show it), which this kernel does not
//! follow; half-precision calls fall back to the CPU.

use super::F;
use crate::dtype::{DType, Scalar};
use crate::error::{Result, TpuError};
use crate::ir::{BinOp, CmpKind, GatherNode, NodeKind, PRef, ProgBuilder, RedKind, UnOp};
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

/// The cubic convolution weight (`A = -0.75`) of the tap `d` (0..4) for the fraction `t`: at
/// distance `s = |t - (d - 1)|`, `((A+2)s - (A+3))s² + 1` within 1, else
/// `((A·s - 5A)·s + 8A)·s - 4A`.
fn cubic_at(p: &mut ProgBuilder, t: PRef, d: PRef) -> PRef {
    let a = -0.75;
    let one = f(p, 1.0);
    let dm = bin(p, BinOp::Sub, d, one);
    let s = bin(p, BinOp::Sub, t, dm);
    let s = p.un(UnOp::Abs, s, F);
    let a2 = f(p, a + 2.0);
    let r = bin(p, BinOp::Mul, a2, s);
    let a3 = f(p, a + 3.0);
    let r = bin(p, BinOp::Sub, r, a3);
    let r = bin(p, BinOp::Mul, r, s);
    let r = bin(p, BinOp::Mul, r, s);
    let near = bin(p, BinOp::Add, r, one);
    let ac = f(p, a);
    let q = bin(p, BinOp::Mul, ac, s);
    let c5 = f(p, 5.0 * a);
    let q = bin(p, BinOp::Sub, q, c5);
    let q = bin(p, BinOp::Mul, q, s);
    let c8 = f(p, 8.0 * a);
    let q = bin(p, BinOp::Add, q, c8);
    let q = bin(p, BinOp::Mul, q, s);
    let c4 = f(p, 4.0 * a);
    let far = bin(p, BinOp::Sub, q, c4);
    let inner = p.cmp(CmpKind::Le, s, one, F);
    p.select(inner, near, far, F)
}

/// The sampling problem: input size, modes, and the taps per output position.
#[derive(Clone, Copy)]
struct Sampler {
    n: usize,
    c: usize,
    /// Spatial dims: 2 (`grid_sampler_2d`) or 3 (`grid_sampler_3d`, with a depth).
    nd: usize,
    /// Input depth (1 in 2-d), height and width.
    ds: usize,
    hs: usize,
    ws: usize,
    /// Output depth (1 in 2-d), height and width.
    dout: usize,
    ho: usize,
    wo: usize,
    interpolation: i64,
    padding: i64,
    align: bool,
    /// Taps per output position: 1 (nearest), 4 (bilinear), 8 (trilinear), 16 (bicubic) or 64
    /// (tricubic).
    taps: usize,
}

impl Sampler {
    /// Taps per side of the tap square (2, or 4 for bicubic).
    fn side(&self) -> usize {
        if self.taps == 16 { 4 } else { 2 }
    }

    /// Nearest: the padded coordinates, rounded; weight 1.
    fn nearest_tap(&self, p: &mut ProgBuilder, ix: PRef, iy: PRef) -> (PRef, PRef, PRef) {
        let ix = pad_coord(p, ix, self.ws, self.padding, self.align);
        let iy = pad_coord(p, iy, self.hs, self.padding, self.align);
        let rx = p.un(UnOp::Round, ix, F);
        let ry = p.un(UnOp::Round, iy, F);
        (ry, rx, f(p, 1.0))
    }

    /// Bilinear tap `(dy, dx)` of the padded coordinates: its (y, x) and weight.
    fn bilinear_tap(
        &self,
        p: &mut ProgBuilder,
        (ix, iy): (PRef, PRef),
        (dxf, dyf): (PRef, PRef),
    ) -> (PRef, PRef, PRef) {
        let ix = pad_coord(p, ix, self.ws, self.padding, self.align);
        let iy = pad_coord(p, iy, self.hs, self.padding, self.align);
        let x0 = p.un(UnOp::Floor, ix, F);
        let y0 = p.un(UnOp::Floor, iy, F);
        let one = f(p, 1.0);
        let x1 = bin(p, BinOp::Add, x0, one);
        let y1 = bin(p, BinOp::Add, y0, one);
        // Tap (dy, dx): weight (dx ? ix - x0 : x1 - ix)·(dy ? iy - y0 : y1 - iy).
        let fx1 = bin(p, BinOp::Sub, x1, ix);
        let fx0 = bin(p, BinOp::Sub, ix, x0);
        let fy1 = bin(p, BinOp::Sub, y1, iy);
        let fy0 = bin(p, BinOp::Sub, iy, y0);
        let zero = f(p, 0.0);
        let dxb = p.cmp(CmpKind::Gt, dxf, zero, F);
        let dyb = p.cmp(CmpKind::Gt, dyf, zero, F);
        let wx = p.select(dxb, fx0, fx1, F);
        let wy = p.select(dyb, fy0, fy1, F);
        let wt = bin(p, BinOp::Mul, wx, wy);
        let ty = bin(p, BinOp::Add, y0, dyf);
        let tx = bin(p, BinOp::Add, x0, dxf);
        (ty, tx, wt)
    }

    /// Bicubic tap `(dy, dx)`: its padded (y, x) and weight.
    fn bicubic_tap(
        &self,
        p: &mut ProgBuilder,
        (ix, iy): (PRef, PRef),
        (dxf, dyf): (PRef, PRef),
    ) -> (PRef, PRef, PRef) {
        let x0 = p.un(UnOp::Floor, ix, F);
        let y0 = p.un(UnOp::Floor, iy, F);
        let txf = bin(p, BinOp::Sub, ix, x0);
        let tyf = bin(p, BinOp::Sub, iy, y0);
        // Tap d (0..4) sits at distance |t - (d - 1)| from the sample.
        let wx = cubic_at(p, txf, dxf);
        let wy = cubic_at(p, tyf, dyf);
        let wt = bin(p, BinOp::Mul, wx, wy);
        let one = f(p, 1.0);
        let yy = bin(p, BinOp::Add, y0, dyf);
        let yy = bin(p, BinOp::Sub, yy, one);
        let xx = bin(p, BinOp::Add, x0, dxf);
        let xx = bin(p, BinOp::Sub, xx, one);
        let yy = pad_coord(p, yy, self.hs, self.padding, self.align);
        let xx = pad_coord(p, xx, self.ws, self.padding, self.align);
        (yy, xx, wt)
    }

    /// The tap at (`ty`, `tx`) of batch `nn`: its table row and weight, both 0 outside the
    /// input (inside: 0 <= t <= size - 1, PyTorch's `within_bounds_2d`).
    fn row_and_weight(
        &self,
        p: &mut ProgBuilder,
        nn: PRef,
        (ty, tx, weight): (PRef, PRef, PRef),
    ) -> Vec<PRef> {
        let (hs, ws) = (self.hs, self.ws);
        let zero = f(p, 0.0);
        let hmax = f(p, hs as f64 - 1.0);
        let wmax = f(p, ws as f64 - 1.0);
        let c1 = p.cmp(CmpKind::Ge, ty, zero, F);
        let c2 = p.cmp(CmpKind::Le, ty, hmax, F);
        let c3 = p.cmp(CmpKind::Ge, tx, zero, F);
        let c4 = p.cmp(CmpKind::Le, tx, wmax, F);
        let mut all = p.cast(c1, I);
        for c in [c2, c3, c4] {
            let ci = p.cast(c, I);
            all = p.bin(BinOp::And, all, ci, I);
        }
        let inside = p.cast(all, DType::Bool);
        let yi = p.cast(ty, I);
        let xi = p.cast(tx, I);
        let wsc = p.constant(Scalar::Int(ws as i64), I);
        let hw = p.constant(Scalar::Int((hs * ws) as i64), I);
        let row = p.bin(BinOp::Mul, yi, wsc, I);
        let row = p.bin(BinOp::Add, row, xi, I);
        let base = p.bin(BinOp::Mul, nn, hw, I);
        let row = p.bin(BinOp::Add, base, row, I);
        let zi = p.constant(Scalar::Int(0), I);
        let row = p.select(inside, row, zi, I);
        let wt = p.select(inside, weight, zero, F);
        vec![row, wt]
    }

    /// Kernel 2: per output position and tap, `[N, (Do,) Ho, Wo, taps]`, the row to read (0
    /// where the tap is outside, with weight 0) and the weight.
    fn tap_rows(&self, op: &OpScope, grid: &Tensor) -> Result<(Tensor, Tensor)> {
        if self.nd == 3 {
            self.tap_rows_3d(op, grid)
        } else {
            self.tap_rows_2d(op, grid)
        }
    }

    /// [`Self::tap_rows`] of a 3-d sampler: taps 1 (nearest), 8 (trilinear: bit `k` of the tap
    /// its offset along x, y, z) or 64 (tricubic: base-4 digits).
    fn tap_rows_3d(&self, op: &OpScope, grid: &Tensor) -> Result<(Tensor, Tensor)> {
        let Sampler {
            n,
            dout,
            ho,
            wo,
            taps,
            ..
        } = *self;
        let gl = grid.layout();
        let shape = vec![n, dout, ho, wo, taps];
        let coord = |k: usize| {
            grid.with_layout(Layout {
                shape: shape.clone(),
                strides: vec![
                    gl.strides[0],
                    gl.strides[1],
                    gl.strides[2],
                    gl.strides[3],
                    0,
                ],
                offset: (gl.offset as isize + k as isize * gl.strides[4]) as usize,
            })
        };
        let (gx, gy, gz) = (coord(0), coord(1), coord(2));
        let mut tw = map_shape(op, &shape, &[&gx, &gy, &gz], &[DType::I32, F], |p, r| {
            let t = p.index(4);
            let nn = p.index(0);
            let sizes = [self.ws, self.hs, self.ds];
            let mut raw = Vec::new();
            for (k, &size) in sizes.iter().enumerate() {
                let g = p.cast(r[k], F);
                raw.push(unnormalize(p, g, size, self.align));
            }
            let (taps_at, weight) = match self.interpolation {
                1 => {
                    let mut rounded = Vec::new();
                    for (&c, &size) in raw.iter().zip(&sizes) {
                        let c = pad_coord(p, c, size, self.padding, self.align);
                        rounded.push(p.un(UnOp::Round, c, F));
                    }
                    (rounded, f(p, 1.0))
                }
                0 => {
                    // Tap bit k: the far corner along coordinate k, weight c - c0; else c1 - c.
                    let mut taps_at = Vec::new();
                    let mut weight = None;
                    for (k, (&c, &size)) in raw.iter().zip(&sizes).enumerate() {
                        let c = pad_coord(p, c, size, self.padding, self.align);
                        let c0 = p.un(UnOp::Floor, c, F);
                        let one = f(p, 1.0);
                        let c1 = bin(p, BinOp::Add, c0, one);
                        let near = bin(p, BinOp::Sub, c1, c);
                        let far = bin(p, BinOp::Sub, c, c0);
                        let bit = p.constant(Scalar::Int(1 << k), I);
                        let on = p.bin(BinOp::And, t, bit, I);
                        let zero_i = p.constant(Scalar::Int(0), I);
                        let is_far = p.cmp(CmpKind::Ne, on, zero_i, I);
                        let w = p.select(is_far, far, near, F);
                        taps_at.push(p.select(is_far, c1, c0, F));
                        weight = Some(match weight {
                            None => w,
                            Some(acc) => bin(p, BinOp::Mul, acc, w),
                        });
                    }
                    (taps_at, weight.expect("three coordinates"))
                }
                _ => {
                    // Tricubic: tap digit k (base 4) is the offset d along coordinate k, at
                    // floor(c) + d - 1, padded, with the cubic weight of the fraction.
                    let mut taps_at = Vec::new();
                    let mut weight = None;
                    let four = p.constant(Scalar::Int(4), I);
                    let mut rest = t;
                    for (&c, &size) in raw.iter().zip(&sizes) {
                        let d = p.bin(BinOp::Rem, rest, four, I);
                        rest = p.bin(BinOp::Div, rest, four, I);
                        let df = p.cast(d, F);
                        let c0 = p.un(UnOp::Floor, c, F);
                        let frac = bin(p, BinOp::Sub, c, c0);
                        let w = cubic_at(p, frac, df);
                        let one = f(p, 1.0);
                        let at = bin(p, BinOp::Add, c0, df);
                        let at = bin(p, BinOp::Sub, at, one);
                        taps_at.push(pad_coord(p, at, size, self.padding, self.align));
                        weight = Some(match weight {
                            None => w,
                            Some(acc) => bin(p, BinOp::Mul, acc, w),
                        });
                    }
                    (taps_at, weight.expect("three coordinates"))
                }
            };
            self.row_and_weight_3d(p, nn, &taps_at, weight)
        })?;
        let weights = tw.remove(1);
        Ok((tw.remove(0), weights))
    }

    /// [`Self::row_and_weight`] of a 3-d sampler: the tap at `at` (x, y, z).
    fn row_and_weight_3d(
        &self,
        p: &mut ProgBuilder,
        nn: PRef,
        at: &[PRef],
        weight: PRef,
    ) -> Vec<PRef> {
        let sizes = [self.ws, self.hs, self.ds];
        let zero = f(p, 0.0);
        let mut inside = None;
        for (&c, &size) in at.iter().zip(&sizes) {
            let hi = f(p, size as f64 - 1.0);
            let ge = p.cmp(CmpKind::Ge, c, zero, F);
            let le = p.cmp(CmpKind::Le, c, hi, F);
            let both = p.bin(BinOp::And, ge, le, DType::Bool);
            inside = Some(match inside {
                None => both,
                Some(acc) => p.bin(BinOp::And, acc, both, DType::Bool),
            });
        }
        let inside = inside.expect("three coordinates");
        // ((nn·D + z)·H + y)·W + x.
        let mut row = nn;
        for (&c, &size) in at.iter().zip(&sizes).rev() {
            let ci = p.cast(c, I);
            let sc = p.constant(Scalar::Int(size as i64), I);
            let scaled = p.bin(BinOp::Mul, row, sc, I);
            row = p.bin(BinOp::Add, scaled, ci, I);
        }
        let zi = p.constant(Scalar::Int(0), I);
        let row = p.select(inside, row, zi, I);
        let wt = p.select(inside, weight, zero, F);
        vec![row, wt]
    }

    /// [`Self::tap_rows`] of a 2-d sampler.
    fn tap_rows_2d(&self, op: &OpScope, grid: &Tensor) -> Result<(Tensor, Tensor)> {
        let Sampler {
            n, ho, wo, taps, ..
        } = *self;
        let gl = grid.layout();
        let coord = |k: usize| {
            grid.with_layout(Layout {
                shape: vec![n, ho, wo, taps],
                strides: vec![gl.strides[0], gl.strides[1], gl.strides[2], 0],
                offset: (gl.offset as isize + k as isize * gl.strides[3]) as usize,
            })
        };
        let (gx, gy) = (coord(0), coord(1));
        let mut tw = map_shape(
            op,
            &[n, ho, wo, taps],
            &[&gx, &gy],
            &[DType::I32, F],
            |p, r| {
                let t = p.index(3);
                let nn = p.index(0);
                let gxf = p.cast(r[0], F);
                let gyf = p.cast(r[1], F);
                let ix = unnormalize(p, gxf, self.ws, self.align);
                let iy = unnormalize(p, gyf, self.hs, self.align);
                let sd = p.constant(Scalar::Int(self.side() as i64), I);
                let dy = p.bin(BinOp::Div, t, sd, I);
                let dx = p.bin(BinOp::Rem, t, sd, I);
                let dyf = p.cast(dy, F);
                let dxf = p.cast(dx, F);
                let tap = match self.interpolation {
                    1 => self.nearest_tap(p, ix, iy),
                    0 => self.bilinear_tap(p, (ix, iy), (dxf, dyf)),
                    _ => self.bicubic_tap(p, (ix, iy), (dxf, dyf)),
                };
                self.row_and_weight(p, nn, tap)
            },
        )?;
        let weights = tw.remove(1);
        Ok((tw.remove(0), weights))
    }

    /// Kernel 3: the taps' rows of `table`, gathered: `[N·(Do·)Ho·Wo·T, C]`.
    fn gather(&self, op: &OpScope, table: &Tensor, rows_idx: &Tensor) -> Result<Tensor> {
        let Sampler {
            n,
            c,
            ds,
            hs,
            ws,
            dout,
            ho,
            wo,
            taps,
            ..
        } = *self;
        let count = n * dout * ho * wo * taps;
        let gathered = Tensor::empty(op.rt(), &[count, c], table.dtype())?;
        op.submit(
            NodeKind::Gather(GatherNode {
                rows: n * ds * hs * ws,
                row_len: c,
                count,
                check_bounds: true,
                zero_table: false,
            }),
            vec![
                table
                    .with_layout(Layout::contiguous(&[n * ds * hs * ws, c]))
                    .view(),
                rows_idx.with_layout(Layout::contiguous(&[count])).view(),
            ],
            vec![gathered.view()],
        )?;
        Ok(gathered)
    }

    /// Kernel 4: the weighted sum over the taps, `[N, C, (Do,) Ho, Wo]`.
    fn weighted_sum(&self, op: &OpScope, gathered: &Tensor, weights: &Tensor) -> Result<Tensor> {
        let Sampler { n, c, taps, nd, .. } = *self;
        let outs: &[usize] = if nd == 3 {
            &[self.dout, self.ho, self.wo]
        } else {
            &[self.ho, self.wo]
        };
        let mut shape = vec![n, c];
        shape.extend_from_slice(outs);
        shape.push(taps);
        let t = taps as isize;
        let cc = c as isize;
        // Positions after each output dim (row-major), for the strides.
        let after = |k: usize| outs[k + 1..].iter().product::<usize>() as isize;
        let all = outs.iter().product::<usize>() as isize;
        let mut gs = vec![all * t * cc, 1];
        gs.extend((0..outs.len()).map(|k| after(k) * t * cc));
        gs.push(cc);
        let gv = gathered.with_layout(Layout {
            shape: shape.clone(),
            strides: gs,
            offset: 0,
        });
        let mut ws = vec![all * t, 0];
        ws.extend((0..outs.len()).map(|k| after(k) * t));
        ws.push(1);
        let wv = weights.with_layout(Layout {
            shape: shape.clone(),
            strides: ws,
            offset: 0,
        });
        Ok(rows(
            op,
            &shape,
            &[nd + 2],
            false,
            &[&gv, &wv],
            &[false, false],
            &[(gathered.dtype(), true)],
            |p, r| {
                let g = p.cast(r[0], F);
                let w = p.cast(r[1], F);
                let m = bin(p, BinOp::Mul, g, w);
                vec![p.reduce(RedKind::Sum, m, F)]
            },
        )?
        .remove(0))
    }
}

/// The argument checks of `grid_sampler_{2,3}d` (`nd` spatial dims).
fn check_args(
    name: &str,
    nd: usize,
    x: &Tensor,
    grid: &Tensor,
    interpolation: i64,
    padding: i64,
) -> Result<()> {
    let d = nd + 2;
    if x.dim() != d
        || grid.dim() != d
        || grid.shape()[d - 1] != nd
        || grid.shape()[0] != x.shape()[0]
    {
        let dims = if nd == 3 { "D, H, W" } else { "H, W" };
        return Err(TpuError::ShapeMismatch(format!(
            "{name}: expected {d}-D input and a [N, {dims}, {nd}] grid with the same batch size, but got input {:?} and grid {:?}",
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
    Ok(())
}

/// `torch.grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)`.
pub fn grid_sampler_2d(
    x: &Tensor,
    grid: &Tensor,
    interpolation: i64,
    padding: i64,
    align: bool,
) -> Result<Tensor> {
    grid_sampler(
        "aten::grid_sampler_2d",
        2,
        x,
        grid,
        interpolation,
        padding,
        align,
    )
}

/// `torch.grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners)`.
pub fn grid_sampler_3d(
    x: &Tensor,
    grid: &Tensor,
    interpolation: i64,
    padding: i64,
    align: bool,
) -> Result<Tensor> {
    grid_sampler(
        "aten::grid_sampler_3d",
        3,
        x,
        grid,
        interpolation,
        padding,
        align,
    )
}

/// The sampler of `nd` spatial dims.
fn grid_sampler(
    name: &str,
    nd: usize,
    x: &Tensor,
    grid: &Tensor,
    interpolation: i64,
    padding: i64,
    align: bool,
) -> Result<Tensor> {
    let op = OpScope::new(name, &[x, grid])?;
    check_args(name, nd, x, grid, interpolation, padding)?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    // Depth 1 in 2-d.
    let xs = &x.shape()[2..];
    let gs = &grid.shape()[1..nd + 1];
    let (ds, hs, ws) = if nd == 3 {
        (xs[0], xs[1], xs[2])
    } else {
        (1, xs[0], xs[1])
    };
    let (dout, ho, wo) = if nd == 3 {
        (gs[0], gs[1], gs[2])
    } else {
        (1, gs[0], gs[1])
    };
    let dt = x.dtype();
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(gs);
    if n * c * dout * ho * wo == 0 || ds * hs * ws == 0 {
        return Ok(map_shape(&op, &out_shape, &[], &[dt], |p, _| {
            vec![p.constant(Scalar::Int(0), dt)]
        })?
        .remove(0));
    }
    // 1. The input channels-last, as a table of `[N·(D·)H·W, C]` rows.
    let xl = x.layout();
    let perm: Vec<i64> = if nd == 3 {
        vec![0, 2, 3, 4, 1]
    } else {
        vec![0, 2, 3, 1]
    };
    let xp = x.with_layout(xl.permute(&perm)?);
    let table = map_shape(&op, xp.shape(), &[&xp], &[dt], |_, r| vec![r[0]])?.remove(0);
    let sampler = Sampler {
        n,
        c,
        nd,
        ds,
        hs,
        ws,
        dout,
        ho,
        wo,
        interpolation,
        padding,
        align,
        taps: match (interpolation, nd) {
            (1, _) => 1,
            (0, 3) => 8,
            (0, _) => 4,
            (_, 3) => 64,
            _ => 16,
        },
    };
    let (rows_idx, weights) = sampler.tap_rows(&op, grid)?;
    let gathered = sampler.gather(&op, &table, &rows_idx)?;
    sampler.weighted_sum(&op, &gathered, &weights)
}
