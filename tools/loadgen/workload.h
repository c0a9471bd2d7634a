// Workload generation for kvserve-loadgen: what each request asks for
// (prompt, output length, shared-prefix group) and when it is sent.
//
// Everything here is a pure function of (options, seed): the same options and
// seed give the same prompts, lengths and arrival times on every machine. The
// random numbers come from std::mt19937_64 (its output sequence is fixed by
// the C++ standard) turned into draws by this file's own code, never by the
// std:: distributions (whose algorithms differ between standard libraries).
#ifndef KVSERVE_TOOLS_LOADGEN_WORKLOAD_H_
#define KVSERVE_TOOLS_LOADGEN_WORKLOAD_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::loadgen {

// How a length (prompt or output) is drawn. Every draw is rounded to the
// nearest integer and clamped to [1, +inf); WorkloadGenerator then clamps
// prompt + output to the model's max length.
enum class LengthDist { kFixed, kUniform, kNormal, kLognormal };

absl::StatusOr<LengthDist> ParseLengthDist(const std::string& name);
const char* LengthDistName(LengthDist dist);

struct LengthSpec {
  LengthDist dist = LengthDist::kFixed;
  double mean = 128;  // fixed: the value; uniform: the centre; normal / lognormal: the mean
  double stddev = 0;  // normal / lognormal: the standard deviation of the length itself
  double range = 0;   // uniform: lengths in [mean - range, mean + range] (then clamped to >= 1)
};

// Deterministic random draws (see the file comment).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Next() { return engine_(); }
  // Uniform in [0, 1), 53 random bits.
  double Uniform01() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (inclusive), unbiased (rejection sampling).
  int64_t UniformInt(int64_t lo, int64_t hi);
  // Standard normal (Box-Muller; one value per call, the second is dropped).
  double Normal();
  // Exponential with the given rate (mean 1 / rate).
  double Exponential(double rate);

 private:
  std::mt19937_64 engine_;
};

// One draw from `spec`, rounded and clamped to >= 1.
int64_t DrawLength(const LengthSpec& spec, Rng& rng);

struct WorkloadOptions {
  int64_t num_requests = 100;
  uint64_t seed = 0;
  // Token-id prompts (no dataset): the length of each request's own random
  // tokens. With a shared prefix, the prompt is prefix + these tokens.
  LengthSpec prompt_len{LengthDist::kFixed, 128, 0, 0};
  LengthSpec output_len{LengthDist::kFixed, 128, 0, 0};
  // Shared-prefix mode (shared_prefix_len > 0): request i belongs to group
  // i % num_prefix_groups, and every request of a group starts with the same
  // random shared_prefix_len tokens.
  int64_t shared_prefix_len = 0;
  int64_t num_prefix_groups = 1;
  // Model facts (from GetModelInfo). Token ids are drawn from [0, vocab_size)
  // minus `excluded_token_ids` (the EOS ids: a prompt must not end early by
  // looking like it already did).
  int64_t vocab_size = 0;
  std::vector<int32_t> excluded_token_ids;
  int64_t max_model_len = 0;  // 0: no limit
  // Text prompts from a dataset (non-empty: used instead of token ids). Request
  // i uses dataset_prompts[perm[i % n]] with perm a seeded shuffle.
  std::vector<std::string> dataset_prompts;
  // Per-prompt output lengths from the dataset (-1: draw from output_len).
  std::vector<int64_t> dataset_output_lens;
};

struct RequestSpec {
  int64_t index = 0;
  int64_t group = -1;               // shared-prefix group; -1 without one
  std::vector<int32_t> prompt_ids;  // token-id prompt (empty for a text prompt)
  std::string prompt_text;          // text prompt (dataset)
  int64_t max_tokens = 0;           // output length asked for
  uint64_t sampling_seed = 0;
};

// Builds the requests. InvalidArgument for inconsistent options (no
// vocabulary, a shared prefix that leaves no room for output, ...).
// Invariants of the result: size == num_requests; index == position; every
// token id is in [0, vocab_size) and not excluded; when max_model_len > 0,
// prompt length + max_tokens <= max_model_len (the request's own part and
// its output are shortened, never the shared prefix).
absl::StatusOr<std::vector<RequestSpec>> GenerateWorkload(const WorkloadOptions& options);

// Send times in seconds from the start of the phase: a Poisson process of
// `rate` requests/s (exponential gaps; the first request waits one gap too),
// or all 0 when rate is +inf. Non-decreasing; same seed, same times.
std::vector<double> PoissonArrivals(int64_t n, double rate, uint64_t seed);

// Reads a JSONL file: one object per non-empty line with a string "prompt"
// and optionally an integer "output_len". Lines without "prompt" are an error.
absl::Status ReadDataset(const std::string& path, std::vector<std::string>* prompts,
                         std::vector<int64_t>* output_lens);

}  // namespace kvserve::loadgen

#endif  // KVSERVE_TOOLS_LOADGEN_WORKLOAD_H_
