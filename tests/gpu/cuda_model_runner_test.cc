// The CUDA ModelRunner against the CPU ModelRunner (the oracle) on the same
// builtin model: logits within the dtype's tolerance, greedy tokens
// identical for 32 steps; batch invariance bit for bit in batch-invariant
// mode; device sampling equal to the CPU sampler on the same logits; NaN in
// every block a sequence does not own never reaches the logits; bad steps are
// InvalidArgument.
#include "engine/cuda/cuda_model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/model_runner.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve::engine {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kNumBlocks = 96;

// Loaded once per name and kept for the process (runners hold references).
const Model& HostModel(const std::string& name = "builtin:tiny") {
  static auto* models = new std::map<std::string, std::unique_ptr<Model>>();
  auto& slot = (*models)[name];
  if (slot == nullptr) {
    auto m = LoadModel(name);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) slot = std::move(*m);
  }
  return *slot;
}

// A sequence as a scheduler keeps it, with blocks from a shuffled free list
// (block 0 is never handed out).
struct Seq {
  std::vector<int32_t> tokens;
  int32_t computed = 0;
  std::vector<int32_t> table;
};

class Blocks {
 public:
  explicit Blocks(uint32_t seed) {
    for (int32_t b = 1; b < kNumBlocks; ++b) free_.push_back(b);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(seed));
  }
  void Reserve(Seq& s, int64_t tokens) {
    while (static_cast<int64_t>(s.table.size()) * kBlockSize < tokens) {
      ASSERT_FALSE(free_.empty());
      s.table.push_back(free_.back());
      free_.pop_back();
    }
  }

 private:
  std::vector<int32_t> free_;
};

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Computes up to `chunk` new tokens of each sequence in one step (logits of
// each sequence's last new token).
StepInput BuildStep(std::vector<Seq*> seqs, Blocks& blocks, int32_t chunk) {
  StepInput in;
  for (Seq* s : seqs) {
    const int32_t n =
        std::min<int32_t>(chunk, static_cast<int32_t>(s->tokens.size()) - s->computed);
    blocks.Reserve(*s, s->computed + n);
    in.AddSequence(std::span(s->tokens).subspan(s->computed, n), s->computed, s->table, kBlockSize,
                   StepInput::Logits::kLast);
  }
  return in;
}

void Advance(std::vector<Seq*> seqs, const StepInput& in) {
  for (int32_t q = 0; q < in.num_seqs(); ++q) {
    seqs[q]->computed += in.query_start[q + 1] - in.query_start[q];
  }
}

int32_t Argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// kFloat32 is auto on CUDA: the serving dtype's cache.
std::optional<KvCacheDtype> CudaKv(KvCacheDtype kv) {
  if (kv == KvCacheDtype::kFloat32) return std::nullopt;
  return kv;
}

std::unique_ptr<CudaModelRunner> MakeCudaRunner(const std::string& dtype, bool invariant,
                                                const std::string& model = "builtin:tiny",
                                                KvCacheDtype kv = KvCacheDtype::kFloat32) {
  auto r =
      CudaModelRunner::Create(HostModel(model), CudaRunnerOptions{.block_size = kBlockSize,
                                                                  .num_blocks = kNumBlocks,
                                                                  .dtype = *ParseWeightDtype(dtype),
                                                                  .kv_cache_dtype = CudaKv(kv),
                                                                  .batch_invariant = invariant,
                                                                  .max_num_tokens = 512,
                                                                  .max_num_seqs = 16});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  std::vector<int32_t> all(kNumBlocks);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_TRUE((*r)->FillKvBlocks(all, std::nanf("")).ok());  // unowned slots stay NaN
  return std::move(*r);
}

// Runs the CPU and CUDA runners side by side over chunked prompts of 5, 54
// and 97 tokens, then 32 batched greedy steps; compares every logits row.
// `kv`: both runners' KV cache format (on the CPU kFloat32 is fp32; on CUDA
// it is the serving dtype's cache). Greedy tokens must agree where the CPU's
// top two logits are more than `argmax_margin` apart (0: everywhere): with a
// quantized cache a code may round the other way on the two devices (their
// K/V differ in the last bits before encoding), which moves near-ties.
// Below fp32 (tolerance >= 1e-3) a near-tie is also a gap under 4 x
// tolerance x the row's RMS logit: the logits may differ by `tolerance` (L2,
// relative), so each by about tolerance x RMS, and two of them by twice that.
// (On H100, bf16 Qwen3 and Phi-3 flipped such ties with the margin 0.)
void CompareWithCpu(const std::string& dtype, double tolerance,
                    const std::string& model = "builtin:tiny",
                    KvCacheDtype kv = KvCacheDtype::kFloat32, float argmax_margin = 0.0f) {
  auto gpu = MakeCudaRunner(dtype, false, model, kv);
  ASSERT_NE(gpu, nullptr);
  ModelRunner cpu(
      HostModel(model),
      RunnerOptions{.num_blocks = kNumBlocks, .block_size = kBlockSize, .kv_cache_dtype = kv});
  std::vector<int32_t> all(kNumBlocks);
  std::iota(all.begin(), all.end(), 0);
  cpu.kv_cache().FillBlocks(all, std::nanf(""));

  std::mt19937 rng(21);
  Seq a{RandomTokens(rng, 5)}, b{RandomTokens(rng, 54)}, c{RandomTokens(rng, 97)};
  std::vector<Seq*> seqs = {&a, &b, &c};
  Blocks blocks(4);
  auto step_both = [&](const StepInput& in) -> std::vector<float> {
    auto g = gpu->Step(in);
    auto h = cpu.Step(in);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(h.ok()) << h.status();
    if (!g.ok() || !h.ok()) return {};
    const double err = gpu_test::RelativeError(g->logits, h->logits);
    EXPECT_LE(err, tolerance) << dtype << " " << model;
    return h->logits;
  };
  // Prefill in chunks of 16 (chunked prefill over the paged cache).
  while (std::any_of(seqs.begin(), seqs.end(),
                     [](Seq* s) { return s->computed < static_cast<int32_t>(s->tokens.size()); })) {
    std::vector<Seq*> pending;
    for (Seq* s : seqs) {
      if (s->computed < static_cast<int32_t>(s->tokens.size())) pending.push_back(s);
    }
    const StepInput in = BuildStep(pending, blocks, 16);
    step_both(in);
    Advance(pending, in);
  }
  // 32 greedy decode steps; the CUDA runner's argmax must equal the CPU's.
  std::vector<float> logits;
  {
    // Logits of each sequence's last prompt token, recomputed as the first
    // decode input: take them from a re-run of the last tokens.
    for (Seq* s : seqs) s->computed -= 1;
    const StepInput in = BuildStep(seqs, blocks, 1);
    logits = step_both(in);
    Advance(seqs, in);
  }
  const int64_t vocab = HostModel(model).config.vocab_size;
  for (int step = 0; step < 32 && !logits.empty(); ++step) {
    for (size_t q = 0; q < seqs.size(); ++q) {
      seqs[q]->tokens.push_back(Argmax(std::span<const float>(logits.data() + q * vocab, vocab)));
    }
    const StepInput in = BuildStep(seqs, blocks, 1);
    auto g = gpu->Step(in);
    ASSERT_TRUE(g.ok()) << g.status();
    auto h = cpu.Step(in);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_LE(gpu_test::RelativeError(g->logits, h->logits), tolerance)
        << model << " step " << step;
    for (size_t q = 0; q < seqs.size(); ++q) {
      const std::span<const float> cpu_row(h->logits.data() + q * vocab, vocab);
      std::vector<float> sorted(cpu_row.begin(), cpu_row.end());
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      double square_sum = 0.0;
      for (float x : cpu_row) square_sum += double{x} * x;
      const double rms = std::sqrt(square_sum / static_cast<double>(vocab));
      const double tie = tolerance >= 1e-3 ? 4.0 * tolerance * rms : 0.0;
      const double gap = sorted[0] - sorted[1];
      if (gap <= argmax_margin || gap <= tie) continue;  // a near-tie may flip
      EXPECT_EQ(Argmax(std::span<const float>(g->logits.data() + q * vocab, vocab)),
                Argmax(cpu_row))
          << dtype << " " << model << " kv " << KvCacheDtypeName(kv) << " step " << step
          << " sequence " << q << ": CPU top-2 gap " << gap << ", near-tie bound "
          << std::max<double>(argmax_margin, tie);
    }
    logits = h->logits;
    Advance(seqs, in);
  }
}

TEST(CudaModelRunner, Fp32MatchesCpuRunner) { CompareWithCpu("float32", 1e-4); }
TEST(CudaModelRunner, Bf16WithinTolerance) { CompareWithCpu("bfloat16", 3e-2); }
TEST(CudaModelRunner, Fp16WithinTolerance) { CompareWithCpu("float16", 1e-2); }

// Every --kv_cache_dtype on an fp32 model against the CPU runner with the same
// format: both caches hold the same encodings of (nearly) the same K/V, so
// the logits differ by the fp32 differences of the two runners plus a code
// that rounds the other way now and then. Bounds per format: the 16-bit
// ones 10x the fp32 runner bound (a flip is one bf16/fp16 ulp of one
// element); int8 and fp8 3e-3 / 1e-2 and the 4-bit formats 3e-2 (a flipped
// code moves an element by one step of the row's grid: 1/127 .. 1/6 of
// max|row|; docs/engine.md's accuracy table has the formats' own errors,
// which are far larger and common to both devices). Unverified: no GPU has
// run them yet (docs/cuda.md).
struct KvRunnerCase {
  KvCacheDtype kv;
  double tolerance;
  float argmax_margin;
};
class CudaKvFormatRunnerTest : public ::testing::TestWithParam<KvRunnerCase> {};
TEST_P(CudaKvFormatRunnerTest, MatchesCpuRunnerWithTheSameFormat) {
  CompareWithCpu("float32", GetParam().tolerance, "builtin:tiny", GetParam().kv,
                 GetParam().argmax_margin);
}
// And on bf16 activations (the 16-bit formats and int8: the serving setup).
TEST(CudaModelRunner, Bf16ActivationsWithInt8Cache) {
  CompareWithCpu("bfloat16", 3e-2, "builtin:tiny", KvCacheDtype::kInt8, 1e-2f);
}
INSTANTIATE_TEST_SUITE_P(Formats, CudaKvFormatRunnerTest,
                         ::testing::Values(KvRunnerCase{KvCacheDtype::kBfloat16, 1e-3, 1e-3f},
                                           KvRunnerCase{KvCacheDtype::kFloat16, 1e-3, 1e-3f},
                                           KvRunnerCase{KvCacheDtype::kFp8E4m3, 1e-2, 1e-2f},
                                           KvRunnerCase{KvCacheDtype::kInt8, 3e-3, 3e-3f},
                                           KvRunnerCase{KvCacheDtype::kInt4, 3e-2, 3e-2f},
                                           KvRunnerCase{KvCacheDtype::kFp4E2m1, 3e-2, 3e-2f}),
                         [](const auto& info) { return KvCacheDtypeName(info.param.kv); });

// The other families through the same comparison: Qwen3's q/k norms, Phi-3's
// fused tensors and longrope, Gemma 2's GeGLU, sandwich (1 + w) norms,
// embedding scale and both soft-caps, Gemma 3's per-layer windows and ropes.
class CudaFamilyTest : public ::testing::TestWithParam<const char*> {};
TEST_P(CudaFamilyTest, Fp32MatchesCpuRunner) { CompareWithCpu("float32", 1e-4, GetParam()); }
TEST_P(CudaFamilyTest, Bf16WithinTolerance) { CompareWithCpu("bfloat16", 3e-2, GetParam()); }
INSTANTIATE_TEST_SUITE_P(Families, CudaFamilyTest,
                         ::testing::Values("builtin:tiny-qwen3", "builtin:tiny-phi3",
                                           "builtin:tiny-gemma2", "builtin:tiny-gemma3"),
                         [](const auto& info) {
                           std::string name = std::string(info.param).substr(13);  // tiny-...
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Batch-invariant mode: sequence A's decode logits are bit-identical whether
// its prompt ran alone in one chunk or in chunks of 7 beside two others.
TEST(CudaModelRunner, BatchInvariantModeIsBitExact) {
  std::mt19937 rng(8);
  const std::vector<int32_t> prompt = RandomTokens(rng, 61);
  auto run = [&](bool crowded) -> std::vector<std::vector<float>> {
    auto gpu = MakeCudaRunner("bfloat16", true);
    if (gpu == nullptr) return {};
    Blocks blocks(crowded ? 9 : 10);
    Seq a{prompt}, b{RandomTokens(rng, 40)}, c{RandomTokens(rng, 77)};
    std::vector<Seq*> seqs = crowded ? std::vector<Seq*>{&b, &a, &c} : std::vector<Seq*>{&a};
    const int32_t chunk = crowded ? 7 : 1000;
    std::vector<std::vector<float>> a_logits;
    const int64_t vocab = HostModel().config.vocab_size;
    for (int step = 0; step < 60; ++step) {
      const StepInput in = BuildStep(seqs, blocks, chunk);
      auto out = gpu->Step(in);
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) return {};
      Advance(seqs, in);
      const size_t a_row = crowded ? 1 : 0;
      if (a.computed == static_cast<int32_t>(a.tokens.size()) && a.computed >= 61) {
        a_logits.emplace_back(out->logits.begin() + a_row * vocab,
                              out->logits.begin() + (a_row + 1) * vocab);
        if (a_logits.size() == 8) break;
        a.tokens.push_back(Argmax(a_logits.back()));
      }
      for (Seq* s : seqs) {  // keep the others decoding once their prompts are done
        if (s != &a && s->computed == static_cast<int32_t>(s->tokens.size())) {
          s->tokens.push_back(static_cast<int32_t>(rng() % 256));
        }
      }
    }
    return a_logits;
  };
  const auto alone = run(false);
  const auto crowded = run(true);
  ASSERT_EQ(alone.size(), 8u);
  ASSERT_EQ(crowded.size(), 8u);
  for (size_t i = 0; i < alone.size(); ++i) {
    ASSERT_EQ(alone[i].size(), crowded[i].size());
    EXPECT_EQ(std::memcmp(alone[i].data(), crowded[i].data(), alone[i].size() * sizeof(float)), 0)
        << "decode step " << i;
  }
}

// Sampling on the device equals engine::Sample on the same logits.
TEST(CudaModelRunner, DeviceSamplingMatchesCpuSampler) {
  auto gpu = MakeCudaRunner("float32", false);
  ASSERT_NE(gpu, nullptr);
  std::mt19937 rng(3);
  Blocks blocks(5);
  std::vector<Seq> storage;
  for (int i = 0; i < 6; ++i) storage.push_back(Seq{RandomTokens(rng, 10 + 9 * i)});
  std::vector<Seq*> seqs;
  for (Seq& s : storage) seqs.push_back(&s);
  const StepInput in = BuildStep(seqs, blocks, 1000);
  auto logits = gpu->Step(in);
  ASSERT_TRUE(logits.ok()) << logits.status();

  std::vector<int32_t> outputs = {65, 66, 67};
  std::vector<int32_t> masked = {10, 11};
  StepInput sampled = in;  // the same step again: it rewrites the same K/V
  for (int i = 0; i < 6; ++i) {
    SamplingParams p;
    p.temperature = i == 0 ? 0.0f : 0.7f + 0.1f * i;
    p.top_k = i == 2 ? 12 : 0;
    p.top_p = i == 3 ? 0.85f : 1.0f;
    p.min_p = i == 4 ? 0.1f : 0.0f;
    p.repetition_penalty = i == 5 ? 1.2f : 1.0f;
    p.seed = 100 + i;
    p.num_logprobs = i;
    sampled.sample_specs.push_back(SampleSpec{.params = p,
                                              .prompt_tokens = storage[i].tokens,
                                              .output_tokens = outputs,
                                              .masked_tokens = masked});
  }
  auto out = gpu->Step(sampled);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->samples.size(), 6u);
  EXPECT_TRUE(out->logits.empty());
  for (int i = 0; i < 6; ++i) {
    std::vector<float> row(logits->row(i).begin(), logits->row(i).end());
    for (int32_t t : masked) row[t] = -INFINITY;
    const SampleSpec& spec = sampled.sample_specs[i];
    const SampleResult want = Sample(row, spec.params, spec.prompt_tokens, spec.output_tokens);
    EXPECT_EQ(out->samples[i].token, want.token) << "row " << i;
    EXPECT_NEAR(out->samples[i].logprob, want.logprob, 1e-4) << "row " << i;
    ASSERT_EQ(out->samples[i].top_logprobs.size(), want.top_logprobs.size()) << "row " << i;
    for (size_t j = 0; j < want.top_logprobs.size(); ++j) {
      EXPECT_EQ(out->samples[i].top_logprobs[j].token, want.top_logprobs[j].token);
    }
  }
}

TEST(CudaModelRunner, RejectsIllFormedSteps) {
  auto gpu = MakeCudaRunner("float32", false);
  ASSERT_NE(gpu, nullptr);
  StepInput bad;
  const std::vector<int32_t> table = {3};
  bad.AddSequence(std::vector<int32_t>{1, 999}, 0, table, kBlockSize, StepInput::Logits::kLast);
  auto out = gpu->Step(bad);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();

  StepInput too_big;  // past max_num_tokens = 512
  std::vector<int32_t> many(600, 5), long_table;
  for (int32_t b = 1; b <= 40; ++b) long_table.push_back(b);
  too_big.AddSequence(many, 0, long_table, kBlockSize, StepInput::Logits::kLast);
  out = gpu->Step(too_big);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();

  // The runner still works after rejecting.
  StepInput good;
  good.AddSequence(std::vector<int32_t>{1, 2, 3}, 0, table, kBlockSize, StepInput::Logits::kLast);
  EXPECT_TRUE(gpu->Step(good).ok());
}

// The Llama-3-8B-shaped builtin: weights generated on the device (bf16),
// one prefill step of a short prompt gives finite logits.
TEST(CudaModelRunner, Llama3ShapeBuiltinRuns) {
  auto model = LoadModel("builtin:llama3-8b", LoadModelOptions{.host_weights = false});
  ASSERT_TRUE(model.ok()) << model.status();
  auto gpu = CudaModelRunner::Create(
      **model, CudaRunnerOptions{
                   .block_size = 16, .num_blocks = 64, .max_num_tokens = 256, .max_num_seqs = 4});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ((*gpu)->dtype_name(), "bf16");
  StepInput in;
  const std::vector<int32_t> table = {5, 9};
  in.AddSequence(std::vector<int32_t>{256, 72, 101, 108, 108, 111}, 0, table, 16,
                 StepInput::Logits::kLast);
  auto out = (*gpu)->Step(in);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->logits.size(), 128256u);
  for (float x : out->logits) ASSERT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace kvserve::engine
