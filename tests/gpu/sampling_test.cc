// SampleRows (kernels/cuda/sampling.h) against the CPU sampler
// (engine::Sample), on rows built as the CUDA model runner builds them
// (engine/cuda/step_arena.cc): greedy tokens and top-N ids must be equal,
// logprobs within 1e-5, and every drawn token equal unless the host shows
// that the draw, or a top-p / min-p cut, lies within 1e-6 (relative) of a
// boundary, where the GPU's different summation order may round the other
// way. Such mismatches must also be rare.
#include "kernels/cuda/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/sample_rows.h"
#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve::gpu_test {
namespace {

using engine::SamplingParams;
using engine::TokenLogprob;
using kernels::cuda::CudaSampleRow;
using kernels::cuda::CudaSamplingParams;
using kernels::cuda::CudaTokenLogprob;
using kernels::cuda::kCudaMaxLogprobs;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kLogprobTolerance = 1e-5;
constexpr double kBoundaryRel = 1e-6;
constexpr int kLargeVocab = 128256;  // Llama 3

struct Case {
  std::vector<float> logits;  // [vocab], as the model produced them
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;  // its size is the output position (keys the draw)
  std::vector<int32_t> mask;    // -inf before anything else (min_tokens' stop tokens)
};

struct Result {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// What the CPU sampler is given: the scheduler masks the row first.
std::vector<float> MaskedRow(const Case& c) {
  std::vector<float> row = c.logits;
  for (int32_t t : c.mask) {
    if (t >= 0 && static_cast<size_t>(t) < row.size()) row[t] = kNegInf;
  }
  return row;
}

Result RunCpu(const Case& c) {
  const engine::SampleResult r = engine::Sample(MaskedRow(c), c.params, c.prompt, c.output);
  return Result{r.token, r.logprob, r.top_logprobs};
}

// One SampleRows call with one row per case, the per-row lists built by the
// runner's own builder (engine/cuda/sample_rows.h). Outputs and workspace are NaN-poisoned first.
std::vector<Result> RunGpu(const std::vector<Case>& cases, int vocab,
                           cudaError_t* status = nullptr) {
  const int n = static_cast<int>(cases.size());
  std::vector<float> logits;
  engine::cuda::SampleRowLists lists;
  for (const Case& c : cases) {
    logits.insert(logits.end(), c.logits.begin(), c.logits.end());
    engine::cuda::AppendSampleRow(engine::SampleSpec{.params = c.params,
                                                     .prompt_tokens = c.prompt,
                                                     .output_tokens = c.output,
                                                     .masked_tokens = c.mask},
                                  vocab, &lists);
  }
  DeviceBuffer d_logits = Upload(logits);
  DeviceBuffer d_rows = Upload(lists.rows);
  DeviceBuffer d_penalty_tokens = Upload(lists.penalty_tokens);
  DeviceBuffer d_penalty_counts = Upload(lists.penalty_counts);
  DeviceBuffer d_masked = Upload(lists.masked_tokens);
  DeviceBuffer d_tokens(n * sizeof(int32_t));
  DeviceBuffer d_logprobs(n * sizeof(float));
  DeviceBuffer d_top(static_cast<size_t>(n) * kCudaMaxLogprobs * sizeof(CudaTokenLogprob));
  const size_t ws_bytes = kernels::cuda::SamplingWorkspaceBytes(n, vocab);
  DeviceBuffer d_ws(ws_bytes);
  PoisonNaN(d_tokens);
  PoisonNaN(d_logprobs);
  PoisonNaN(d_top);
  PoisonNaN(d_ws);
  const CudaSamplingParams p{.logits = d_logits.as<float>(),
                             .num_rows = n,
                             .vocab = vocab,
                             .rows = d_rows.as<CudaSampleRow>(),
                             .penalty_tokens = d_penalty_tokens.as<int32_t>(),
                             .penalty_counts = d_penalty_counts.as<int32_t>(),
                             .masked_tokens = d_masked.as<int32_t>(),
                             .out_tokens = d_tokens.as<int32_t>(),
                             .out_logprobs = d_logprobs.as<float>(),
                             .out_top = d_top.as<CudaTokenLogprob>(),
                             .workspace = d_ws.get(),
                             .workspace_bytes = ws_bytes};
  const cudaError_t err = kernels::cuda::SampleRows(p, nullptr);
  const cudaError_t sync = cudaDeviceSynchronize();
  if (status != nullptr) *status = err != cudaSuccess ? err : sync;
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  const std::vector<int32_t> tokens = Download<int32_t>(d_tokens, n);
  const std::vector<float> logprobs = Download<float>(d_logprobs, n);
  const std::vector<CudaTokenLogprob> top =
      Download<CudaTokenLogprob>(d_top, static_cast<size_t>(n) * kCudaMaxLogprobs);
  std::vector<Result> results(n);
  for (int i = 0; i < n; ++i) {
    results[i].token = tokens[i];
    results[i].logprob = logprobs[i];
    const int num_top = std::min(std::max(cases[i].params.num_logprobs, 0), vocab);
    for (int j = 0; j < num_top; ++j) {
      const CudaTokenLogprob& e = top[static_cast<size_t>(i) * kCudaMaxLogprobs + j];
      results[i].top.push_back(TokenLogprob{e.token, e.logprob});
    }
  }
  return results;
}

// ---- the host's view of how close a row's draw is to a boundary -------------

bool NearlyEqual(double a, double b, double scale) {
  return std::abs(a - b) <= kBoundaryRel * scale;
}

// Recomputes the CPU sampler's decision in double (sampler.h semantics) and
// says whether the top-p cut, a min-p comparison or the inverse-CDF draw
// lies within kBoundaryRel of a boundary: only there may the GPU (other
// summation order) and the CPU differ.
bool NearBoundary(const Case& c, std::string* why) {
  const SamplingParams& p = c.params;
  if (p.temperature < engine::kGreedyTemperature) return false;  // exact
  std::vector<float> row = MaskedRow(c);
  const size_t vocab = row.size();
  for (float& l : row) l = std::isnan(l) ? kNegInf : std::min(l, std::numeric_limits<float>::max());
  // Penalties, as sampler.cc.
  std::map<int32_t, int32_t> counts;
  for (int32_t t : c.prompt) counts.try_emplace(t, 0);
  for (int32_t t : c.output) ++counts[t];
  for (const auto& [t, count] : counts) {
    if (t < 0 || static_cast<size_t>(t) >= vocab) continue;
    float& l = row[t];
    if (p.repetition_penalty != 1.0f) {
      l = l > 0.0f ? std::min(l / p.repetition_penalty, std::numeric_limits<float>::max())
                   : l * p.repetition_penalty;
    }
    if ((p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) && count > 0) {
      l -= p.frequency_penalty * static_cast<float>(count);
      l -= p.presence_penalty;
    }
  }
  const float max = *std::max_element(row.begin(), row.end());
  if (max == kNegInf) return false;
  const float inv_t = 1.0f / p.temperature;
  std::vector<double> mass(vocab);
  for (size_t t = 0; t < vocab; ++t) {
    const float x = (row[t] - max) * inv_t;
    mass[t] = x < -87.0f ? 0.0 : std::exp(static_cast<double>(x));
  }
  std::vector<int32_t> ranked;
  for (size_t t = 0; t < vocab; ++t) {
    if (row[t] != kNegInf) ranked.push_back(static_cast<int32_t>(t));
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  size_t kept = ranked.size();
  if (p.top_k >= 1 && static_cast<size_t>(p.top_k) < kept) kept = p.top_k;
  double target = std::numeric_limits<double>::infinity();
  if (p.top_p < 1.0f) {
    double z = 0.0;
    for (size_t j = 0; j < kept; ++j) z += mass[ranked[j]];
    target = p.top_p * z;
  }
  double cumulative = 0.0;
  for (size_t j = 0; j < kept; ++j) {
    const double m = mass[ranked[j]];
    if (p.min_p > 0.0f && NearlyEqual(m, p.min_p, p.min_p)) {
      *why = "min-p comparison";
      return true;
    }
    if (m < p.min_p) {
      kept = j;
      break;
    }
    const double before = cumulative;
    cumulative += m;
    if (NearlyEqual(cumulative, target, target) || NearlyEqual(before, target, target)) {
      *why = "top-p cut";
      return true;
    }
    if (cumulative >= target) {
      kept = j + 1;
      break;
    }
  }
  std::vector<int32_t> ids(ranked.begin(), ranked.begin() + kept);
  std::sort(ids.begin(), ids.end());
  double total = 0.0;
  for (int32_t t : ids) total += mass[t];
  const double draw = engine::CounterUniform(p.seed, c.output.size()) * total;
  double sum = 0.0;
  for (int32_t t : ids) {
    sum += mass[t];
    if (NearlyEqual(sum, draw, total)) {
      *why = "inverse-CDF draw";
      return true;
    }
  }
  return false;
}

// ---- comparison -------------------------------------------------------------

bool LogprobNear(float a, float b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(static_cast<double>(a) - b) <= kLogprobTolerance;
}

std::string Describe(const Case& c) {
  const SamplingParams& p = c.params;
  return "vocab=" + std::to_string(c.logits.size()) + " T=" + std::to_string(p.temperature) +
         " top_k=" + std::to_string(p.top_k) + " top_p=" + std::to_string(p.top_p) +
         " min_p=" + std::to_string(p.min_p) + " rep=" + std::to_string(p.repetition_penalty) +
         " freq=" + std::to_string(p.frequency_penalty) +
         " pres=" + std::to_string(p.presence_penalty) + " seed=" + std::to_string(p.seed) +
         " pos=" + std::to_string(c.output.size()) +
         " n_logprobs=" + std::to_string(p.num_logprobs) +
         " masked=" + std::to_string(c.mask.size());
}

// Runs the cases on both samplers and compares. Returns the number of drawn
// tokens that differ at a boundary (each one justified by NearBoundary).
int CompareWithCpu(const std::vector<Case>& cases, int vocab) {
  const std::vector<Result> gpu = RunGpu(cases, vocab);
  int boundary = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Result cpu = RunCpu(c);
    SCOPED_TRACE("row " + std::to_string(i) + ": " + Describe(c));
    if (gpu[i].token < 0 || gpu[i].token >= vocab) {
      ADD_FAILURE() << "token " << gpu[i].token << " out of range";
      continue;
    }
    if (gpu[i].token != cpu.token) {
      std::string why;
      if (NearBoundary(c, &why)) {
        ++boundary;
      } else {
        ADD_FAILURE() << "token " << gpu[i].token << " (gpu) vs " << cpu.token
                      << " (cpu), not near any boundary";
        continue;
      }
    } else {
      EXPECT_TRUE(LogprobNear(gpu[i].logprob, cpu.logprob))
          << gpu[i].logprob << " (gpu) vs " << cpu.logprob << " (cpu)";
    }
    EXPECT_EQ(gpu[i].top.size(), cpu.top.size());
    for (size_t j = 0; j < std::min(cpu.top.size(), gpu[i].top.size()); ++j) {
      EXPECT_EQ(gpu[i].top[j].token, cpu.top[j].token) << "top " << j;
      EXPECT_TRUE(LogprobNear(gpu[i].top[j].logprob, cpu.top[j].logprob))
          << "top " << j << ": " << gpu[i].top[j].logprob << " vs " << cpu.top[j].logprob;
    }
  }
  return boundary;
}

// Random logits: normal(0, sigma) with a few outstanding tokens, as model
// logits tend to be.
std::vector<float> RandomLogits(int vocab, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> row(vocab);
  for (float& l : row) l = normal(rng);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  for (int i = 0; i < 3; ++i) row[pick(rng)] += 3.0f * sigma;
  return row;
}

std::vector<int32_t> RandomTokens(int count, int lo, int hi, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> tokens(count);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

SamplingParams Params(float temperature, int32_t top_k, float top_p, float min_p, uint64_t seed,
                      int32_t num_logprobs = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  p.num_logprobs = num_logprobs;
  return p;
}

const int kVocabs[] = {258, 1000, kLargeVocab};

// ---- tests ------------------------------------------------------------------

TEST(GpuSampling, GreedyAndLogprobsMatchCpu) {
  std::mt19937 rng(1);
  for (int vocab : kVocabs) {
    std::vector<Case> cases;
    for (int i = 0; i < 17; ++i) {
      Case c;
      c.logits = RandomLogits(vocab, i % 2 == 0 ? 2.0f : 6.0f, rng);
      c.params = Params(0.0f, 0, 1.0f, 0.0f, i, /*num_logprobs=*/i % 7 == 0 ? 20 : i % 6);
      c.output = RandomTokens(i, 0, vocab - 1, rng);
      cases.push_back(std::move(c));
    }
    EXPECT_EQ(CompareWithCpu(cases, vocab), 0) << "greedy rows never differ";
  }
}

TEST(GpuSampling, GreedyTiesPickTheLowestId) {
  std::mt19937 rng(2);
  for (int vocab : kVocabs) {
    std::vector<Case> cases;
    std::uniform_int_distribution<int> level(-3, 1);
    for (int i = 0; i < 6; ++i) {
      Case c;
      c.logits.resize(vocab);
      for (float& l : c.logits) l = static_cast<float>(level(rng));  // many exact ties
      c.params = Params(0.0f, 0, 1.0f, 0.0f, 0, /*num_logprobs=*/20);
      cases.push_back(std::move(c));
    }
    // -0 and +0 tie as the maximum: the lower id (-0 here) wins.
    Case zeros;
    zeros.logits.assign(vocab, -1.0f);
    zeros.logits[vocab / 5] = -0.0f;
    zeros.logits[vocab / 3] = 0.0f;
    zeros.params = Params(0.0f, 0, 1.0f, 0.0f, 0, 3);
    cases.push_back(zeros);
    const std::vector<Result> gpu = RunGpu(cases, vocab);
    for (size_t i = 0; i + 1 < cases.size(); ++i) {
      const auto& row = cases[i].logits;
      const auto first_max = std::max_element(row.begin(), row.end()) - row.begin();
      EXPECT_EQ(gpu[i].token, first_max) << "vocab " << vocab << " row " << i;
    }
    EXPECT_EQ(gpu.back().token, vocab / 5);
    EXPECT_EQ(CompareWithCpu(cases, vocab), 0);
  }
}

TEST(GpuSampling, SeededSamplingMatchesCpu) {
  std::mt19937 rng(3);
  const float temperatures[] = {0.3f, 1.0f, 2.5f};
  const int32_t top_ks[] = {0, 1, 20, 700};
  const float top_ps[] = {1.0f, 0.95f, 0.6f};
  const float min_ps[] = {0.0f, 0.02f, 0.3f};
  const float sigmas[] = {0.5f, 2.0f, 5.0f};
  int rows = 0, boundary = 0;
  for (int vocab : kVocabs) {
    std::vector<Case> cases;
    int k = 0;
    for (float t : temperatures) {
      for (int32_t top_k : top_ks) {
        for (float top_p : top_ps) {
          for (float min_p : min_ps) {
            Case c;
            c.logits = RandomLogits(vocab, sigmas[k % 3], rng);
            c.params = Params(t, top_k, top_p, min_p, rng(), /*num_logprobs=*/k % 4);
            c.output = RandomTokens(k % 37, 0, vocab - 1, rng);
            cases.push_back(std::move(c));
            ++k;
          }
        }
      }
    }
    boundary += CompareWithCpu(cases, vocab);
    rows += static_cast<int>(cases.size());
  }
  EXPECT_LE(boundary * 100, rows) << boundary << " boundary mismatches in " << rows << " rows";
}

TEST(GpuSampling, ManyDrawsOfOneRowMatchCpu) {
  // One row at 200 output positions: the draws sweep the whole CDF.
  std::mt19937 rng(4);
  for (int vocab : {1000, kLargeVocab}) {
    const std::vector<float> logits = RandomLogits(vocab, 1.5f, rng);
    std::vector<Case> cases;
    for (int pos = 0; pos < 200; ++pos) {
      Case c;
      c.logits = logits;
      c.params = Params(1.0f, pos % 3 == 0 ? 50 : 0, pos % 2 == 0 ? 0.9f : 1.0f, 0.0f, 77);
      c.output.assign(pos, 0);
      cases.push_back(std::move(c));
    }
    const int boundary = CompareWithCpu(cases, vocab);
    EXPECT_LE(boundary, 2);
  }
}

TEST(GpuSampling, PenaltiesMatchCpu) {
  std::mt19937 rng(5);
  const float repetition[] = {0.7f, 1.0f, 1.5f, 2.0f};
  const float frequency[] = {0.0f, 0.5f, -0.3f};
  const float presence[] = {0.0f, 1.0f, -0.5f};
  int rows = 0, boundary = 0;
  for (int vocab : kVocabs) {
    std::vector<Case> cases;
    int k = 0;
    for (float rep : repetition) {
      for (float freq : frequency) {
        for (float pres : presence) {
          Case c;
          c.logits = RandomLogits(vocab, 2.0f, rng);
          const bool greedy = k % 2 == 0;
          c.params = Params(greedy ? 0.0f : 0.8f, 0, greedy ? 1.0f : 0.9f, 0.0f, rng(), k % 5);
          c.params.repetition_penalty = rep;
          c.params.frequency_penalty = freq;
          c.params.presence_penalty = pres;
          // Prompt ids out of the vocabulary are ignored by both samplers.
          c.prompt = RandomTokens(50 + k * 7, -2, vocab + 2, rng);
          c.output = RandomTokens(k % 40, 0, std::min(vocab - 1, 60), rng);  // repeats
          // Make the penalised tokens matter: lift some to the top.
          for (size_t j = 0; j < c.output.size(); j += 3) c.logits[c.output[j]] += 8.0f;
          cases.push_back(std::move(c));
          ++k;
        }
      }
    }
    // A repetition penalty < 1 on a huge positive logit overflows: kept finite.
    Case huge;
    huge.logits = RandomLogits(vocab, 1.0f, rng);
    huge.logits[7] = 3e38f;
    huge.params = Params(0.0f, 0, 1.0f, 0.0f, 0, 2);
    huge.params.repetition_penalty = 0.5f;
    huge.prompt = {7, 8};
    cases.push_back(huge);
    boundary += CompareWithCpu(cases, vocab);
    rows += static_cast<int>(cases.size());
  }
  EXPECT_LE(boundary * 100, rows) << boundary << " boundary mismatches in " << rows << " rows";
}

TEST(GpuSampling, MaskedTokensAreNeverDrawn) {
  std::mt19937 rng(6);
  for (int vocab : kVocabs) {
    std::vector<Case> cases;
    for (int i = 0; i < 24; ++i) {
      Case c;
      c.logits = RandomLogits(vocab, 3.0f, rng);
      const auto argmax = std::max_element(c.logits.begin(), c.logits.end()) - c.logits.begin();
      c.mask = RandomTokens(1 + i % 9, 0, vocab - 1, rng);
      c.mask.push_back(static_cast<int32_t>(argmax));
      c.params = Params(i % 3 == 0 ? 0.0f : 1.2f, i % 4 == 1 ? 5 : 0, i % 2 ? 0.8f : 1.0f,
                        i % 5 == 2 ? 0.1f : 0.0f, rng(), /*num_logprobs=*/5);
      cases.push_back(std::move(c));
    }
    // Everything masked but one token.
    Case one;
    one.logits = RandomLogits(vocab, 1.0f, rng);
    for (int t = 0; t < vocab; ++t) {
      if (t != vocab / 2) one.mask.push_back(t);
    }
    one.params = Params(0.7f, 0, 0.9f, 0.0f, 11, 3);
    cases.push_back(one);
    const std::vector<Result> gpu = RunGpu(cases, vocab);
    for (size_t i = 0; i < cases.size(); ++i) {
      for (int32_t t : cases[i].mask) EXPECT_NE(gpu[i].token, t) << "row " << i;
    }
    EXPECT_EQ(gpu.back().token, vocab / 2);
    EXPECT_EQ(gpu.back().logprob, 0.0f);
    const int boundary = CompareWithCpu(cases, vocab);
    EXPECT_LE(boundary, 1);
  }
}

TEST(GpuSampling, NonFiniteLogits) {
  std::mt19937 rng(7);
  for (int vocab : kVocabs) {
    std::vector<Case> cases;
    const SamplingParams sampled = Params(1.0f, 0, 0.9f, 0.0f, 5, 4);
    const SamplingParams greedy = Params(0.0f, 0, 1.0f, 0.0f, 5, 4);
    for (const SamplingParams& p : {sampled, greedy}) {
      // NaN where the maximum would be, and elsewhere.
      Case nan;
      nan.logits = RandomLogits(vocab, 2.0f, rng);
      *std::max_element(nan.logits.begin(), nan.logits.end()) = kNaN;
      for (int j = 0; j < 5; ++j) nan.logits[(j * 7919) % vocab] = kNaN;
      nan.params = p;
      cases.push_back(nan);
      // Two +inf: both become the largest float and tie.
      Case inf;
      inf.logits = RandomLogits(vocab, 2.0f, rng);
      inf.logits[vocab - 1] = kPosInf;
      inf.logits[vocab / 2] = kPosInf;
      inf.logits[3] = kNegInf;
      inf.params = p;
      cases.push_back(inf);
      // Everything -inf / NaN: token 0, logprob -inf.
      Case all_masked;
      all_masked.logits.assign(vocab, kNegInf);
      all_masked.params = p;
      cases.push_back(all_masked);
      Case all_nan;
      all_nan.logits.assign(vocab, kNaN);
      all_nan.params = p;
      cases.push_back(all_nan);
      // One finite token.
      Case single;
      single.logits.assign(vocab, kNegInf);
      single.logits[vocab - 2] = -5.0f;
      single.params = p;
      cases.push_back(single);
    }
    const std::vector<Result> gpu = RunGpu(cases, vocab);
    for (int j : {2, 3, 7, 8}) {
      EXPECT_EQ(gpu[j].token, 0) << "row " << j;
      EXPECT_EQ(gpu[j].logprob, kNegInf) << "row " << j;
    }
    for (int j : {4, 9}) {
      EXPECT_EQ(gpu[j].token, vocab - 2);
      EXPECT_EQ(gpu[j].logprob, 0.0f);
    }
    EXPECT_TRUE(gpu[6].token == vocab / 2) << "the lowest id of the tied +inf";
    EXPECT_EQ(CompareWithCpu(cases, vocab), 0);
  }
}

TEST(GpuSampling, FlatRowsSplitTheCutBin) {
  // Thousands of tokens with (nearly) the same mass: the cut bin holds more
  // than fits in shared memory and is split by key, down to single ids.
  std::mt19937 rng(8);
  const int vocab = kLargeVocab;
  std::vector<Case> cases;
  std::uniform_real_distribution<float> uniform(-5.0f, 5.0f);
  for (int i = 0; i < 12; ++i) {
    Case c;
    c.logits.resize(vocab);
    if (i < 4) {
      c.logits.assign(vocab, 1.25f);  // exact ties everywhere
    } else {
      for (float& l : c.logits) l = uniform(rng);
    }
    const float t = i < 4 ? 1.0f : 20.0f;  // high temperature: flat masses
    const int32_t top_k = i % 4 == 1 ? 100000 : (i % 4 == 2 ? 9000 : 0);
    const float top_p = i % 4 == 3 ? 0.999f : (i % 2 == 0 ? 0.5f : 1.0f);
    c.params = Params(t, top_k, top_p, i % 4 == 0 ? 0.5f : 0.0f, rng(), i % 3 == 0 ? 20 : 0);
    c.output.assign(i * 13, 0);
    cases.push_back(std::move(c));
  }
  const int boundary = CompareWithCpu(cases, vocab);
  EXPECT_LE(boundary, 1);
}

TEST(GpuSampling, BatchInvariantAndDeterministic) {
  std::mt19937 rng(9);
  const int vocab = 1000;
  std::vector<Case> cases;
  for (int i = 0; i < 9; ++i) {
    Case c;
    c.logits = RandomLogits(vocab, 2.0f, rng);
    c.params = Params(i % 3 == 0 ? 0.0f : 0.9f, i % 2 ? 40 : 0, 0.9f, 0.01f, rng(), 6);
    c.params.repetition_penalty = i % 4 == 0 ? 1.2f : 1.0f;
    c.prompt = RandomTokens(30, 0, vocab - 1, rng);
    c.output = RandomTokens(i, 0, vocab - 1, rng);
    cases.push_back(std::move(c));
  }
  const std::vector<Result> batch = RunGpu(cases, vocab);
  const std::vector<Result> again = RunGpu(cases, vocab);
  std::vector<Case> reversed(cases.rbegin(), cases.rend());
  const std::vector<Result> rev = RunGpu(reversed, vocab);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<Result> alone = RunGpu({cases[i]}, vocab);
    for (const Result* other : {&again[i], &rev[cases.size() - 1 - i], &alone[0]}) {
      EXPECT_EQ(other->token, batch[i].token) << "row " << i;
      EXPECT_EQ(std::memcmp(&other->logprob, &batch[i].logprob, sizeof(float)), 0) << "row " << i;
      ASSERT_EQ(other->top.size(), batch[i].top.size());
      for (size_t j = 0; j < batch[i].top.size(); ++j) {
        EXPECT_EQ(other->top[j].token, batch[i].top[j].token);
        EXPECT_EQ(std::memcmp(&other->top[j].logprob, &batch[i].top[j].logprob, sizeof(float)), 0);
      }
    }
  }
}

TEST(GpuSampling, InvalidArguments) {
  const int vocab = 100;
  DeviceBuffer logits(vocab * sizeof(float));
  DeviceBuffer rows(sizeof(CudaSampleRow));
  DeviceBuffer tokens(sizeof(int32_t)), logprobs(sizeof(float));
  DeviceBuffer top(kCudaMaxLogprobs * sizeof(CudaTokenLogprob));
  const size_t ws_bytes = kernels::cuda::SamplingWorkspaceBytes(1, vocab);
  EXPECT_GT(ws_bytes, 0u);
  DeviceBuffer ws(ws_bytes);
  CudaSamplingParams p{.logits = logits.as<float>(),
                       .num_rows = 1,
                       .vocab = vocab,
                       .rows = rows.as<CudaSampleRow>(),
                       .out_tokens = tokens.as<int32_t>(),
                       .out_logprobs = logprobs.as<float>(),
                       .out_top = top.as<CudaTokenLogprob>(),
                       .workspace = ws.get(),
                       .workspace_bytes = ws_bytes};
  CudaSamplingParams bad = p;
  bad.workspace_bytes = ws_bytes - 1;
  EXPECT_EQ(kernels::cuda::SampleRows(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.logits = nullptr;
  EXPECT_EQ(kernels::cuda::SampleRows(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.vocab = 0;
  EXPECT_EQ(kernels::cuda::SampleRows(bad, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.num_rows = 0;
  EXPECT_EQ(kernels::cuda::SampleRows(bad, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace kvserve::gpu_test
