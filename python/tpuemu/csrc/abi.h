// The C ABI of tpuemu's native half (python/src/abi.rs and python/src/call.rs declare the same
// structs; keep them in step and bump TPU_ABI_VERSION with any change).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpuemu {

constexpr uint64_t TPU_ABI_VERSION = 6;

// Status codes.
enum : int32_t {
  TPU_OK = 0,
  TPU_ERROR = 1,
  TPU_UNSUPPORTED = 2,  // the backend cannot run this call: run the operator on the CPU
  TPU_INDEX_ERROR = 3,
  TPU_RESIZE = 4,  // an out= tensor has the wrong shape: resize it to the result's and call again
  TPU_OUT_OF_MEMORY = 5,  // raised as torch.OutOfMemoryError
  TPU_INTERRUPTED = 6,    // the user stopped a run (Ctrl-C): raised as KeyboardInterrupt
  TPU_LINALG_ERROR = 7,   // a singular or not positive-definite input: torch.linalg.LinAlgError
  TPU_VERBATIM_ERROR = 8,  // a RuntimeError whose message is PyTorch's own (nothing put in front)
};

// Argument and result tags.
enum : int32_t {
  TAG_NONE = 0,
  TAG_TENSOR = 1,
  TAG_INT = 2,
  TAG_FLOAT = 3,
  TAG_BOOL = 4,
  TAG_INTS = 5,
  TAG_FLOATS = 6,
  TAG_BOOLS = 7,
  TAG_STR = 8,
  TAG_DTYPE = 9,
  TAG_TENSORS = 10,
  TAG_OPT_TENSORS = 11,
  TAG_HOST_SCALAR = 12,  // a 0-dim CPU tensor: p points to its element
  TAG_LIST = 13,         // results: a list of n entries follows
  TAG_WRAPPED = 14,      // a Python number PyTorch wrapped as a 0-dim CPU tensor
  TAG_GENERATOR = 15,    // an explicit tpu generator: n is its stream's key
};

struct Arg {
  int32_t tag;
  int32_t dtype;  // c10::ScalarType code (tensors, dtypes)
  int64_t n;      // int / bool value; list or string length; tensor rank
  double f;
  const void* p;  // tensor: storage handle; lists: elements; str: bytes
  const int64_t* sizes;
  const int64_t* strides;
  int64_t offset;
};

struct Out {
  int32_t tag;
  int32_t dtype;
  int64_t n;
  double f;
  void* handle;  // a new storage's handle (the receiver owns it), or null
  uint64_t addr;
  uint64_t nbytes;
  int64_t alias;    // the input tensor (argument order, lists flattened) whose storage it views, or -1
  int64_t same_as;  // an earlier result whose new storage it shares, or -1
  int64_t dims;     // sizes then strides start at this index of the dims array
  int64_t offset;
};

using CallFn = int32_t (*)(int64_t op, const Arg* args, size_t nargs, const int64_t* fargs,
                           size_t nfargs, const int64_t* writes, size_t nwrites, const Out** outs,
                           size_t* nouts, const int64_t** dims);

struct VTable {
  uint64_t version;
  const uint8_t* (*last_error)(size_t* len);
  int32_t (*alloc)(uint64_t nbytes, void** handle, uint64_t* addr);
  void (*release)(void* handle);
  int32_t (*write_view)(const void* handle, const int64_t* shape, const int64_t* strides,
                        size_t ndim, int64_t offset, size_t elem_size, const uint8_t* data,
                        size_t len);
  int32_t (*read_view)(const void* handle, const int64_t* shape, const int64_t* strides,
                       size_t ndim, int64_t offset, size_t elem_size, uint8_t* out, size_t len);
  int32_t (*copy_storage)(const void* src, const void* dst, uint64_t nbytes);
  void (*note_fallback)(const uint8_t* name, size_t len, double ns);
  int32_t (*synchronize)();
  int64_t (*resolve)(const uint8_t* name, size_t len);
  CallFn call;
  CallFn call_graph;
  // Collectives carried by another engine (torch.distributed's gloo): a view's bytes out and a
  // result's bytes in, untimed; the result is ready at ready_ns of simulated time.
  int32_t (*peek_view)(const void* handle, const int64_t* shape, const int64_t* strides,
                       size_t ndim, int64_t offset, size_t elem_size, uint8_t* out, size_t len);
  int32_t (*land_view)(const void* handle, const int64_t* shape, const int64_t* strides,
                       size_t ndim, int64_t offset, size_t elem_size, const uint8_t* data,
                       size_t len, double ready_ns);
  // The random generators' streams: op 0 reads key's seed and next counter, 1 sets them, 2
  // forgets the stream (key < 0: the default generator).
  int32_t (*rng)(int32_t op, int64_t key, uint64_t* seed, uint64_t* offset);
};

}  // namespace tpuemu
