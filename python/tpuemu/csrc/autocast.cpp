// Mixed precision on the tpu: `torch.autocast("tpu", dtype=torch.bfloat16)`.
//
// PyTorch's autocast policy, as CUDA registers it (ATen/autocast_mode.cpp), over the op lists
// ATen shares with other backends so that they keep in step (ATen/autocast_mode.h):
// matrix products, convolutions and attention in the autocast dtype (`lower_precision_fp`);
// functions that lose precision or range in 16 bits (exp, log, pow, norms, losses, softmax,
// sums, ...) in float32 (`fp32`, `fp32_set_opt_dtype`, `fp32_append_dtype`); functions of
// several tensors in their widest dtype (`promote`). Every other operator falls through to the
// tpu's own kernel unchanged. A TPU's matrix units take bfloat16 and float32 (float16 runs
// through the same kernels, converted).

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

// The shared op lists name these unqualified (ATen registers them inside namespace at).
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

#define _KERNEL_TPU_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define _KERNEL_TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define _KERNEL_TPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define _KERNEL_TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

// PyTorch's own message (binary_cross_entropy_banned in ATen/autocast_mode.cpp).
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
              "BCEWithLogits are\n"
              "safe to autocast.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(_KERNEL_TPU_LOW_PRECISION_FP)
  AT_FORALL_FP32(_KERNEL_TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(_KERNEL_TPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(_KERNEL_TPU_PROMOTE)
  // As on CUDA: unsafe in 16 bits, and refused with a message that names the safe form.
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&binary_cross_entropy_banned)));
}

}  // namespace
