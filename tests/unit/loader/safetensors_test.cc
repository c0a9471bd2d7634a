#include "engine/loader/safetensors.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/loader/test_files.h"

namespace kvserve::engine {
namespace {

using ::kvserve::engine::testing::SafetensorsWriter;
using ::kvserve::engine::testing::TempDir;
using ::kvserve::engine::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

std::vector<float> ReadAll(const SafetensorsCheckpoint& ckpt, const std::string& name) {
  absl::StatusOr<const TensorInfo*> t = ckpt.Find(name);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  size_t n = 1;
  for (int64_t d : (*t)->shape) n *= d;
  std::vector<float> out(n, -12345.0f);
  absl::Status s = ckpt.ReadF32(name, (*t)->shape, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// ---------------------------------------------------------------- round trips

TEST(SafetensorsTest, F32RoundTripIsBitExact) {
  TempDir dir;
  const std::vector<float> values = {0.0f,
                                     -0.0f,
                                     1.5f,
                                     -3.25e-3f,
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::max()};
  SafetensorsWriter().AddF32("w", {3, 3}, values).Write(dir.File("model.safetensors"));

  auto ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::vector<float> got = ReadAll(**ckpt, "w");
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(Bits(got[i]), Bits(values[i])) << i;
}

TEST(SafetensorsTest, F16ConvertsExactlyIncludingSpecialValues) {
  TempDir dir;
  const std::vector<uint16_t> bits = {
      0x0000,  // +0
      0x8000,  // -0
      0x3c00,  // 1
      0xc000,  // -2
      0x3555,  // 0.333251953125
      0x0001,  // smallest subnormal 2^-24
      0x8001,  // -2^-24
      0x03ff,  // largest subnormal 1023 * 2^-24
      0x0400,  // smallest normal 2^-14
      0x7bff,  // largest finite 65504
      0x7c00,  // +inf
      0xfc00,  // -inf
  };
  const std::vector<float> expected = {0.0f,
                                       -0.0f,
                                       1.0f,
                                       -2.0f,
                                       0x1.554p-2f,
                                       0x1p-24f,
                                       -0x1p-24f,
                                       0x3ffp-24f,
                                       0x1p-14f,
                                       65504.0f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity()};
  SafetensorsWriter()
      .AddU16("h", "F16", {12}, bits)
      .AddU16("nan", "F16", {3}, {0x7e00, 0xfe01, 0xfc01})
      .Write(dir.File("model.safetensors"));

  auto ckpt = SafetensorsCheckpoint::Open(dir.File("model.safetensors"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::vector<float> got = ReadAll(**ckpt, "h");
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(Bits(got[i]), Bits(expected[i])) << "element " << i << " got " << got[i];
  }
  const std::vector<float> nans = ReadAll(**ckpt, "nan");
  ASSERT_EQ(nans.size(), 3u);
  EXPECT_EQ(Bits(nans[0]), 0x7fc00000u);  // quiet NaN
  EXPECT_EQ(Bits(nans[1]), 0xffc02000u);  // negative quiet NaN, payload 1 kept
  EXPECT_EQ(Bits(nans[2]), 0xff802000u);  // negative signalling NaN stays signalling
}

TEST(SafetensorsTest, BF16IsTheUpperHalfOfF32) {
  TempDir dir;
  const std::vector<uint16_t> bits = {0x3f80, 0xbf80, 0x8000, 0x4049,
                                      0x0001, 0x7f80, 0xff80, 0x7fc0};
  SafetensorsWriter().AddU16("b", "BF16", {2, 4}, bits).Write(dir.File("model.safetensors"));
  auto ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::vector<float> got = ReadAll(**ckpt, "b");
  ASSERT_EQ(got.size(), bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    EXPECT_EQ(Bits(got[i]), static_cast<uint32_t>(bits[i]) << 16) << i;
  }
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[3], 3.140625f);
  EXPECT_EQ(got[4], 0x1p-133f);  // a fp32 subnormal
  EXPECT_TRUE(std::isnan(got[7]));
}

TEST(SafetensorsTest, UnalignedDataSectionReadsCorrectly) {
  TempDir dir;
  const std::vector<float> values = {1.0f, 2.0f, 3.0f};
  // One-byte tensor first, unpadded header: the F32 data starts at an odd offset.
  SafetensorsWriter()
      .PadHeader(false)
      .Add("flag", "U8", {1}, std::string(1, '\x01'))
      .AddF32("x", {3}, values)
      .AddU16("y", "F16", {2}, {0x3c00, 0x4000})
      .Write(dir.File("model.safetensors"));
  auto ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ReadAll(**ckpt, "x"), values);
  EXPECT_THAT(ReadAll(**ckpt, "y"), ElementsAre(1.0f, 2.0f));
}

TEST(SafetensorsTest, FindReportsMetadataAndNames) {
  TempDir dir;
  SafetensorsWriter()
      .AddF32("b", {2, 3}, std::vector<float>(6, 1.0f))
      .AddU16("a", "BF16", {4}, std::vector<uint16_t>(4, 0))
      .AddF32("empty", {0, 5}, {})
      .Write(dir.File("model.safetensors"));
  auto ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_THAT((*ckpt)->TensorNames(), ElementsAre("a", "b", "empty"));
  EXPECT_TRUE((*ckpt)->Contains("a"));
  EXPECT_FALSE((*ckpt)->Contains("c"));
  auto b = (*ckpt)->Find("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->name, "b");
  EXPECT_EQ((*b)->file, dir.File("model.safetensors"));
  EXPECT_EQ((*b)->dtype, DType::kF32);
  EXPECT_THAT((*b)->shape, ElementsAre(2, 3));
  EXPECT_EQ((*b)->num_bytes, 24u);
  auto a = (*ckpt)->Find("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->dtype, DType::kBF16);
  EXPECT_STREQ(DTypeName((*a)->dtype), "BF16");
  const int64_t empty_shape[] = {0, 5};
  EXPECT_TRUE((*ckpt)->ReadF32("empty", empty_shape, nullptr).ok());
}

// Writes a two-shard checkpoint; returns the directory.
void WriteSharded(const TempDir& dir) {
  SafetensorsWriter()
      .AddF32("model.embed_tokens.weight", {2, 2}, {1, 2, 3, 4})
      .AddF32("model.layers.0.mlp.up_proj.weight", {1, 2}, {5, 6})
      .Write(dir.File("model-00001-of-00002.safetensors"));
  SafetensorsWriter()
      .AddU16("model.norm.weight", "BF16", {2}, {0x3f80, 0x4000})
      .Write(dir.File("model-00002-of-00002.safetensors"));
  nlohmann::json index = {
      {"metadata", {{"total_size", 28}}},
      {"weight_map",
       {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
        {"model.layers.0.mlp.up_proj.weight", "model-00001-of-00002.safetensors"},
        {"model.norm.weight", "model-00002-of-00002.safetensors"}}}};
  WriteFile(dir.File("model.safetensors.index.json"), index.dump(2));
}

TEST(SafetensorsTest, ShardedCheckpointThroughIndex) {
  TempDir dir;
  WriteSharded(dir);
  auto ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->TensorNames().size(), 3u);
  EXPECT_THAT(ReadAll(**ckpt, "model.embed_tokens.weight"), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(ReadAll(**ckpt, "model.layers.0.mlp.up_proj.weight"), ElementsAre(5, 6));
  EXPECT_THAT(ReadAll(**ckpt, "model.norm.weight"), ElementsAre(1, 2));
  EXPECT_EQ((*(*ckpt)->Find("model.norm.weight"))->file,
            dir.File("model-00002-of-00002.safetensors"));

  // The index file itself can be opened too.
  auto by_index = SafetensorsCheckpoint::Open(dir.File("model.safetensors.index.json"));
  ASSERT_TRUE(by_index.ok()) << by_index.status();

  auto missing = (*ckpt)->Find("lm_head.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("\"lm_head.weight\""));
  EXPECT_THAT(missing.status().message(), HasSubstr("model.safetensors.index.json"));
}

TEST(SafetensorsTest, IndexWinsOverSingleFile) {
  TempDir dir;
  WriteSharded(dir);
  SafetensorsWriter().AddF32("other", {1}, {9}).Write(dir.File("model.safetensors"));
  auto ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_FALSE((*ckpt)->Contains("other"));
  EXPECT_TRUE((*ckpt)->Contains("model.norm.weight"));
}

// -------------------------------------------------------------------- errors

class SafetensorsErrorTest : public ::testing::Test {
 protected:
  std::string file() const { return dir_.File("model.safetensors"); }

  // Opens the checkpoint expecting failure; returns the status.
  absl::Status OpenError() {
    auto ckpt = SafetensorsCheckpoint::Open(dir_.path());
    EXPECT_FALSE(ckpt.ok()) << "expected an error";
    return ckpt.ok() ? absl::OkStatus() : ckpt.status();
  }

  std::unique_ptr<SafetensorsCheckpoint> OpenOk() {
    auto ckpt = SafetensorsCheckpoint::Open(dir_.path());
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    return ckpt.ok() ? *std::move(ckpt) : nullptr;
  }

  static SafetensorsWriter TwoTensors() {
    SafetensorsWriter w;
    w.AddF32("model.embed_tokens.weight", {4, 2}, std::vector<float>(8, 0.5f))
        .AddF32("model.layers.0.self_attn.q_proj.weight", {2, 2}, {1, 2, 3, 4});
    return w;
  }

  TempDir dir_;
};

TEST_F(SafetensorsErrorTest, TruncatedInData) {
  std::string bytes = TwoTensors().Serialize();
  bytes.resize(bytes.size() - 3);
  WriteFile(file(), bytes);
  const absl::Status s = OpenError();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(file()));
  EXPECT_THAT(s.message(), HasSubstr("\"model.layers.0.self_attn.q_proj.weight\""));
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsErrorTest, TruncatedInHeader) {
  std::string bytes = TwoTensors().Serialize();
  bytes.resize(40);
  WriteFile(file(), bytes);
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr(file()));
  EXPECT_THAT(s.message(), HasSubstr("header length"));
}

TEST_F(SafetensorsErrorTest, TruncatedInLengthField) {
  WriteFile(file(), std::string("\x10\x00\x00", 3));
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr(file()));
  EXPECT_THAT(s.message(), HasSubstr("too short"));
}

TEST_F(SafetensorsErrorTest, EmptyFile) {
  WriteFile(file(), "");
  EXPECT_THAT(OpenError().message(), HasSubstr("0 bytes"));
}

TEST_F(SafetensorsErrorTest, HeaderLengthLargerThanFile) {
  std::string bytes = TwoTensors().Serialize();
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bytes.data(), &huge, 8);
  WriteFile(file(), bytes);
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr(file()));
  EXPECT_THAT(s.message(), HasSubstr("header length 1099511627776 exceeds"));
}

TEST_F(SafetensorsErrorTest, HeaderIsNotJson) {
  WriteFile(file(), SafetensorsWriter::Assemble("{\"w\": {\"dtype\": \"F32\",", "", true));
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr(file()));
  EXPECT_THAT(s.message(), HasSubstr("not valid JSON"));
}

TEST_F(SafetensorsErrorTest, HeaderIsNotAnObject) {
  WriteFile(file(), SafetensorsWriter::Assemble("[1, 2, 3]", "", true));
  EXPECT_THAT(OpenError().message(), HasSubstr("not a JSON object"));
}

TEST_F(SafetensorsErrorTest, MalformedEntry) {
  nlohmann::json header = {{"w", {{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 4}}}}};
  WriteFile(file(), SafetensorsWriter::Assemble(header.dump(), std::string(4, '\0'), true));
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr("tensor \"w\""));
  EXPECT_THAT(s.message(), HasSubstr("shape"));
}

TEST_F(SafetensorsErrorTest, MissingTensor) {
  TwoTensors().Write(file());
  auto ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  const std::string name = "model.layers.3.mlp.up_proj.weight";
  auto t = ckpt->Find(name);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.status().message(), "tensor \"" + name + "\" not found in " + file());
  float out[4];
  const int64_t shape[] = {2, 2};
  EXPECT_EQ(ckpt->ReadF32(name, shape, out).code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsErrorTest, WrongShape) {
  TwoTensors().Write(file());
  auto ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  std::vector<float> out(8);
  const int64_t transposed[] = {2, 4};
  const absl::Status s = ckpt->ReadF32("model.embed_tokens.weight", transposed, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"model.embed_tokens.weight\""));
  EXPECT_THAT(s.message(), HasSubstr(file()));
  EXPECT_THAT(s.message(), HasSubstr("shape [4, 2], expected [2, 4]"));
  const int64_t rank1[] = {8};
  EXPECT_FALSE(ckpt->ReadF32("model.embed_tokens.weight", rank1, out.data()).ok());
}

TEST_F(SafetensorsErrorTest, UnsupportedDtypesFailWhenRead) {
  SafetensorsWriter()
      .AddF32("ok", {1}, {1.0f})
      .Add("position_ids", "I64", {2}, std::string(16, '\0'))
      .Add("double", "F64", {1}, std::string(8, '\0'))
      .Write(file());
  auto ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  // Present (an unused buffer must not make the checkpoint unloadable)...
  EXPECT_TRUE(ckpt->Contains("position_ids"));
  EXPECT_THAT(ckpt->TensorNames(), ElementsAre("double", "ok", "position_ids"));
  // ...but reading names the tensor, the dtype and the file.
  for (const auto& [name, dtype] : {std::pair{"position_ids", "I64"}, std::pair{"double", "F64"}}) {
    auto t = ckpt->Find(name);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr(std::string("\"") + name + "\""));
    EXPECT_THAT(t.status().message(), HasSubstr(std::string("dtype ") + dtype));
    EXPECT_THAT(t.status().message(), HasSubstr(file()));
    float out[2];
    const int64_t shape[] = {2};
    EXPECT_FALSE(ckpt->ReadF32(name, shape, out).ok());
  }
}

TEST_F(SafetensorsErrorTest, KnownDtypeWithWrongByteCountFailsAtOpen) {
  SafetensorsWriter().Add("ids", "I64", {3}, std::string(16, '\0')).Write(file());
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr("\"ids\""));
  EXPECT_THAT(s.message(), HasSubstr("I64 [3] needs 24"));
}

TEST_F(SafetensorsErrorTest, OffsetsDoNotMatchShape) {
  // 12 bytes for a [2, 2] F32 tensor (16 needed).
  SafetensorsWriter().Add("model.norm.weight", "F32", {2, 2}, std::string(12, '\0')).Write(file());
  const absl::Status s = OpenError();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(file()));
  EXPECT_THAT(s.message(), HasSubstr("\"model.norm.weight\""));
  EXPECT_THAT(s.message(), HasSubstr("hold 12 bytes but F32 [2, 2] needs 16"));
}

TEST_F(SafetensorsErrorTest, ReversedOffsets) {
  nlohmann::json header = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 4}}}}};
  WriteFile(file(), SafetensorsWriter::Assemble(header.dump(), std::string(8, '\0'), true));
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr("tensor \"w\""));
  EXPECT_THAT(s.message(), HasSubstr("data_offsets [8, 4]"));
}

TEST_F(SafetensorsErrorTest, OverlappingTensors) {
  nlohmann::json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                           {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  WriteFile(file(), SafetensorsWriter::Assemble(header.dump(), std::string(12, '\0'), true));
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr("\"a\" and \"b\" overlap"));
}

TEST_F(SafetensorsErrorTest, MissingShardFile) {
  WriteSharded(dir_);
  std::filesystem::remove(dir_.File("model-00002-of-00002.safetensors"));
  const absl::Status s = OpenError();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(s.message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("\"model.norm.weight\""));
}

TEST_F(SafetensorsErrorTest, ShardLacksTensorTheIndexNames) {
  WriteSharded(dir_);
  SafetensorsWriter()
      .AddU16("model.final_norm.weight", "BF16", {2}, {0x3f80, 0x4000})
      .Write(dir_.File("model-00002-of-00002.safetensors"));
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(s.message(), HasSubstr("\"model.norm.weight\""));
  EXPECT_THAT(s.message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("no shard holds it"));
}

TEST_F(SafetensorsErrorTest, DuplicateTensorAcrossShards) {
  WriteSharded(dir_);
  SafetensorsWriter()
      .AddU16("model.norm.weight", "BF16", {2}, {0x3f80, 0x4000})
      .AddF32("model.embed_tokens.weight", {2, 2}, {1, 2, 3, 4})
      .Write(dir_.File("model-00002-of-00002.safetensors"));
  const absl::Status s = OpenError();
  EXPECT_THAT(s.message(), HasSubstr("\"model.embed_tokens.weight\" is stored twice"));
  EXPECT_THAT(s.message(), HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(SafetensorsErrorTest, BadIndex) {
  WriteFile(dir_.File("model.safetensors.index.json"), "{\"weight_map\": ");
  EXPECT_THAT(OpenError().message(), HasSubstr("model.safetensors.index.json: not valid JSON"));
  WriteFile(dir_.File("model.safetensors.index.json"), "{\"metadata\": {}}");
  EXPECT_THAT(OpenError().message(), HasSubstr("field \"weight_map\" missing"));
  WriteFile(dir_.File("model.safetensors.index.json"), R"({"weight_map": {"w": 3}})");
  EXPECT_THAT(OpenError().message(), HasSubstr("tensor \"w\" is not a relative file name"));
}

TEST_F(SafetensorsErrorTest, NoCheckpointInDirectory) {
  const absl::Status s = OpenError();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir_.path()));
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors.index.json or model.safetensors"));
}

TEST_F(SafetensorsErrorTest, NoSuchPath) {
  auto ckpt = SafetensorsCheckpoint::Open(dir_.File("nope.safetensors"));
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("nope.safetensors"));
}

}  // namespace
}  // namespace kvserve::engine
