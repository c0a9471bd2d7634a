// The CUDA backend as the rest of kvserve sees it: options, a runner
// interface, and the loader of the module that implements them.
//
// Why a module (libkvserve_cuda_backend.so, dlopen'ed on demand) rather than
// linked into the daemon: libcublasLt carries ~92 KiB of thread-local
// storage. Linked at start-up, that TLS becomes part of every thread's static
// TLS block, and threads created with small stacks fail: civetweb's workers
// (the /metrics endpoint) could not start at all ("Cannot create first worker
// thread"). A dlopen'ed library's TLS is allocated per thread on demand, so
// the daemon's threads are unaffected. It also keeps the CUDA libraries out
// of processes that never use a GPU.
//
// Calls cross the boundary through CudaBackendApi's function pointers and
// DeviceRunner's vtable only. Both sides come from the same build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/step_input.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::engine {

struct CudaRunnerOptions {
  int device = 0;
  int64_t block_size = 16;
  // KV blocks; 0 sizes the pool from gpu_memory_fraction: the fraction of the
  // device's total memory this process may hold (weights, KV, scratch).
  int64_t num_blocks = 0;
  double gpu_memory_fraction = 0.9;
  // Storage dtype of weights, activations and KV: "auto" (the checkpoint's:
  // the dtype of its embedding table; builtin:llama3-8b is bf16, the other
  // builtins fp32), "float32", "bfloat16" or "float16".
  std::string dtype = "auto";
  // KV cache format (--kv_cache_dtype; kernels/cpu/kv_quant.h encodings,
  // engine/kv_cache.h layout). kFloat32 is "auto": the cache in `dtype`, as
  // before the formats existed (on the CPU, auto is fp32). bfloat16/float16
  // store that 16-bit type whatever `dtype` is; the scaled formats add one
  // fp32 scale per (token, kv head) row. The pool's size in blocks follows
  // from gpu_memory_fraction over KvCacheShape::bytes_per_block.
  kernels::KvDtype kv_cache_dtype = kernels::KvDtype::kFloat32;
  bool batch_invariant = false;
  // Bounds of one step, for sizing scratch up front (a larger step is
  // InvalidArgument): the scheduler's token budget and sequence cap.
  int32_t max_num_tokens = 8192;
  int32_t max_num_seqs = 256;
  // Longest sequence served (attention workspace sizing); 0: the model's
  // max_position_embeddings.
  int32_t max_model_len = 0;
};

// One forward step on a device (engine/cuda/cuda_model_runner.h implements
// it). Step returns logits, or samples when the input carries sample_specs.
class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  virtual absl::StatusOr<StepOutput> Step(const StepInput& input) = 0;
  virtual int64_t num_blocks() const = 0;
  virtual int64_t block_size() const = 0;
  virtual std::string device_name() const = 0;
  virtual std::string dtype_name() const = 0;
  virtual int64_t weight_bytes() const = 0;
  virtual int64_t kv_cache_bytes() const = 0;
  // Bytes of weights a decode step streams (the roofline's weight share).
  virtual int64_t streamed_weight_bytes() const = 0;
  // Fills every slot of the given blocks (all layers, K and V) with `value`
  // (tests poison unowned blocks with NaN).
  virtual absl::Status FillKvBlocks(const std::vector<int32_t>& block_ids, float value) = 0;
};

inline constexpr int kCudaBackendAbiVersion = 2;  // 2: CudaRunnerOptions::kv_cache_dtype
inline constexpr char kCudaBackendSymbol[] = "kvserve_cuda_backend_api";

struct CudaBackendApi {
  int abi_version = 0;  // kCudaBackendAbiVersion
  // Whether a CUDA device can be used; *why says why not.
  bool (*device_available)(std::string* why) = nullptr;
  // `model` must outlive the runner. FailedPrecondition without a device.
  absl::StatusOr<std::unique_ptr<DeviceRunner>> (*create)(
      const Model& model, const CudaRunnerOptions& options) = nullptr;
};

// OK when the CUDA runner implements every feature `config` uses (all the
// family features the loader accepts); otherwise InvalidArgument naming what
// it lacks (a head_dim the attention kernels are not built for) and saying
// that --backend=cpu serves the model. CudaModelRunner::Create calls it
// first; it needs no GPU.
absl::Status CheckCudaSupports(const ModelConfig& config);

// Loads the module once per process: $KVSERVE_CUDA_BACKEND_MODULE, else where
// the build put it, else next to the executable, else the library path.
// FailedPrecondition naming every path tried when it cannot be loaded (a
// build without CUDA has none).
absl::StatusOr<const CudaBackendApi*> LoadCudaBackend();

}  // namespace kvserve::engine
