//! The registered resampling overloads: `upsample_*` forward and backward (plain and `.vec`
//! forms), `grid_sampler_2d` and the pixel and channel shuffles, with the argument parsing
//! they share (`output_size` or `scale_factors`, `align_corners`).

use super::*;

/// A `float[]?` argument.
fn opt_floats(a: &Args, i: usize) -> Result<Option<Vec<f64>>> {
    match a.get(i) {
        None => Ok(None),
        Some(Value::Floats(v)) => Ok(Some(v.clone())),
        Some(Value::Ints(v)) => Ok(Some(v.iter().map(|&x| x as f64).collect())),
        Some(_) => Err(crate::error::TpuError::BadArgs(format!(
            "{}(): argument {i} must be float[]",
            a.op()
        ))),
    }
}

/// Runs an `upsample_*` overload: `align` says whether it has `align_corners` (argument 2);
/// the `.vec` form takes `output_size?` and `scale_factors?`, the plain one `output_size` and
/// one optional scale per dim.
fn run_upsample(
    a: &Args,
    name: &str,
    nd: usize,
    mode: Interp,
    has_align: bool,
    vec_form: bool,
) -> Result<Vec<Value>> {
    let x = a.tensor(0)?;
    let align = has_align && a.bool(2)?;
    let first_scale = if has_align { 3 } else { 2 };
    let (size, scales) = if vec_form {
        let o = a.opt_ints(1)?;
        let s = opt_floats(a, first_scale)?;
        sizes_of(name, x, nd, o.as_deref(), s.as_deref())?
    } else {
        let s: Vec<Option<f64>> = (0..nd)
            .map(|i| a.opt_float(first_scale + i))
            .collect::<Result<_>>()?;
        (a.ints(1)?, s)
    };
    t1(upsample(name, nd, x, &size, align, &scales, mode))
}

/// Runs an `upsample_*_backward` overload (`grad, output_size, input_size, [align_corners,]
/// scales...`).
fn run_upsample_backward(
    a: &Args,
    name: &str,
    nd: usize,
    mode: Interp,
    has_align: bool,
) -> Result<Vec<Value>> {
    let align = has_align && a.bool(3)?;
    let first = if has_align { 4 } else { 3 };
    let s: Vec<Option<f64>> = (0..nd)
        .map(|i| a.opt_float(first + i))
        .collect::<Result<_>>()?;
    t1(upsample_backward(
        name,
        nd,
        a.tensor(0)?,
        &a.ints(1)?,
        &a.ints(2)?,
        align,
        &s,
        mode,
    ))
}

/// The registered resampling and shuffle overloads.
pub(super) fn defs() -> Vec<OpDef> {
    let float = DType::FLOATING;
    let k = OpImpl::Kernel;
    let windows = "spatial windows cross shard boundaries";
    vec![
        OpDef::new("aten::upsample_nearest1d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_nearest1d",
                1,
                Interp::Nearest,
                false,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest1d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_nearest1d.vec",
                1,
                Interp::Nearest,
                false,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest2d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_nearest2d",
                2,
                Interp::Nearest,
                false,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest2d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_nearest2d.vec",
                2,
                Interp::Nearest,
                false,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest3d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_nearest3d",
                3,
                Interp::Nearest,
                false,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest3d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_nearest3d.vec",
                3,
                Interp::Nearest,
                false,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_upsample_nearest_exact1d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::_upsample_nearest_exact1d",
                1,
                Interp::NearestExact,
                false,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_upsample_nearest_exact1d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::_upsample_nearest_exact1d.vec",
                1,
                Interp::NearestExact,
                false,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_upsample_nearest_exact2d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::_upsample_nearest_exact2d",
                2,
                Interp::NearestExact,
                false,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_upsample_nearest_exact2d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::_upsample_nearest_exact2d.vec",
                2,
                Interp::NearestExact,
                false,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_upsample_nearest_exact3d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::_upsample_nearest_exact3d",
                3,
                Interp::NearestExact,
                false,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::_upsample_nearest_exact3d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::_upsample_nearest_exact3d.vec",
                3,
                Interp::NearestExact,
                false,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_linear1d", k, float, |_, a| {
            run_upsample(a, "aten::upsample_linear1d", 1, Interp::Linear, true, false)
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_linear1d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_linear1d.vec",
                1,
                Interp::Linear,
                true,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_bilinear2d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_bilinear2d",
                2,
                Interp::Linear,
                true,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_bilinear2d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_bilinear2d.vec",
                2,
                Interp::Linear,
                true,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_trilinear3d", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_trilinear3d",
                3,
                Interp::Linear,
                true,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_trilinear3d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_trilinear3d.vec",
                3,
                Interp::Linear,
                true,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_bicubic2d", k, float, |_, a| {
            run_upsample(a, "aten::upsample_bicubic2d", 2, Interp::Cubic, true, false)
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_bicubic2d.vec", k, float, |_, a| {
            run_upsample(
                a,
                "aten::upsample_bicubic2d.vec",
                2,
                Interp::Cubic,
                true,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest1d_backward", k, float, |_, a| {
            run_upsample_backward(
                a,
                "aten::upsample_nearest1d_backward",
                1,
                Interp::Nearest,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest2d_backward", k, float, |_, a| {
            run_upsample_backward(
                a,
                "aten::upsample_nearest2d_backward",
                2,
                Interp::Nearest,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_nearest3d_backward", k, float, |_, a| {
            run_upsample_backward(
                a,
                "aten::upsample_nearest3d_backward",
                3,
                Interp::Nearest,
                false,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new(
            "aten::_upsample_nearest_exact1d_backward",
            k,
            float,
            |_, a| {
                run_upsample_backward(
                    a,
                    "aten::_upsample_nearest_exact1d_backward",
                    1,
                    Interp::NearestExact,
                    false,
                )
            },
        )
        .shard(Sharding::Replicate(windows)),
        OpDef::new(
            "aten::_upsample_nearest_exact2d_backward",
            k,
            float,
            |_, a| {
                run_upsample_backward(
                    a,
                    "aten::_upsample_nearest_exact2d_backward",
                    2,
                    Interp::NearestExact,
                    false,
                )
            },
        )
        .shard(Sharding::Replicate(windows)),
        OpDef::new(
            "aten::_upsample_nearest_exact3d_backward",
            k,
            float,
            |_, a| {
                run_upsample_backward(
                    a,
                    "aten::_upsample_nearest_exact3d_backward",
                    3,
                    Interp::NearestExact,
                    false,
                )
            },
        )
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_linear1d_backward", k, float, |_, a| {
            run_upsample_backward(
                a,
                "aten::upsample_linear1d_backward",
                1,
                Interp::Linear,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_bilinear2d_backward", k, float, |_, a| {
            run_upsample_backward(
                a,
                "aten::upsample_bilinear2d_backward",
                2,
                Interp::Linear,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_trilinear3d_backward", k, float, |_, a| {
            run_upsample_backward(
                a,
                "aten::upsample_trilinear3d_backward",
                3,
                Interp::Linear,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::upsample_bicubic2d_backward", k, float, |_, a| {
            run_upsample_backward(
                a,
                "aten::upsample_bicubic2d_backward",
                2,
                Interp::Cubic,
                true,
            )
        })
        .shard(Sharding::Replicate(windows)),
        OpDef::new("aten::grid_sampler_2d", k, &[DType::F32], |_, a| {
            t1(grid_sampler_2d(
                a.tensor(0)?,
                a.tensor(1)?,
                a.int(2)?,
                a.int(3)?,
                a.bool(4)?,
            ))
        })
        .shard(Sharding::Replicate(windows)),
    ]
}
