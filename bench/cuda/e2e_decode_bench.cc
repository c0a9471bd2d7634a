// End-to-end steps of the CUDA runner (engine/cuda/cuda_model_runner.h) on
// builtin:llama3-8b (bf16, weights generated on the device):
//
//   decode   batch 64 x context 4096, block 16: 64 sequences of one token at
//            position 4096, their block tables covering 4097 tokens (distinct,
//            shuffled blocks), logits for every sequence. Timed twice: once
//            returning the fp32 logits to the host, once sampling greedily on
//            the device (sample_specs, temperature 0).
//   prefill  4 sequences x a 2048-token first chunk (position 0), logits of
//            each chunk's last token.
//
// Each is timed with the default runner and with batch_invariant = true (a
// second runner, created after the first is freed). Step() is synchronous,
// so times are wall-clock (steady_clock) medians after warm-up, and they
// include everything Step does on the host (validation, the metadata upload,
// the results copy back).
//
// Decode roofline: (streamed weight bytes + K/V bytes read) / copy
// bandwidth, K/V bytes = batch * (context + 1) * layers * 2 * kv_heads *
// head_dim * element size. The copy bandwidth (gpu_timing.h) counts bytes
// read plus bytes written; a decode step almost only reads, and pure reads
// can run somewhat faster than a copy, so the ratio to this roofline slightly
// flatters the step. Target: ratio <= 1.25 (printed, never asserted).
// Prefill is reported in TFLOP/s (matrix products + causal attention) and as
// a fraction of a cuBLAS bf16 matrix product measured in the same run.
//
// The KV pool is filled with 0.01 before timing (no NaN or denormal effects
// from uninitialised memory; prefill is not needed to time a step).
//
// Usage: kvserve_cuda_e2e_decode_bench [--quick] [--model=builtin:llama3-8b]
//          [--batch=64] [--context=4096] [--dtype=auto] [--prefill_seqs=4]
//          [--prefill_chunk=2048]
// (--model=builtin:small --batch=8 --context=512 is a fast smoke test.)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/cuda/gpu_timing.h"
#include "engine/cuda/cuda_model_runner.h"
#include "engine/model.h"
#include "engine/step_input.h"

namespace kvserve::bench {
namespace {

using engine::CudaModelRunner;
using engine::CudaRunnerOptions;
using engine::Model;
using engine::SampleSpec;
using engine::StepInput;
using engine::StepOutput;

struct Flags {
  bool quick = false;
  std::string model = "builtin:llama3-8b";
  std::string dtype = "auto";
  int batch = 64;
  int context = 4096;  // cached tokens per sequence; the decode token sits at this position
  int block_size = 16;
  int prefill_seqs = 4;
  int prefill_chunk = 2048;
};

[[noreturn]] void Fail(std::string_view what, const absl::Status& status) {
  std::fprintf(stderr, "e2e_decode_bench: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> result, std::string_view what) {
  if (!result.ok()) Fail(what, result.status());
  return std::move(*result);
}

bool ParseInt(std::string_view arg, std::string_view name, int* out) {
  if (arg.substr(0, name.size()) != name) return false;
  const std::string value(arg.substr(name.size()));
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < 1 || v > (1 << 24)) {
    std::fprintf(stderr, "e2e_decode_bench: bad value in %.*s\n", static_cast<int>(arg.size()),
                 arg.data());
    std::exit(2);
  }
  *out = static_cast<int>(v);
  return true;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick") {
      f.quick = true;
    } else if (a.substr(0, 8) == "--model=") {
      f.model = std::string(a.substr(8));
    } else if (a.substr(0, 8) == "--dtype=") {
      f.dtype = std::string(a.substr(8));
    } else if (ParseInt(a, "--batch=", &f.batch) || ParseInt(a, "--context=", &f.context) ||
               ParseInt(a, "--prefill_seqs=", &f.prefill_seqs) ||
               ParseInt(a, "--prefill_chunk=", &f.prefill_chunk)) {
    } else {
      std::fprintf(stderr,
                   "usage: kvserve_cuda_e2e_decode_bench [--quick] [--model=builtin:llama3-8b] "
                   "[--batch=64] [--context=4096] [--dtype=auto] [--prefill_seqs=4] "
                   "[--prefill_chunk=2048]\n");
      std::exit(2);
    }
  }
  return f;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The steps, built once and shared by both runners (same blocks, same tokens).
struct Workload {
  int64_t num_blocks = 0;  // pool size given to each runner
  StepInput decode_logits;
  StepInput decode_greedy;
  StepInput prefill;
};

Workload BuildWorkload(const Flags& f, int64_t vocab) {
  const int64_t decode_blocks = CeilDiv(f.context + 1, f.block_size);  // covers 0..context
  const int64_t prefill_blocks = CeilDiv(f.prefill_chunk, f.block_size);
  const int64_t used = f.batch * decode_blocks + f.prefill_seqs * prefill_blocks;
  Workload w;
  w.num_blocks = used + 1 + 16;  // one spare, plus slack
  // Distinct blocks in a shuffled order, as a long-running server's pool is.
  std::vector<int32_t> ids(w.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(20240607);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  size_t next = 0;
  auto take = [&](int64_t n) {
    std::vector<int32_t> table(ids.begin() + next, ids.begin() + next + n);
    next += n;
    return table;
  };
  for (int s = 0; s < f.batch; ++s) {
    const std::vector<int32_t> table = take(decode_blocks);
    const int32_t tok = token(rng);
    for (StepInput* in : {&w.decode_logits, &w.decode_greedy}) {
      in->AddSequence({&tok, 1}, f.context, table, f.block_size, StepInput::Logits::kLast);
    }
  }
  engine::SamplingParams greedy;
  greedy.temperature = 0.0f;
  w.decode_greedy.sample_specs.assign(
      w.decode_greedy.logits_indices.size(),
      SampleSpec{.params = greedy, .prompt_tokens = {}, .output_tokens = {}, .masked_tokens = {}});
  for (int s = 0; s < f.prefill_seqs; ++s) {
    const std::vector<int32_t> table = take(prefill_blocks);
    std::vector<int32_t> tokens(f.prefill_chunk);
    for (int32_t& t : tokens) t = token(rng);
    w.prefill.AddSequence(tokens, 0, table, f.block_size, StepInput::Logits::kLast);
  }
  return w;
}

// Median wall-clock milliseconds of a synchronous Step over `reps` runs
// after `warmup`; every status is checked.
double MedianStepMs(CudaModelRunner& runner, const StepInput& in, std::string_view what, int warmup,
                    int reps) {
  for (int i = 0; i < warmup; ++i) Check(runner.Step(in), what);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Check(runner.Step(in), what);
    const auto stop = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct ModeResult {
  double decode_logits_ms = 0;
  double decode_greedy_ms = 0;
  double prefill_ms = 0;
  std::vector<float> logits;  // the decode step's, for the cross-mode sanity line
  int64_t streamed_weight_bytes = 0;
  size_t elem_bytes = 2;
  std::string device, dtype;
};

int32_t Argmax(std::span<const float> row) {
  int32_t best = 0;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] > row[best]) best = static_cast<int32_t>(i);  // lowest id on ties
  }
  return best;
}

ModeResult RunMode(const Model& model, const Flags& f, const Workload& w, bool batch_invariant) {
  const char* mode = batch_invariant ? "batch-invariant" : "default";
  CudaRunnerOptions options;
  options.block_size = f.block_size;
  options.num_blocks = w.num_blocks;
  options.dtype = Check(engine::ParseWeightDtype(f.dtype), "--dtype");
  options.batch_invariant = batch_invariant;
  options.max_num_tokens = std::max(f.batch, f.prefill_seqs * f.prefill_chunk);
  options.max_num_seqs = std::max(f.batch, f.prefill_seqs);
  options.max_model_len = std::max({8192, f.context + 1, f.prefill_chunk});

  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CudaModelRunner> runner = Check(
      CudaModelRunner::Create(model, options), std::string("creating the runner (") + mode + ")");
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<int32_t> all(runner->num_blocks());
  std::iota(all.begin(), all.end(), 0);
  if (absl::Status s = runner->FillKvBlocks(all, 0.01f); !s.ok()) Fail("filling the KV pool", s);
  const auto t2 = std::chrono::steady_clock::now();
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf(
      "[%s] %s on %s: weights %.2f GB (streamed per decode step %.2f GB), KV pool %lld blocks = "
      "%.2f GB; created in %.1f s, KV filled in %.1f s\n",
      mode, runner->dtype_name().c_str(), runner->device_name().c_str(),
      runner->weight_bytes() / 1e9, runner->streamed_weight_bytes() / 1e9,
      static_cast<long long>(runner->num_blocks()), runner->kv_cache_bytes() / 1e9, secs(t0, t1),
      secs(t1, t2));
  std::fflush(stdout);

  ModeResult r;
  r.streamed_weight_bytes = runner->streamed_weight_bytes();
  r.elem_bytes = runner->dtype_name() == "f32" ? 4 : 2;
  r.device = runner->device_name();
  r.dtype = runner->dtype_name();
  const int64_t vocab = model.config.vocab_size;

  // One untimed run of each decode step, checked for shape and sanity.
  StepOutput logits_out = Check(runner->Step(w.decode_logits), "decode step (logits)");
  if (logits_out.logits.size() != static_cast<size_t>(f.batch * vocab)) {
    Fail("decode step (logits)", absl::InternalError("wrong number of logits returned"));
  }
  const int64_t non_finite = std::count_if(logits_out.logits.begin(), logits_out.logits.end(),
                                           [](float x) { return !std::isfinite(x); });
  StepOutput greedy_out = Check(runner->Step(w.decode_greedy), "decode step (greedy)");
  if (greedy_out.samples.size() != static_cast<size_t>(f.batch)) {
    Fail("decode step (greedy)", absl::InternalError("wrong number of samples returned"));
  }
  int agree = 0;
  for (int s = 0; s < f.batch; ++s) {
    const int32_t t = greedy_out.samples[s].token;
    if (t < 0 || t >= vocab) {
      Fail("decode step (greedy)", absl::InternalError("token out of range"));
    }
    agree += t == Argmax(logits_out.row(s));
  }
  std::printf("[%s] sanity: %lld non-finite logits; greedy token == argmax(logits) for %d/%d\n",
              mode, static_cast<long long>(non_finite), agree, f.batch);
  if (non_finite > 0) {
    std::printf("[%s] WARNING: the decode step returned non-finite logits\n", mode);
  }
  r.logits = std::move(logits_out.logits);

  const int warm = f.quick ? 1 : 3, reps = f.quick ? 5 : 20;
  r.decode_logits_ms = MedianStepMs(*runner, w.decode_logits, "decode step (logits)", warm, reps);
  r.decode_greedy_ms = MedianStepMs(*runner, w.decode_greedy, "decode step (greedy)", warm, reps);
  r.prefill_ms =
      MedianStepMs(*runner, w.prefill, "prefill step", f.quick ? 1 : 2, f.quick ? 3 : 10);
  std::printf("[%s] decode -> logits %.3f ms, decode -> greedy %.3f ms, prefill %.3f ms\n", mode,
              r.decode_logits_ms, r.decode_greedy_ms, r.prefill_ms);
  std::fflush(stdout);
  return r;  // the runner is freed here, before the next mode's is created
}

// FLOPs of the prefill step: every matrix product (lm_head on the logits rows
// only) plus causal attention (QK^T and PV over the (query, key) pairs).
double PrefillFlops(const engine::ModelConfig& c, const Flags& f) {
  const double n = static_cast<double>(f.prefill_seqs) * f.prefill_chunk;
  const double q_width = double(c.num_heads) * c.head_dim;
  const double kv_width = double(c.num_kv_heads) * c.head_dim;
  const double per_token_layer =
      c.hidden_size * (q_width + 2 * kv_width) + q_width * c.hidden_size +
      c.hidden_size * 2.0 * c.intermediate_size + double(c.intermediate_size) * c.hidden_size;
  const double linear = 2.0 * n * c.num_layers * per_token_layer +
                        2.0 * f.prefill_seqs * double(c.hidden_size) * c.vocab_size;
  const double pairs = f.prefill_seqs * double(f.prefill_chunk) * (f.prefill_chunk + 1) / 2.0;
  const double attention = 4.0 * q_width * pairs * c.num_layers;
  return linear + attention;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  std::string why;
  if (!engine::CudaDeviceAvailable(&why)) {
    std::fprintf(stderr, "e2e_decode_bench: no CUDA device: %s\n", why.c_str());
    return 1;
  }
  std::unique_ptr<Model> model =
      Check(engine::LoadModel(f.model, {.host_weights = false}), "loading " + f.model);
  const engine::ModelConfig& c = model->config;

  // Ceilings first, while the device is empty.
  cudaStream_t stream = nullptr;
  KVSERVE_BENCH_CUDA(cudaStreamCreate(&stream));
  const double copy_bw = MeasureCopyBandwidth(stream);
  const double gemm_flops = MeasureBf16MatmulFlops(stream);
  KVSERVE_BENCH_CUDA(cudaStreamDestroy(stream));

  const Workload w = BuildWorkload(f, c.vocab_size);
  std::printf(
      "e2e steps of %s (%lld layers, hidden %lld, %lld/%lld heads, head dim %lld, vocab %lld), "
      "block size %d\n",
      f.model.c_str(), static_cast<long long>(c.num_layers), static_cast<long long>(c.hidden_size),
      static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
      static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size), f.block_size);
  std::printf(
      "ceilings: device copy bandwidth %.1f GB/s (bytes read + written; a decode step only reads, "
      "and pure reads can run a little faster, so the decode roofline flatters the step slightly); "
      "cuBLAS bf16 GEMM %.1f TFLOP/s\n",
      copy_bw / 1e9, gemm_flops / 1e12);
  std::fflush(stdout);

  const ModeResult def = RunMode(*model, f, w, /*batch_invariant=*/false);
  const double kv_bytes = static_cast<double>(f.batch) * (f.context + 1) * c.num_layers * 2.0 *
                          c.num_kv_heads * c.head_dim * static_cast<double>(def.elem_bytes);
  const double decode_bytes = static_cast<double>(def.streamed_weight_bytes) + kv_bytes;
  const double roofline_ms = decode_bytes / copy_bw * 1e3;
  const double prefill_flops = PrefillFlops(c, f);
  const bool bf16 = def.dtype == "bf16";
  // Headline lines (bench/cuda/run_on_gpu.sh greps "^RESULT"), printed as
  // soon as they are known: a run cut short still reports the default mode.
  std::printf("decode step: weights %.2f GB + K/V read %.2f GB = %.2f GB; roofline %.3f ms\n",
              def.streamed_weight_bytes / 1e9, kv_bytes / 1e9, decode_bytes / 1e9, roofline_ms);
  std::printf("RESULT e2e decode/roofline (default, logits) = %.3f (target <= 1.25)\n",
              def.decode_logits_ms / roofline_ms);
  std::printf("RESULT e2e decode/roofline (default, greedy) = %.3f (target <= 1.25)\n",
              def.decode_greedy_ms / roofline_ms);
  std::fflush(stdout);

  const ModeResult inv = RunMode(*model, f, w, /*batch_invariant=*/true);
  std::printf("RESULT e2e batch-invariant/default decode (logits) = %.3f\n",
              inv.decode_logits_ms / def.decode_logits_ms);
  std::printf("RESULT e2e batch-invariant/default decode (greedy) = %.3f\n",
              inv.decode_greedy_ms / def.decode_greedy_ms);
  std::printf("RESULT e2e batch-invariant/default prefill = %.3f\n",
              inv.prefill_ms / def.prefill_ms);

  // Cross-mode sanity: the two modes compute the same function by different
  // kernels; their logits should agree to within the dtype's rounding.
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < def.logits.size() && i < inv.logits.size(); ++i) {
    max_diff = std::max(max_diff, double{std::fabs(def.logits[i] - inv.logits[i])});
    max_abs = std::max(max_abs, double{std::fabs(def.logits[i])});
  }

  std::printf("\ndefault vs batch-invariant decode logits: max |diff| %.3g (max |logit| %.3g)\n\n",
              max_diff, max_abs);
  std::printf("%-34s %-16s %10s %12s %8s\n", "step", "mode", "ms", "roofline ms", "ratio");
  char decode_name[64], prefill_name[64];
  std::snprintf(decode_name, sizeof(decode_name), "decode %dx%d", f.batch, f.context);
  std::snprintf(prefill_name, sizeof(prefill_name), "prefill %dx%d", f.prefill_seqs,
                f.prefill_chunk);
  for (const auto* m : {&def, &inv}) {
    const char* mode = m == &def ? "default" : "batch-invariant";
    std::printf("%-34s %-16s %10.3f %12.3f %8.3f\n",
                (std::string(decode_name) + " -> logits").c_str(), mode, m->decode_logits_ms,
                roofline_ms, m->decode_logits_ms / roofline_ms);
    std::printf("%-34s %-16s %10.3f %12.3f %8.3f\n",
                (std::string(decode_name) + " -> greedy").c_str(), mode, m->decode_greedy_ms,
                roofline_ms, m->decode_greedy_ms / roofline_ms);
  }
  std::printf("\n%-34s %-16s %10s %12s %12s\n", "step", "mode", "ms", "TFLOP/s", "of cuBLAS");
  for (const auto* m : {&def, &inv}) {
    const double flops = prefill_flops / (m->prefill_ms * 1e-3);
    char share[32] = "n/a (not bf16)";
    if (bf16) std::snprintf(share, sizeof(share), "%.0f%%", 100 * flops / gemm_flops);
    std::printf("%-34s %-16s %10.3f %12.1f %12s\n", prefill_name,
                m == &def ? "default" : "batch-invariant", m->prefill_ms, flops / 1e12, share);
  }
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) { return kvserve::bench::Main(argc, argv); }
