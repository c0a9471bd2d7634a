// kvserve-generate: generates a completion for one prompt on the CPU engine
// and streams the text to stdout. The main job until the gRPC daemon exists.
//
//   kvserve-generate --model=builtin:small --prompt="Hello" --max_tokens=32
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/cli_help.h"
#include "engine/model.h"
#include "engine/model_runner.h"
#include "engine/sampling/sampler.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "builtin:tiny",
          "builtin:tiny, builtin:small, or a Hugging Face checkpoint directory");
ABSL_FLAG(std::string, prompt, "Hello, kvserve!", "prompt text");
ABSL_FLAG(int32_t, max_tokens, 64, "tokens to generate (>= 1)");
ABSL_FLAG(float, temperature, 0.0f, "0 = greedy");
ABSL_FLAG(int32_t, top_k, 0, "0 = off");
ABSL_FLAG(float, top_p, 1.0f, "nucleus sampling mass");
ABSL_FLAG(float, min_p, 0.0f, "minimum probability relative to the top token");
ABSL_FLAG(float, repetition_penalty, 1.0f, "1 = off");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past the end-of-sequence token");
ABSL_FLAG(int32_t, block_size, 16, "KV cache block size in tokens");
ABSL_FLAG(std::string, dtype, "auto",
          "weight storage, as the daemon's --dtype on the cpu backend: auto (a bf16/fp16 "
          "checkpoint stays 16-bit), float32, bfloat16 or float16");
ABSL_FLAG(std::string, quantization, "none",
          "none, int8 (weight-only, per output channel) or w8a8 (and int8 activations per token)");
ABSL_FLAG(std::string, matmul_precision, "float32",
          "float32, or bfloat16 (bf16 weights and inputs, bf16 dot products)");
ABSL_FLAG(int32_t, prefill_chunk, 512, "prompt tokens per step (chunked prefill)");
ABSL_FLAG(bool, json, false,
          "print one JSON object {prompt_token_ids, token_ids, text} instead of streaming text "
          "(a reference for the daemon's tests)");

namespace {

using kvserve::engine::StepInput;
using Clock = std::chrono::steady_clock;

int Fail(const std::string& message) {
  std::cerr << "kvserve-generate: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  kvserve::common::ConfigureHelp(
      {.usage = "Generate text from a prompt with kvserve's CPU engine, without the daemon.\n"
                "  kvserve-generate --model=builtin:tiny --prompt=\"Hello\" --max_tokens=32",
       .flag_files = {"server/generate_main.cc"}});
  kvserve::common::ParseCommandLine(argc, argv);
  kvserve::engine::SamplingParams sampling{
      .temperature = absl::GetFlag(FLAGS_temperature),
      .top_k = absl::GetFlag(FLAGS_top_k),
      .top_p = absl::GetFlag(FLAGS_top_p),
      .min_p = absl::GetFlag(FLAGS_min_p),
      .repetition_penalty = absl::GetFlag(FLAGS_repetition_penalty),
      .seed = absl::GetFlag(FLAGS_seed),
  };
  if (auto s = sampling.Validate(); !s.ok()) return Fail(std::string(s.message()));
  const int32_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  const int32_t chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (max_tokens < 1) return Fail("--max_tokens must be >= 1");
  if (block_size < 1 || block_size > 256) return Fail("--block_size must be in [1, 256]");
  if (chunk < 1) return Fail("--prefill_chunk must be >= 1");

  auto weight_dtype = kvserve::engine::ParseWeightDtype(absl::GetFlag(FLAGS_dtype));
  if (!weight_dtype.ok()) return Fail("--dtype: " + std::string(weight_dtype.status().message()));
  auto quantization = kvserve::engine::ParseQuantization(absl::GetFlag(FLAGS_quantization));
  if (!quantization.ok()) {
    return Fail("--quantization: " + std::string(quantization.status().message()));
  }
  auto precision = kvserve::engine::ParseMatmulPrecision(absl::GetFlag(FLAGS_matmul_precision));
  if (!precision.ok()) {
    return Fail("--matmul_precision: " + std::string(precision.status().message()));
  }
  auto model = kvserve::engine::LoadModel(
      absl::GetFlag(FLAGS_model),
      {.weights = {
           .dtype = *weight_dtype, .quantization = *quantization, .matmul_precision = *precision}});
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const auto& tokenizer = (*model)->tokenizer;
  if (tokenizer == nullptr) return Fail("the model has no tokenizer; text prompts need one");
  auto encoded = tokenizer->Encode(absl::GetFlag(FLAGS_prompt), /*add_special_tokens=*/true);
  if (!encoded.ok()) return Fail(std::string(encoded.status().message()));
  std::vector<int32_t> prompt = *encoded;
  if (prompt.empty()) return Fail("the prompt encodes to no tokens");
  const auto& config = (*model)->config;
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_tokens;
  if (total > config.max_position_embeddings) {
    return Fail("prompt tokens + max_tokens exceed the model length " +
                std::to_string(config.max_position_embeddings));
  }

  const int64_t num_blocks = (total + block_size - 1) / block_size + 1;
  kvserve::engine::ModelRunner runner(**model,
                                      {.num_blocks = num_blocks, .block_size = block_size});
  std::vector<int32_t> table;
  for (int32_t b = 1; b < num_blocks; ++b) table.push_back(b);  // block 0: null block

  std::vector<int32_t> tokens = prompt, output;
  kvserve::engine::IncrementalDetokenizer detok(*tokenizer, /*skip_special=*/true);
  const bool json = absl::GetFlag(FLAGS_json);
  std::string text;
  int32_t computed = 0;
  const auto start = Clock::now();
  Clock::time_point first_token;
  while (static_cast<int32_t>(output.size()) < max_tokens) {
    const int32_t count = std::min<int32_t>(chunk, static_cast<int32_t>(tokens.size()) - computed);
    StepInput in;
    in.AddSequence(std::span(tokens).subspan(computed, count), computed, table, block_size,
                   StepInput::Logits::kLast);
    auto out = runner.Step(in);
    if (!out.ok()) return Fail(std::string(out.status().message()));
    computed += count;
    if (computed < static_cast<int32_t>(tokens.size())) continue;  // prompt not finished
    const auto result = kvserve::engine::Sample(out->row(0), sampling, prompt, output);
    if (output.empty()) first_token = Clock::now();
    output.push_back(result.token);
    tokens.push_back(result.token);
    const std::string piece = detok.Push(result.token);
    text += piece;
    if (!json) std::cout << piece << std::flush;
    const auto& eos = config.eos_token_ids;
    if (!absl::GetFlag(FLAGS_ignore_eos) &&
        std::find(eos.begin(), eos.end(), result.token) != eos.end()) {
      break;
    }
  }
  const std::string tail = detok.Flush();
  text += tail;
  if (json) {
    const nlohmann::json j = {{"prompt_token_ids", prompt}, {"token_ids", output}, {"text", text}};
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << tail << std::endl;
  }
  const double prefill_s = std::chrono::duration<double>(first_token - start).count();
  const double decode_s = std::chrono::duration<double>(Clock::now() - first_token).count();
  std::fprintf(stderr,
               "[kvserve-generate] model=%s prompt_tokens=%zu output_tokens=%zu "
               "ttft=%.1f ms decode=%.1f tokens/s\n",
               (*model)->name.c_str(), prompt.size(), output.size(), prefill_s * 1e3,
               output.size() > 1 ? (output.size() - 1) / decode_s : 0.0);
  return 0;
}
