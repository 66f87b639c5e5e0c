// The "tpu" device itself: the Rust table, errors, the allocator, the device guard, the
// PrivateUse1 hooks (the generators are in generator.cpp).

#include <torch/csrc/Exceptions.h>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <map>
#include <mutex>

#include "tpuemu.h"

namespace tpuemu {

namespace {
const VTable* g_vt = nullptr;

// This process's tpu: its index (the local rank when torchrun started one process per chip,
// else 0) and how many tpus the host has (LOCAL_WORLD_SIZE, else 1). Every tensor of this
// process lives on its own index; the others belong to other processes.
std::atomic<int> g_index{0};
std::atomic<int> g_count{1};

c10::Device own() {
  return c10::Device(c10::DeviceType::PrivateUse1,
                     static_cast<c10::DeviceIndex>(g_index.load(std::memory_order_relaxed)));
}
}  // namespace

void set_device_layout(int index, int count) {
  TORCH_CHECK(count >= 1 && index >= 0 && index < count, "tpuemu: tpu:", index,
              " is not one of ", count, " tpus");
  g_index.store(index);
  g_count.store(count);
}

int own_index() { return g_index.load(std::memory_order_relaxed); }

int device_count() { return g_count.load(std::memory_order_relaxed); }

void check_device(c10::Device d) {
  if (!d.has_index() || d.index() == own_index()) return;
  if (device_count() == 1) {
    TORCH_CHECK(false, "tpuemu has one tpu device (tpu:0), not ", d);
  }
  TORCH_CHECK(d.index() >= 0 && d.index() < device_count(), "tpuemu: ", d,
              " does not exist: this host has ", device_count(), " tpus (tpu:0 to tpu:",
              device_count() - 1, ")");
  TORCH_CHECK(false, "tpuemu: ", d, " is emulated by another process; this process (local rank ",
              own_index(), ") emulates tpu:", own_index(),
              ". Use torch.device(\"tpu\") or torch.tpu.current_device().");
}

void set_vtable(const VTable* t) {
  TORCH_CHECK(t != nullptr && t->version == TPU_ABI_VERSION,
              "tpuemu: the native extension's ABI (version ", t ? t->version : 0,
              ") does not match the C++ shim's (", TPU_ABI_VERSION,
              "); rebuild with scripts/python.sh");
  g_vt = t;
}

bool ready() { return g_vt != nullptr; }

const VTable& vt() {
  TORCH_CHECK(g_vt != nullptr, "tpuemu: the tpu device is not initialised (import tpuemu)");
  return *g_vt;
}

std::string last_error() {
  size_t len = 0;
  const uint8_t* p = vt().last_error(&len);
  std::string s(reinterpret_cast<const char*>(p), len);
  for (const char* prefix :
       {"IndexError: ", "NotImplementedError: ", "RuntimeError: ", "KeyboardInterrupt: ",
        "LinAlgError: "}) {
    if (s.rfind(prefix, 0) == 0) s = s.substr(std::string(prefix).size());
  }
  return s;
}

void raise(int32_t rc, const std::string& where) {
  std::string msg = last_error();
  // A LinAlgError and a verbatim error carry PyTorch's own message (it names the API).
  bool verbatim = rc == TPU_LINALG_ERROR || rc == TPU_VERBATIM_ERROR;
  if (!verbatim && !where.empty() && msg.find(where) == std::string::npos)
    msg = where + ": " + msg;
  switch (rc) {
    case TPU_INDEX_ERROR:
      TORCH_CHECK_INDEX(false, msg);
    case TPU_UNSUPPORTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    case TPU_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case TPU_LINALG_ERROR:
      TORCH_CHECK_LINALG(false, msg);
    case TPU_INTERRUPTED: {
      // KeyboardInterrupt, as Python's own handler raises it (operators run with the GIL
      // released: take it to set the error). Python's handler, which saw the same Ctrl-C, runs
      // now, so that it does not raise a second KeyboardInterrupt later; ours, which says what
      // was stopped, replaces its exception.
      python_error e;
      {
        pybind11::gil_scoped_acquire gil;
        // Another handler's exception (a SIGTERM handler's, say) is kept, not replaced.
        bool raised = PyErr_CheckSignals() != 0;
        if (!raised || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
          PyErr_Clear();
          PyErr_SetString(PyExc_KeyboardInterrupt, msg.c_str());
        }
        e.persist();
      }
      throw e;
    }
    default:
      TORCH_CHECK(false, msg);
  }
}

// ---------------------------------------------------------------------------------------------
// Allocator: a storage's DataPtr holds the Rust handle as its context and a made-up address
// that never repeats as its data pointer (nothing lives in host memory).

c10::DataPtr data_ptr_for(void* handle, uint64_t addr) {
  return c10::DataPtr(reinterpret_cast<void*>(addr), handle, vt().release, own());
}

namespace {
struct TpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* handle = nullptr;
    uint64_t addr = 0;
    int32_t rc = vt().alloc(nbytes, &handle, &addr);
    if (rc != TPU_OK) raise(rc, "tpu allocation");
    return data_ptr_for(handle, addr);
  }
  void copy_data(void* /*dest*/, const void* /*src*/, std::size_t /*count*/) const override {
    TORCH_CHECK(false, "tpuemu: tpu storages are not host memory; copy tensors instead");
  }
};
TpuAllocator g_allocator;
}  // namespace

c10::Allocator* allocator() { return &g_allocator; }

const void* handle_of(const at::Tensor& t) {
  if (!t.has_storage()) return nullptr;
  return t.storage().data_ptr().get_context();
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  auto* impl = storage.unsafeGetStorageImpl();
  const size_t old = impl->nbytes();
  if (old == nbytes) return;
  c10::DataPtr fresh = g_allocator.allocate(nbytes);
  const size_t keep = std::min(old, nbytes);
  if (keep > 0) {
    int32_t rc = vt().copy_storage(impl->data_ptr().get_context(), fresh.get_context(), keep);
    if (rc != TPU_OK) raise(rc, "resize");
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

// ---------------------------------------------------------------------------------------------
// Device guard: this process's device, one in-order stream.

namespace {
struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check_device(d);
    return own();
  }
  c10::Device getDevice() const override { return own(); }
  void setDevice(c10::Device d) const override { check_device(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  // Work on the device runs in issue order: events need nothing.
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag)
      const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override { synchronize_all(); }
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override { synchronize_all(); }
  static void synchronize_all() {
    if (!ready()) return;
    int32_t rc = vt().synchronize();
    if (rc != TPU_OK) raise(rc, "synchronize");
  }
};
}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// ---------------------------------------------------------------------------------------------
// Pinned memory and hooks.

namespace {
// Pinned host memory (`pin_memory()`, `.to("cpu", non_blocking=True)`): the emulator copies
// from any host memory, so pinned memory is ordinary host memory that remembers it was asked
// for pinned (`is_pinned()` says so for exactly these allocations).
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(mu());
      live()[reinterpret_cast<uintptr_t>(p)] = nbytes;
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  static bool pinned(const void* ptr) {
    const auto at = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu());
    auto it = live().upper_bound(at);
    if (it == live().begin()) return false;
    --it;
    return at < it->first + std::max<size_t>(it->second, 1);
  }

 private:
  static void release(void* p) {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mu());
      live().erase(reinterpret_cast<uintptr_t>(p));
    }
    c10::free_cpu(p);
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::map<uintptr_t, size_t>& live() {
    static std::map<uintptr_t, size_t> m;
    return m;
  }
};
PinnedAllocator g_pinned;

struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(own_index());
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return generator();
  }
  // torch.Generator(device="tpu"): a stream of its own on the device (generator.cpp).
  at::Generator getNewGenerator(c10::DeviceIndex) const override { return new_generator(); }
  at::Device getDeviceFromPtr(void*) const override { return own(); }
  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};
}  // namespace

void register_device() {
  static bool done = false;
  if (done) return;
  done = true;
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator);
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
}

}  // namespace tpuemu
