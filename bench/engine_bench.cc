// Engine benchmark on builtin:small (~106M parameters, SmolLM-135M shape):
// prefill and decode tokens/s at batch 1, 8 and 32, with batch-1 decode
// expressed as achieved bytes/s over the copy bandwidth this program
// measures. Prints a report; asserts nothing.
//
//   kvserve_engine_bench [--quick]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/roofline.h"
#include "engine/model.h"
#include "engine/model_runner.h"

namespace {

using kvserve::engine::ModelRunner;
using kvserve::engine::StepInput;
using Clock = std::chrono::steady_clock;

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
  int32_t computed = 0;
};

// Runs `steps` decode steps over all sequences; returns seconds per step.
double DecodeSteps(ModelRunner& runner, std::vector<Seq>& seqs, int steps) {
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    StepInput in;
    for (Seq& q : seqs) {
      q.tokens.push_back((q.tokens.back() * 31 + 7) % 256);
      in.AddSequence(std::span(q.tokens).subspan(q.computed, 1), q.computed, q.table,
                     static_cast<int32_t>(runner.block_size()), StepInput::Logits::kLast);
      ++q.computed;
    }
    if (!runner.Step(in).ok()) std::abort();
  }
  return kvserve::bench::Seconds(start) / steps;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  auto& pool = kvserve::kernels::ThreadPool::Default();
  auto model = kvserve::engine::LoadModel("builtin:small");
  if (!model.ok()) return 1;
  const auto& c = (*model)->config;
  // Measured before and after the model runs (best of both): on a shared
  // machine a single measurement can land in a noisy moment.
  double copy_bw = kvserve::bench::CopyBytesPerSecond(pool.num_threads(), size_t{512} << 20);
  std::printf("builtin:small  layers=%lld hidden=%lld threads=%d\n",
              static_cast<long long>(c.num_layers), static_cast<long long>(c.hidden_size),
              pool.num_threads());
  std::printf("copy bandwidth (measured, read + write as STREAM Copy): %.2f GB/s\n\n",
              copy_bw / 1e9);

  constexpr int32_t kBlockSize = 16;
  constexpr int32_t kPromptLen = 128;
  const int decode_steps = quick ? 4 : 16;

  // Prefill: one 512-token prompt in one step, and 8 prompts of 128 in one step.
  {
    ModelRunner runner(**model, {.num_blocks = 80, .block_size = kBlockSize});
    std::vector<int32_t> prompt(512), table;
    for (int i = 0; i < 512; ++i) prompt[i] = (i * 37 + 11) % 256;
    for (int b = 1; b < 80; ++b) table.push_back(b);
    StepInput in;
    in.AddSequence(prompt, 0, table, kBlockSize, StepInput::Logits::kLast);
    (void)runner.Step(in);  // warm-up
    const auto start = Clock::now();
    const int reps = quick ? 1 : 3;
    for (int r = 0; r < reps; ++r) (void)runner.Step(in);
    std::printf("prefill 1 x 512 tokens:   %8.1f tokens/s\n",
                512.0 * reps / kvserve::bench::Seconds(start));
  }

  double batch1_tps = 0;
  for (int batch : {1, 8, 32}) {
    const int32_t max_len = kPromptLen + decode_steps + 2;
    const int32_t blocks_per_seq = (max_len + kBlockSize - 1) / kBlockSize;
    ModelRunner runner(**model,
                       {.num_blocks = 1 + batch * blocks_per_seq, .block_size = kBlockSize});
    std::vector<Seq> seqs(batch);
    StepInput prefill;
    for (int i = 0; i < batch; ++i) {
      for (int t = 0; t < kPromptLen; ++t) seqs[i].tokens.push_back((i * 131 + t * 17) % 256);
      for (int b = 0; b < blocks_per_seq; ++b) seqs[i].table.push_back(1 + i * blocks_per_seq + b);
      prefill.AddSequence(seqs[i].tokens, 0, seqs[i].table, kBlockSize, StepInput::Logits::kLast);
      seqs[i].computed = kPromptLen;
    }
    const auto start = Clock::now();
    if (!runner.Step(prefill).ok()) return 1;
    const double prefill_tps = batch * kPromptLen / kvserve::bench::Seconds(start);
    DecodeSteps(runner, seqs, 1);  // warm-up
    const double step_s = DecodeSteps(runner, seqs, decode_steps);
    const double tps = batch / step_s;
    if (batch == 1) batch1_tps = tps;
    std::printf(
        "batch %2d: prefill %d x %d: %8.1f tokens/s | decode: %7.1f tokens/s (%.2f ms/step)", batch,
        batch, kPromptLen, prefill_tps, tps, step_s * 1e3);
    if (batch == 1) {
      copy_bw = std::max(copy_bw,
                         kvserve::bench::CopyBytesPerSecond(pool.num_threads(), size_t{512} << 20));
      const double context = kPromptLen + 1 + decode_steps / 2.0;
      const double kv_bytes = 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * 4 * context;
      const double bytes =
          static_cast<double>((*model)->weights.StreamedBytesPerToken()) + kv_bytes;
      std::printf(
          "\n          bytes/step %.1f MB, %.2f GB/s = %.0f%% of copy bandwidth (%.2f GB/s)",
          bytes / 1e6, bytes / step_s / 1e9, 100.0 * bytes / step_s / copy_bw, copy_bw / 1e9);
    } else {
      std::printf("  = %.2fx batch 1", tps / batch1_tps);
    }
    std::printf("\n");
  }
  return 0;
}
