#include "tools/loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::loadgen {
namespace {

// SplitMix64: derives independent stream seeds from (seed, stream), so that
// e.g. changing the output-length distribution leaves the prompts unchanged.
uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

enum Stream : uint64_t {
  kPrompts,
  kPromptLengths,
  kPrefixes,
  kSampling,
  kArrivals,
  kDataset,
  kOutputLengths
};

}  // namespace

absl::StatusOr<LengthDist> ParseLengthDist(const std::string& name) {
  if (name == "fixed") return LengthDist::kFixed;
  if (name == "uniform") return LengthDist::kUniform;
  if (name == "normal") return LengthDist::kNormal;
  if (name == "lognormal") return LengthDist::kLognormal;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown length distribution \"", name, "\" (expected fixed, uniform, normal or lognormal)"));
}

const char* LengthDistName(LengthDist dist) {
  switch (dist) {
    case LengthDist::kFixed:
      return "fixed";
    case LengthDist::kUniform:
      return "uniform";
    case LengthDist::kNormal:
      return "normal";
    case LengthDist::kLognormal:
      return "lognormal";
  }
  return "fixed";
}

int64_t Rng::UniformInt(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;  // > 0 unless the full range
  if (span == 0) return static_cast<int64_t>(Next());
  // Reject the top partial copy of [0, span) so every value is equally likely.
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return lo + static_cast<int64_t>(x % span);
}

double Rng::Normal() {
  // 1 - U in (0, 1]: log never sees 0.
  const double u1 = 1.0 - Uniform01();
  const double u2 = Uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double Rng::Exponential(double rate) { return -std::log(1.0 - Uniform01()) / rate; }

int64_t DrawLength(const LengthSpec& spec, Rng& rng) {
  double x = spec.mean;
  switch (spec.dist) {
    case LengthDist::kFixed:
      break;
    case LengthDist::kUniform: {
      const int64_t lo = std::llround(spec.mean - spec.range);
      const int64_t hi = std::llround(spec.mean + spec.range);
      x = static_cast<double>(rng.UniformInt(std::max<int64_t>(lo, 1), std::max<int64_t>(hi, 1)));
      break;
    }
    case LengthDist::kNormal:
      x = spec.mean + spec.stddev * rng.Normal();
      break;
    case LengthDist::kLognormal: {
      // Parameters of the underlying normal such that the length itself has
      // the given mean and standard deviation.
      if (spec.mean <= 0) break;
      const double sigma2 = std::log1p((spec.stddev * spec.stddev) / (spec.mean * spec.mean));
      const double mu = std::log(spec.mean) - sigma2 / 2;
      x = std::exp(mu + std::sqrt(sigma2) * rng.Normal());
      break;
    }
  }
  const double clamped = std::clamp(std::round(x), 1.0, 1e9);
  return static_cast<int64_t>(clamped);
}

absl::StatusOr<std::vector<RequestSpec>> GenerateWorkload(const WorkloadOptions& o) {
  if (o.num_requests < 0) return absl::InvalidArgumentError("num_requests: must be >= 0");
  const bool text = !o.dataset_prompts.empty();
  if (!text && o.vocab_size <= 0) {
    return absl::InvalidArgumentError("vocab_size: must be > 0 for token-id prompts");
  }
  if (o.shared_prefix_len < 0) return absl::InvalidArgumentError("shared_prefix_len: must be >= 0");
  if (o.shared_prefix_len > 0 && text) {
    return absl::InvalidArgumentError("shared_prefix_len: not supported with a dataset");
  }
  if (o.num_prefix_groups < 1) return absl::InvalidArgumentError("num_prefix_groups: must be >= 1");
  if (o.max_model_len > 0 && o.shared_prefix_len + 2 > o.max_model_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared_prefix_len: ", o.shared_prefix_len,
                     " leaves no room for one own prompt token and one output token within "
                     "max_model_len ",
                     o.max_model_len));
  }
  const std::set<int32_t> excluded(o.excluded_token_ids.begin(), o.excluded_token_ids.end());
  int64_t allowed = o.vocab_size;
  for (int32_t id : excluded) allowed -= (id >= 0 && id < o.vocab_size) ? 1 : 0;
  if (!text && allowed <= 0) return absl::InvalidArgumentError("every token id is excluded");

  Rng prompt_rng(StreamSeed(o.seed, kPrompts));
  Rng prompt_len_rng(StreamSeed(o.seed, kPromptLengths));
  Rng output_len_rng(StreamSeed(o.seed, kOutputLengths));
  Rng prefix_rng(StreamSeed(o.seed, kPrefixes));
  Rng sampling_rng(StreamSeed(o.seed, kSampling));
  Rng dataset_rng(StreamSeed(o.seed, kDataset));
  // Excluded ids are rare (the EOS ids), so rejection is cheap.
  auto draw_token = [&](Rng& rng) {
    int32_t id;
    do {
      id = static_cast<int32_t>(rng.UniformInt(0, o.vocab_size - 1));
    } while (excluded.count(id) != 0);
    return id;
  };

  std::vector<std::vector<int32_t>> prefixes;
  if (o.shared_prefix_len > 0) {
    prefixes.resize(o.num_prefix_groups);
    for (auto& prefix : prefixes) {
      for (int64_t i = 0; i < o.shared_prefix_len; ++i) prefix.push_back(draw_token(prefix_rng));
    }
  }
  // Dataset order: a seeded Fisher-Yates shuffle.
  std::vector<int64_t> perm(o.dataset_prompts.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  for (size_t i = perm.size(); i > 1; --i) {
    std::swap(perm[i - 1], perm[dataset_rng.UniformInt(0, static_cast<int64_t>(i) - 1)]);
  }

  std::vector<RequestSpec> specs(o.num_requests);
  for (int64_t i = 0; i < o.num_requests; ++i) {
    RequestSpec& spec = specs[i];
    spec.index = i;
    spec.sampling_seed = sampling_rng.Next();
    // Both lengths are drawn for every request (text prompts too), so the
    // draws of request i do not depend on the kind of the earlier requests.
    int64_t own_len = DrawLength(o.prompt_len, prompt_len_rng);
    spec.max_tokens = DrawLength(o.output_len, output_len_rng);
    if (text) {
      const size_t line = perm[i % perm.size()];
      spec.prompt_text = o.dataset_prompts[line];
      if (line < o.dataset_output_lens.size() && o.dataset_output_lens[line] > 0) {
        spec.max_tokens = o.dataset_output_lens[line];
      }
      continue;  // the token count of a text prompt is the server's business
    }
    if (o.max_model_len > 0) {
      // prefix + own + output <= max_model_len, with own >= 1 and output >= 1.
      const int64_t room = o.max_model_len - o.shared_prefix_len;  // >= 2 (checked above)
      spec.max_tokens = std::min(spec.max_tokens, room - 1);
      own_len = std::min(own_len, room - spec.max_tokens);
    }
    if (o.shared_prefix_len > 0) {
      spec.group = i % o.num_prefix_groups;
      spec.prompt_ids = prefixes[spec.group];
    }
    spec.prompt_ids.reserve(spec.prompt_ids.size() + own_len);
    for (int64_t t = 0; t < own_len; ++t) spec.prompt_ids.push_back(draw_token(prompt_rng));
  }
  return specs;
}

std::vector<double> PoissonArrivals(int64_t n, double rate, uint64_t seed) {
  std::vector<double> times(std::max<int64_t>(n, 0), 0.0);
  if (std::isinf(rate)) return times;
  Rng rng(StreamSeed(seed, kArrivals));
  double t = 0;
  for (double& time : times) {
    t += rng.Exponential(rate);
    time = t;
  }
  return times;
}

absl::Status ReadDataset(const std::string& path, std::vector<std::string>* prompts,
                         std::vector<int64_t>* output_lens) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--dataset: cannot read ", path));
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dataset: ", path, ":", lineno, ": expected a JSON object with a string \"prompt\""));
    }
    prompts->push_back(j["prompt"].get<std::string>());
    int64_t out_len = -1;
    if (j.contains("output_len") && j["output_len"].is_number_integer()) {
      out_len = j["output_len"].get<int64_t>();
    }
    output_lens->push_back(out_len);
  }
  if (prompts->empty())
    return absl::InvalidArgumentError(absl::StrCat("--dataset: ", path, " holds no prompt"));
  return absl::OkStatus();
}

}  // namespace kvserve::loadgen
