// main() of every GPU test binary: without a usable CUDA device the binary
// prints why and exits kSkipExitCode, which CTest reports as "Skipped" (the
// test is neither failed nor silently passed). With one, it runs gtest.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "gtest/gtest.h"

namespace {
constexpr int kSkipExitCode = 77;  // tests/CMakeLists.txt: SKIP_RETURN_CODE
}

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return kSkipExitCode;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
