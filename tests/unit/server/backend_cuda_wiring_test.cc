// The daemon's --backend=cuda path as far as the CUDA module's `create`,
// with fake_cuda_backend_module.cc in the module's place (no GPU needed):
// what the server hands the CUDA runner must match what the CPU backend
// serves with. The server loads the module once per process, from the path
// the environment names first: the fake one, as SetUp names it before any
// test of this binary makes a backend (no other test here does).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/loader/model_config.h"
#include "server/backend.h"
#include "tests/unit/server/fake_cuda_backend_module.h"

namespace kvserve::server {
namespace {

// The fake module's record; null while the module is not loaded.
testing::FakeCudaCreateCall* LoadedRecord() {
  void* module = dlopen(KVSERVE_FAKE_CUDA_MODULE_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (module == nullptr) return nullptr;
  using Accessor = testing::FakeCudaCreateCall* (*)();
  auto last_call = reinterpret_cast<Accessor>(dlsym(module, testing::kFakeCudaLastCallSymbol));
  dlclose(module);  // only this lookup's reference: the server's keeps it loaded
  return last_call == nullptr ? nullptr : last_call();
}

const testing::FakeCudaCreateCall& LastCreateCall() {
  testing::FakeCudaCreateCall* record = LoadedRecord();
  EXPECT_NE(record, nullptr) << "the server did not load the fake module";
  static const testing::FakeCudaCreateCall kNone;
  return record == nullptr ? kNone : *record;
}

// Each test starts with no call recorded, whether CTest runs it alone or
// the whole binary runs in one process.
class BackendCudaWiring : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(setenv("KVSERVE_CUDA_BACKEND_MODULE", KVSERVE_FAKE_CUDA_MODULE_PATH, 1), 0);
    if (testing::FakeCudaCreateCall* record = LoadedRecord()) *record = {};
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
  EXPECT_EQ(call.options.max_model_len, 64);
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
  EXPECT_EQ(call.options.max_model_len, 2048);
  config.backend = "cpu";
  auto cpu = MakeBackend(config);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(call.rope_inv_freq, cpu->model->rope_inv_freq);
}

// The flags the CUDA runner sizes and stores by reach it as given.
TEST_F(BackendCudaWiring, RunnerOptionsFollowTheFlags) {
  ServerConfig config;
  config.backend = "cuda";
  config.block_size = 32;
  config.num_kv_blocks = 100;
  config.gpu_memory_fraction = 0.5;
  config.dtype = "bfloat16";
  config.kv_cache_dtype = "int4";
  config.batch_invariant = true;
  config.max_num_batched_tokens = 1024;
  config.max_num_seqs = 7;
  ASSERT_FALSE(MakeBackend(config).ok());
  const testing::FakeCudaCreateCall& call = LastCreateCall();
  ASSERT_TRUE(call.called);
  EXPECT_EQ(call.options.block_size, 32);
  EXPECT_EQ(call.options.num_blocks, 100);
  EXPECT_EQ(call.options.gpu_memory_fraction, 0.5);
  EXPECT_EQ(call.options.dtype, engine::WeightDtype::kBfloat16);
  EXPECT_EQ(call.options.kv_cache_dtype, kernels::KvDtype::kInt4);
  EXPECT_TRUE(call.options.batch_invariant);
  EXPECT_EQ(call.options.max_num_tokens, 1024);
  EXPECT_EQ(call.options.max_num_seqs, 7);
}

// MakeBackend(config) fails with an error that names `flag`.
void ExpectRefusedNaming(const ServerConfig& config, const std::string& flag) {
  auto backend = MakeBackend(config);
  ASSERT_FALSE(backend.ok()) << flag;
  EXPECT_NE(backend.status().message().find(flag), std::string::npos) << backend.status();
}

// What only the CPU backend has is refused before the CUDA runner is made,
// naming the flag; so is a KV format that does not exist.
TEST_F(BackendCudaWiring, CpuOnlyFlagsAreRefusedByName) {
  ServerConfig config;
  config.backend = "cuda";
  config.quantization = "int8";
  ExpectRefusedNaming(config, "--quantization=int8");
  config.quantization = "none";
  config.matmul_precision = "bfloat16";
  ExpectRefusedNaming(config, "--matmul_precision=bfloat16");
  config.matmul_precision = "float32";
  config.kv_cache_dtype = "int3";
  ExpectRefusedNaming(config, "--kv_cache_dtype=int3");
  EXPECT_FALSE(LastCreateCall().called);
}

}  // namespace
}  // namespace kvserve::server
