// What fake_cuda_backend_module.cc records of the last `create` call it got,
// read (and reset) by the test through kFakeCudaLastCallSymbol (dlsym on the
// module the server loaded).
#pragma once

#include <vector>

#include "engine/cuda_backend.h"

namespace kvserve::testing {

struct FakeCudaCreateCall {
  bool called = false;
  std::vector<float> rope_inv_freq;  // the Model's, as the CUDA runner uploads it
  engine::CudaRunnerOptions options;
};

inline constexpr char kFakeCudaLastCallSymbol[] = "kvserve_fake_cuda_backend_last_call";
inline constexpr char kFakeCudaCreateError[] = "fake CUDA module: the call is recorded, no runner";

}  // namespace kvserve::testing
