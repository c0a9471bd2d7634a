#include "engine/cuda_backend.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/module/module_loader.h"

#ifndef KVSERVE_CUDA_BACKEND_MODULE_PATH
#define KVSERVE_CUDA_BACKEND_MODULE_PATH ""  // this build has no CUDA backend
#endif

namespace kvserve::engine {

absl::Status CheckCudaSupports(const ModelConfig& c) {
  // The CUDA runner implements every family feature the loader accepts (q/k
  // norms, fused Phi-3 tensors, partial and longrope rotary, GeGLU, Gemma's
  // norms, embedding scale, soft-capping, per-layer windows and ropes). What
  // it lacks are head sizes its attention kernels are not instantiated for.
  constexpr int64_t kHeadDims[] = {16, 32, 64, 80, 96, 128, 256};  // paged_attention.h
  if (std::find(std::begin(kHeadDims), std::end(kHeadDims), c.head_dim) == std::end(kHeadDims)) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.architecture, " (model_type ", c.model_type, ") has head_dim ", c.head_dim,
        ", which the CUDA attention kernels do not implement (16, 32, 64, 80, 96, 128 or 256); "
        "the CPU backend serves this model (--backend=cpu)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const CudaBackendApi*> LoadCudaBackend() {
  struct Loaded {
    const CudaBackendApi* api = nullptr;
    std::string error;
  };
  static const Loaded loaded = [] {
    Loaded l;
    void* entry = nullptr;
    if (LoadModule("libkvserve_cuda_backend.so", "KVSERVE_CUDA_BACKEND_MODULE",
                   KVSERVE_CUDA_BACKEND_MODULE_PATH, kCudaBackendSymbol, /*deepbind=*/false, &entry,
                   &l.error) == nullptr) {
      if (!*KVSERVE_CUDA_BACKEND_MODULE_PATH)
        l.error += "\n  (this kvserve was built without CUDA)";
      return l;
    }
    const CudaBackendApi* api = reinterpret_cast<const CudaBackendApi* (*)()>(entry)();
    if (api == nullptr || api->abi_version != kCudaBackendAbiVersion) {
      l.error = absl::StrCat("libkvserve_cuda_backend.so is from another build (ABI version ",
                             api == nullptr ? -1 : api->abi_version, ", expected ",
                             kCudaBackendAbiVersion, ")");
      return l;
    }
    l.api = api;
    return l;
  }();
  if (loaded.api == nullptr) return absl::FailedPreconditionError(loaded.error);
  return loaded.api;
}

}  // namespace kvserve::engine
