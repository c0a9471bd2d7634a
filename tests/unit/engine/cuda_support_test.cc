// CheckCudaSupports: the CUDA runner refuses a model whose features it does
// not implement, naming the feature and pointing at the CPU backend (no GPU
// needed: CudaModelRunner::Create calls it before touching a device).
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

TEST(CudaSupportTest, LlamaFamilyBuiltinsAreAccepted) {
  for (const char* name : {"tiny", "small", "llama3-8b"}) {
    EXPECT_TRUE(CheckCudaSupports(Builtin(name)).ok()) << name;
  }
}

TEST(CudaSupportTest, NewFamiliesAreRejectedNamingTheFeature) {
  EXPECT_THAT(Rejection(Builtin("tiny-qwen3")),
              HasSubstr("Qwen3ForCausalLM (model_type qwen3) uses per-head q/k RMSNorm"));
  EXPECT_THAT(Rejection(Builtin("tiny-phi3")), HasSubstr("fused qkv_proj / gate_up_proj"));
  EXPECT_THAT(Rejection(Builtin("tiny-gemma2")), HasSubstr("gelu_pytorch_tanh"));
  EXPECT_THAT(Rejection(Builtin("tiny-gemma3")), HasSubstr("q/k RMSNorm"));
}

TEST(CudaSupportTest, EachFeatureAloneIsRejected) {
  const auto with = [](auto edit) {
    ModelConfig c = Builtin("tiny");
    edit(c);
    return Rejection(c);
  };
  EXPECT_THAT(with([](ModelConfig& c) { c.partial_rotary_factor = 0.5; }),
              HasSubstr("partial rotary"));
  EXPECT_THAT(with([](ModelConfig& c) { c.rope_scaling.type = RopeScaling::Type::kLongRope; }),
              HasSubstr("longrope"));
  EXPECT_THAT(with([](ModelConfig& c) { c.norm_weight_plus_one = true; }),
              HasSubstr("sandwich RMSNorms"));
  EXPECT_THAT(with([](ModelConfig& c) { c.scale_embeddings = true; }),
              HasSubstr("embedding scaling"));
  EXPECT_THAT(with([](ModelConfig& c) { c.attn_logit_softcapping = 50.0; }),
              HasSubstr("attention logit soft-capping"));
  EXPECT_THAT(with([](ModelConfig& c) { c.final_logit_softcapping = 30.0; }),
              HasSubstr("final logit soft-capping"));
  EXPECT_THAT(with([](ModelConfig& c) { c.query_pre_attn_scalar = 256.0; }),
              HasSubstr("query_pre_attn_scalar"));
  EXPECT_THAT(with([](ModelConfig& c) {
                c.sliding_layers = {true, false};
              }),
              HasSubstr("per-layer sliding windows"));
  EXPECT_THAT(with([](ModelConfig& c) { c.local_rope_theta = 1e4; }),
              HasSubstr("rope_local_base_freq"));
}

}  // namespace
}  // namespace kvserve::engine
