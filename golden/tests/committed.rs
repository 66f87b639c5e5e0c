//! The committed cases: they all load, and they reach every overload the backend registers first.

use std::sync::OnceLock;

use tpuemu_golden::spec::ValueSpec;
use tpuemu_golden::validate::{Validation, validate_dir};

use crate::runner::cases_dir;

/// The backend's first operator list (issue 4): every one must have golden cases.
pub const REQUIRED: &[&str] = &[
    // binary
    "aten::add.Tensor",
    "aten::add.Scalar",
    "aten::sub.Tensor",
    "aten::mul.Tensor",
    "aten::mul.Scalar",
    "aten::div.Tensor",
    "aten::div.Tensor_mode",
    "aten::pow.Tensor_Scalar",
    "aten::pow.Tensor_Tensor",
    "aten::maximum",
    "aten::minimum",
    "aten::where.self",
    "aten::eq.Tensor",
    "aten::eq.Scalar",
    "aten::ne.Tensor",
    "aten::ne.Scalar",
    "aten::lt.Tensor",
    "aten::lt.Scalar",
    "aten::le.Tensor",
    "aten::le.Scalar",
    "aten::gt.Tensor",
    "aten::gt.Scalar",
    "aten::ge.Tensor",
    "aten::ge.Scalar",
    "aten::logical_and",
    "aten::logical_or",
    "aten::logical_not",
    "aten::clamp",
    "aten::remainder.Tensor",
    // unary
    "aten::neg",
    "aten::abs",
    "aten::exp",
    "aten::log",
    "aten::log1p",
    "aten::sqrt",
    "aten::rsqrt",
    "aten::reciprocal",
    "aten::sin",
    "aten::cos",
    "aten::tanh",
    "aten::sigmoid",
    "aten::relu",
    "aten::gelu",
    "aten::silu",
    "aten::erf",
    "aten::floor",
    "aten::ceil",
    "aten::sign",
    // reductions
    "aten::sum",
    "aten::sum.dim_IntList",
    "aten::mean.dim",
    "aten::amax",
    "aten::amin",
    "aten::max.dim",
    "aten::argmax",
    "aten::var.correction",
    "aten::prod",
    // matrix
    "aten::mm",
    "aten::bmm",
    "aten::addmm",
    "aten::baddbmm",
    "aten::dot",
    "aten::mv",
    // neural-net
    "aten::_softmax",
    "aten::_log_softmax",
    "aten::native_layer_norm",
    "aten::rms_norm",
    "aten::embedding",
    "aten::nll_loss_forward",
    "aten::scaled_dot_product_attention",
    // layout and data movement
    "aten::view",
    "aten::_unsafe_view",
    "aten::reshape",
    "aten::permute",
    "aten::transpose.int",
    "aten::t",
    "aten::expand",
    "aten::slice.Tensor",
    "aten::select.int",
    "aten::unsqueeze",
    "aten::squeeze.dim",
    "aten::as_strided",
    "aten::clone",
    "aten::contiguous",
    "aten::cat",
    "aten::stack",
    "aten::split.Tensor",
    "aten::index_select",
    "aten::gather",
    "aten::masked_fill.Scalar",
    "aten::tril",
    "aten::triu",
    "aten::_to_copy",
    "aten::copy_",
    "aten::fill_.Scalar",
    "aten::zeros",
    "aten::ones",
    "aten::full",
    "aten::arange",
    "aten::arange.start_step",
    "aten::empty.memory_format",
    "aten::constant_pad_nd",
    "aten::flip",
    // backward
    "aten::threshold_backward",
    "aten::gelu_backward",
    "aten::silu_backward",
    "aten::sigmoid_backward",
    "aten::tanh_backward",
    "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data",
    "aten::native_layer_norm_backward",
    "aten::nll_loss_backward",
    "aten::embedding_dense_backward",
];

fn committed() -> &'static Validation {
    static V: OnceLock<Validation> = OnceLock::new();
    V.get_or_init(|| validate_dir(&cases_dir()).expect("golden/cases is readable"))
}

#[test]
fn all_committed_cases_load() {
    let v = committed();
    assert!(
        v.problems.is_empty(),
        "{} problems, first: {:#?}",
        v.problems.len(),
        &v.problems[..v.problems.len().min(10)]
    );
    assert!(v.cases > 3000, "only {} cases", v.cases);
    assert!(
        v.index.len() > 600,
        "the OpInfo index lists {} entries",
        v.index.len()
    );
    for dtype in ["float32", "bfloat16", "float16", "int64", "int32", "bool"] {
        assert!(
            v.cases_per_dtype.get(dtype).copied().unwrap_or(0) > 100,
            "few {dtype} cases: {:?}",
            v.cases_per_dtype
        );
    }
}

#[test]
fn every_required_overload_has_float32_and_bfloat16_cases() {
    let v = committed();
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|op| !v.calls_per_op.contains_key(*op))
        .collect();
    assert!(missing.is_empty(), "no golden case calls {missing:?}");
    let float_ops = REQUIRED
        .iter()
        .filter(|op| !op.starts_with("aten::arange") && !op.starts_with("aten::logical"));
    for op in float_ops {
        for dtype in ["float32", "bfloat16"] {
            let found = v.all_cases.iter().any(|(_, c)| {
                c.dtype.as_deref() == Some(dtype) && c.calls.iter().any(|k| k.op == *op)
            });
            assert!(found, "no {dtype} case calls {op}");
        }
    }
}

#[test]
fn gelu_has_both_approximations() {
    let v = committed();
    for approx in ["none", "tanh"] {
        let found = v.all_cases.iter().flat_map(|(_, c)| &c.calls).any(|k| {
            k.op == "aten::gelu" && k.args.get(1) == Some(&ValueSpec::Str(approx.to_string()))
        });
        assert!(found, "no aten::gelu case with approximate={approx:?}");
    }
}

/// Tolerance exceptions are the matrix unit's (one bf16 pass) or the matrix exponential's
/// normwise bound, and are not vacuous: each one's
/// atol is under a tenth of the largest magnitude of the call's first output, so an output off
/// by more than that (a wrong scale, mask or operand) fails the case. (They were once bounds
/// that allowed several times the output's size.)
#[test]
fn tolerance_exceptions_are_matrix_unit_bounds_a_wrong_kernel_fails() {
    use tpuemu_golden::format::{Manifest, load_manifest};
    use tpuemu_golden::store::TensorStore;
    let mut checked = 0;
    let mut paths = tpuemu_golden::runner::manifest_paths(&cases_dir()).unwrap();
    paths.sort();
    for path in paths {
        let Ok(Manifest::Cases(file)) = load_manifest(&path) else {
            continue;
        };
        let Some(tensors) = &file.tensors else {
            continue;
        };
        let store = TensorStore::load(tensors).unwrap();
        for entry in &file.cases {
            let tpuemu_golden::format::CaseEntry::Ok(case) = entry else {
                continue;
            };
            for call in &case.calls {
                let Some(t) = &call.tolerance else { continue };
                // Matrix-unit bounds, and the matrix exponential's normwise bound (measured
                // against float64 on the call: golden/README.md).
                let normwise = call.op == "aten::linalg_matrix_exp" && t.why.contains("normwise");
                assert!(t.why.contains("bf16") || normwise, "{}: {}", case.id, t.why);
                assert!(
                    t.rtol > 0.0 && t.rtol <= 1.6e-2,
                    "{}: rtol {}",
                    case.id,
                    t.rtol
                );
                let ValueSpec::Tensor(r) = &call.outputs[0] else {
                    continue;
                };
                let out = store.tensor(r).unwrap();
                let max = out.to_f64_vec().iter().fold(0.0f64, |m, v| m.max(v.abs()));
                assert!(
                    t.atol <= 0.1 * max || t.atol <= 2e-5,
                    "{}: {}: atol {} against outputs up to {max}",
                    case.id,
                    call.op,
                    t.atol
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no tolerance exception was checked");
}
