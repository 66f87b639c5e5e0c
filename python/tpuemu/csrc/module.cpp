// The Python module of the shim (tpuemu._C): initialisation, registration and the generator.

#include <torch/python.h>  // pybind11 and the Tensor casters, without torch/all.h

#include "tpuemu.h"

namespace tpuemu {
void set_vtable(const VTable* t);
void register_device();
}  // namespace tpuemu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace tpuemu;
  m.def(
      "init",
      [](uintptr_t vtable, uint64_t version) {
        TORCH_CHECK(version == TPU_ABI_VERSION, "tpuemu: the native extension's ABI (",
                    version, ") does not match the C++ shim's (", TPU_ABI_VERSION,
                    "); rebuild with scripts/python.sh");
        set_vtable(reinterpret_cast<const VTable*>(vtable));
        register_device();
      },
      "Connects the shim to tpuemu._rust's table and registers the device.");
  m.def("register_kernels", &register_rust_kernels,
        "Sends these aten overloads on tpu tensors to the Rust backend.");
  m.def("set_variant", &set_variant,
        "Runs an in-place or out= overload as its functional overload plus copies.");
  m.def("set_cpu_fallback", &set_cpu_fallback, "Allows (or forbids) the CPU fallback.");
  m.def("run_graph", &run_graph, "Runs a compiled graph on tpu tensors.");
  m.def("manual_seed", [](uint64_t seed) {
    auto& g = generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(seed);
  });
  m.def("initial_seed", []() {
    auto& g = generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.current_seed();
  });
  m.def("seed", []() {
    auto& g = generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.seed();
  });
  m.def("get_rng_state", []() {
    auto& g = generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.get_state();
  });
  m.def("set_rng_state", [](const at::Tensor& state) {
    auto& g = generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  });
  m.def("abi_version", []() { return TPU_ABI_VERSION; });
  m.def("set_device_layout", &set_device_layout,
        "This process's tpu index and the host's tpu count (before the first tensor).");
  m.def("own_index", &own_index, "This process's tpu index.");
  m.def("device_count", &device_count, "The host's tpu count.");
  m.def("peek", &peek_host, "A tpu tensor's elements for a collective (untimed).");
  m.def("land", &land_host, "A collective's result into a tpu tensor, ready at ready_ns.");
}
