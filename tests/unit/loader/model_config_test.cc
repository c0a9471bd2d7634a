#include "engine/loader/model_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/loader/config_parse_util.h"
#include "tests/unit/loader/test_files.h"

namespace kvserve::engine {
namespace {

using ::kvserve::engine::testing::Parse;
using ::kvserve::engine::testing::ParseError;
using ::kvserve::engine::testing::TempDir;
using ::kvserve::engine::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Meta-Llama-3.1-8B's config.json as published (transformers 4.x format).
constexpr char kLlama31Config[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// Written by transformers 5.23.0: LlamaForCausalLM(LlamaConfig(..., rope_scaling=
// llama3)).save_pretrained(dir). Note "rope_parameters" and no top-level rope_theta.
constexpr char kTransformers5Llama3Config[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "dtype": "float32",
  "eos_token_id": [2, 3],
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 128,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pad_token_id": null,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rope_type": "llama3"
  },
  "tie_word_embeddings": false,
  "transformers_version": "5.23.0",
  "use_cache": true,
  "vocab_size": 100
})";

// transformers 5.23.0, MistralForCausalLM(MistralConfig(...)).save_pretrained.
constexpr char kTransformers5MistralConfig[] = R"({
  "architectures": ["MistralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "dtype": "float32",
  "eos_token_id": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 128,
  "max_position_embeddings": 131072,
  "model_type": "mistral",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pad_token_id": null,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "transformers_version": "5.23.0",
  "use_cache": true,
  "vocab_size": 100
})";

// transformers 5.23.0, Qwen2ForCausalLM(Qwen2Config(..., tie_word_embeddings=True)).
constexpr char kTransformers5Qwen2Config[] = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "float32",
  "eos_token_id": null,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 128,
  "layer_types": ["full_attention", "full_attention"],
  "max_position_embeddings": 32768,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pad_token_id": null,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "sliding_window": null,
  "tie_word_embeddings": true,
  "transformers_version": "5.23.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 100
})";

// A minimal Llama 2 style config (no rope fields, no kv heads).
Json MinimalLlama() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 32000, "hidden_size": 256, "intermediate_size": 688,
    "num_hidden_layers": 2, "num_attention_heads": 8, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "bos_token_id": 1, "eos_token_id": 2
  })");
}

TEST(ModelConfigTest, Llama31Transformers4Format) {
  absl::StatusOr<ModelConfig> c = Parse(Json::parse(kLlama31Config));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);  // GQA
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(128001, 128008, 128009));
}

TEST(ModelConfigTest, Llama3Transformers5RopeParameters) {
  absl::StatusOr<ModelConfig> c = Parse(Json::parse(kTransformers5Llama3Config));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 3));
}

TEST(ModelConfigTest, Llama2Defaults) {
  absl::StatusOr<ModelConfig> c = Parse(MinimalLlama());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 8);  // defaults to num_attention_heads (MHA)
  EXPECT_EQ(c->head_dim, 32);     // hidden_size / num_attention_heads
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
}

TEST(ModelConfigTest, MistralSlidingWindow) {
  absl::StatusOr<ModelConfig> c = Parse(Json::parse(kTransformers5MistralConfig));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "MistralForCausalLM");
  EXPECT_EQ(c->model_type, "mistral");
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);

  Json json = Json::parse(kTransformers5MistralConfig);
  json["sliding_window"] = nullptr;  // Mistral 7B v0.2+: no window
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);
}

TEST(ModelConfigTest, Qwen2BiasAndTiedEmbeddings) {
  absl::StatusOr<ModelConfig> c = Parse(Json::parse(kTransformers5Qwen2Config));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->sliding_window, 0);  // use_sliding_window false
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(ModelConfigTest, Qwen2SlidingWindowOnlyWhenEveryLayerSlides) {
  Json json = Json::parse(kTransformers5Qwen2Config);
  json["sliding_window"] = 128;
  absl::StatusOr<ModelConfig> c = Parse(json);  // use_sliding_window still false
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);

  json["use_sliding_window"] = true;
  json["layer_types"] = {"sliding_attention", "sliding_attention"};
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 128);

  json.erase("layer_types");
  json["max_window_layers"] = 0;  // layers >= 0 slide
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 128);

  json["max_window_layers"] = 28;  // no layer >= 28: none slides
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);

  json["max_window_layers"] = 1;  // layer 1 slides, layer 0 does not
  EXPECT_THAT(ParseError(json), HasSubstr("1 of 2 layers sliding"));
}

TEST(ModelConfigTest, ExplicitHeadDim) {
  Json json = MinimalLlama();
  json["head_dim"] = 64;  // != hidden_size / heads (Mistral-Nemo style)
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 64);
  json["head_dim"] = nullptr;  // null: derived
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 32);
}

TEST(ModelConfigTest, LlamaAttentionBiasBiasesQkvAndO) {
  Json json = MinimalLlama();
  json["attention_bias"] = true;
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_proj_bias);
}

TEST(ModelConfigTest, FamilyFromModelTypeOrArchitecture) {
  Json json = MinimalLlama();
  json.erase("architectures");  // what LlamaConfig.save_pretrained writes
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");

  json = MinimalLlama();
  json.erase("model_type");
  json["architectures"] = {"MistralForCausalLM"};
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "mistral");
}

TEST(ModelConfigTest, LinearScalingWithLegacyTypeKey) {
  Json json = MinimalLlama();
  json["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  json["rope_theta"] = 20000.0;
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c->rope_theta, 20000.0);
}

// transformers 5.23's own reading of these combinations, checked with AutoConfig.
TEST(ModelConfigTest, RopePrecedenceFollowsTransformers5) {
  Json json = MinimalLlama();
  json["rope_theta"] = 1234.0;
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  absl::StatusOr<ModelConfig> c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);  // the dict's theta wins

  // A non-empty rope_scaling wins over rope_parameters (theta then defaults).
  json = MinimalLlama();
  json["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);

  // An empty rope_scaling does not.
  json["rope_scaling"] = Json::object();
  json["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 3.0}};
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 3.0);

  // llama3 without original_max_position_embeddings: max_position_embeddings.
  json = MinimalLlama();
  json["rope_parameters"] = {{"rope_type", "llama3"},
                             {"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0}};
  c = Parse(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
}

// ------------------------------------------------------------------- errors

TEST(ModelConfigTest, UnsupportedArchitecture) {
  Json json = MinimalLlama();
  json["architectures"] = {"GPT2LMHeadModel"};
  json["model_type"] = "gpt2";
  EXPECT_EQ(ParseError(json),
            "config.json: unsupported architecture \"GPT2LMHeadModel\" (supported: "
            "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
            "Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM)");
  json.erase("architectures");
  EXPECT_THAT(ParseError(json), HasSubstr("unsupported model_type \"gpt2\""));
  json["model_type"] = "llama";
  json["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_THAT(ParseError(json),
              HasSubstr("architecture \"Qwen2ForCausalLM\" does not match model_type \"llama\""));
  json.erase("architectures");
  json.erase("model_type");
  EXPECT_EQ(ParseError(json), "config.json: field \"model_type\" missing");
}

TEST(ModelConfigTest, UnsupportedActivation) {
  Json json = MinimalLlama();
  json["hidden_act"] = "gelu";
  EXPECT_THAT(ParseError(json), HasSubstr("config.json: field \"hidden_act\" \"gelu\""));
}

TEST(ModelConfigTest, MlpBiasUnsupported) {
  Json json = MinimalLlama();
  json["mlp_bias"] = true;
  EXPECT_EQ(ParseError(json), "config.json: field \"mlp_bias\" true is not supported");
}

TEST(ModelConfigTest, MissingField) {
  Json json = MinimalLlama();
  json.erase("hidden_size");
  EXPECT_EQ(ParseError(json), "config.json: field \"hidden_size\" missing");
  json = MinimalLlama();
  json["num_hidden_layers"] = nullptr;
  EXPECT_EQ(ParseError(json), "config.json: field \"num_hidden_layers\" missing");
}

TEST(ModelConfigTest, WrongFieldType) {
  Json json = MinimalLlama();
  json["hidden_size"] = "256";
  EXPECT_EQ(ParseError(json), "config.json: field \"hidden_size\" must be an integer, got \"256\"");
  json = MinimalLlama();
  json["tie_word_embeddings"] = 1;
  EXPECT_THAT(ParseError(json), HasSubstr("field \"tie_word_embeddings\" must be true or false"));
  json = MinimalLlama();
  json["max_position_embeddings"] = 4096.0;  // an integral float is accepted
  EXPECT_TRUE(Parse(json).ok());
}

TEST(ModelConfigTest, HeadsNotDivisibleByKvHeads) {
  Json json = MinimalLlama();
  json["num_key_value_heads"] = 3;
  EXPECT_THAT(ParseError(json),
              HasSubstr("num_attention_heads 8 is not a multiple of num_key_value_heads 3"));
}

TEST(ModelConfigTest, InvalidSizes) {
  Json json = MinimalLlama();
  json["head_dim"] = 33;
  EXPECT_THAT(ParseError(json), HasSubstr("head_dim 33 must be even"));
  json = MinimalLlama();
  json["intermediate_size"] = 0;
  EXPECT_THAT(ParseError(json), HasSubstr("\"intermediate_size\" must be positive"));
  json = MinimalLlama();
  json["num_attention_heads"] = 7;  // 256 % 7 != 0 and no head_dim
  EXPECT_THAT(ParseError(json), HasSubstr("field \"head_dim\" missing and hidden_size 256"));
  json = MinimalLlama();
  json["eos_token_id"] = {2, 32000};
  EXPECT_THAT(ParseError(json), HasSubstr("eos_token_id 32000 is outside the vocabulary"));
  json = MinimalLlama();
  json["eos_token_id"] = "</s>";
  EXPECT_THAT(ParseError(json), HasSubstr("field \"eos_token_id\" must be a token id"));
}

TEST(ModelConfigTest, UnsupportedRopeType) {
  Json json = MinimalLlama();
  json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_EQ(ParseError(json),
            "config.json: rope_scaling type \"yarn\" is not supported (supported: default, "
            "linear, llama3)");
  json["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_THAT(ParseError(json), HasSubstr("rope_scaling type \"dynamic\" is not supported"));
  json = MinimalLlama();
  json["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}};
  EXPECT_THAT(ParseError(json), HasSubstr("rope_parameters type \"longrope\" is not supported"));
}

TEST(ModelConfigTest, IncompleteOrUnsupportedRopeParameters) {
  Json json = MinimalLlama();
  json["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}};
  EXPECT_EQ(ParseError(json), "config.json: field \"rope_scaling.low_freq_factor\" missing");
  json["rope_scaling"] = {{"rope_type", "linear"}};
  EXPECT_EQ(ParseError(json), "config.json: field \"rope_scaling.factor\" missing");
  json["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 4.0},
                          {"high_freq_factor", 4.0}};
  EXPECT_THAT(ParseError(json), HasSubstr("low_freq_factor < high_freq_factor"));
  json = MinimalLlama();
  json["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  EXPECT_THAT(ParseError(json), HasSubstr("rope_parameters.partial_rotary_factor"));
  json["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
  EXPECT_THAT(ParseError(json), HasSubstr("per-layer-type rope_parameters"));
}

TEST(ModelConfigTest, TopLevelMustBeAnObject) {
  EXPECT_EQ(ParseError(Json::array()), "config.json: top level is not a JSON object");
}

TEST(ModelConfigTest, ValidateHandBuiltConfig) {
  ModelConfig c;
  EXPECT_FALSE(c.Validate().ok());  // all sizes zero
  c.vocab_size = 10;
  c.hidden_size = c.intermediate_size = c.num_layers = c.max_position_embeddings = 8;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.num_kv_heads = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("num_key_value_heads"));
}

TEST(ModelConfigTest, LoadFromDirectory) {
  TempDir dir;
  absl::StatusOr<ModelConfig> missing = LoadModelConfig(dir.path());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.File("config.json")));

  WriteFile(dir.File("config.json"), "{\"model_type\": ");
  absl::StatusOr<ModelConfig> bad = LoadModelConfig(dir.path());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr(dir.File("config.json") + ": not valid JSON"));

  Json json = MinimalLlama();
  json["num_key_value_heads"] = 3;
  WriteFile(dir.File("config.json"), json.dump());
  bad = LoadModelConfig(dir.path());
  EXPECT_THAT(bad.status().message(), HasSubstr(dir.File("config.json") + ": num_attention_heads"));

  WriteFile(dir.File("config.json"), kLlama31Config);
  absl::StatusOr<ModelConfig> ok = LoadModelConfig(dir.path());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->num_kv_heads, 8);
}

}  // namespace
}  // namespace kvserve::engine
