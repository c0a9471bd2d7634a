// The CUDA backend as the rest of kvserve sees it: its options, and the
// loader of the module that makes its StepRunner (engine/step_runner.h).
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
// StepRunner's vtable only. Both sides come from the same build.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/model_weights.h"
#include "engine/step_runner.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::engine {

struct CudaRunnerOptions {
  int device = 0;
  int64_t block_size = 16;
  // KV blocks; 0 sizes the pool from gpu_memory_fraction: the fraction of the
  // device's total memory this process may hold (weights, KV, scratch).
  int64_t num_blocks = 0;
  double gpu_memory_fraction = 0.9;
  // Storage dtype of weights and activations (--dtype): kAuto is the
  // checkpoint's (the dtype of its embedding table; builtin:llama3-8b is
  // bf16, the other builtins fp32).
  WeightDtype dtype = WeightDtype::kAuto;
  // KV cache format (--kv_cache_dtype; kernels/cpu/kv_quant.h encodings,
  // engine/kv_cache.h layout). nullopt is auto: the cache in `dtype`.
  // bfloat16/float16 store that 16-bit type whatever `dtype` is; the scaled
  // formats add one fp32 scale per (token, kv head) row. The pool's size in
  // blocks follows from gpu_memory_fraction over KvCacheShape::bytes_per_block.
  std::optional<kernels::KvDtype> kv_cache_dtype;
  bool batch_invariant = false;
  // Bounds of one step, for sizing scratch up front (a larger step is
  // InvalidArgument): the scheduler's token budget and sequence cap.
  int32_t max_num_tokens = 8192;
  int32_t max_num_seqs = 256;
  // Longest sequence served (attention workspace sizing); 0: the model's
  // max_position_embeddings.
  int32_t max_model_len = 0;
};

// 3: typed CudaRunnerOptions::dtype / kv_cache_dtype, and StepRunner runners.
inline constexpr int kCudaBackendAbiVersion = 3;
inline constexpr char kCudaBackendSymbol[] = "kvserve_cuda_backend_api";

struct CudaBackendApi {
  int abi_version = 0;  // kCudaBackendAbiVersion
  // Whether a CUDA device can be used; *why says why not.
  bool (*device_available)(std::string* why) = nullptr;
  // `model` must outlive the runner. FailedPrecondition without a device.
  absl::StatusOr<std::unique_ptr<StepRunner>> (*create)(const Model& model,
                                                        const CudaRunnerOptions& options) = nullptr;
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
