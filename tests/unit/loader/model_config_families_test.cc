// config.json parsing of the families beyond Llama: Qwen3, Phi-3 and Gemma
// 2 / 3 (text). The configs are those published with the checkpoints (trimmed
// of fields kvserve does not read) or written by transformers 5.23.
#include <string>
#include <vector>

#include "engine/loader/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/loader/config_parse_util.h"

namespace kvserve::engine {
namespace {

using ::kvserve::engine::testing::Parse;
using ::kvserve::engine::testing::ParseError;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Qwen/Qwen3-0.6B.
Json Qwen3() {
  return Json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "use_sliding_window": false,
    "vocab_size": 151936
  })");
}

// microsoft/Phi-4-mini-instruct's shape (factor lists shortened to their
// length: head_dim 128 * 0.75 = 96 rotary dims, 48 factors).
Json Phi4Mini() {
  Json j = Json::parse(R"({
    "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "bos_token_id": 199999,
    "eos_token_id": 199999, "hidden_act": "silu", "hidden_size": 3072,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "phi3",
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 262144,
    "tie_word_embeddings": true, "vocab_size": 200064,
    "rope_scaling": {"type": "longrope"}
  })");
  std::vector<double> short_factor(48), long_factor(48);
  for (int i = 0; i < 48; ++i) {
    short_factor[i] = 1.0 + 0.01 * i;
    long_factor[i] = 1.0 + 1.5 * i;
  }
  j["rope_scaling"]["short_factor"] = short_factor;
  j["rope_scaling"]["long_factor"] = long_factor;
  return j;
}

// google/gemma-2-2b.
Json Gemma2() {
  return Json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": false,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 107], "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2304, "intermediate_size": 9216, "max_position_embeddings": 8192,
    "model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 26,
    "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000
  })");
}

// google/gemma-3-1b-it (transformers 4.x format).
Json Gemma3() {
  return Json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false,
    "attn_logit_softcapping": null, "bos_token_id": 2, "eos_token_id": [1, 106],
    "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26,
    "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null,
    "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "vocab_size": 262144
  })");
}

TEST(Qwen3ConfigTest, QkNormExplicitHeadDimNoBias) {
  absl::StatusOr<ModelConfig> c = Parse(Qwen3());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 128);  // != 1024 / 16
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_FALSE(c->sandwich_norms);
  EXPECT_EQ(c->hidden_act, Activation::kSilu);
  EXPECT_EQ(c->AttentionScale(), static_cast<float>(1.0 / std::sqrt(128.0)));
}

TEST(Qwen3ConfigTest, AttentionBiasAndDefaultHeadDim) {
  Json json = Qwen3();
  json["attention_bias"] = true;
  json.erase("head_dim");  // Qwen3Config's default is 128, not hidden / heads
  json["hidden_size"] = 512;
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_proj_bias);  // Qwen3Attention biases o_proj too
  EXPECT_EQ(c->head_dim, 128);
}

TEST(Qwen3ConfigTest, SlidingWindowRulesAndRejections) {
  Json json = Qwen3();
  json["use_sliding_window"] = true;
  json["sliding_window"] = 4096;
  json["max_window_layers"] = 0;  // every layer slides
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  json["max_window_layers"] = 14;
  EXPECT_THAT(ParseError(json), HasSubstr("14 of 28 layers sliding"));
  json = Qwen3();
  json["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  EXPECT_THAT(ParseError(json), HasSubstr("rope_parameters.partial_rotary_factor"));
  json = Qwen3();
  json["hidden_act"] = "gelu";
  EXPECT_THAT(ParseError(json), HasSubstr("field \"hidden_act\" \"gelu\""));
}

TEST(Phi3ConfigTest, Phi4MiniPartialRotaryLongRope) {
  absl::StatusOr<ModelConfig> c = Parse(Phi4Mini());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Phi3ForCausalLM");
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->partial_rotary_factor, 0.75);
  EXPECT_EQ(c->RotaryDim(), 96);
  const RopeScaling& s = c->rope_scaling;
  EXPECT_EQ(s.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(s.original_max_position_embeddings, 4096);
  ASSERT_EQ(s.short_factor.size(), 48u);
  ASSERT_EQ(s.long_factor.size(), 48u);
  EXPECT_EQ(s.long_factor[2], 4.0);
  EXPECT_EQ(s.factor, 32.0);  // max_position_embeddings / original
  EXPECT_DOUBLE_EQ(s.attention_factor, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)));
  EXPECT_EQ(c->sliding_window, 262144);
  EXPECT_TRUE(c->sliding_layers.empty());  // every layer
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(ComputeRopeInvFreq(*c).size(), 48u);
}

TEST(Phi3ConfigTest, LegacySuTypeExplicitAttentionFactorAndDictPrecedence) {
  Json json = Phi4Mini();
  json["rope_scaling"]["type"] = "su";  // Phi-3-128k's original name for longrope
  json["rope_scaling"]["attention_factor"] = 1.25;
  json["rope_scaling"]["partial_rotary_factor"] = 0.5;  // the dict's wins over the top level
  json["rope_scaling"]["short_factor"] = std::vector<double>(32, 1.0);
  json["rope_scaling"]["long_factor"] = std::vector<double>(32, 2.0);
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(c->rope_scaling.attention_factor, 1.25);
  EXPECT_EQ(c->RotaryDim(), 64);
  EXPECT_EQ(RopeAttentionScaling(*c), 1.25f);
}

TEST(Phi3ConfigTest, Phi3Mini4kPlain) {
  Json json = Phi4Mini();
  json.erase("rope_scaling");
  json.erase("partial_rotary_factor");
  json["sliding_window"] = 2047;
  json["tie_word_embeddings"] = false;
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c->RotaryDim(), 128);
  EXPECT_EQ(c->sliding_window, 2047);
  EXPECT_EQ(RopeAttentionScaling(*c), 1.0f);
}

TEST(Phi3ConfigTest, Rejections) {
  Json json = Phi4Mini();
  json["rope_scaling"]["long_factor"] = std::vector<double>(47, 1.0);
  EXPECT_EQ(ParseError(json),
            "config.json: field \"rope_scaling.long_factor\" must have rotary_dim / 2 = 48 "
            "elements, got 47");
  json = Phi4Mini();
  json["rope_scaling"].erase("short_factor");
  EXPECT_EQ(ParseError(json), "config.json: field \"rope_scaling.short_factor\" missing");
  json = Phi4Mini();
  json["rope_scaling"]["short_factor"][3] = -1.0;
  EXPECT_THAT(ParseError(json), HasSubstr("rope_scaling.short_factor\" must hold positive"));
  json = Phi4Mini();
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(ParseError(json),
              HasSubstr("rope_scaling type \"linear\" is not supported for phi3"));
  json = Phi4Mini();
  json.erase("rope_scaling");
  json["partial_rotary_factor"] = 0.01;  // int(128 * 0.01) = 1: odd
  EXPECT_THAT(ParseError(json), HasSubstr("partial_rotary_factor 0.01 must be in (0, 1]"));
  json["partial_rotary_factor"] = 1.5;
  EXPECT_THAT(ParseError(json), HasSubstr("partial_rotary_factor 1.5"));
  json = Phi4Mini();
  json["architectures"] = {"Phi3SmallForCausalLM"};
  json["model_type"] = "phi3small";
  EXPECT_THAT(ParseError(json), HasSubstr("unsupported architecture \"Phi3SmallForCausalLM\""));
}

TEST(Gemma2ConfigTest, Gemma2_2b) {
  absl::StatusOr<ModelConfig> c = Parse(Gemma2());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Gemma2ForCausalLM");
  EXPECT_EQ(c->hidden_act, Activation::kGeluTanh);
  EXPECT_TRUE(c->norm_weight_plus_one);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_TRUE(c->scale_embeddings);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_TRUE(c->tie_word_embeddings);  // Gemma's default
  EXPECT_EQ(c->attn_logit_softcapping, 50.0);
  EXPECT_EQ(c->final_logit_softcapping, 30.0);
  EXPECT_EQ(c->query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c->AttentionScale(), 0.0625f);
  EXPECT_EQ(c->sliding_window, 4096);
  ASSERT_EQ(c->sliding_layers.size(), 26u);
  for (int64_t i = 0; i < 26; ++i) {  // sliding, global, sliding, ...
    EXPECT_EQ(c->LayerSlidingWindow(i), i % 2 == 0 ? 4096 : 0) << i;
    EXPECT_FALSE(c->LayerUsesLocalRope(i));
  }
  EXPECT_EQ(c->local_rope_theta, 0.0);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(1, 107));
}

TEST(Gemma2ConfigTest, DefaultsNullsAndLayerTypes) {
  Json json = Gemma2();
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping",
                          "query_pre_attn_scalar", "sliding_window", "hidden_activation"}) {
    json.erase(key);
  }
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcapping, 50.0);  // Gemma2Config defaults
  EXPECT_EQ(c->final_logit_softcapping, 30.0);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->hidden_act, Activation::kGeluTanh);
  json["attn_logit_softcapping"] = nullptr;  // None: no capping
  json["final_logit_softcapping"] = nullptr;
  json["sliding_window"] = nullptr;
  json["num_hidden_layers"] = 3;
  json["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcapping, 0.0);
  EXPECT_EQ(c->final_logit_softcapping, 0.0);
  EXPECT_THAT(c->sliding_layers, ElementsAre(false, true, false));
  EXPECT_EQ(c->LayerSlidingWindow(1), 0);  // no window without sliding_window
}

TEST(Gemma2ConfigTest, Rejections) {
  Json json = Gemma2();
  json["hidden_activation"] = "gelu";
  EXPECT_EQ(ParseError(json),
            "config.json: field \"hidden_activation\" \"gelu\" is not supported (only "
            "\"gelu_pytorch_tanh\")");
  json = Gemma2();
  json["use_bidirectional_attention"] = true;
  EXPECT_THAT(ParseError(json), HasSubstr("use_bidirectional_attention\" true is not supported"));
  json = Gemma2();
  json["layer_types"] = {"sliding_attention"};
  EXPECT_THAT(ParseError(json), HasSubstr("layer_types\" must list one type per layer (26)"));
  json["num_hidden_layers"] = 1;
  json["layer_types"] = {"chunked_attention"};
  EXPECT_THAT(ParseError(json), HasSubstr("\"chunked_attention\" is not supported"));
  json = Gemma2();
  json["final_logit_softcapping"] = -1.0;
  EXPECT_THAT(ParseError(json), HasSubstr("final_logit_softcapping\" must be positive or null"));
  json = Gemma2();
  json["query_pre_attn_scalar"] = 0;
  EXPECT_THAT(ParseError(json), HasSubstr("query_pre_attn_scalar\" must be positive"));
}

TEST(Gemma3ConfigTest, Gemma3_1bLocalRopeAndPattern) {
  absl::StatusOr<ModelConfig> c = Parse(Gemma3());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(c->model_type, "gemma3_text");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->attn_logit_softcapping, 0.0);
  EXPECT_EQ(c->final_logit_softcapping, 0.0);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->local_rope_theta, 1e4);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  ASSERT_EQ(c->sliding_layers.size(), 26u);
  for (int64_t i = 0; i < 26; ++i) {  // five sliding layers, then a global one
    const bool sliding = (i + 1) % 6 != 0;
    EXPECT_EQ(c->LayerSlidingWindow(i), sliding ? 512 : 0) << i;
    EXPECT_EQ(c->LayerUsesLocalRope(i), sliding) << i;
  }
  EXPECT_EQ(ComputeLocalRopeInvFreq(*c).size(), 128u);
}

TEST(Gemma3ConfigTest, LegacyRopeScalingAppliesToGlobalLayersOnly) {
  Json json = Gemma3();  // gemma-3-4b style
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  json.erase("rope_local_base_freq");
  json.erase("rope_theta");
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_theta, 1e6);  // Gemma3TextConfig default_theta
  EXPECT_EQ(c->local_rope_theta, 1e4);
}

TEST(Gemma3ConfigTest, Transformers5NestedRopeParameters) {
  Json json = Gemma3();
  json.erase("rope_local_base_freq");
  json.erase("rope_theta");
  json.erase("rope_scaling");
  json["rope_parameters"] = Json::parse(R"({
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}})");
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 5e5);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);
  EXPECT_EQ(c->local_rope_theta, 2e4);
}

TEST(Gemma3ConfigTest, Rejections) {
  Json json = Gemma3();
  json["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(ParseError(json), HasSubstr("must be nested by layer type"));
  json = Gemma3();
  json["rope_parameters"] = {{"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}};
  EXPECT_THAT(ParseError(json),
              HasSubstr("rope_parameters.sliding_attention.rope_type\" \"linear\" is not "
                        "supported for sliding layers"));
  json = Gemma3();
  json["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}, {"factor", 2.0}}}};
  EXPECT_THAT(ParseError(json), HasSubstr("rope_parameters.full_attention type \"yarn\""));
  json = Gemma3();
  json["sliding_window_pattern"] = 0;
  EXPECT_THAT(ParseError(json), HasSubstr("sliding_window_pattern\" must be positive"));
  json = Gemma3();
  json["architectures"] = {"Gemma3ForConditionalGeneration"};
  json["model_type"] = "gemma3";
  EXPECT_THAT(ParseError(json),
              HasSubstr("unsupported architecture \"Gemma3ForConditionalGeneration\""));
}

TEST(ModelFamiliesTest, ArchitectureMustMatchModelType) {
  Json json = Gemma2();
  json["model_type"] = "gemma3_text";
  EXPECT_THAT(ParseError(json), HasSubstr("does not match model_type"));
  json = Qwen3();
  json.erase("architectures");  // model_type alone is enough
  ASSERT_TRUE(Parse(json).ok());
}

}  // namespace
}  // namespace kvserve::engine
