// Weight-format benchmark: batch-1 decode and prefill tokens/s, weight bytes
// per token against the copy and the read bandwidth measured in the same run
// (bench/roofline.h: a decode only reads, and the memory may feed readers
// less than a copy's reads plus writes), and memory
// (RSS after load, peak RSS of the load) for each CPU weight format. The
// read roofline is taken just before and just after the timed decode, and
// decode is reported against their mean:
//   float32   the fp32 checkpoint widened (kvserve before 16-bit weights)
//   bfloat16  a bf16 checkpoint kept in 16 bits (--dtype=auto)
//   float16   an fp16 checkpoint kept in 16 bits
//   int8      the fp32 checkpoint quantized at load (--quantization=int8)
//   w8a8      the same int8 weights, activations quantized per token
//             (--quantization=w8a8: int8 dot products)
//   bf16dot   the bf16 checkpoint under --matmul_precision=bfloat16 (bf16 dot
//             products)
// Each (round, format) runs in its own forked process, so RSS is that
// format's alone; rounds interleave the formats (same noise for all) and the
// median round is reported. Prints a table; asserts nothing.
//
//   kvserve_weights_bench [--model=small-49k] [--rounds=3] [--decode=64] [--prompt=128]
//                         [--formats=float32,bfloat16,float16,int8,w8a8]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/roofline.h"
#include "engine/model.h"
#include "engine/model_runner.h"

namespace {

using kvserve::engine::DType;
using kvserve::engine::ModelRunner;
using kvserve::engine::StepInput;
using Clock = std::chrono::steady_clock;

struct Format {
  const char* name;
  DType checkpoint;
  kvserve::engine::WeightOptions weights;
};

const Format kFormats[] = {
    {"float32", DType::kF32, {.dtype = kvserve::engine::WeightDtype::kFloat32}},
    {"bfloat16", DType::kBF16, {}},
    {"float16", DType::kF16, {}},
    {"int8", DType::kF32, {.quantization = kvserve::engine::Quantization::kInt8}},
    {"w8a8", DType::kF32, {.quantization = kvserve::engine::Quantization::kW8A8}},
    {"bf16dot", DType::kBF16, {.matmul_precision = kvserve::engine::MatmulPrecision::kBfloat16}},
};

struct Result {  // written by the child through a pipe
  // read_bw_before / read_bw_after: the read roofline just before and just after
  // the timed decode (this VM's memory moves by up to 2x within seconds, so
  // one figure taken after the decode can miss what the decode had).
  double decode_tps, prefill_tps, bytes_per_token, copy_bw, read_bw_before, read_bw_after, rss_mb,
      peak_rss_mb, weights_mb;
};

// VmRSS / VmHWM of this process, MiB.
double StatusMb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::strlen(key))) / 1024.0;
  }
  return 0;
}

Result Measure(const std::string& model_name, const Format& f, int prompt_len, int decode) {
  Result r{};
  auto& pool = kvserve::kernels::ThreadPool::Default();
  auto model = kvserve::engine::LoadBuiltinModel(model_name, f.checkpoint, {.weights = f.weights});
  if (!model.ok()) std::abort();
  r.rss_mb = StatusMb("VmRSS:");
  r.peak_rss_mb = StatusMb("VmHWM:");
  r.weights_mb = static_cast<double>((*model)->weights.TotalBytes()) / (1 << 20);
  const auto& c = (*model)->config;
  constexpr int32_t kBlock = 16;
  const int32_t blocks = (prompt_len + decode + 2 + kBlock - 1) / kBlock;
  ModelRunner runner(**model, {.num_blocks = blocks + 1, .block_size = kBlock});
  std::vector<int32_t> tokens, table;
  for (int t = 0; t < prompt_len; ++t) tokens.push_back((t * 17 + 5) % 256);
  for (int b = 1; b <= blocks; ++b) table.push_back(b);
  // Prefill (twice: the first faults the scratch buffers in; the second is timed).
  for (int rep = 0; rep < 2; ++rep) {
    StepInput in;
    in.AddSequence(tokens, 0, table, kBlock, StepInput::Logits::kLast);
    const auto start = Clock::now();
    if (!runner.Step(in).ok()) std::abort();
    r.prefill_tps = prompt_len / kvserve::bench::Seconds(start);
  }
  int32_t computed = prompt_len;
  auto step = [&] {
    tokens.push_back((tokens.back() * 31 + 7) % 256);
    StepInput in;
    in.AddSequence(std::span(tokens).subspan(computed, 1), computed, table, kBlock,
                   StepInput::Logits::kLast);
    ++computed;
    if (!runner.Step(in).ok()) std::abort();
  };
  step();  // warm-up
  r.read_bw_before = kvserve::bench::ReadBytesPerSecond(pool.num_threads(), size_t{512} << 20);
  const auto start = Clock::now();
  for (int s = 0; s < decode; ++s) step();
  const double step_s = kvserve::bench::Seconds(start) / decode;
  r.decode_tps = 1.0 / step_s;
  const double context = prompt_len + 1 + decode / 2.0;
  const double kv_bytes = 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * 4 * context;
  r.bytes_per_token = static_cast<double>((*model)->weights.StreamedBytesPerToken()) + kv_bytes;
  r.copy_bw = kvserve::bench::CopyBytesPerSecond(pool.num_threads(), size_t{512} << 20);
  r.read_bw_after = kvserve::bench::ReadBytesPerSecond(pool.num_threads(), size_t{512} << 20);
  return r;
}

// Runs Measure in a child process (fresh RSS, its own thread pool).
bool RunChild(const std::string& model, const Format& f, int prompt, int decode, Result* out) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const Result r = Measure(model, f, prompt, decode);
    const bool ok = write(fds[1], &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r));
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  const bool ok = read(fds[0], out, sizeof(*out)) == static_cast<ssize_t>(sizeof(*out));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::atoi(argv[i] + prefix.size());
    }
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "small-49k", formats = "float32,bfloat16,float16,int8,w8a8,bf16dot";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--model=", 8) == 0) model = argv[i] + 8;
    if (std::strncmp(argv[i], "--formats=", 10) == 0) formats = argv[i] + 10;
  }
  auto wanted = [&](const char* name) {
    return ("," + formats + ",").find(std::string(",") + name + ",") != std::string::npos;
  };
  const int rounds = IntFlag(argc, argv, "rounds", 3);
  const int decode = IntFlag(argc, argv, "decode", 64);
  const int prompt = IntFlag(argc, argv, "prompt", 128);
  constexpr int kFormats_n = sizeof(kFormats) / sizeof(kFormats[0]);
  std::vector<std::vector<Result>> results(kFormats_n);
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < kFormats_n; ++i) {
      if (!wanted(kFormats[i].name)) continue;
      Result r;
      if (!RunChild(model, kFormats[i], prompt, decode, &r)) {
        std::fprintf(stderr, "%s: child failed\n", kFormats[i].name);
        return 1;
      }
      results[i].push_back(r);
    }
  }
  std::printf(
      "builtin:%s, batch-1 decode of %d tokens after a %d-token prompt; %d rounds "
      "(median by decode tokens/s)\n\n",
      model.c_str(), decode, prompt, rounds);
  std::printf(
      "| weights | decode tok/s | vs first | prefill tok/s | weight+KV MB/token | GB/s | of copy "
      "bw | of read bw (mean of before / after) | weights MiB | RSS MiB | peak RSS MiB |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  double fp32_tps = 0;
  for (int i = 0; i < kFormats_n; ++i) {
    std::vector<Result>& rs = results[i];
    if (rs.empty()) continue;
    std::sort(rs.begin(), rs.end(),
              [](const Result& a, const Result& b) { return a.decode_tps < b.decode_tps; });
    const Result& m = rs[rs.size() / 2];
    if (fp32_tps == 0) fp32_tps = m.decode_tps;  // the first format listed
    const double gbs = m.bytes_per_token * m.decode_tps / 1e9;
    const double read_mean = (m.read_bw_before + m.read_bw_after) / 2;
    std::printf(
        "| %s | %.1f | %.2fx | %.1f | %.1f | %.2f | %.0f%% (%.2f GB/s) | %.0f%% (%.2f / %.2f GB/s) "
        "| %.1f | %.1f | %.1f |\n",
        kFormats[i].name, m.decode_tps, m.decode_tps / fp32_tps, m.prefill_tps,
        m.bytes_per_token / 1e6, gbs, 100.0 * gbs * 1e9 / m.copy_bw, m.copy_bw / 1e9,
        100.0 * gbs * 1e9 / read_mean, m.read_bw_before / 1e9, m.read_bw_after / 1e9, m.weights_mb,
        m.rss_mb, m.peak_rss_mb);
  }
  return 0;
}
