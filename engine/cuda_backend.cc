#include "engine/cuda_backend.h"

#include "absl/strings/str_cat.h"
#include "engine/module/module_loader.h"

#ifndef KVSERVE_CUDA_BACKEND_MODULE_PATH
#define KVSERVE_CUDA_BACKEND_MODULE_PATH ""  // this build has no CUDA backend
#endif

namespace kvserve::engine {

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
