// The GGUF parser (engine/loader/gguf_file.h) on files written by an
// independent encoder (gguf_writer.h): a good file with every value type, and
// truncated or hostile ones, each refused with an error naming the field.
#include "engine/loader/gguf.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/loader/gguf_dequant.h"
#include "engine/loader/gguf_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/loader/gguf_writer.h"
#include "tests/unit/loader/test_files.h"

namespace kvserve::engine::testing {
namespace {

using ::testing::HasSubstr;

// Parses a copy of `bytes` that lives until the test binary exits: a parsed
// GgufFile borrows its buffer, and the tests parse temporaries.
absl::StatusOr<std::unique_ptr<GgufFile>> ParseBytes(const std::string& bytes) {
  static std::vector<std::unique_ptr<std::string>>* const kept =
      new std::vector<std::unique_ptr<std::string>>();
  kept->push_back(std::make_unique<std::string>(bytes));
  const std::string& owned = *kept->back();
  return GgufFile::Parse(reinterpret_cast<const uint8_t*>(owned.data()), owned.size(), "t.gguf");
}

// Every value type, two tensors (one Q8_0) and a 64-byte alignment.
GgufSpec GoodSpec() {
  GgufSpec s;
  s.alignment = 64;
  s.kvs = {
      ScalarKv<uint32_t>("general.alignment", 4, 64),
      StringKv("general.architecture", "llama"),
      ScalarKv<uint8_t>("v.u8", 0, 200),
      ScalarKv<int8_t>("v.i8", 1, -100),
      ScalarKv<uint16_t>("v.u16", 2, 60000),
      ScalarKv<int16_t>("v.i16", 3, -30000),
      ScalarKv<uint32_t>("v.u32", 4, 4000000000u),
      ScalarKv<int32_t>("v.i32", 5, -2000000000),
      ScalarKv<float>("v.f32", 6, 0.25f),
      ScalarKv<uint8_t>("v.bool", 7, 1),
      ScalarKv<uint64_t>("v.u64", 10, uint64_t{1} << 40),
      ScalarKv<int64_t>("v.i64", 11, -(int64_t{1} << 40)),
      ScalarKv<double>("v.f64", 12, 1e-300),
      StringArrayKv("v.strings", {"a", "", "ünï"}),
      ArrayKv<int32_t>("v.ints", 5, {1, -2, 3}),
      ArrayKv<float>("v.floats", 6, {1.5f, -0.5f}),
  };
  // A nested array: two arrays of u8.
  GgufBytes nested;
  nested.Put<uint32_t>(9).Put<uint64_t>(2);
  nested.Put<uint32_t>(0).Put<uint64_t>(2).Put<uint8_t>(1).Put<uint8_t>(2);
  nested.Put<uint32_t>(0).Put<uint64_t>(1).Put<uint8_t>(3);
  s.kvs.push_back({"v.nested", 9, nested.bytes()});
  s.tensors.push_back({"a", {4, 2}, 0, F32Bytes({1, 2, 3, 4, 5, 6, 7, 8})});
  // Q8_0: one block, d = 0.5 (fp16 0x3800), quants 0..31.
  GgufBytes q8;
  q8.Put<uint16_t>(0x3800);
  for (int i = 0; i < 32; ++i) q8.Put<int8_t>(static_cast<int8_t>(i - 16));
  s.tensors.push_back({"b", {32}, 8, q8.bytes()});
  return s;
}

TEST(GgufTest, ParsesEveryValueTypeAndTensor) {
  auto file = ParseBytes(EncodeGguf(GoodSpec()));
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(*f.GetUint("v.u8"), 200u);
  EXPECT_EQ(f.Find("v.i8")->int_value, -100);
  EXPECT_EQ(*f.GetUint("v.u16"), 60000u);
  EXPECT_EQ(f.Find("v.i16")->int_value, -30000);
  EXPECT_EQ(*f.GetUint("v.u32"), 4000000000u);
  EXPECT_EQ(f.Find("v.i32")->int_value, -2000000000);
  EXPECT_EQ(*f.GetFloat("v.f32"), 0.25);
  EXPECT_TRUE(*f.GetBool("v.bool"));
  EXPECT_EQ(*f.GetUint("v.u64"), uint64_t{1} << 40);
  EXPECT_EQ(f.Find("v.i64")->int_value, -(int64_t{1} << 40));
  EXPECT_EQ(*f.GetFloat("v.f64"), 1e-300);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  auto strings = f.GetStringArray("v.strings");
  ASSERT_TRUE(strings.ok());
  EXPECT_EQ(std::vector<std::string_view>(strings->begin(), strings->end()),
            (std::vector<std::string_view>{"a", "", "ünï"}));
  EXPECT_EQ(*f.GetInt32Array("v.ints"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(*f.GetFloatArray("v.floats"), (std::vector<float>{1.5f, -0.5f}));
  const GgufValue* nested = f.Find("v.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].count, 2u);
  EXPECT_EQ(nested->arrays[1].raw[0], 3);

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* a = f.FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->num_bytes, 32u);
  float a5;
  std::memcpy(&a5, a->data + 5 * 4, 4);
  EXPECT_EQ(a5, 6.0f);
  const GgufTensor* b = f.FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GgmlType::kQ8_0);
  EXPECT_EQ(b->offset % 64, 0u);
  std::vector<float> values(32);
  ASSERT_TRUE(DequantizeGgml(b->type, b->data, b->num_bytes, 32, values.data()).ok());
  EXPECT_EQ(values[0], -8.0f);
  EXPECT_EQ(values[31], 7.5f);
}

TEST(GgufTest, OpensFromAPath) {
  TempDir dir;
  WriteFile(dir.File("m.gguf"), EncodeGguf(GoodSpec()));
  auto file = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 2u);
  EXPECT_EQ(GgufFile::Open(dir.File("absent.gguf")).status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufTest, TypedGettersNameTheKeyOnAWrongType) {
  auto file = ParseBytes(EncodeGguf(GoodSpec()));
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(std::string((*file)->GetString("v.u32").status().message()),
              HasSubstr("\"v.u32\" has type UINT32"));
  EXPECT_THAT(std::string((*file)->GetUint("v.i8").status().message()), HasSubstr("negative"));
  EXPECT_EQ((*file)->GetUint("absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE((*file)->GetBool("v.u8").ok());
  EXPECT_FALSE((*file)->GetStringArray("v.ints").ok());
  EXPECT_FALSE((*file)->GetInt32Array("v.floats").ok());
}

TEST(GgufTest, EveryTruncationIsAnErrorNeverACrash) {
  const std::string good = EncodeGguf(GoodSpec());
  for (size_t n = 0; n < good.size(); ++n) {
    auto file = ParseBytes(good.substr(0, n));
    EXPECT_FALSE(file.ok()) << "a prefix of " << n << " of " << good.size() << " bytes parsed";
    if (!file.ok()) EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

void ExpectRefused(const std::string& bytes, const std::string& message) {
  auto file = ParseBytes(bytes);
  ASSERT_FALSE(file.ok()) << "parsed; expected an error saying " << message;
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(message));
}

TEST(GgufTest, RefusesBadHeaders) {
  std::string bad_magic = EncodeGguf(GoodSpec());
  bad_magic[0] = 'X';
  ExpectRefused(bad_magic, "GGUF magic");
  GgufSpec v1 = GoodSpec();
  v1.version = 1;
  ExpectRefused(EncodeGguf(v1), "version: 1 is not supported");
  GgufSpec big_endian = GoodSpec();
  big_endian.version = 0x03000000;
  ExpectRefused(EncodeGguf(big_endian), "big-endian");
  GgufSpec huge_kvs = GoodSpec();
  huge_kvs.kv_count = uint64_t{1} << 60;
  ExpectRefused(EncodeGguf(huge_kvs), "kv_count");
  GgufSpec huge_tensors = GoodSpec();
  huge_tensors.tensor_count = uint64_t{1} << 62;
  ExpectRefused(EncodeGguf(huge_tensors), "tensor_count");
}

TEST(GgufTest, RefusesHostileMetadata) {
  auto with_kv = [](GgufKv kv) {
    GgufSpec s;
    s.kvs.push_back(std::move(kv));
    return EncodeGguf(s);
  };
  // A string whose length runs past the end.
  ExpectRefused(with_kv({"k", 8, GgufBytes().Put<uint64_t>(uint64_t{1} << 62).bytes()}),
                "metadata \"k\"");
  ExpectRefused(with_kv({"k", 13, ""}), "unknown value type 13");
  ExpectRefused(with_kv({"k", 7, GgufBytes().Put<uint8_t>(2).bytes()}), "neither 0 nor 1");
  ExpectRefused(
      with_kv({"k", 9, GgufBytes().Put<uint32_t>(4).Put<uint64_t>(uint64_t{1} << 61).bytes()}),
      "array of 2305843009213693952 UINT32 runs past the end");
  ExpectRefused(
      with_kv({"k", 9, GgufBytes().Put<uint32_t>(8).Put<uint64_t>(uint64_t{1} << 40).bytes()}),
      "cannot fit");
  ExpectRefused(with_kv({"k", 9, GgufBytes().Put<uint32_t>(42).Put<uint64_t>(0).bytes()}),
                "unknown array element type 42");
  // Arrays nested four deep.
  GgufBytes deep;
  for (int i = 0; i < 4; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  deep.Put<uint32_t>(0).Put<uint64_t>(0);
  ExpectRefused(with_kv({"k", 9, deep.bytes()}), "nested deeper");
  GgufSpec twice;
  twice.kvs = {StringKv("k", "a"), StringKv("k", "b")};
  ExpectRefused(EncodeGguf(twice), "appears twice");
  GgufSpec odd_alignment;
  odd_alignment.kvs = {ScalarKv<uint32_t>("general.alignment", 4, 48)};
  ExpectRefused(EncodeGguf(odd_alignment), "not a power of two");
  GgufSpec wrong_type_alignment;
  wrong_type_alignment.kvs = {ScalarKv<uint64_t>("general.alignment", 10, 32)};
  ExpectRefused(EncodeGguf(wrong_type_alignment), "must be UINT32");
}

TEST(GgufTest, RefusesHostileTensorInfos) {
  auto with_tensor = [](GgufTensorSpec t) {
    GgufSpec s;
    s.tensors.push_back(std::move(t));
    return EncodeGguf(s);
  };
  ExpectRefused(with_tensor({"t", {}, 0, ""}), "n_dims 0");
  ExpectRefused(with_tensor({"t", {1, 1, 1, 1, 1}, 0, F32Bytes({0})}), "n_dims 5");
  ExpectRefused(with_tensor({"t", {4, 0}, 0, ""}), "dimension 1 = 0");
  ExpectRefused(with_tensor({"t", {uint64_t{1} << 30, uint64_t{1} << 30}, 0, ""}), "dimension 1");
  ExpectRefused(with_tensor({"t", {4}, 19, F32Bytes({0, 0, 0, 0})}), "ggml type 19");
  ExpectRefused(with_tensor({"t", {16}, 8, std::string(34, '\0')}), "not a multiple of Q8_0");
  ExpectRefused(with_tensor({"t", {4}, 0, F32Bytes({0, 0, 0, 0}), 8}),
                "not a multiple of the alignment");
  // The claimed bytes run past the end of the file.
  std::string short_data = with_tensor({"t", {64}, 0, F32Bytes(std::vector<float>(64))});
  short_data.resize(short_data.size() - 4);
  ExpectRefused(short_data, "run past the end of the data section");
  ExpectRefused(with_tensor({"t", {4}, 0, "", uint64_t{1} << 62}), "run past the end");
  GgufSpec twice;
  twice.tensors = {{"t", {1}, 0, F32Bytes({1})}, {"t", {1}, 0, F32Bytes({2})}};
  ExpectRefused(EncodeGguf(twice), "appears twice");
  GgufSpec overlap;
  overlap.tensors = {{"a", {16}, 0, F32Bytes(std::vector<float>(16)), 0},
                     {"b", {16}, 0, F32Bytes(std::vector<float>(16)), 32}};
  ExpectRefused(EncodeGguf(overlap), "overlaps tensor \"a\"");
}

TEST(GgufTest, DequantizeChecksTheByteCount) {
  std::vector<float> out(32);
  const std::string block(34, '\0');
  const auto* data = reinterpret_cast<const uint8_t*>(block.data());
  EXPECT_TRUE(DequantizeGgml(GgmlType::kQ8_0, data, 34, 32, out.data()).ok());
  EXPECT_FALSE(DequantizeGgml(GgmlType::kQ8_0, data, 33, 32, out.data()).ok());
  EXPECT_FALSE(DequantizeGgml(GgmlType::kQ8_0, data, 34, 31, out.data()).ok());
}

}  // namespace
}  // namespace kvserve::engine::testing

namespace kvserve::engine::testing {
namespace {

// A two-layer llama GGUF: 2 heads of 4 dims, 1 kv head, hidden 8.
GgufSpec LlamaSpec(const std::string& arch) {
  GgufSpec s;
  s.kvs = {
      StringKv("general.architecture", arch),
      ScalarKv<uint32_t>(arch + ".embedding_length", 4, 8),
      ScalarKv<uint32_t>(arch + ".feed_forward_length", 4, 16),
      ScalarKv<uint32_t>(arch + ".block_count", 4, 12),
      ScalarKv<uint32_t>(arch + ".attention.head_count", 4, 2),
      ScalarKv<uint32_t>(arch + ".attention.head_count_kv", 4, 1),
      ScalarKv<uint32_t>(arch + ".context_length", 4, 256),
      ScalarKv<float>(arch + ".attention.layer_norm_rms_epsilon", 6, 1e-5f),
      ScalarKv<float>(arch + ".rope.freq_base", 6, 5e5f),
      ScalarKv<uint32_t>("tokenizer.ggml.bos_token_id", 4, 1),
      ScalarKv<uint32_t>("tokenizer.ggml.eos_token_id", 4, 2),
      ScalarKv<uint32_t>("tokenizer.ggml.eot_token_id", 4, 3),
  };
  std::vector<float> q(8 * 8), norm(8, 0.5f);
  for (int row = 0; row < 8; ++row) {
    for (int col = 0; col < 8; ++col) q[row * 8 + col] = static_cast<float>(row);
  }
  s.tensors = {{"token_embd.weight", {8, 32}, 0, F32Bytes(std::vector<float>(8 * 32))},
               {"blk.0.attn_q.weight", {8, 8}, 0, F32Bytes(q)},
               {"blk.0.attn_norm.weight", {8}, 0, F32Bytes(norm)}};
  return s;
}

TEST(GgufConfigTest, LlamaMetadataBecomesTheConfig) {
  auto file = ParseBytes(EncodeGguf(LlamaSpec("llama")));
  ASSERT_TRUE(file.ok()) << file.status();
  auto config = GgufModelConfig(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type, "llama");
  EXPECT_EQ(config->hidden_size, 8);
  EXPECT_EQ(config->num_layers, 12);
  EXPECT_EQ(config->num_heads, 2);
  EXPECT_EQ(config->num_kv_heads, 1);
  EXPECT_EQ(config->head_dim, 4);
  EXPECT_EQ(config->vocab_size, 32);
  EXPECT_EQ(config->rope_theta, 5e5f);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{2, 3}));
}

TEST(GgufConfigTest, Gemma3SlidesOnFiveOfEverySixLayers) {
  GgufSpec s = LlamaSpec("gemma3");
  s.kvs.push_back(ScalarKv<uint32_t>("gemma3.attention.sliding_window", 4, 64));
  auto file = ParseBytes(EncodeGguf(s));
  ASSERT_TRUE(file.ok()) << file.status();
  auto config = GgufModelConfig(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type, "gemma3_text");
  EXPECT_TRUE(config->norm_weight_plus_one);
  EXPECT_EQ(config->sliding_window, 64);
  EXPECT_EQ(config->local_rope_theta, 10000.0);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(config->LayerSlides(i), (i + 1) % 6 != 0) << i;
}

TEST(GgufConfigTest, GemmaScoreScaleFollowsLlamaCpp) {
  for (uint32_t layers : {12u, 46u}) {
    GgufSpec s = LlamaSpec("gemma2");
    s.kvs.push_back(ScalarKv<uint32_t>("gemma2.attention.key_length", 4, 16));
    s.kvs.push_back(ScalarKv<uint32_t>("gemma2.attention.value_length", 4, 16));
    for (GgufKv& kv : s.kvs) {
      if (kv.key == "gemma2.block_count") kv.value = GgufBytes().Put<uint32_t>(layers).bytes();
    }
    auto file = ParseBytes(EncodeGguf(s));
    ASSERT_TRUE(file.ok());
    auto config = GgufModelConfig(**file);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->head_dim, 16);
    // 46 layers: Gemma 2 27B, scaled by hidden / heads = 4.
    EXPECT_EQ(config->query_pre_attn_scalar, layers == 46 ? 4.0 : 16.0) << layers;
  }
}

TEST(GgufConfigTest, RefusesAnArchitectureByName) {
  auto file = ParseBytes(EncodeGguf(LlamaSpec("mamba")));
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(std::string(GgufModelConfig(**file).status().message()),
              HasSubstr("GGUF architecture \"mamba\" is not supported"));
}

TEST(GgufCheckpointTest, UndoesLlamaQPermutationAndGemmaNormOffset) {
  for (const std::string arch : {"llama", "gemma3"}) {
    auto file = ParseBytes(EncodeGguf(LlamaSpec(arch)));
    ASSERT_TRUE(file.ok());
    auto config = GgufModelConfig(**file);
    ASSERT_TRUE(config.ok()) << config.status();
    std::shared_ptr<const GgufFile> shared(std::move(*file));
    auto checkpoint = MakeGgufCheckpoint(shared, *config);
    std::vector<float> q(64), norm(8);
    ASSERT_TRUE(
        checkpoint->ReadF32("model.layers.0.self_attn.q_proj.weight", {{8, 8}}, q.data()).ok());
    ASSERT_TRUE(
        checkpoint->ReadF32("model.layers.0.input_layernorm.weight", {{8}}, norm.data()).ok());
    // Within each head of 4 rows, GGUF row 2i + a is row a * 2 + i.
    const std::vector<float> llama_rows = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int row = 0; row < 8; ++row) {
      EXPECT_EQ(q[row * 8], arch == "llama" ? llama_rows[row] : row) << arch << " row " << row;
    }
    EXPECT_EQ(norm[0], arch == "gemma3" ? -0.5f : 0.5f) << arch;
    EXPECT_FALSE(checkpoint->Contains("model.layers.0.self_attn.k_proj.weight"));
  }
}

}  // namespace
}  // namespace kvserve::engine::testing
