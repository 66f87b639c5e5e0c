// Operators on "tpu" tensors: the boxed kernel that sends an overload to the Rust backend (its
// arguments marshalled into the compact form of abi.h, its results wrapped as tpu tensors),
// in-place and out= overloads run as their functional overload plus a copy, and the CPU
// fallback for what the backend lacks.

#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include <ATen/native/CPUFallback.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <ATen/native/Resize.h>

#include "tpuemu.h"

namespace tpuemu {

at::Tensor as_int32_words(const at::Tensor& t);

namespace {

// How an argument's integer IValue is meant (ScalarType, Layout and MemoryFormat arrive as
// ints).
enum class ArgKind : uint8_t { Plain, Dtype, Layout, MemoryFormat, Generator };

struct Entry {
  enum class Kind { Rust, Fallback };
  std::atomic<Kind> kind{Kind::Rust};
  std::string name;  // aten::add_.Tensor
  int64_t id = -1;   // the Rust operator (the functional one for variants)
  std::vector<int64_t> fargs, writes;
  std::vector<ArgKind> kinds;
  std::atomic<bool> warned{false};
};

struct Variant {
  std::string functional;
  std::vector<int64_t> fargs, writes;
};

std::mutex g_mu;
std::unordered_map<const c10::FunctionSchema*, Entry*> g_entries;
std::unordered_map<std::string, Variant> g_variants;
std::atomic<bool> g_fallback_on{true};

int64_t resolve(const std::string& name) {
  return vt().resolve(reinterpret_cast<const uint8_t*>(name.data()), name.size());
}

ArgKind kind_of(const c10::Argument& a) {
  c10::TypePtr t = a.real_type();
  if (auto o = t->cast<c10::OptionalType>()) t = o->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::ScalarTypeType:
      return ArgKind::Dtype;
    case c10::TypeKind::LayoutType:
      return ArgKind::Layout;
    case c10::TypeKind::MemoryFormatType:
      return ArgKind::MemoryFormat;
    case c10::TypeKind::GeneratorType:
      return ArgKind::Generator;
    default:
      return ArgKind::Plain;
  }
}

std::string full_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

Entry* entry_for(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_entries.find(key);
  if (it != g_entries.end()) return it->second;
  auto* e = new Entry();  // lives as long as the process, as the dispatcher's operators do
  e->name = full_name(op);
  for (const auto& a : op.schema().arguments()) e->kinds.push_back(kind_of(a));
  auto v = g_variants.find(e->name);
  if (v != g_variants.end()) {
    e->id = resolve(v->second.functional);
    e->fargs = v->second.fargs;
    e->writes = v->second.writes;
  } else {
    e->id = resolve(e->name);
  }
  g_entries.emplace(key, e);
  return e;
}

const char* memory_format_name(int64_t v) {
  switch (static_cast<c10::MemoryFormat>(v)) {
    case c10::MemoryFormat::Contiguous:
      return "contiguous_format";
    case c10::MemoryFormat::Preserve:
      return "preserve_format";
    case c10::MemoryFormat::ChannelsLast:
      return "channels_last";
    case c10::MemoryFormat::ChannelsLast3d:
      return "channels_last_3d";
    default:
      return "unknown_format";
  }
}

const char* layout_name(int64_t v) {
  return static_cast<c10::Layout>(v) == c10::Layout::Strided ? "strided" : "non_strided";
}

// Arguments in abi.h's form. Pointers into list buffers are fixed once all are built.
struct Marshal {
  std::vector<Arg> args;
  std::vector<Arg> elems;  // tensor list elements
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<uint8_t> bools;
  std::vector<std::string> strs;
  std::vector<c10::Storage> inputs;  // storages of tpu tensor arguments, in order
  struct Fix {
    bool elem;
    size_t at;
    int which;  // 0 ints, 1 floats, 2 bools, 3 elems, 4 strs
    size_t from;
  };
  std::vector<Fix> fixes;
  std::string why;  // why the backend cannot take these arguments

  void clear() {
    args.clear();
    elems.clear();
    ints.clear();
    floats.clear();
    bools.clear();
    strs.clear();
    inputs.clear();
    fixes.clear();
    why.clear();
  }

  static Arg blank(int32_t tag) {
    Arg a{};
    a.tag = tag;
    return a;
  }

  // A tensor argument; false when the backend cannot take it.
  bool tensor(const at::Tensor& t, Arg& a) {
    if (!t.defined()) {
      a = blank(TAG_NONE);
      return true;
    }
    if (t.is_privateuseone()) {
      if (t.layout() != c10::Layout::Strided) {
        why = "a non-strided tensor";
        return false;
      }
      a = blank(TAG_TENSOR);
      a.dtype = static_cast<int32_t>(t.scalar_type());
      a.n = t.dim();
      a.p = handle_of(t);
      a.sizes = t.sizes().data();
      a.strides = t.strides().data();
      a.offset = t.storage_offset();
      inputs.push_back(t.storage());
      return true;
    }
    if (t.is_cpu() && t.dim() == 0) {
      a = blank(t.unsafeGetTensorImpl()->is_wrapped_number() ? TAG_WRAPPED : TAG_HOST_SCALAR);
      a.dtype = static_cast<int32_t>(t.scalar_type());
      a.p = t.data_ptr();
      return true;
    }
    TORCH_CHECK(false,
                "Expected all tensors to be on the same device, but found at least two "
                "devices, tpu:0 and ",
                t.device(), "!");
  }

  bool value(const c10::IValue& v, ArgKind kind, Arg& a, bool elem, size_t at) {
    if (v.isNone()) {
      a = blank(TAG_NONE);
    } else if (v.isTensor()) {
      return tensor(v.toTensor(), a);
    } else if (v.isInt() || v.isSymInt()) {
      int64_t i = v.isInt() ? v.toInt() : v.toSymInt().guard_int(__FILE__, __LINE__);
      switch (kind) {
        case ArgKind::Dtype:
          a = blank(TAG_DTYPE);
          a.n = i;
          break;
        case ArgKind::Layout:
          return str(layout_name(i), a, elem, at);
        case ArgKind::MemoryFormat:
          return str(memory_format_name(i), a, elem, at);
        default:
          a = blank(TAG_INT);
          a.n = i;
      }
    } else if (v.isDouble()) {
      a = blank(TAG_FLOAT);
      a.f = v.toDouble();
    } else if (v.isBool()) {
      a = blank(TAG_BOOL);
      a.n = v.toBool();
    } else if (v.isDevice()) {
      return str(v.toDevice().str(), a, elem, at);
    } else if (v.isString()) {
      return str(v.toStringRef(), a, elem, at);
    } else if (v.isGenerator()) {
      // The default tpu generator is the backend's default stream (TAG_NONE); another tpu
      // generator its own stream.
      const int64_t key = generator_key(v.toGenerator());
      a = blank(key < 0 ? TAG_NONE : TAG_GENERATOR);
      a.n = key;
    } else if (v.isIntList()) {
      a = blank(TAG_INTS);
      fixes.push_back({elem, at, 0, ints.size()});
      for (int64_t x : v.toIntVector()) ints.push_back(x);
      a.n = static_cast<int64_t>(ints.size() - fixes.back().from);
    } else if (v.isDoubleList()) {
      a = blank(TAG_FLOATS);
      fixes.push_back({elem, at, 1, floats.size()});
      for (double x : v.toDoubleVector()) floats.push_back(x);
      a.n = static_cast<int64_t>(floats.size() - fixes.back().from);
    } else if (v.isBoolList()) {
      a = blank(TAG_BOOLS);
      fixes.push_back({elem, at, 2, bools.size()});
      for (bool x : v.toBoolList()) bools.push_back(x);
      a.n = static_cast<int64_t>(bools.size() - fixes.back().from);
    } else if (v.isTensorList() || v.isList()) {
      return tensor_list(v, a, at);
    } else {
      why = std::string("an argument of type ") + v.tagKind();
      return false;
    }
    return true;
  }

  bool str(const std::string& s, Arg& a, bool elem, size_t at) {
    a = blank(TAG_STR);
    a.n = static_cast<int64_t>(s.size());
    fixes.push_back({elem, at, 4, strs.size()});
    strs.push_back(s);
    return true;
  }

  bool tensor_list(const c10::IValue& v, Arg& a, size_t at) {
    TORCH_CHECK(at != SIZE_MAX, "tpuemu: nested lists are not supported");
    const bool plain = v.isTensorList();
    a = blank(plain ? TAG_TENSORS : TAG_OPT_TENSORS);
    const size_t from = elems.size();
    if (plain) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        elems.push_back(blank(TAG_NONE));
        if (!tensor(t, elems.back())) return false;
      }
    } else {
      for (const c10::IValue& x : v.toListRef()) {
        elems.push_back(blank(TAG_NONE));
        if (x.isNone()) continue;
        if (!x.isTensor()) {
          why = "a list of non-tensors";
          return false;
        }
        if (!tensor(x.toTensor(), elems.back())) return false;
      }
    }
    a.n = static_cast<int64_t>(elems.size() - from);
    fixes.push_back({false, at, 3, from});
    return true;
  }

  bool build(c10::ArrayRef<c10::IValue> vals, const std::vector<ArgKind>& kinds) {
    args.resize(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) {
      if (!value(vals[i], i < kinds.size() ? kinds[i] : ArgKind::Plain, args[i], false, i))
        return false;
    }
    for (const Fix& f : fixes) {
      Arg& a = f.elem ? elems[f.at] : args[f.at];
      switch (f.which) {
        case 0: a.p = ints.data() + f.from; break;
        case 1: a.p = floats.data() + f.from; break;
        case 2: a.p = bools.data() + f.from; break;
        case 3: a.p = elems.data() + f.from; break;
        default: a.p = strs[f.from].data();
      }
    }
    return true;
  }
};

// One marshal buffer per nesting level on each thread (a CPU fallback's copies come back here).
struct MarshalScope {
  static thread_local std::vector<std::unique_ptr<Marshal>> pool;
  static thread_local size_t depth;
  Marshal* m;
  MarshalScope() {
    if (pool.size() <= depth) pool.emplace_back(new Marshal());
    m = pool[depth++].get();
    m->clear();
  }
  // The inputs are released with the call: a tensor deleted after its last operator frees
  // its storage at once (torch.tpu.memory_allocated() drops).
  ~MarshalScope() {
    m->clear();
    --depth;
  }
};
thread_local std::vector<std::unique_ptr<Marshal>> MarshalScope::pool;
thread_local size_t MarshalScope::depth = 0;

// Results as tpu tensors.
struct Results {
  const Out* outs;
  size_t n;
  const int64_t* dims;
  std::vector<c10::Storage> made;
  size_t k = 0;

  at::Tensor tensor(const std::vector<c10::Storage>& inputs) {
    TORCH_CHECK(k < n, "tpuemu: fewer results than the schema returns");
    const Out& o = outs[k];
    made.resize(n);
    const size_t idx = k++;
    if (o.tag == TAG_NONE) return at::Tensor();
    TORCH_CHECK(o.tag == TAG_TENSOR, "tpuemu: expected a tensor result");
    c10::Storage st;
    if (o.alias >= 0) {
      st = inputs.at(o.alias);
    } else if (o.same_as >= 0) {
      st = made.at(o.same_as);
    } else {
      st = c10::Storage(c10::Storage::use_byte_size_t(), o.nbytes,
                        data_ptr_for(o.handle, o.addr), allocator(), /*resizable=*/true);
    }
    made[idx] = st;
    auto t = at::detail::make_tensor<c10::TensorImpl>(
        std::move(st), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        caffe2::TypeMeta::fromScalarType(static_cast<c10::ScalarType>(o.dtype)));
    t.unsafeGetTensorImpl()->set_sizes_and_strides(c10::IntArrayRef(dims + o.dims, o.n),
                                                   c10::IntArrayRef(dims + o.dims + o.n, o.n),
                                                   o.offset);
    return t;
  }

  c10::IValue scalar() {
    TORCH_CHECK(k < n, "tpuemu: fewer results than the schema returns");
    const Out& o = outs[k++];
    switch (o.tag) {
      case TAG_INT: return c10::IValue(o.n);
      case TAG_FLOAT: return c10::IValue(o.f);
      case TAG_BOOL: return c10::IValue(o.n != 0);
      default: return c10::IValue();
    }
  }
};

// The IValues the schema returns: written arguments come back as themselves.
std::vector<c10::IValue> wrap_returns(const c10::FunctionSchema& schema,
                                      c10::ArrayRef<c10::IValue> args, Results& res,
                                      const std::vector<c10::Storage>& inputs) {
  std::vector<c10::IValue> rets;
  for (const auto& r : schema.returns()) {
    const auto* ai = r.alias_info();
    if (ai && ai->isWrite()) {
      bool found = false;
      for (size_t i = 0; i < schema.arguments().size(); ++i) {
        const auto* aa = schema.arguments()[i].alias_info();
        if (aa && aa->isWrite() && aa->beforeSets() == ai->beforeSets()) {
          rets.push_back(args[i]);
          found = true;
          break;
        }
      }
      TORCH_CHECK(found, "tpuemu: no argument for a returned alias of ", schema.name());
      continue;
    }
    const auto& t = r.type();
    if (t->kind() == c10::TypeKind::TensorType) {
      rets.emplace_back(res.tensor(inputs));
    } else if (t->kind() == c10::TypeKind::ListType) {
      TORCH_CHECK(res.k < res.n && res.outs[res.k].tag == TAG_LIST,
                  "tpuemu: expected a list result");
      int64_t len = res.outs[res.k++].n;
      c10::List<at::Tensor> l;
      for (int64_t j = 0; j < len; ++j) l.push_back(res.tensor(inputs));
      rets.emplace_back(std::move(l));
    } else {
      rets.push_back(res.scalar());
    }
  }
  return rets;
}

// `clone` of a conjugate view of a complex tensor (PyTorch's Conjugate fallback asks for one
// before another operator reads such a view): the words copied, then the imaginary parts' sign
// bits flipped (exact, NaN included). Its composite kernel would copy from the view, which
// asks for this clone again.
// Flips the sign bits of a complex tensor's imaginary parts, in place.
void negate_imag(const at::Tensor& r) {
  if (r.numel() == 0) return;
  at::Tensor imag_high = as_int32_words(r).select(-1, r.element_size() / 4 - 1);
  imag_high.bitwise_xor_(static_cast<int64_t>(INT32_MIN));
}

bool clone_conj(const std::string& name, c10::ArrayRef<c10::IValue> args, c10::IValue* out) {
  if (name != "aten::clone" || args.empty() || !args[0].isTensor()) return false;
  const at::Tensor& self = args[0].toTensor();
  if (!self.is_complex() || !self.is_conj() || self.is_neg()) return false;
  at::Tensor base = self.conj();
  std::optional<c10::MemoryFormat> format;
  if (args.size() > 1 && !args[1].isNone()) format = args[1].toMemoryFormat();
  at::Tensor r = at::empty_like(base, base.options(), format);
  device_copy(r, base);
  negate_imag(r);
  *out = c10::IValue(r);
  return true;
}

// `conj_physical` of a complex tensor: its words copied and the imaginary parts' sign bits
// flipped, as the CPU's negation (exact, NaN included).
bool conj_physical(const std::string& name, c10::ArrayRef<c10::IValue> args, c10::IValue* out) {
  if (name != "aten::conj_physical" && name != "aten::_conj_physical") return false;
  if (args.empty() || !args[0].isTensor()) return false;
  const at::Tensor& self = args[0].toTensor();
  if (!self.is_complex() || self.is_conj() || self.is_neg()) return false;
  at::Tensor r = at::empty_like(self);
  device_copy(r, self);
  negate_imag(r);
  *out = c10::IValue(r);
  return true;
}

// Operators PyTorch composes from `empty`, `fill_` and `copy_` (CompositeExplicitAutograd): for
// a dtype the backend holds but does not compute, their composite kernel runs, its fills and
// copies on the device as 32-bit words (`fill_foreign`, `device_copy`).
bool moves_only(const std::string& n) {
  static const char* const names[] = {
      "aten::zeros_like", "aten::ones_like", "aten::full_like",      "aten::new_zeros",
      "aten::new_ones",   "aten::new_full",  "aten::zeros",          "aten::ones",
      "aten::full",       "aten::zeros.out", "aten::ones.out",       "aten::full.out",
      "aten::clone",      "aten::constant_pad_nd"};
  for (const char* x : names) {
    if (n == x) return true;
  }
  return false;
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, Entry* e,
                  const std::string& why) {
  const std::string reason = why.empty() ? "" : " (" + why + ")";
  TORCH_CHECK_NOT_IMPLEMENTED(g_fallback_on.load(), "tpuemu: ", e->name,
                              " is not implemented for the tpu device", reason,
                              ", and TORCH_TPU_CPU_FALLBACK=0 forbids running it on the CPU");
  // A view run on the CPU returns a copy, not a view: writes through it (a collective's
  // result written into view_as_real of a complex tensor) would be lost without a word.
  for (const auto& r : op.schema().returns()) {
    TORCH_CHECK_NOT_IMPLEMENTED(r.alias_info() == nullptr || r.alias_info()->isWrite(),
                                "tpuemu: ", e->name,
                                " is a view operator the tpu device lacks; it cannot run on the "
                                "CPU (its result would be a copy, not a view of the tpu tensor)");
  }
  if (!e->warned.exchange(true)) {
    TORCH_WARN("tpuemu: ", e->name, " is not implemented for the tpu device", reason,
               "; it runs on the CPU (inputs copied to the host, results back). This warning "
               "is shown once per overload; tpuemu.metrics()['cpu_fallbacks'] counts the calls.");
  }
  // A random operator the tpu lacks draws on the host from a generator keyed by the tpu
  // generator's stream (which it advances): reproducible under torch.manual_seed.
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  for (size_t i = 0; i < n; ++i) {
    if (e->kinds[i] == ArgKind::Generator) {
      c10::IValue& v = (*stack)[stack->size() - n + i];
      v = c10::IValue(host_generator_for(v.isNone() ? std::nullopt : std::optional(v.toGenerator())));
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  at::native::cpu_fallback(op, stack);
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                  .count();
  vt().note_fallback(reinterpret_cast<const uint8_t*>(e->name.data()), e->name.size(), ns);
}

// Calls the backend; on TPU_RESIZE, resizes the out= arguments and calls again.
int32_t call_backend(Entry* e, c10::ArrayRef<c10::IValue> args, Marshal& m, Results& res) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!m.build(args, e->kinds)) return TPU_UNSUPPORTED;
    int32_t rc = vt().call(e->id, m.args.data(), m.args.size(), e->fargs.data(),
                           e->fargs.size(), e->writes.data(), e->writes.size(), &res.outs,
                           &res.n, &res.dims);
    if (rc != TPU_RESIZE) return rc;
    std::vector<std::vector<int64_t>> shapes;
    for (size_t k = 0; k < res.n; ++k) {
      if (res.outs[k].tag != TAG_TENSOR) continue;
      const int64_t* d = res.dims + res.outs[k].dims;
      shapes.emplace_back(d, d + res.outs[k].n);
    }
    TORCH_CHECK(shapes.size() == e->writes.size(), "tpuemu: ", e->name,
                ": results do not match its outputs");
    for (size_t k = 0; k < shapes.size(); ++k) {
      args[e->writes[k]].toTensor().resize_(shapes[k]);
    }
    m.clear();
  }
  TORCH_CHECK(false, "tpuemu: ", e->name, ": outputs still have the wrong shape after resizing");
}

void rust_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Entry* e = entry_for(op);
  if (e->kind.load(std::memory_order_relaxed) == Entry::Kind::Fallback) {
    return cpu_fallback(op, stack, e, "");
  }
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  MarshalScope scope;
  Marshal& m = *scope.m;
  Results res{};
  int32_t rc = call_backend(e, args, m, res);
  if (rc == TPU_UNSUPPORTED) {
    std::string why = m.why.empty() ? last_error() : m.why;
    c10::IValue conj;
    if (clone_conj(e->name, args, &conj) || conj_physical(e->name, args, &conj)) {
      torch::jit::drop(*stack, n);
      stack->push_back(std::move(conj));
      return;
    }
    if (fill_foreign(e->name, args)) {
      c10::IValue self = args[0];
      torch::jit::drop(*stack, n);
      stack->push_back(std::move(self));
      return;
    }
    // (A dtype, or a complex fill value, the backend does not compute.)
    const bool foreign = why.find("is not computed on the tpu") != std::string::npos ||
                         why.find("of type Complex") != std::string::npos;
    if (foreign && moves_only(e->name) &&
        op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
      op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
      return;
    }
    if (why.find("is not registered") != std::string::npos) {
      e->kind.store(Entry::Kind::Fallback);
      why.clear();
    }
    return cpu_fallback(op, stack, e, why);
  }
  if (rc != TPU_OK) raise(rc, e->name);
  std::vector<c10::IValue> rets = wrap_returns(schema, args, res, m.inputs);
  torch::jit::drop(*stack, n);
  for (auto& r : rets) stack->push_back(std::move(r));
}

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  rust_kernel(op, stack);
}

std::unique_ptr<torch::Library>& rust_library() {
  static std::unique_ptr<torch::Library> lib;
  return lib;
}

}  // namespace

void register_rust_kernels(const std::vector<std::string>& names) {
  auto& lib = rust_library();
  if (!lib) {
    lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                           c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  }
  for (const auto& n : names) {
    lib->impl(n.c_str(), torch::CppFunction::makeFromBoxedFunction<&rust_kernel>());
  }
}

void set_variant(const std::string& name, const std::string& functional,
                 const std::vector<int64_t>& fargs, const std::vector<int64_t>& writes) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_variants[name] = Variant{functional, fargs, writes};
}

void set_cpu_fallback(bool on) { g_fallback_on.store(on); }

// An 8- or 16-byte-element tensor seen as int32 words (one more dim of 2 or 4): copying those
// moves the bits exactly (the device computes int64 in 32-bit lanes, and float64 and complex
// not at all).
at::Tensor as_int32_words(const at::Tensor& t) {
  const int64_t k = t.element_size() / 4;
  auto r = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(t.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::Make<int32_t>());
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> strides;
  for (int64_t s : t.strides()) strides.push_back(k * s);
  sizes.push_back(k);
  strides.push_back(1);
  r.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, k * t.storage_offset());
  return r;
}


void device_copy(const at::Tensor& dst, const at::Tensor& src_in) {
  static const int64_t copy_id = resolve("aten::copy_");
  static const std::vector<ArgKind> kinds(3, ArgKind::Plain);
  at::Tensor src = src_in;
  at::Tensor d = dst;
  const int64_t size = dst.element_size();
  if (src.scalar_type() == dst.scalar_type() && (size == 8 || size == 16)) {
    src = as_int32_words(src.expand(dst.sizes()));
    d = as_int32_words(dst);
  }
  std::vector<c10::IValue> args{c10::IValue(d), c10::IValue(src), c10::IValue(false)};
  MarshalScope scope;
  Marshal& m = *scope.m;
  int32_t rc = TPU_UNSUPPORTED;
  if (m.build(args, kinds)) {
    const Out* outs;
    size_t nouts;
    const int64_t* dims;
    rc = vt().call(copy_id, m.args.data(), m.args.size(), nullptr, 0, nullptr, 0, &outs, &nouts,
                   &dims);
  }
  if (rc == TPU_UNSUPPORTED) {
    // A dtype the backend does not compute with: through the host, bytes exact.
    at::Tensor h = src.cpu();
    const_cast<at::Tensor&>(dst).copy_(h);
    return;
  }
  if (rc != TPU_OK) raise(rc, "aten::copy_");
}

std::vector<at::Tensor> run_graph(int64_t id, const std::vector<at::Tensor>& inputs) {
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  std::vector<ArgKind> kinds(args.size(), ArgKind::Plain);
  MarshalScope scope;
  Marshal& m = *scope.m;
  TORCH_CHECK(m.build(args, kinds), "tpuemu: compiled graph inputs: ", m.why);
  Results res{};
  int32_t rc = vt().call_graph(id, m.args.data(), m.args.size(), nullptr, 0, nullptr, 0,
                               &res.outs, &res.n, &res.dims);
  if (rc != TPU_OK) raise(rc, "compiled graph");
  std::vector<at::Tensor> out;
  while (res.k < res.n) out.push_back(res.tensor(m.inputs));
  return out;
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
}

namespace {

// PyTorch's own `conj_physical_` and `conj_physical.out` call the CPU's kernel stub directly:
// the tpu's are these (a real tensor is its own conjugate).
at::Tensor& conj_physical_inplace(at::Tensor& self) {
  if (!self.is_complex()) return self;
  TORCH_CHECK(!self.is_conj() && !self.is_neg(),
              "tpuemu: conj_physical_ of a conjugate or negative view; resolve it first");
  negate_imag(self);
  return self;
}

at::Tensor& conj_physical_out(const at::Tensor& self, at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  out.copy_(self);
  return conj_physical_inplace(out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("conj_physical_", TORCH_FN(conj_physical_inplace));
  m.impl("conj_physical.out", TORCH_FN(conj_physical_out));
}

}  // namespace tpuemu
