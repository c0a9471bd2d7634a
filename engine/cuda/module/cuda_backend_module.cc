// libkvserve_cuda_backend.so: the CUDA runner behind engine/cuda_backend.h's
// CudaBackendApi (see there for why it is a separately loaded module). The
// one exported symbol is the API table.
#include <memory>
#include <string>

#include "engine/cuda/cuda_model_runner.h"

namespace {

absl::StatusOr<std::unique_ptr<kvserve::engine::StepRunner>> Create(
    const kvserve::engine::Model& model, const kvserve::engine::CudaRunnerOptions& options) {
  auto runner = kvserve::engine::CudaModelRunner::Create(model, options);
  if (!runner.ok()) return runner.status();
  return std::unique_ptr<kvserve::engine::StepRunner>(std::move(*runner));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvserve::engine::CudaBackendApi*
kvserve_cuda_backend_api() {
  static const kvserve::engine::CudaBackendApi api{
      .abi_version = kvserve::engine::kCudaBackendAbiVersion,
      .device_available =
          [](std::string* why) { return kvserve::engine::CudaDeviceAvailable(why); },
      .create = &Create};
  return &api;
}
