// The daemon's --backend=cuda path as far as the CUDA module's `create`,
// with fake_cuda_backend_module.cc in the module's place (no GPU needed):
// what the server hands the CUDA runner must match what the CPU backend
// serves with. CTest runs each test in its own process, so the module (loaded
// once per process) is the fake one wherever the environment names it first.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/loader/model_config.h"
#include "server/backend.h"
#include "tests/unit/server/fake_cuda_backend_module.h"

namespace kvserve::server {
namespace {

const testing::FakeCudaCreateCall& LastCreateCall() {
  void* module = dlopen(KVSERVE_FAKE_CUDA_MODULE_PATH, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(module, nullptr) << "the server did not load the fake module";
  using Accessor = const testing::FakeCudaCreateCall* (*)();
  auto last_call = reinterpret_cast<Accessor>(dlsym(module, testing::kFakeCudaLastCallSymbol));
  EXPECT_NE(last_call, nullptr);
  return *last_call();
}

class BackendCudaWiring : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(setenv("KVSERVE_CUDA_BACKEND_MODULE", KVSERVE_FAKE_CUDA_MODULE_PATH, 1), 0);
  }
};

// Phi-3's longrope picks its factors by the served length: tiny-phi3 has 64
// original positions and 2048 in all, so --max_model_len=64 serves with the
// short factors on both backends.
TEST_F(BackendCudaWiring, ServedLengthPicksTheRopeFactorsAsOnTheCpu) {
  ServerConfig config;
  config.model = "builtin:tiny-phi3";
  config.max_model_len = 64;
  config.backend = "cpu";
  auto cpu = MakeBackend(config);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const std::vector<float>& cpu_freq = cpu->model->rope_inv_freq;
  ASSERT_NE(cpu_freq, engine::ComputeRopeInvFreq(cpu->model->config, /*max_model_len=*/2048))
      << "tiny-phi3's short and long factors must differ for this test to mean anything";

  config.backend = "cuda";
  auto cuda = MakeBackend(config);
  ASSERT_FALSE(cuda.ok());
  EXPECT_NE(cuda.status().ToString().find(testing::kFakeCudaCreateError), std::string::npos)
      << cuda.status();
  const testing::FakeCudaCreateCall& call = LastCreateCall();
  ASSERT_TRUE(call.called);
  EXPECT_EQ(call.options_max_model_len, 64);
  EXPECT_EQ(call.rope_inv_freq, cpu_freq);
}

// Without --max_model_len both serve the model's whole length: long factors.
TEST_F(BackendCudaWiring, WholeLengthServesTheLongFactors) {
  ServerConfig config;
  config.model = "builtin:tiny-phi3";
  config.backend = "cuda";
  ASSERT_FALSE(MakeBackend(config).ok());
  const testing::FakeCudaCreateCall& call = LastCreateCall();
  ASSERT_TRUE(call.called);
  EXPECT_EQ(call.options_max_model_len, 2048);
  config.backend = "cpu";
  auto cpu = MakeBackend(config);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(call.rope_inv_freq, cpu->model->rope_inv_freq);
}

}  // namespace
}  // namespace kvserve::server
