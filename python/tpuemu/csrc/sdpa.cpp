// Which backend `torch.nn.functional.scaled_dot_product_attention` takes on the tpu. PyTorch asks
// the device's `_fused_sdp_choice`; without one it decomposes attention into bmm, softmax, bmm
// (the `[L, S]` scores through HBM). For calls the backend's flash-attention kernels take -- no
// mask, no dropout, bf16 or float32, 4-D `[B, H, L, E]`, key/value heads dividing the query
// heads -- it answers "overrideable", so PyTorch calls
// `aten::_scaled_dot_product_fused_attention_overrideable` (and its backward), which the backend
// runs as one kernel each way; everything else takes the math path as before.

#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>

namespace {

int64_t tpu_fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& mask, double dropout_p,
                             bool /*is_causal*/, std::optional<double> /*scale*/,
                             bool enable_gqa) {
  const auto math = static_cast<int64_t>(at::SDPBackend::math);
  if ((mask.has_value() && mask->defined()) || dropout_p != 0.0) return math;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return math;
  const auto dt = q.scalar_type();
  if ((dt != at::kFloat && dt != at::kBFloat16) || k.scalar_type() != dt ||
      v.scalar_type() != dt)
    return math;
  const auto hq = q.size(1), hk = k.size(1);
  if (hk == 0 || v.size(1) != hk || hq % hk != 0 || (hq != hk && !enable_gqa)) return math;
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(2) != v.size(2) ||
      k.size(3) != q.size(3))
    return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

}  // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpu_fused_sdp_choice)
}  // namespace at::native
