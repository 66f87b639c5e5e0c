// tpuemu's C++ shim: PyTorch's PrivateUse1 device, renamed "tpu", backed by the emulated chip
// that the Rust extension (tpuemu._rust) owns. Storages hold a handle to a backend storage;
// operators go to Rust through the C ABI in abi.h.
#pragma once

#include <string>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Allocator.h>

#include "abi.h"

namespace tpuemu {

// The Rust side's table (set by init; null before).
const VTable& vt();
bool ready();

// Throws the Rust side's last error as the matching Python exception (RuntimeError,
// IndexError, NotImplementedError), prefixed with `where`.
[[noreturn]] void raise(int32_t rc, const std::string& where);
// The Rust side's last error message.
std::string last_error();

// This process's tpu index and the host's tpu count (one process per chip under torchrun).
void set_device_layout(int index, int count);
int own_index();
int device_count();
// Refuses a device index other than this process's.
void check_device(c10::Device d);

// A collective's input bytes out of a tpu tensor, and its result into one, ready at ready_ns
// of simulated time; neither is timed (the interconnect model times the collective).
at::Tensor peek_host(const at::Tensor& src);
void land_host(const at::Tensor& dst, const at::Tensor& src, double ready_ns);

// The allocator of "tpu" storages.
c10::Allocator* allocator();
// A DataPtr for a handle the Rust side created.
c10::DataPtr data_ptr_for(void* handle, uint64_t addr);
// The backend storage handle of a tensor (null for storages of zero bytes).
const void* handle_of(const at::Tensor& t);
// Grows or shrinks a storage to nbytes, keeping its first bytes (on the device).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

// Registers the native kernels (empty, copies, resize, set_, views) and the fallback.
void register_native_kernels();
// Registers the boxed kernel that sends an operator to Rust, for these overloads
// ("add.Tensor").
void register_rust_kernels(const std::vector<std::string>& names);
// How an in-place or out= overload runs as its functional overload: the functional's name,
// which arguments form its argument list (-1: absent), which arguments receive its results.
void set_variant(const std::string& name, const std::string& functional,
                 const std::vector<int64_t>& fargs, const std::vector<int64_t>& writes);
// CPU fallback on or off (TORCH_TPU_CPU_FALLBACK).
void set_cpu_fallback(bool on);

// Runs compiled graph `id` on tpu tensors.
std::vector<at::Tensor> run_graph(int64_t id, const std::vector<at::Tensor>& inputs);

// A tpu random generator (generator.cpp): the backend's Threefry stream `key` (-1: the
// default stream), read and written through the Rust table.
class TpuGenerator final : public c10::GeneratorImpl {
 public:
  TpuGenerator(int64_t key, uint64_t seed);
  ~TpuGenerator() override;
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  int64_t key() const { return key_; }
  // The stream's seed and next counter.
  std::pair<uint64_t, uint64_t> stream() const;

 private:
  void put(uint64_t seed, uint64_t offset);
  TpuGenerator* clone_impl() const override;
  int64_t key_;
};

// The default tpu generator (torch.tpu.manual_seed, get/set_rng_state).
at::Generator& generator();
// A new tpu generator (torch.Generator(device="tpu")), seeded with PyTorch's default seed.
at::Generator new_generator();
// The stream key of a random operator's generator argument (-1: none, or the default one);
// a generator of another device is refused as PyTorch refuses it.
int64_t generator_key(const std::optional<at::Generator>& g);
// A host generator for a random operator the tpu lacks (run on the CPU): seeded from the tpu
// stream's seed and next counter, whose counter it then advances by one.
at::Generator host_generator_for(const std::optional<at::Generator>& g);

// tpu -> tpu copy through the backend (dtype conversion and broadcasting included).
void device_copy(const at::Tensor& dst, const at::Tensor& src);

// `fill_` / `zero_` of a tensor whose dtype the backend holds but does not compute (float64,
// complex): the value's bytes, made by PyTorch on the CPU in that dtype, copied to one element
// on the tpu and broadcast over the tensor by a device copy of 32-bit words. False for any
// other operator or dtype.
bool fill_foreign(const std::string& name, c10::ArrayRef<c10::IValue> args);

}  // namespace tpuemu
