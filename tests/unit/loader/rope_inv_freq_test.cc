// ComputeRopeInvFreq against numbers transformers itself produced.
//
// The constants below were generated once with transformers 5.23.0 / torch
// 2.15 (CPU) by calling its own rope init functions and printing float.hex():
//
//   from transformers import LlamaConfig
//   from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
//   from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
//   cfg = LlamaConfig(hidden_size=512, num_attention_heads=4, rope_theta=500000.0,
//                     max_position_embeddings=131072,
//                     rope_scaling={"rope_type": "llama3", "factor": 8.0,
//                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
//                                   "original_max_position_embeddings": 8192})
//   inv_freq = ROPE_INIT_FUNCTIONS["llama3"](cfg)[0]   # or
//   inv_freq = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)[0]
//   print([float(x).hex() for x in inv_freq])
//
// torch evaluates theta ** x with a vectorised powf that is not correctly
// rounded (about 0.6% of elements are 1 ulp off), while kvserve rounds
// correctly, so the comparison allows 1 ulp. Of the 200 values below exactly
// one differs (by 1 ulp); every other step, llama3 smoothing included, is
// replayed in the same fp32 operations and matches bit for bit.
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "engine/loader/model_config.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

// clang-format off
constexpr float kDefaultHd64Theta1e4[32] = {
    0x1p0f, 0x1.7ff222p-1f, 0x1.1feb34p-1f, 0x1.afd136p-2f, 0x1.43d136p-2f, 0x1.e5a846p-3f,
    0x1.6c310ep-3f, 0x1.111aeep-3f, 0x1.99999ap-4f, 0x1.33281ap-4f, 0x1.ccab84p-5f,
    0x1.59742ap-5f, 0x1.030dc6p-5f, 0x1.84869ep-6f, 0x1.235a72p-6f, 0x1.b4f7e4p-7f,
    0x1.47ae14p-7f, 0x1.eb736p-8f, 0x1.708938p-8f, 0x1.145ceep-8f, 0x1.9e7c7p-9f, 0x1.36d21ap-9f,
    0x1.d22a5p-10f, 0x1.5d931cp-10f, 0x1.0624dep-10f, 0x1.892918p-11f, 0x1.26d42cp-11f,
    0x1.ba2e4ap-12f, 0x1.4b96cp-12f, 0x1.f1502ap-13f, 0x1.74eea6p-13f, 0x1.17a8e4p-13f,
};
constexpr float kDefaultHd128Theta1e6[64] = {
    0x1p0f, 0x1.9c975ap-1f, 0x1.4c7bcp-1f, 0x1.0beddep-1f, 0x1.afd136p-2f, 0x1.5bf9fep-2f,
    0x1.186a08p-2f, 0x1.c3f06ap-3f, 0x1.6c310ep-3f, 0x1.257b22p-3f, 0x1.d8ffacp-4f,
    0x1.7d298cp-4f, 0x1.33281ap-4f, 0x1.ef0a26p-5f, 0x1.8eec7ep-5f, 0x1.41783ap-5f,
    0x1.030dc6p-5f, 0x1.a1835p-6f, 0x1.507316p-6f, 0x1.0f201p-6f, 0x1.b4f7e4p-7f, 0x1.6020a4p-7f,
    0x1.1bc25ap-7f, 0x1.c9548cp-8f, 0x1.708938p-8f, 0x1.28fb5cp-8f, 0x1.dea41cp-9f,
    0x1.81b58ap-9f, 0x1.36d21ap-9f, 0x1.f4f1ep-10f, 0x1.93aeb8p-10f, 0x1.454deep-10f,
    0x1.0624dep-10f, 0x1.a67e5p-11f, 0x1.547688p-11f, 0x1.125c04p-11f, 0x1.ba2e4ap-12f,
    0x1.6453f6p-12f, 0x1.1f24e4p-12f, 0x1.cec924p-13f, 0x1.74eea6p-13f, 0x1.2c8648p-13f,
    0x1.e459c4p-14f, 0x1.864f6ap-14f, 0x1.3a8748p-14f, 0x1.faeba8p-15f, 0x1.987f7cp-15f,
    0x1.492f56p-15f, 0x1.094564p-15f, 0x1.ab8882p-16f, 0x1.58863ap-16f, 0x1.15a1dap-16f,
    0x1.bf749ep-17f, 0x1.68941cp-17f, 0x1.2291c6p-17f, 0x1.d44e64p-18f, 0x1.796182p-18f,
    0x1.301c04p-18f, 0x1.ea20ep-19f, 0x1.8af756p-19f, 0x1.3e47c8p-19f, 0x1.007bd8p-19f,
    0x1.9d5ef2p-20f, 0x1.4d1c98p-20f,
};
constexpr float kLinearHd16Factor2[8] = {
    0x1p-1f, 0x1.43d136p-3f, 0x1.99999ap-5f, 0x1.030dc6p-6f, 0x1.47ae14p-8f, 0x1.9e7c7p-10f,
    0x1.0624dep-11f, 0x1.4b96cp-13f,
};
constexpr float kLlama31Hd128[64] = {
    0x1p0f, 0x1.a11582p-1f, 0x1.53c38cp-1f, 0x1.14c708p-1f, 0x1.c2ef78p-2f, 0x1.6f56fap-2f,
    0x1.2b3dc6p-2f, 0x1.e788c2p-3f, 0x1.8d276p-3f, 0x1.43874p-3f, 0x1.078d4p-3f, 0x1.ad6338p-4f,
    0x1.5dc95ap-4f, 0x1.1cf13p-4f, 0x1.d03ccep-5f, 0x1.7a2d08p-5f, 0x1.34119p-5f, 0x1.f5ea7ep-6f,
    0x1.98de92p-6f, 0x1.4d1272p-6f, 0x1.0f5386p-6f, 0x1.ba0dd8p-7f, 0x1.681adap-7f,
    0x1.2558fep-7f, 0x1.ddee9ep-8f, 0x1.8554ecp-8f, 0x1.3d2804p-8f, 0x1.025c6ap-8f, 0x1.a4ee4p-9f,
    0x1.1bfa0cp-9f, 0x1.67a23ap-10f, 0x1.c12f3cp-11f, 0x1.132ba4p-11f, 0x1.47e21p-12f,
    0x1.765ba4p-13f, 0x1.90d10cp-14f, 0x1.46831ap-14f, 0x1.09fb7ep-14f, 0x1.b15902p-15f,
    0x1.610332p-15f, 0x1.1f91fp-15f, 0x1.d484dep-16f, 0x1.7da9e8p-16f, 0x1.36e8eap-16f,
    0x1.fa8b86p-17f, 0x1.9ca3eap-17f, 0x1.5024d6p-17f, 0x1.11d41ep-17f, 0x1.be2188p-18f,
    0x1.6b6d0ep-18f, 0x1.280d96p-18f, 0x1.e257p-19f, 0x1.88ec2p-19f, 0x1.4014d2p-19f,
    0x1.04be68p-19f, 0x1.a8d01p-20f, 0x1.5a0f4ep-20f, 0x1.19e8p-20f, 0x1.cb4a9ap-21f,
    0x1.76258ep-21f, 0x1.30c94ep-21f, 0x1.f09184p-22f, 0x1.94836p-22f, 0x1.4985fep-22f,
};
constexpr float kLlama32Hd64Factor32[32] = {
    0x1p0f, 0x1.53c38cp-1f, 0x1.c2ef78p-2f, 0x1.2b3dc6p-2f, 0x1.8d276p-3f, 0x1.078d4p-3f,
    0x1.5dc95ap-4f, 0x1.d03ccep-5f, 0x1.34119p-5f, 0x1.98de92p-6f, 0x1.0f5386p-6f, 0x1.681adap-7f,
    0x1.ddee9ep-8f, 0x1.3d2804p-8f, 0x1.a4ee4p-9f, 0x1.524f36p-10f, 0x1.c26c4p-12f,
    0x1.9731eep-14f, 0x1.46831ap-16f, 0x1.b15902p-17f, 0x1.1f91fp-17f, 0x1.7da9e8p-18f,
    0x1.fa8b86p-19f, 0x1.5024d6p-19f, 0x1.be2188p-20f, 0x1.280d96p-20f, 0x1.88ec2p-21f,
    0x1.04be68p-21f, 0x1.5a0f4ep-22f, 0x1.cb4a9ap-23f, 0x1.30c94ep-23f, 0x1.94836p-24f,
};
// clang-format on

ModelConfig RopeConfig(int64_t head_dim, double theta) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  return c;
}

ModelConfig Llama3Config(int64_t head_dim, double factor) {
  ModelConfig c = RopeConfig(head_dim, 500000.0);
  c.rope_scaling = {.type = RopeScaling::Type::kLlama3,
                    .factor = factor,
                    .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0,
                    .original_max_position_embeddings = 8192};
  return c;
}

int64_t UlpDistance(float a, float b) {
  // Both positive here: the bit patterns are ordered like the values.
  return std::llabs(static_cast<int64_t>(std::bit_cast<uint32_t>(a)) -
                    static_cast<int64_t>(std::bit_cast<uint32_t>(b)));
}

// Returns the number of elements that differ at all; fails if any is more
// than max_ulp apart.
int ExpectNear(const std::vector<float>& got, std::span<const float> want, int64_t max_ulp) {
  EXPECT_EQ(got.size(), want.size());
  int differing = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const int64_t ulp = UlpDistance(got[i], want[i]);
    EXPECT_LE(ulp, max_ulp) << "inv_freq[" << i << "] = " << got[i] << ", transformers " << want[i];
    differing += ulp != 0;
  }
  return differing;
}

TEST(RopeInvFreqTest, DefaultMatchesTransformers) {
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(RopeConfig(64, 10000.0)), kDefaultHd64Theta1e4, 1), 1);
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(RopeConfig(128, 1e6)), kDefaultHd128Theta1e6, 1), 1);
}

TEST(RopeInvFreqTest, LinearMatchesTransformers) {
  ModelConfig c = RopeConfig(16, 10000.0);
  c.rope_scaling = {.type = RopeScaling::Type::kLinear, .factor = 2.0};
  EXPECT_EQ(ExpectNear(ComputeRopeInvFreq(c), kLinearHd16Factor2, 0), 0);
}

TEST(RopeInvFreqTest, Llama3MatchesTransformers) {
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(Llama3Config(128, 8.0)), kLlama31Hd128, 1), 1);
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(Llama3Config(64, 32.0)), kLlama32Hd64Factor32, 1), 1);
}

TEST(RopeInvFreqTest, Llama3BandsBehaveAsDefined) {
  const std::vector<float> plain = ComputeRopeInvFreq(RopeConfig(128, 500000.0));
  const std::vector<float> scaled = ComputeRopeInvFreq(Llama3Config(128, 8.0));
  ASSERT_EQ(plain.size(), 64u);
  ASSERT_EQ(scaled.size(), 64u);
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * 3.14159265358979323846 / plain[i];
    if (wavelen < 8192.0 / 4.0) {  // high frequency: untouched
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++high;
    } else if (wavelen > 8192.0) {  // low frequency: divided by factor
      EXPECT_EQ(scaled[i], plain[i] / 8.0f) << i;
      ++low;
    } else {  // between: strictly between the two
      EXPECT_LT(scaled[i], plain[i]) << i;
      EXPECT_GT(scaled[i], plain[i] / 8.0f) << i;
      ++medium;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeInvFreqTest, LinearIsDefaultDividedByFactor) {
  ModelConfig c = RopeConfig(96, 10000.0);
  const std::vector<float> plain = ComputeRopeInvFreq(c);
  c.rope_scaling = {.type = RopeScaling::Type::kLinear, .factor = 4.0};
  const std::vector<float> scaled = ComputeRopeInvFreq(c);
  ASSERT_EQ(scaled.size(), 48u);
  for (size_t i = 0; i < scaled.size(); ++i) EXPECT_EQ(scaled[i], plain[i] / 4.0f);
  EXPECT_EQ(plain[0], 1.0f);
}

// Phi-3 longrope with partial rotary (head_dim 16 * 0.75 = 12), from
//   cfg = Phi3Config(hidden_size=96, num_attention_heads=6, max_position_embeddings=8192,
//                    original_max_position_embeddings=4096, partial_rotary_factor=0.75,
//                    rope_scaling=dict(type="longrope", short_factor=kShort, long_factor=kLong))
//   ROPE_INIT_FUNCTIONS["longrope"](cfg)                 # short factors, 1.0408329997330663
//   ROPE_INIT_FUNCTIONS["longrope"](cfg, seq_len=4097)   # long factors
constexpr float kLongRopeShort[] = {0x1.0000000000000p+0f,  0x1.911dd60000000p-3f,
                                    0x1.247dd20000000p-5f,  0x1.6c16c20000000p-8f,
                                    0x1.d6a4b20000000p-11f, 0x1.44787c0000000p-13f};
constexpr float kLongRopeLong[] = {0x1.aaaaaa0000000p-1f,  0x1.d073640000000p-4f,
                                   0x1.b28f080000000p-7f,  0x1.b4e81c0000000p-10f,
                                   0x1.9abe480000000p-13f, 0x1.855d600000000p-16f};

ModelConfig Phi3LongRope() {
  ModelConfig c = RopeConfig(16, 10000.0);
  c.model_type = "phi3";
  c.max_position_embeddings = 8192;
  c.partial_rotary_factor = 0.75;
  c.rope_scaling.type = RopeScaling::Type::kLongRope;
  c.rope_scaling.original_max_position_embeddings = 4096;
  c.rope_scaling.short_factor = {1.0, 1.1, 1.3, 1.8, 2.4, 3.0};
  c.rope_scaling.long_factor = {1.2, 1.9, 3.5, 6.0, 11.0, 20.0};
  c.rope_scaling.attention_factor = 1.0408329997330663;
  return c;
}

TEST(RopeInvFreqTest, LongRopePicksFactorsByServedLength) {
  const ModelConfig c = Phi3LongRope();
  EXPECT_EQ(c.RotaryDim(), 12);
  // Served length <= original_max_position_embeddings: short factors.
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(c, 4096), kLongRopeShort, 1), 1);
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(c, 96), kLongRopeShort, 1), 1);
  // Longer (and the default, max_position_embeddings = 8192): long factors.
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(c, 4097), kLongRopeLong, 1), 1);
  EXPECT_LE(ExpectNear(ComputeRopeInvFreq(c), kLongRopeLong, 1), 1);
  EXPECT_EQ(RopeAttentionScaling(c), static_cast<float>(1.0408329997330663));
  EXPECT_EQ(RopeAttentionScaling(RopeConfig(16, 10000.0)), 1.0f);
}

TEST(RopeInvFreqTest, LocalRopeIsDefaultRopeWithTheLocalTheta) {
  ModelConfig c = RopeConfig(64, 1e6);
  EXPECT_TRUE(ComputeLocalRopeInvFreq(c).empty());
  c.local_rope_theta = 10000.0;
  c.rope_scaling = {.type = RopeScaling::Type::kLinear, .factor = 8.0};  // global layers only
  EXPECT_LE(ExpectNear(ComputeLocalRopeInvFreq(c), kDefaultHd64Theta1e4, 1), 1);
}

}  // namespace
}  // namespace kvserve::engine
