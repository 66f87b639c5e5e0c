//! Indexing, ordering, scans, shape operators and reductions against PyTorch itself: fixed samples whose
//! outputs PyTorch 2.15.0 computed (`from_torch.py` writes `from_torch.json`; run it again
//! after changing a sample). Each sample runs in every mode, some inputs through
//! non-contiguous placements ("t": dims stored in reverse order; "s": every other element
//! along the first dim, after an offset), and every derived in-place and `out=` form of the
//! operator runs on the same sample.
//!
//! Indices and counts are compared exactly; floats with `torch.testing`'s default tolerance
//! for their dtype (the inputs are multiples of 1/4, so sums and scans are exact). Outputs
//! PyTorch leaves unspecified (`empty_strided`, `resize_`) are compared by shape and dtype.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;
use tpuemu_backend::DType;
use tpuemu_backend::ops::{self, Value};

use super::harness::{Arg, Input, MODES, Out, Placement, Sample, SuiteMode, runtime, verify};
use super::reference::HostTensor;

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::glu_backward", from_torch),
    ("aten::_cdist_backward", from_torch),
    ("aten::_pdist_backward", from_torch),
    ("aten::multi_margin_loss_backward", from_torch),
    ("aten::adaptive_max_pool2d_backward", from_torch),
    ("aten::adaptive_max_pool3d_backward", from_torch),
    ("aten::_prelu_kernel_backward", from_torch),
    ("aten::reflection_pad1d_backward", from_torch),
    ("aten::replication_pad1d_backward", from_torch),
    ("aten::reflection_pad2d_backward", from_torch),
    ("aten::replication_pad2d_backward", from_torch),
    ("aten::reflection_pad3d_backward", from_torch),
    ("aten::replication_pad3d_backward", from_torch),
    ("aten::nansum", from_torch),
    ("aten::linalg_lu_factor_ex", from_torch),
    ("aten::linalg_lu", from_torch),
    ("aten::lu_unpack", from_torch),
    ("aten::linalg_lu_solve", from_torch),
    ("aten::_linalg_solve_ex", from_torch),
    ("aten::linalg_inv_ex", from_torch),
    ("aten::_linalg_det", from_torch),
    ("aten::_linalg_slogdet", from_torch),
    ("aten::linalg_cholesky_ex", from_torch),
    ("aten::_cholesky_solve_helper", from_torch),
    ("aten::cholesky_inverse", from_torch),
    ("aten::linalg_solve_triangular", from_torch),
    ("aten::triangular_solve", from_torch),
    ("aten::geqrf", from_torch),
    ("aten::linalg_householder_product", from_torch),
    ("aten::linalg_qr", from_torch),
    ("aten::ormqr", from_torch),
    ("aten::_linalg_eigh", from_torch),
    ("aten::_batch_norm_with_update_functional", from_torch),
    ("aten::batch_norm_backward", from_torch),
    ("aten::nll_loss2d_backward", from_torch),
    ("aten::_linalg_svd", from_torch),
    ("aten::_grouped_mm", from_torch),
    ("aten::native_batch_norm_backward", from_torch),
    ("aten::native_group_norm_backward", from_torch),
    ("aten::_index_put_impl", from_torch),
    ("aten::_weight_norm_interface", from_torch),
    ("aten::_weight_norm_interface_backward", from_torch),
    ("aten::frexp.Tensor", from_torch),
    ("aten::nextafter", from_torch),
    ("aten::gcd", from_torch),
    ("aten::lcm", from_torch),
    ("aten::special_erfcx", from_torch),
    ("aten::special_log_ndtr", from_torch),
    ("aten::_euclidean_dist", from_torch),
    ("aten::_cdist_forward", from_torch),
    ("aten::_pdist_forward", from_torch),
    ("aten::multi_margin_loss", from_torch),
    ("aten::unique_dim", from_torch),
    ("aten::grid_sampler_3d", from_torch),
    ("aten::_upsample_bilinear2d_aa", from_torch),
    ("aten::_upsample_bicubic2d_aa", from_torch),
    ("aten::_upsample_bilinear2d_aa_backward", from_torch),
    ("aten::_upsample_bicubic2d_aa_backward", from_torch),
    ("aten::segment_reduce", from_torch),
    ("aten::_embedding_bag", from_torch),
    ("aten::_embedding_bag_forward_only", from_torch),
    ("aten::_embedding_bag_backward", from_torch),
    (
        "aten::_embedding_bag_per_sample_weights_backward",
        from_torch,
    ),
    ("aten::_segment_reduce_backward", from_torch),
    ("aten::convolution", from_torch),
    ("aten::avg_pool2d", from_torch),
    ("aten::avg_pool3d", from_torch),
    ("aten::fractional_max_pool2d", from_torch),
    ("aten::fractional_max_pool3d", from_torch),
    ("aten::fractional_max_pool2d_backward", from_torch),
    ("aten::fractional_max_pool3d_backward", from_torch),
    ("aten::multilabel_margin_loss_forward", from_torch),
    ("aten::multilabel_margin_loss_backward", from_torch),
    ("aten::_to_copy", from_torch),
    ("aten::addr", from_torch),
    ("aten::addmv", from_torch),
    ("aten::addbmm", from_torch),
    ("aten::_trilinear", from_torch),
    ("aten::linalg_cross", from_torch),
    ("aten::mse_loss", from_torch),
    ("aten::mse_loss_backward", from_torch),
    ("aten::huber_loss", from_torch),
    ("aten::smooth_l1_loss", from_torch),
    ("aten::soft_margin_loss", from_torch),
    ("aten::binary_cross_entropy", from_torch),
    ("aten::binary_cross_entropy_with_logits", from_torch),
    ("aten::dist", from_torch),
    ("aten::renorm", from_torch),
    ("aten::glu", from_torch),
    ("aten::_prelu_kernel", from_torch),
    ("aten::i0", from_torch),
    ("aten::special_i0e", from_torch),
    ("aten::special_i1", from_torch),
    ("aten::special_i1e", from_torch),
    ("aten::special_modified_bessel_i0", from_torch),
    ("aten::special_modified_bessel_i1", from_torch),
    ("aten::special_modified_bessel_k0", from_torch),
    ("aten::special_modified_bessel_k1", from_torch),
    ("aten::special_scaled_modified_bessel_k0", from_torch),
    ("aten::special_scaled_modified_bessel_k1", from_torch),
    ("aten::special_bessel_j0", from_torch),
    ("aten::special_bessel_j1", from_torch),
    ("aten::special_bessel_y0", from_torch),
    ("aten::special_bessel_y1", from_torch),
    ("aten::special_spherical_bessel_j0", from_torch),
    ("aten::special_airy_ai", from_torch),
    ("aten::erfinv", from_torch),
    ("aten::special_ndtri", from_torch),
    ("aten::special_zeta", from_torch),
    ("aten::trace", from_torch),
    ("aten::vdot", from_torch),
    ("aten::special_chebyshev_polynomial_t", from_torch),
    ("aten::special_chebyshev_polynomial_u", from_torch),
    ("aten::special_chebyshev_polynomial_v", from_torch),
    ("aten::special_chebyshev_polynomial_w", from_torch),
    ("aten::special_hermite_polynomial_h", from_torch),
    ("aten::special_hermite_polynomial_he", from_torch),
    ("aten::special_laguerre_polynomial_l", from_torch),
    ("aten::special_legendre_polynomial_p", from_torch),
    ("aten::special_shifted_chebyshev_polynomial_t", from_torch),
    ("aten::special_shifted_chebyshev_polynomial_u", from_torch),
    ("aten::special_shifted_chebyshev_polynomial_v", from_torch),
    ("aten::special_shifted_chebyshev_polynomial_w", from_torch),
    ("aten::_chunk_cat", from_torch),
    ("aten::_reshape_copy", from_torch),
    ("aten::_unique", from_torch),
    ("aten::_unique2", from_torch),
    ("aten::_unsafe_index.Tensor", from_torch),
    ("aten::_unsafe_index_put", from_torch),
    ("aten::_unsafe_masked_index", from_torch),
    ("aten::_unsafe_masked_index_put_accumulate", from_torch),
    ("aten::alias", from_torch),
    ("aten::alias_copy", from_torch),
    ("aten::all", from_torch),
    ("aten::all.dim", from_torch),
    ("aten::all.dims", from_torch),
    ("aten::aminmax", from_torch),
    ("aten::any", from_torch),
    ("aten::any.dim", from_torch),
    ("aten::any.dims", from_torch),
    ("aten::argsort", from_torch),
    ("aten::argsort.stable", from_torch),
    ("aten::argwhere", from_torch),
    ("aten::as_strided_copy", from_torch),
    ("aten::as_strided_scatter", from_torch),
    ("aten::bincount", from_torch),
    ("aten::block_diag", from_torch),
    ("aten::bucketize.Scalar", from_torch),
    ("aten::bucketize.Tensor", from_torch),
    ("aten::channel_shuffle", from_torch),
    ("aten::col2im", from_torch),
    ("aten::count_nonzero", from_torch),
    ("aten::count_nonzero.dim_IntList", from_torch),
    ("aten::cummax", from_torch),
    ("aten::cummin", from_torch),
    ("aten::cumprod", from_torch),
    ("aten::cumsum", from_torch),
    ("aten::diag_embed", from_torch),
    ("aten::diagonal", from_torch),
    ("aten::diagonal_backward", from_torch),
    ("aten::diagonal_copy", from_torch),
    ("aten::diagonal_scatter", from_torch),
    ("aten::empty_permuted", from_torch),
    ("aten::empty_strided", from_torch),
    ("aten::expand_copy", from_torch),
    ("aten::eye", from_torch),
    ("aten::eye.m", from_torch),
    ("aten::histc", from_torch),
    ("aten::histogram.bin_ct", from_torch),
    ("aten::im2col", from_torch),
    ("aten::index.Tensor", from_torch),
    ("aten::index_add", from_torch),
    ("aten::index_copy", from_torch),
    ("aten::index_fill.int_Scalar", from_torch),
    ("aten::index_fill.int_Tensor", from_torch),
    ("aten::index_put", from_torch),
    ("aten::index_reduce", from_torch),
    ("aten::index_select_backward", from_torch),
    ("aten::isin.Scalar_Tensor", from_torch),
    ("aten::isin.Tensor_Scalar", from_torch),
    ("aten::isin.Tensor_Tensor", from_torch),
    ("aten::kthvalue", from_torch),
    ("aten::linalg_vector_norm", from_torch),
    ("aten::linspace", from_torch),
    ("aten::linspace.Scalar_Tensor", from_torch),
    ("aten::linspace.Tensor_Scalar", from_torch),
    ("aten::linspace.Tensor_Tensor", from_torch),
    ("aten::logcumsumexp", from_torch),
    ("aten::logspace", from_torch),
    ("aten::logspace.Scalar_Tensor", from_torch),
    ("aten::logspace.Tensor_Scalar", from_torch),
    ("aten::logspace.Tensor_Tensor", from_torch),
    ("aten::logsumexp", from_torch),
    ("aten::masked_scatter", from_torch),
    ("aten::masked_select", from_torch),
    ("aten::median", from_torch),
    ("aten::median.dim", from_torch),
    ("aten::mode", from_torch),
    ("aten::msort", from_torch),
    ("aten::nanmedian", from_torch),
    ("aten::nanmedian.dim", from_torch),
    ("aten::narrow", from_torch),
    ("aten::narrow_copy", from_torch),
    ("aten::native_channel_shuffle", from_torch),
    ("aten::nonzero", from_torch),
    ("aten::nonzero_numpy", from_torch),
    ("aten::nonzero_static", from_torch),
    ("aten::norm.Scalar", from_torch),
    ("aten::norm.ScalarOpt_dim", from_torch),
    ("aten::norm.ScalarOpt_dim_dtype", from_torch),
    ("aten::norm.ScalarOpt_dtype", from_torch),
    ("aten::permute_copy", from_torch),
    ("aten::pixel_shuffle", from_torch),
    ("aten::pixel_unshuffle", from_torch),
    ("aten::put", from_torch),
    ("aten::repeat", from_torch),
    ("aten::repeat_interleave.Tensor", from_torch),
    ("aten::repeat_interleave.self_Tensor", from_torch),
    ("aten::repeat_interleave.self_int", from_torch),
    ("aten::resize_", from_torch),
    ("aten::resize_as_", from_torch),
    ("aten::roll", from_torch),
    ("aten::rot90", from_torch),
    ("aten::scatter.reduce", from_torch),
    ("aten::scatter.src", from_torch),
    ("aten::scatter.value", from_torch),
    ("aten::scatter.value_reduce", from_torch),
    ("aten::scatter_add", from_torch),
    ("aten::scatter_reduce.two", from_torch),
    ("aten::searchsorted.Scalar", from_torch),
    ("aten::searchsorted.Tensor", from_torch),
    ("aten::select_backward", from_torch),
    ("aten::select_copy.int", from_torch),
    ("aten::select_scatter", from_torch),
    ("aten::slice_backward", from_torch),
    ("aten::slice_copy.Tensor", from_torch),
    ("aten::slice_scatter", from_torch),
    ("aten::sort", from_torch),
    ("aten::sort.stable", from_torch),
    ("aten::split_copy.Tensor", from_torch),
    ("aten::split_with_sizes", from_torch),
    ("aten::split_with_sizes_copy", from_torch),
    ("aten::squeeze", from_torch),
    ("aten::squeeze.dims", from_torch),
    ("aten::squeeze_", from_torch),
    ("aten::squeeze_.dim", from_torch),
    ("aten::squeeze_.dims", from_torch),
    ("aten::squeeze_copy", from_torch),
    ("aten::squeeze_copy.dim", from_torch),
    ("aten::squeeze_copy.dims", from_torch),
    ("aten::std_mean", from_torch),
    ("aten::std_mean.correction", from_torch),
    ("aten::std_mean.dim", from_torch),
    ("aten::t_", from_torch),
    ("aten::t_copy", from_torch),
    ("aten::take", from_torch),
    ("aten::take_along_dim", from_torch),
    ("aten::topk", from_torch),
    ("aten::transpose_", from_torch),
    ("aten::transpose_copy.int", from_torch),
    ("aten::tril_indices", from_torch),
    ("aten::triu_indices", from_torch),
    ("aten::unbind.int", from_torch),
    ("aten::unbind_copy.int", from_torch),
    ("aten::unfold", from_torch),
    ("aten::unfold_backward", from_torch),
    ("aten::unfold_copy", from_torch),
    ("aten::unique_consecutive", from_torch),
    ("aten::unsafe_split.Tensor", from_torch),
    ("aten::unsafe_split_with_sizes", from_torch),
    ("aten::unsqueeze_", from_torch),
    ("aten::unsqueeze_copy", from_torch),
    ("aten::var_mean", from_torch),
    ("aten::var_mean.correction", from_torch),
    ("aten::var_mean.dim", from_torch),
    ("aten::view_copy", from_torch),
    ("aten::where", from_torch),
    ("aten::where.Scalar", from_torch),
    ("aten::where.ScalarOther", from_torch),
    ("aten::where.ScalarSelf", from_torch),
    ("aten::histogram.bins_tensor", from_torch),
    ("aten::_histogramdd_bin_edges", from_torch),
    ("aten::_histogramdd_from_bin_cts", from_torch),
    ("aten::_histogramdd_from_bin_tensors", from_torch),
    ("aten::embedding_renorm", from_torch),
];

const SAMPLES: &str = include_str!("from_torch.json");

/// Overloads whose output shape depends on the values (some samples of them, such as a
/// boolean-mask `index.Tensor` or `histc` over the data's own range): a compiled graph cannot
/// read values back, so in Compile mode they must refuse with that error, as
/// `torch.compile`'s graph breaks on them. The orthogonal polynomials unroll their recurrence
/// to the largest degree among the values, so they read them too.
const DATA_DEPENDENT: &[&str] = &[
    "aten::_histogramdd_bin_edges",
    "aten::_histogramdd_from_bin_cts",
    "aten::_unique",
    "aten::_unique2",
    "aten::argwhere",
    "aten::bincount",
    "aten::histc",
    "aten::histogram.bin_ct",
    "aten::index.Tensor",
    "aten::index_put",
    "aten::masked_select",
    "aten::nonzero",
    "aten::nonzero_numpy",
    "aten::repeat_interleave.Tensor",
    "aten::repeat_interleave.self_Tensor",
    "aten::special_chebyshev_polynomial_t",
    "aten::special_chebyshev_polynomial_u",
    "aten::special_chebyshev_polynomial_v",
    "aten::special_chebyshev_polynomial_w",
    "aten::special_hermite_polynomial_h",
    "aten::special_hermite_polynomial_he",
    "aten::special_laguerre_polynomial_l",
    "aten::special_legendre_polynomial_p",
    "aten::special_shifted_chebyshev_polynomial_t",
    "aten::special_shifted_chebyshev_polynomial_u",
    "aten::special_shifted_chebyshev_polynomial_v",
    "aten::special_shifted_chebyshev_polynomial_w",
    "aten::unique_consecutive",
    "aten::unique_dim",
    "aten::where",
];

fn number(v: &Json) -> f64 {
    match v {
        Json::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("not a number: {other}"),
        },
        v => v.as_f64().expect("a number"),
    }
}

fn dtype(v: &Json) -> DType {
    DType::from_name(v.as_str().expect("a dtype name")).expect("a known dtype")
}

fn host(v: &Json) -> HostTensor {
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("a size") as usize)
        .collect();
    let data = v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(number)
        .collect();
    HostTensor::new(&shape, dtype(&v["dtype"]), data)
}

fn input(v: &Json) -> Input {
    let h = host(v);
    let n = h.dim();
    let mut place = Placement::contiguous(n);
    match v["place"].as_str() {
        Some("t") => place.perm.reverse(),
        Some("s") => {
            place.offset = 3;
            if n > 0 {
                place.steps[0] = 2;
            }
        }
        _ => {}
    }
    Input { host: h, place }
}

fn arg(v: &Json) -> Arg {
    let (kind, x) = v
        .as_object()
        .expect("an argument")
        .iter()
        .next()
        .expect("one key");
    let list = || x.as_array().expect("a list");
    match kind.as_str() {
        "t" => Arg::T(input(x)),
        "ts" => Arg::Ts(list().iter().map(input).collect()),
        "ots" => Arg::OptTs(
            list()
                .iter()
                .map(|t| (!t.is_null()).then(|| input(t)))
                .collect(),
        ),
        "none" => Arg::V(Value::None),
        "bool" => Arg::V(Value::Bool(x.as_bool().expect("a bool"))),
        "int" => Arg::V(Value::Int(x.as_i64().expect("an int"))),
        "float" => Arg::V(Value::Float(number(x))),
        "str" => Arg::V(Value::Str(x.as_str().expect("a str").to_string())),
        "dtype" => Arg::V(Value::Dtype(dtype(x))),
        "ints" => Arg::V(Value::Ints(
            list().iter().map(|i| i.as_i64().expect("an int")).collect(),
        )),
        "floats" => Arg::V(Value::Floats(list().iter().map(number).collect())),
        "bools" => Arg::V(Value::Bools(
            list()
                .iter()
                .map(|b| b.as_bool().expect("a bool"))
                .collect(),
        )),
        other => panic!("unknown argument kind {other}"),
    }
}

/// A sample's call with keyword arguments moved to their schema positions (gaps take their
/// defaults: `None` stands for a default).
fn sample(op: &str, v: &Json) -> Sample {
    let mut args: Vec<Arg> = v["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(arg)
        .collect();
    let schema = ops::registry()
        .get(op)
        .unwrap_or_else(|| panic!("{op} is not registered"))
        .schema;
    for (name, x) in v["kwargs"].as_object().expect("kwargs") {
        let i = schema
            .arg_index(name)
            .unwrap_or_else(|| panic!("{op} has no argument {name}"));
        while args.len() <= i {
            args.push(Arg::V(Value::None));
        }
        args[i] = arg(x);
    }
    let outs = v["outs"]
        .as_array()
        .expect("outs")
        .iter()
        .map(|o| {
            if o.get("data").is_some() {
                Out::close(host(o))
            } else {
                let shape = o["shape"]
                    .as_array()
                    .expect("shape")
                    .iter()
                    .map(|d| d.as_u64().expect("a size") as usize)
                    .collect();
                Out::Meta(shape, dtype(&o["dtype"]))
            }
        })
        .collect();
    Sample::new(args, outs)
}

/// The samples by overload.
fn samples() -> BTreeMap<&'static str, Vec<Sample>> {
    let json: Json = serde_json::from_str(SAMPLES).expect("from_torch.json parses");
    assert_eq!(json["torch"], "2.15.0", "samples from another PyTorch");
    let mut by_op: BTreeMap<&'static str, Vec<Sample>> = BTreeMap::new();
    for s in json["samples"].as_array().expect("samples") {
        let name = s["op"].as_str().expect("op");
        let op = OPS
            .iter()
            .map(|(n, _)| *n)
            .find(|n| *n == name)
            .unwrap_or_else(|| panic!("{name} has samples but is not in OPS"));
        by_op.entry(op).or_default().push(sample(op, s));
    }
    by_op
}

#[test]
fn from_torch() {
    let by_op = samples();
    let listed: BTreeSet<&str> = OPS.iter().map(|(n, _)| *n).collect();
    let sampled: BTreeSet<&str> = by_op.keys().copied().collect();
    assert_eq!(listed, sampled, "every listed overload has samples");
    let rts: Vec<_> = MODES.iter().map(|m| (*m, runtime(*m))).collect();
    let only = std::env::var("OP_SUITE_ONLY").ok();
    let mut failures = Vec::new();
    for (op, samples) in &by_op {
        if only.as_deref().is_some_and(|o| !op.contains(o)) {
            continue;
        }
        for (k, s) in samples.iter().enumerate() {
            for (mode, rt) in &rts {
                match verify(rt, *mode, op, s) {
                    Err(e)
                        if *mode == SuiteMode::Compile
                            && DATA_DEPENDENT.contains(op)
                            && e.contains("compiled graphs cannot read tensor values") => {}
                    Err(e) => failures.push(format!("{op} sample {k} in {mode:?}: {e}")),
                    Ok(()) => {}
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
