// Test helpers for the scheduler: a fake model whose outputs depend on the
// K/V cache contents, and request/collection helpers.
//
// HashModelRunner ("hash model"): the "K/V" of the token at position p of a
// sequence is a fingerprint chained through the cache itself,
//
//   kv[slot(p)] = Mix(kv[slot(p - 1)] (read through the block table), token, p)
//
// and the logits of a token are pseudo-random numbers derived from its
// fingerprint. So a sequence's logits are a pure function of its tokens if
// and only if the cache holds exactly its own prefix: a block reused or
// overwritten under a request, a wrong prefix-cache hit, a lost or repeated
// token after preemption all change the output (compared against
// HashModelReference, which runs the same chain without any cache). Reading
// a slot never written is an error. Thousands of steps per second.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/step_input.h"
#include "scheduler/engine_core.h"
#include "scheduler/output_stream.h"
#include "scheduler/request.h"

namespace kvserve::scheduler::testing {

inline uint64_t Mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline constexpr uint64_t kHashModelRoot = 0x1234567ULL;

inline uint64_t HashModelFingerprint(uint64_t prev, int32_t token, int32_t pos) {
  return Mix64(prev ^ (static_cast<uint64_t>(token) * 0x9e3779b97f4a7c15ULL) ^
               (static_cast<uint64_t>(pos) << 40)) |
         1;  // never 0 (0 marks an unwritten slot)
}

inline void HashModelLogits(uint64_t fp, int32_t vocab, float* row) {
  for (int32_t j = 0; j < vocab; ++j) {
    row[j] = static_cast<float>(Mix64(fp ^ (0x51ed27ULL * (j + 1))) >> 40) / float(1 << 24) * 8.f;
  }
}

class HashModelRunner final : public StepRunner {
 public:
  HashModelRunner(int32_t num_blocks, int32_t block_size, int32_t vocab)
      : block_size_(block_size), vocab_(vocab), kv_(static_cast<size_t>(num_blocks) * block_size) {}

  absl::StatusOr<engine::StepOutput> Step(const engine::StepInput& in) override {
    ++num_steps;
    engine::StepOutput out;
    out.vocab_size = vocab_;
    std::vector<uint64_t> fps(in.token_ids.size());
    for (int32_t s = 0; s < in.num_seqs(); ++s) {
      std::span<const int32_t> table(in.block_ids.data() + in.block_table_start[s],
                                     in.block_table_start[s + 1] - in.block_table_start[s]);
      for (int32_t i = in.query_start[s]; i < in.query_start[s + 1]; ++i) {
        const int32_t p = in.positions[i];
        if (p / block_size_ >= static_cast<int32_t>(table.size())) {
          return absl::InternalError("position past the block table");
        }
        const int64_t slot = int64_t{table[p / block_size_]} * block_size_ + p % block_size_;
        if (slot != in.slot_mapping[i]) return absl::InternalError("slot mapping mismatch");
        uint64_t prev = kHashModelRoot;
        if (p > 0) {
          const int32_t q = p - 1;
          prev = kv_[static_cast<size_t>(table[q / block_size_]) * block_size_ + q % block_size_];
          if (prev == 0) {
            return absl::InternalError(absl::StrCat("seq ", s, " reads unwritten position ", q));
          }
        }
        fps[i] = HashModelFingerprint(prev, in.token_ids[i], p);
        kv_[slot] = fps[i];
      }
    }
    out.logits.resize(in.logits_indices.size() * static_cast<size_t>(vocab_));
    for (size_t k = 0; k < in.logits_indices.size(); ++k) {
      HashModelLogits(fps[in.logits_indices[k]], vocab_, out.logits.data() + k * vocab_);
    }
    tokens_computed += in.num_tokens();
    return out;
  }

  int64_t num_steps = 0;
  int64_t tokens_computed = 0;

 private:
  int32_t block_size_;
  int32_t vocab_;
  std::vector<uint64_t> kv_;
};

// What the hash model generates for `params`, greedily or with the sampler,
// without any cache: the oracle for HashModelRunner runs. Stops at max_tokens
// or an eos id (no min_tokens / stop strings here).
inline std::vector<int32_t> HashModelReference(const RequestParams& params, int32_t vocab,
                                               std::span<const int32_t> eos_ids) {
  std::vector<int32_t> tokens = params.prompt_tokens;
  std::vector<int32_t> output;
  std::vector<float> row(vocab);
  uint64_t fp = kHashModelRoot;
  int32_t pos = 0;
  for (int32_t t : tokens) fp = HashModelFingerprint(fp, t, pos++);
  while (static_cast<int32_t>(output.size()) < params.stop.max_tokens) {
    HashModelLogits(fp, vocab, row.data());
    const int32_t tok = engine::Sample(row, params.sampling, params.prompt_tokens, output).token;
    output.push_back(tok);
    bool eos = false;
    for (int32_t e : eos_ids) eos |= (!params.stop.ignore_eos && e == tok);
    if (eos) break;
    fp = HashModelFingerprint(fp, tok, pos++);
  }
  return output;
}

// What the hash model's prefill gives for prompt logprobs: every prompt
// token after the first scored by the logits of the position before it.
inline std::vector<TokenLogprobs> HashModelPromptLogprobs(std::span<const int32_t> prompt,
                                                          int32_t vocab, int32_t num_top) {
  std::vector<TokenLogprobs> scored;
  std::vector<float> row(vocab);
  uint64_t fp = kHashModelRoot;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    fp = HashModelFingerprint(fp, prompt[p], static_cast<int32_t>(p));
    HashModelLogits(fp, vocab, row.data());
    const engine::TokenScore s = engine::ScoreToken(row, prompt[p + 1], num_top);
    scored.push_back(TokenLogprobs{
        .token = s.token, .logprob = s.logprob, .top = s.top_logprobs, .rank = s.rank});
  }
  return scored;
}

// Collects every request's outputs (for synchronous EngineCore runs, where
// the callback runs on the test's own thread).
struct Collector {
  struct Result {
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<TokenLogprobs> prompt_logprobs;
    int num_prompt_logprob_messages = 0;  // messages that carried some
    int num_messages = 0;
    bool finished = false;
    RequestOutput final;
  };
  std::map<RequestId, Result> results;

  OutputCallback For(RequestId id) {
    return [this, id](RequestOutput&& out) {
      Result& r = results[id];
      EXPECT_FALSE(r.finished) << "output after the final message, request " << id;
      EXPECT_EQ(out.request_id, id);
      ++r.num_messages;
      r.tokens.insert(r.tokens.end(), out.token_ids.begin(), out.token_ids.end());
      r.text += out.text;
      if (!out.prompt_logprobs.empty()) ++r.num_prompt_logprob_messages;
      for (TokenLogprobs& lp : out.prompt_logprobs) r.prompt_logprobs.push_back(lp);
      if (out.finished) {
        r.finished = true;
        r.final = std::move(out);
      }
    };
  }
};

// Sampling for request i of a varied set: greedy or temperature 0.9, and
// top-k, top-p, min-p and the three penalties on by turns; seed base + i.
inline engine::SamplingParams VariedSampling(int i, uint64_t seed_base) {
  engine::SamplingParams s;
  s.num_logprobs = i % 4;
  s.temperature = i % 4 == 0 ? 0.0f : 0.9f;
  s.top_k = i % 3 == 1 ? 20 : 0;
  s.top_p = i % 5 == 2 ? 0.8f : 1.0f;
  s.min_p = i % 6 == 3 ? 0.05f : 0.0f;
  s.repetition_penalty = i % 4 == 1 ? 1.3f : 1.0f;
  s.frequency_penalty = i % 4 == 2 ? 0.5f : 0.0f;
  s.presence_penalty = i % 4 == 3 ? -0.4f : 0.0f;
  s.seed = seed_base + i;
  return s;
}

inline std::vector<int32_t> RandomPrompt(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

inline RequestParams Greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  RequestParams p;
  p.prompt_tokens = std::move(prompt);
  p.sampling.temperature = 0.0f;
  p.stop.max_tokens = max_tokens;
  return p;
}

}  // namespace kvserve::scheduler::testing
