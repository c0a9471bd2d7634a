// What fake_cuda_backend_module.cc records of the one `create` call it gets,
// read back by the test through kFakeCudaLastCallSymbol (dlsym on the module
// the server loaded).
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve::testing {

struct FakeCudaCreateCall {
  bool called = false;
  std::vector<float> rope_inv_freq;  // the Model's, as the CUDA runner uploads it
  int64_t options_max_model_len = 0;
};

inline constexpr char kFakeCudaLastCallSymbol[] = "kvserve_fake_cuda_backend_last_call";
inline constexpr char kFakeCudaCreateError[] = "fake CUDA module: the call is recorded, no runner";

}  // namespace kvserve::testing
