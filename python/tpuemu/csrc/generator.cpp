// The tpu's random generators: PyTorch's view of the backend's Threefry streams.
//
// A random operator on tpu tensors draws on the device from a counter-based stream (the Rust
// backend's Threefry-2x32-20, `tpuemu_kernels::rng`): a seed and the next counter, advanced by
// every draw. The default tpu generator is the backend's default stream; each
// `torch.Generator(device="tpu")` is a stream of its own, known to the backend by a key. This
// object holds nothing but that key: seeding, `get_state`/`set_state` and the offset read and
// write the backend's stream, so they see every draw the backend made, in every mode.
//
// The state is 16 bytes (uint8): the seed, then the next counter, both little-endian u64 — as
// CUDA's Philox generator keeps a seed and an offset.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GeneratorImpl.h>

#include <atomic>
#include <cstring>

#include "tpuemu.h"

namespace tpuemu {

namespace {
constexpr int32_t RNG_GET = 0, RNG_SET = 1, RNG_DROP = 2;
constexpr uint64_t DEFAULT_SEED = 67280421310721ULL;  // c10::default_rng_seed_val
constexpr size_t STATE_BYTES = 16;

int64_t next_key() {
  static std::atomic<int64_t> k{0};
  return k.fetch_add(1);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

TpuGenerator::TpuGenerator(int64_t key, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, 0),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      key_(key) {
  // The default generator is the backend's default stream, seeded by the backend already.
  if (key_ >= 0) put(seed, 0);
}

TpuGenerator::~TpuGenerator() {
  if (key_ >= 0 && ready()) vt().rng(RNG_DROP, key_, nullptr, nullptr);
}

std::pair<uint64_t, uint64_t> TpuGenerator::stream() const {
  uint64_t seed = 0, offset = 0;
  int32_t rc = vt().rng(RNG_GET, key_, &seed, &offset);
  if (rc != TPU_OK) raise(rc, "tpu generator");
  return {seed, offset};
}

void TpuGenerator::put(uint64_t seed, uint64_t offset) {
  int32_t rc = vt().rng(RNG_SET, key_, &seed, &offset);
  if (rc != TPU_OK) raise(rc, "tpu generator");
}

void TpuGenerator::set_current_seed(uint64_t seed) { put(seed, 0); }
uint64_t TpuGenerator::current_seed() const { return stream().first; }
void TpuGenerator::set_offset(uint64_t offset) { put(stream().first, offset); }
uint64_t TpuGenerator::get_offset() const { return stream().second; }

uint64_t TpuGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  auto [seed, offset] = stream();
  auto t = at::empty({static_cast<int64_t>(STATE_BYTES)}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(t.data_ptr<uint8_t>(), &seed, 8);
  std::memcpy(t.data_ptr<uint8_t>() + 8, &offset, 8);
  return t.getIntrusivePtr();
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                  new_state.numel() == static_cast<int64_t>(STATE_BYTES) &&
                  new_state.is_contiguous() && new_state.device().is_cpu(),
              "RNG state must be a torch.ByteTensor of ", STATE_BYTES,
              " bytes (the tpu generator's seed and offset, as get_rng_state returns)");
  uint64_t seed = 0, offset = 0;
  const auto* p = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed, p, 8);
  std::memcpy(&offset, p + 8, 8);
  put(seed, offset);
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto [seed, offset] = stream();
  auto* g = new TpuGenerator(next_key(), seed);
  g->put(seed, offset);
  return g;
}

at::Generator new_generator() {
  return at::make_generator<TpuGenerator>(next_key(), DEFAULT_SEED);
}

at::Generator& generator() {
  static at::Generator g = at::make_generator<TpuGenerator>(-1, DEFAULT_SEED);
  return g;
}

int64_t generator_key(const std::optional<at::Generator>& g) {
  if (!g.has_value() || !g->defined()) return -1;
  auto* impl = dynamic_cast<TpuGenerator*>(g->unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "Expected a 'tpu' device type for generator but found '",
              g->device().type() == c10::DeviceType::PrivateUse1 ? std::string("tpu")
                                                                   : g->device().str(),
              "'");
  return impl->key();
}

at::Generator host_generator_for(const std::optional<at::Generator>& g) {
  // One counter of the tpu stream keys a host generator: reproducible under manual_seed, and
  // the next draw on the device starts after it.
  at::Generator tpu = g.has_value() && g->defined() ? *g : generator();
  auto* impl = dynamic_cast<TpuGenerator*>(tpu.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "Expected a 'tpu' device type for generator but found '",
              tpu.device().str(), "'");
  std::lock_guard<std::mutex> lock(tpu.mutex());
  auto [seed, offset] = impl->stream();
  impl->set_offset(offset + 1);
  return at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed ^ splitmix64(offset)));
}

}  // namespace tpuemu
