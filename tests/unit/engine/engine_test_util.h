// Test harness for ModelRunner: a tiny block allocator handing out shuffled,
// non-contiguous block ids, with every block no live sequence owns filled
// with NaN, so a kernel that reads a slot it must not read poisons the logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model.h"
#include "engine/model_runner.h"
#include "gtest/gtest.h"

namespace kvserve::engine::testing {

// builtin:NAME, loaded once per process (engine tests only use them read-only).
// NAME may end in a weight format (model_weights.h):
//   ":bf16", ":f16"  generated as a bf16 / fp16 checkpoint, weights kept 16-bit
//   ":int8"          the fp32 checkpoint, weights quantized to int8
//   ":w8a8"          the same, with int8 activations per token
//   ":bf16dot"       a bf16 checkpoint under --matmul_precision=bfloat16
inline const Model& BuiltinModel(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>>* models =
      new std::map<std::string, std::unique_ptr<Model>>();
  std::unique_ptr<Model>& model = (*models)[name];
  if (model == nullptr) {
    const size_t colon = name.find(':');
    const std::string base = name.substr(0, colon);
    const std::string format = colon == std::string::npos ? "" : name.substr(colon + 1);
    LoadModelOptions options;
    DType checkpoint = DType::kF32;
    if (format == "bf16") checkpoint = DType::kBF16;
    if (format == "f16") checkpoint = DType::kF16;
    if (format == "int8") options.weights.quantization = Quantization::kInt8;
    if (format == "w8a8") options.weights.quantization = Quantization::kW8A8;
    if (format == "bf16dot") {
      checkpoint = DType::kBF16;
      options.weights.matmul_precision = MatmulPrecision::kBfloat16;
    }
    EXPECT_TRUE(format.empty() || format == "bf16" || format == "f16" || format == "int8" ||
                format == "w8a8" || format == "bf16dot")
        << name;
    auto m = LoadBuiltinModel(base, checkpoint, options);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) model = std::move(*m);
  }
  return *model;
}

// A test name's suffix for a model name: '-' and ':' become '_'.
inline std::string TestNameOf(std::string name) {
  for (char& ch : name) ch = ch == '-' || ch == ':' ? '_' : ch;
  return name;
}

// The tiny models of every family in each non-fp32 weight format, for the
// invariance tests (with the fp32 KV cache).
inline std::vector<std::string> TinyModelsInWeightFormats() {
  std::vector<std::string> names;
  for (const char* format : {":bf16", ":f16", ":int8", ":w8a8", ":bf16dot"}) {
    for (const char* model : {"tiny", "tiny-qwen3", "tiny-phi3", "tiny-gemma2", "tiny-gemma3"}) {
      names.push_back(std::string(model) + format);
    }
  }
  return names;
}

inline const Model& TinyModel() { return BuiltinModel("tiny"); }

// log softmax in double of one row of logits (the accuracy tests' KL and
// |delta log p| are computed from it).
inline std::vector<double> LogSoftmax(const std::vector<float>& x) {
  double mx = -1e300, sum = 0;
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  for (float v : x) sum += std::exp(v - mx);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - mx - std::log(sum);
  return out;
}

// A test name's suffix for a KV cache format: "" for fp32 (auto), so the fp32
// cases keep their names, else "_int8" etc.
inline std::string KvDtypeSuffix(KvCacheDtype dtype) {
  std::string suffix;
  if (dtype != KvCacheDtype::kFloat32) suffix = absl::StrCat("_", KvCacheDtypeName(dtype));
  return suffix;
}

// builtin:tiny and one tiny model of each family beyond Llama (every
// optional feature of the runner: builtin_models.h).
inline const std::vector<std::string>& TinyModelsOfEveryFamily() {
  static const std::vector<std::string> names = {"tiny", "tiny-qwen3", "tiny-phi3", "tiny-gemma2",
                                                 "tiny-gemma3"};
  return names;
}

// One sequence's state as a scheduler would keep it.
struct Sequence {
  std::vector<int32_t> tokens;       // all tokens known so far
  int32_t num_computed = 0;          // tokens whose K/V are in the cache
  std::vector<int32_t> block_table;  // physical block ids
};

class Harness {
 public:
  Harness(const Model& model, int64_t block_size, int64_t num_blocks, uint32_t seed,
          bool shuffle_and_poison = true, KvCacheDtype kv_dtype = KvCacheDtype::kFloat32)
      : runner_(model, RunnerOptions{.num_blocks = num_blocks,
                                     .block_size = block_size,
                                     .kv_cache_dtype = kv_dtype}) {
    for (int32_t b = 1; b < num_blocks; ++b) free_.push_back(b);  // block 0: null block
    if (!shuffle_and_poison) return;
    std::shuffle(free_.begin(), free_.end(), std::mt19937(seed));
    std::vector<int32_t> all(num_blocks);
    for (int32_t b = 0; b < num_blocks; ++b) all[b] = b;
    runner_.kv_cache().FillBlocks(all, std::nanf(""));
    poison_ = true;
  }

  ModelRunner& runner() { return runner_; }

  // Grows seq's block table to hold `num_tokens` tokens.
  void Reserve(Sequence& seq, int64_t num_tokens) {
    const int64_t bs = runner_.block_size();
    while (static_cast<int64_t>(seq.block_table.size()) * bs < num_tokens) {
      ASSERT_FALSE(free_.empty()) << "harness ran out of blocks";
      seq.block_table.push_back(free_.back());
      free_.pop_back();
    }
  }

  // Returns seq's blocks (poisoned again when the harness poisons).
  void Release(Sequence& seq) {
    if (poison_) runner_.kv_cache().FillBlocks(seq.block_table, std::nanf(""));
    free_.insert(free_.end(), seq.block_table.begin(), seq.block_table.end());
    seq.block_table.clear();
    seq.num_computed = 0;
  }

  // Adds `count` uncomputed tokens of seq to `step` (reserving blocks).
  void Schedule(StepInput& step, Sequence& seq, int32_t count, StepInput::Logits logits) {
    Reserve(seq, seq.num_computed + count);
    step.AddSequence(std::span(seq.tokens).subspan(seq.num_computed, count), seq.num_computed,
                     seq.block_table, static_cast<int32_t>(runner_.block_size()), logits);
    seq.num_computed += count;
  }

  StepOutput Run(const StepInput& step) {
    auto out = runner_.Step(step);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? std::move(*out) : StepOutput{};
  }

 private:
  ModelRunner runner_;
  std::vector<int32_t> free_;
  bool poison_ = false;
};

inline std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

inline std::vector<float> Row(const StepOutput& out, size_t i) {
  auto r = out.row(i);
  return {r.begin(), r.end()};
}

inline int32_t Argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Bit-for-bit equality, with NaN counting as a failure.
inline ::testing::AssertionResult BitEqual(const std::vector<float>& a,
                                           const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size differs";
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      return ::testing::AssertionFailure() << "NaN at " << i;
    }
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "differs at " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvserve::engine::testing
