// CheckCudaSupports: the CUDA runner takes every family the loader accepts and
// refuses what its kernels lack (a head size), naming it and pointing at the
// CPU backend (no GPU needed: CudaModelRunner::Create calls it first).
#include <string>

#include "engine/builtin_models.h"
#include "engine/cuda_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using ::testing::HasSubstr;

ModelConfig Builtin(const std::string& name) {
  absl::StatusOr<ModelConfig> c = BuiltinModelConfig(name);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

std::string Rejection(const ModelConfig& c) {
  const absl::Status s = CheckCudaSupports(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("the CPU backend serves this model (--backend=cpu)"));
  return std::string(s.message());
}

TEST(CudaSupportTest, EveryBuiltinFamilyIsAccepted) {
  for (const char* name :
       {"tiny", "small", "llama3-8b", "tiny-qwen3", "tiny-phi3", "tiny-gemma2", "tiny-gemma3"}) {
    EXPECT_TRUE(CheckCudaSupports(Builtin(name)).ok()) << name;
  }
}

TEST(CudaSupportTest, EachFamilyFeatureAloneIsAccepted) {
  const auto with = [](auto edit) {
    ModelConfig c = Builtin("tiny");
    edit(c);
    return CheckCudaSupports(c);
  };
  EXPECT_TRUE(with([](ModelConfig& c) { c.partial_rotary_factor = 0.5; }).ok());
  EXPECT_TRUE(
      with([](ModelConfig& c) { c.rope_scaling.type = RopeScaling::Type::kLongRope; }).ok());
  EXPECT_TRUE(with([](ModelConfig& c) { c.norm_weight_plus_one = true; }).ok());
  EXPECT_TRUE(with([](ModelConfig& c) { c.attn_logit_softcapping = 50.0; }).ok());
  EXPECT_TRUE(with([](ModelConfig& c) { c.sliding_layers = {true, false}; }).ok());
}

TEST(CudaSupportTest, AHeadDimTheKernelsLackIsRejected) {
  ModelConfig c = Builtin("tiny");
  c.head_dim = 48;
  EXPECT_THAT(Rejection(c), HasSubstr("has head_dim 48, which the CUDA attention kernels"));
}

}  // namespace
}  // namespace kvserve::engine
