// The kernels every PrivateUse1 device provides itself: empty tensors, copies between the host
// and the device, resize_, set_ and the generic view kernels (complex tensors as pairs of reals
// included, and `complex`/`polar` written through them). (`item()` and `zero_` are the Rust
// backend's, registered by name with the other operators: one kernel each, no override.)

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "tpuemu.h"

namespace tpuemu {

namespace {

constexpr c10::DispatchKeySet kTpuKeys{c10::DispatchKey::PrivateUse1};

void check_options(std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                   std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "tpuemu: only strided tensors live on the tpu");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Pin memory can only be on CPU");
  check_device(c10::device_or_default(device));
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, device, pin);
  return at::detail::empty_generic(size, allocator(), kTpuKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin) {
  check_options(layout, device, pin);
  return at::detail::empty_strided_generic(size, stride, allocator(), kTpuKeys,
                                           c10::dtype_or_default(dtype));
}

// Host bytes of a contiguous CPU tensor into a strided view of a tpu tensor.
void write_host(const at::Tensor& dst, const at::Tensor& host) {
  int32_t rc = vt().write_view(handle_of(dst), dst.sizes().data(), dst.strides().data(),
                               dst.dim(), dst.storage_offset(), dst.element_size(),
                               static_cast<const uint8_t*>(host.const_data_ptr()), host.nbytes());
  if (rc != TPU_OK) raise(rc, "copy to tpu");
}


// A tpu tensor's elements into a new contiguous CPU tensor of its dtype.
at::Tensor read_host(const at::Tensor& src) {
  at::Tensor host = at::empty(src.sizes(), src.options().device(at::kCPU));
  if (host.numel() == 0) return host;
  int32_t rc = vt().read_view(handle_of(src), src.sizes().data(), src.strides().data(),
                              src.dim(), src.storage_offset(), src.element_size(),
                              static_cast<uint8_t*>(host.mutable_data_ptr()), host.nbytes());
  if (rc != TPU_OK) raise(rc, "copy from tpu");
  return host;
}

}  // namespace

bool fill_foreign(const std::string& name, c10::ArrayRef<c10::IValue> args) {
  const bool zero = name == "aten::zero_";
  if (!zero && name != "aten::fill_.Scalar" && name != "aten::fill_.Tensor") return false;
  if (args.empty() || !args[0].isTensor()) return false;
  const at::Tensor& self = args[0].toTensor();
  const int64_t size = self.element_size();
  if (!self.is_privateuseone() || self.scalar_type() == at::kLong || size < 8 || size % 4 != 0) {
    return false;
  }
  // PyTorch's own fill on the CPU decides the value (casts, complex parts, errors).
  at::Tensor one = at::empty({}, self.options().device(at::kCPU));
  if (zero) {
    one.zero_();
  } else if (name == "aten::fill_.Scalar") {
    one.fill_(args[1].toScalar());
  } else {
    const at::Tensor& v = args[1].toTensor();
    TORCH_CHECK(v.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
                v.dim(), " dimensions.");
    one.fill_(v.cpu());
  }
  if (self.numel() == 0) return true;
  at::Tensor dev = at::empty({}, self.options());
  write_host(dev, one);
  device_copy(self, dev);
  return true;
}

// A tpu tensor's elements for a collective (untimed; see abi.h).
at::Tensor peek_host(const at::Tensor& src) {
  TORCH_CHECK(src.is_privateuseone(), "tpuemu: peek needs a tpu tensor, not one on ",
              src.device());
  at::Tensor host = at::empty(src.sizes(), src.options().device(at::kCPU));
  if (host.numel() == 0) return host;
  int32_t rc = vt().peek_view(handle_of(src), src.sizes().data(), src.strides().data(),
                              src.dim(), src.storage_offset(), src.element_size(),
                              static_cast<uint8_t*>(host.mutable_data_ptr()), host.nbytes());
  if (rc != TPU_OK) raise(rc, "collective read");
  return host;
}

// A collective's result (a CPU tensor of dst's dtype and shape) into a tpu tensor, ready at
// ready_ns of simulated time (untimed; see abi.h).
void land_host(const at::Tensor& dst, const at::Tensor& src, double ready_ns) {
  TORCH_CHECK(dst.is_privateuseone(), "tpuemu: land needs a tpu tensor, not one on ",
              dst.device());
  TORCH_CHECK(src.is_cpu() && src.scalar_type() == dst.scalar_type() &&
                  src.sizes() == dst.sizes(),
              "tpuemu: a collective's result must be a CPU tensor of the destination's dtype ",
              "and shape");
  if (dst.numel() == 0) return;
  at::Tensor host = src.contiguous();
  int32_t rc = vt().land_view(handle_of(dst), dst.sizes().data(), dst.strides().data(),
                              dst.dim(), dst.storage_offset(), dst.element_size(),
                              static_cast<const uint8_t*>(host.const_data_ptr()), host.nbytes(),
                              ready_ns);
  if (rc != TPU_OK) raise(rc, "collective result");
}

namespace {

at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool /*non_blocking*/) {
  if (dst.numel() == 0) return dst;
  const bool src_tpu = src.is_privateuseone();
  const bool dst_tpu = dst.is_privateuseone();
  if (src_tpu && dst_tpu) {
    device_copy(dst, src);
  } else if (dst_tpu) {
    TORCH_CHECK(src.is_cpu(), "tpuemu: copies to the tpu come from the CPU, not ",
                src.device());
    at::Tensor host = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    write_host(dst, host);
  } else {
    TORCH_CHECK(dst.is_cpu(), "tpuemu: copies from the tpu go to the CPU, not ", dst.device());
    const_cast<at::Tensor&>(dst).copy_(read_host(src));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.sizes() != src.sizes()) const_cast<at::Tensor&>(dst).resize_(src.sizes());
  return copy_from(src, dst, false);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size_sym,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const size_t need = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(),
                                                                 impl->storage_offset());
  if (need > self.storage().nbytes()) resize_storage_bytes(self.storage(), need);
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset_sym,
                               c10::SymIntArrayRef size_sym, c10::SymIntArrayRef stride_sym) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "tpuemu: set_ needs a tpu storage, not one on ", source.device());
  auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  auto stride = C10_AS_INTARRAYREF_SLOW(stride_sym);
  const int64_t offset = offset_sym.guard_int(__FILE__, __LINE__);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(source);
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  if (self.numel() > 0) {
    const size_t need = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                         self.dtype().itemsize(), offset);
    if (need > source.nbytes()) resize_storage_bytes(source, need);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  std::vector<c10::SymInt> size{c10::SymInt(n)};
  return set_storage_offset(self, std::move(source), 0, size, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.unsafeGetTensorImpl() == src.unsafeGetTensorImpl()) return self;
  return set_storage_offset(self, src.storage(), src.sym_storage_offset(), src.sym_sizes(),
                            src.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, allocator()->allocate(0), allocator(),
                     /*resizable=*/true);
  std::vector<c10::SymInt> size{c10::SymInt(0)};
  return set_storage_offset(self, std::move(empty), 0, size, {});
}

bool is_set_to(const at::Tensor& self, const at::Tensor& src) {
  return self.storage().unsafeGetStorageImpl() == src.storage().unsafeGetStorageImpl() &&
         self.storage_offset() == src.storage_offset() && self.sizes() == src.sizes() &&
         self.strides() == src.strides();
}


at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  std::optional<int64_t> off;
  if (offset) off = offset->guard_int(__FILE__, __LINE__);
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), off);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(const at::Tensor& self, int64_t dim, int64_t size, int64_t step) {
  return at::native::unfold(self, dim, size, step);
}

// Complex tensors seen as pairs of reals and back (PyTorch's own view kernels: metadata only).
at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }
at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

// PyTorch's checks of `complex` and `polar` (aten/src/ATen/native/TensorFactories.cpp).
void check_parts(const char* what, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  const auto t = a.scalar_type();
  const bool half_ok = std::string(what) == "complex";
  auto ok = [&](c10::ScalarType x) {
    return x == at::kFloat || x == at::kDouble || (half_ok && x == at::kHalf);
  };
  TORCH_CHECK(ok(t) && ok(b.scalar_type()), "Expected both inputs to be ",
              half_ok ? "Half, Float or Double" : "Float or Double", " tensors but got ", t,
              " and ", b.scalar_type());
  TORCH_CHECK(t == b.scalar_type(), "Expected object of scalar type ", t,
              " but got scalar type ", b.scalar_type(), " for second argument");
  TORCH_CHECK(out.scalar_type() == c10::toComplexType(t), "Expected object of scalar type ",
              c10::toComplexType(t), " but got scalar type ", out.scalar_type(),
              " for argument 'out'");
}

// `out` = re + i im, broadcast: the two parts copied into `view_as_real(out)` on the device.
void write_parts(at::Tensor& out, const at::Tensor& re, const at::Tensor& im) {
  at::native::resize_output(out, at::infer_size(re.sizes(), im.sizes()));
  at::Tensor parts = at::view_as_real(out);
  parts.select(-1, 0).copy_(re);
  parts.select(-1, 1).copy_(im);
}

at::Tensor& complex_out(const at::Tensor& real, const at::Tensor& imag, at::Tensor& out) {
  check_parts("complex", real, imag, out);
  write_parts(out, real, imag);
  return out;
}

// abs (cos angle + i sin angle), the parts computed on the device in the inputs' dtype as the
// CPU computes them.
at::Tensor& polar_out(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
  check_parts("polar", abs, angle, out);
  write_parts(out, abs * at::cos(angle), abs * at::sin(angle));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("is_set_to", TORCH_FN(is_set_to));
  m.impl("view", TORCH_FN(view));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("complex.out", TORCH_FN(complex_out));
  m.impl("polar.out", TORCH_FN(polar_out));
}

}  // namespace tpuemu
