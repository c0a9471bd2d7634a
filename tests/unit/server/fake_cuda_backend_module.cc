// A stand-in for libkvserve_cuda_backend.so, loaded through
// $KVSERVE_CUDA_BACKEND_MODULE by backend_cuda_wiring_test.cc: it says a
// device is available, records what MakeBackend hands the CUDA runner's
// `create`, and makes no runner. So the server's CUDA wiring (the model it
// loads, the options it passes) is tested on machines without a GPU.
#include "tests/unit/server/fake_cuda_backend_module.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/cuda_backend.h"
#include "engine/model.h"

namespace {

kvserve::testing::FakeCudaCreateCall last_call;

absl::StatusOr<std::unique_ptr<kvserve::engine::StepRunner>> Create(
    const kvserve::engine::Model& model, const kvserve::engine::CudaRunnerOptions& options) {
  last_call.called = true;
  last_call.rope_inv_freq = model.rope_inv_freq;
  last_call.options = options;
  return absl::UnavailableError(std::string(kvserve::testing::kFakeCudaCreateError));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvserve::engine::CudaBackendApi*
kvserve_cuda_backend_api() {
  static const kvserve::engine::CudaBackendApi api{
      .abi_version = kvserve::engine::kCudaBackendAbiVersion,
      .device_available = [](std::string*) { return true; },
      .create = &Create};
  return &api;
}

extern "C" __attribute__((visibility("default"))) kvserve::testing::FakeCudaCreateCall*
kvserve_fake_cuda_backend_last_call() {
  return &last_call;
}
