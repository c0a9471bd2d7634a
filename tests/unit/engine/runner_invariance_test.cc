// The engine's exactness contract (docs/architecture.md, batch invariance), checked bit
// for bit through ModelRunner::Step on builtin:tiny (GQA, 2 layers) and the
// tiny model of every other family (q/k norms, partial rotary + longrope,
// soft-capping, sliding windows of 24 / 40 that the sequences cross,
// alternating sliding/global layers), with shuffled block tables and NaN in
// every slot a sequence does not own; for every KV cache format (a row's
// encoding depends on that row alone, so each holds bit for bit); and for bf16,
// fp16 and int8 weights (a fixed reduction order per output: kernels/cpu/gemm.h).
#include <random>
#include <string>
#include <tuple>

#include "tests/unit/engine/engine_test_util.h"

namespace kvserve::engine::testing {
namespace {

class RunnerInvarianceTest
    : public ::testing::TestWithParam<std::tuple<std::string, int64_t, KvCacheDtype>> {
 protected:
  int64_t block_size() const { return std::get<1>(GetParam()); }
  KvCacheDtype dtype() const { return std::get<2>(GetParam()); }
  const Model& model() const { return BuiltinModel(std::get<0>(GetParam())); }
  int vocab() const { return static_cast<int>(model().config.vocab_size); }
};

// Logits of every prompt token, computed in chunks of `chunk` tokens.
std::vector<std::vector<float>> ChunkedPrefill(Harness& h, const std::vector<int32_t>& prompt,
                                               int32_t chunk) {
  Sequence seq{.tokens = prompt};
  std::vector<std::vector<float>> rows;
  while (seq.num_computed < static_cast<int32_t>(prompt.size())) {
    StepInput step;
    const int32_t count =
        std::min<int32_t>(chunk, static_cast<int32_t>(prompt.size()) - seq.num_computed);
    h.Schedule(step, seq, count, StepInput::Logits::kAll);
    StepOutput out = h.Run(step);
    for (int32_t i = 0; i < count; ++i) rows.push_back(Row(out, i));
  }
  h.Release(seq);
  return rows;
}

// (1) Decoding with the cache equals recomputing the whole sequence.
TEST_P(RunnerInvarianceTest, DecodeWithCacheEqualsFullRecompute) {
  Harness cached(model(), block_size(), 160, 1, true, dtype());
  Harness fresh(model(), block_size(), 160, 2, true, dtype());
  Sequence seq{.tokens = RandomTokens(21, vocab(), 7)};
  StepInput prefill;
  cached.Schedule(prefill, seq, 21, StepInput::Logits::kLast);
  StepOutput out = cached.Run(prefill);
  for (int step = 0; step < 50; ++step) {  // crosses key tiles (32) and many blocks
    const std::vector<float> cached_row = Row(out, 0);
    Sequence whole{.tokens = seq.tokens};
    StepInput recompute;
    fresh.Schedule(recompute, whole, static_cast<int32_t>(whole.tokens.size()),
                   StepInput::Logits::kLast);
    ASSERT_TRUE(BitEqual(cached_row, Row(fresh.Run(recompute), 0))) << "decode step " << step;
    fresh.Release(whole);

    seq.tokens.push_back(Argmax(cached_row));
    StepInput decode;
    cached.Schedule(decode, seq, 1, StepInput::Logits::kLast);
    out = cached.Run(decode);
  }
}

// (2) Chunked prefill with chunks of 1, 7, 64 and the whole prompt.
TEST_P(RunnerInvarianceTest, ChunkedPrefillIsBitIdentical) {
  const std::vector<int32_t> prompt = RandomTokens(97, vocab(), 11);
  Harness h(model(), block_size(), 160, 3, true, dtype());
  const auto whole = ChunkedPrefill(h, prompt, 97);
  ASSERT_EQ(whole.size(), 97u);
  for (int32_t chunk : {1, 7, 64}) {
    const auto chunked = ChunkedPrefill(h, prompt, chunk);
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_TRUE(BitEqual(whole[i], chunked[i])) << "chunk " << chunk << " token " << i;
    }
  }
}

// (3) A sequence's logits alone equal its logits inside a batch of 16 other
// sequences of random lengths at random stages (prefill chunks and decodes).
TEST_P(RunnerInvarianceTest, BatchInvariance) {
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = RandomTokens(54, vocab(), 13);
  constexpr int kChunk = 13, kDecodeSteps = 12;

  // Alone.
  Harness alone_h(model(), block_size(), 200, 4, true, dtype());
  Sequence alone{.tokens = prompt};
  std::vector<std::vector<float>> alone_rows;
  for (int step = 0; alone_rows.size() < kDecodeSteps + 5; ++step) {
    StepInput in;
    const int32_t remaining = static_cast<int32_t>(alone.tokens.size()) - alone.num_computed;
    alone_h.Schedule(in, alone, std::min(kChunk, remaining), StepInput::Logits::kLast);
    alone_rows.push_back(Row(alone_h.Run(in), 0));
    if (alone.num_computed == static_cast<int32_t>(alone.tokens.size())) {
      alone.tokens.push_back(Argmax(alone_rows.back()));
    }
  }

  // In a batch: the target is placed at a random index among 16 others.
  Harness batch_h(model(), block_size(), 2000, 6, true, dtype());
  Sequence target{.tokens = prompt};
  std::vector<Sequence> others(16);
  std::uniform_int_distribution<int> len(1, 120);
  for (size_t i = 0; i < others.size(); ++i) {
    others[i].tokens = RandomTokens(len(rng), vocab(), 100 + i);
    // Some others are already mid-sequence (decode-only from the start).
    if (i % 3 == 0) {
      StepInput warm;
      batch_h.Schedule(warm, others[i], static_cast<int32_t>(others[i].tokens.size()),
                       StepInput::Logits::kNone);
      batch_h.Run(warm);
      others[i].tokens.push_back(static_cast<int32_t>(i));
    }
  }
  for (size_t row = 0; row < alone_rows.size(); ++row) {
    StepInput in;
    const int target_index = std::uniform_int_distribution<int>(0, 16)(rng);
    int logits_row = -1, rows = 0;
    for (int slot = 0; slot <= 16; ++slot) {
      if (slot == target_index) {
        const int32_t remaining = static_cast<int32_t>(target.tokens.size()) - target.num_computed;
        batch_h.Schedule(in, target, std::min(kChunk, remaining), StepInput::Logits::kLast);
        logits_row = rows++;
        continue;
      }
      Sequence& o = others[slot < target_index ? slot : slot - 1];
      int32_t remaining = static_cast<int32_t>(o.tokens.size()) - o.num_computed;
      if (remaining == 0) {
        o.tokens.push_back(static_cast<int32_t>(rng() % vocab()));
        remaining = 1;
      }
      const int32_t count = std::uniform_int_distribution<int32_t>(1, remaining)(rng);
      batch_h.Schedule(in, o, count, StepInput::Logits::kLast);
      ++rows;
    }
    StepOutput out = batch_h.Run(in);
    ASSERT_EQ(out.logits.size(), static_cast<size_t>(rows * vocab()));
    const std::vector<float> batched = Row(out, logits_row);
    ASSERT_TRUE(BitEqual(alone_rows[row], batched)) << "step " << row;
    if (target.num_computed == static_cast<int32_t>(target.tokens.size())) {
      target.tokens.push_back(Argmax(batched));
    }
  }
}

// (4) Shuffled, non-contiguous block tables with NaN everywhere else give the
// same logits as contiguous tables over a clean cache.
TEST_P(RunnerInvarianceTest, NonContiguousPoisonedBlocksChangeNothing) {
  const std::vector<int32_t> prompt = RandomTokens(70, vocab(), 17);
  Harness contiguous(model(), block_size(), 120, 0, /*shuffle_and_poison=*/false, dtype());
  Harness shuffled(model(), block_size(), 120, 9, /*shuffle_and_poison=*/true, dtype());
  const auto a = ChunkedPrefill(contiguous, prompt, 16);
  const auto b = ChunkedPrefill(shuffled, prompt, 23);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(BitEqual(a[i], b[i])) << "token " << i;
}

INSTANTIATE_TEST_SUITE_P(ModelsAndBlockSizes, RunnerInvarianceTest,
                         ::testing::Combine(::testing::ValuesIn(TinyModelsOfEveryFamily()),
                                            ::testing::Values(1, 8, 16),
                                            ::testing::ValuesIn(kernels::kAllKvDtypes)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name + "_block" + std::to_string(std::get<1>(info.param)) +
                                  KvDtypeSuffix(std::get<2>(info.param));
                         });

// 16-bit and int8 weights (engine_test_util.h), with the fp32 KV cache.
INSTANTIATE_TEST_SUITE_P(WeightFormats, RunnerInvarianceTest,
                         ::testing::Combine(::testing::ValuesIn(TinyModelsInWeightFormats()),
                                            ::testing::Values(1, 16),
                                            ::testing::Values(KvCacheDtype::kFloat32)),
                         [](const auto& info) {
                           return TestNameOf(std::get<0>(info.param)) + "_block" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace kvserve::engine::testing
