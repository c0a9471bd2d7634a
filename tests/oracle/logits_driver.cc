// Oracle driver: loads a model with kvserve's engine and prints, as JSON,
// the logits of every prompt token and a greedy continuation, for the
// Python tests to compare with Hugging Face transformers.
//
//   kvserve_logits_driver MODEL < {"prompt": [ids] | "prompt_text": "...",
//                                  "greedy_tokens": 32,
//                                  "block_size": 16, "chunk": 64,
//                                  "backend": "cpu" | "cuda", "dtype": "auto",
//                                  "max_model_len": 0,
//                                  "weight_dtype": "auto", "quantization": "none",
//                                  "kv_cache_dtype": "auto" (cpu: engine/kv_cache.h)}
//   > {"prompt_logits": [[...], ...], "greedy": [ids], "prompt_ids": [ids]}
#include <algorithm>
#include <iostream>

#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/model_runner.h"
#include "nlohmann/json.hpp"
#if KVSERVE_HAVE_CUDA
#include "engine/cuda/cuda_model_runner.h"
#endif

namespace {

using kvserve::engine::StepInput;

int Fail(const std::string& message) {
  std::cerr << "logits_driver: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: kvserve_logits_driver MODEL < request.json");
  const nlohmann::json request = nlohmann::json::parse(std::cin, nullptr, false);
  if (request.is_discarded()) return Fail("stdin is not JSON");
  const std::string backend = request.value("backend", "cpu");
  // weight_dtype / quantization / matmul_precision: the cpu runner's weight
  // format (the server's --dtype, --quantization and --matmul_precision).
  auto weight_dtype = kvserve::engine::ParseWeightDtype(request.value("weight_dtype", "auto"));
  if (!weight_dtype.ok()) return Fail(std::string(weight_dtype.status().message()));
  auto quantization = kvserve::engine::ParseQuantization(request.value("quantization", "none"));
  if (!quantization.ok()) return Fail(std::string(quantization.status().message()));
  auto precision =
      kvserve::engine::ParseMatmulPrecision(request.value("matmul_precision", "float32"));
  if (!precision.ok()) return Fail(std::string(precision.status().message()));
  // max_model_len: the served length (longrope picks its factors by it).
  auto model = kvserve::engine::LoadModel(
      argv[1], kvserve::engine::LoadModelOptions{
                   .host_weights = backend == "cpu",
                   .weights = {.dtype = *weight_dtype,
                               .quantization = *quantization,
                               .matmul_precision = *precision},
                   .max_model_len = request.value("max_model_len", int64_t{0})});
  if (!model.ok()) return Fail(std::string(model.status().message()));

  // "prompt_text" instead of "prompt": encoded by the checkpoint's own
  // tokenizer (with its special tokens), echoed back as "prompt_ids".
  std::vector<int32_t> tokens;
  if (request.contains("prompt_text")) {
    if ((*model)->tokenizer == nullptr) return Fail("the checkpoint has no tokenizer");
    auto ids = (*model)->tokenizer->Encode(request.at("prompt_text").get<std::string>(), true);
    if (!ids.ok()) return Fail(std::string(ids.status().message()));
    tokens = *std::move(ids);
  } else {
    tokens = request.at("prompt").get<std::vector<int32_t>>();
  }
  const std::vector<int32_t> prompt_ids = tokens;
  const int greedy_tokens = request.value("greedy_tokens", 0);
  const int32_t block_size = request.value("block_size", 16);
  const int32_t chunk = request.value("chunk", 1 << 30);
  const int64_t max_tokens = static_cast<int64_t>(tokens.size()) + greedy_tokens;
  const int64_t num_blocks = max_tokens / block_size + 2;
  std::unique_ptr<kvserve::engine::StepRunner> runner;
  if (backend == "cpu") {
    auto kv_dtype = kvserve::engine::ParseKvCacheDtype(request.value("kv_cache_dtype", "auto"));
    if (!kv_dtype.ok()) return Fail(std::string(kv_dtype.status().message()));
    runner = std::make_unique<kvserve::engine::ModelRunner>(
        **model,
        kvserve::engine::RunnerOptions{
            .num_blocks = num_blocks, .block_size = block_size, .kv_cache_dtype = *kv_dtype});
  } else if (backend == "cuda") {
#if KVSERVE_HAVE_CUDA
    auto dtype = kvserve::engine::ParseWeightDtype(request.value("dtype", "auto"));
    if (!dtype.ok()) return Fail(std::string(dtype.status().message()));
    auto created = kvserve::engine::CudaModelRunner::Create(
        **model, {.block_size = block_size,
                  .num_blocks = num_blocks,
                  .dtype = *dtype,
                  .max_num_tokens = static_cast<int32_t>(std::max<int64_t>(max_tokens, 16)),
                  .max_num_seqs = 1});
    if (!created.ok()) return Fail(std::string(created.status().message()));
    runner = std::move(*created);
#else
    return Fail("this build has no CUDA backend");
#endif
  } else {
    return Fail("backend must be cpu or cuda");
  }
  // Blocks in reverse order: a non-trivial block table.
  std::vector<int32_t> table;
  for (int64_t b = num_blocks - 1; b >= 1; --b) table.push_back(static_cast<int32_t>(b));

  nlohmann::json prompt_logits = nlohmann::json::array();
  std::vector<float> last;
  int32_t computed = 0;
  auto step = [&](int32_t count, StepInput::Logits logits) -> bool {
    StepInput in;
    in.AddSequence(std::span(tokens).subspan(computed, count), computed, table, block_size, logits);
    auto out = runner->Step(in);
    if (!out.ok()) {
      Fail(std::string(out.status().message()));
      return false;
    }
    for (size_t r = 0; r < in.logits_indices.size(); ++r) {
      auto row = out->row(r);
      last.assign(row.begin(), row.end());
      if (logits == StepInput::Logits::kAll) prompt_logits.push_back(last);
    }
    computed += count;
    return true;
  };
  const int32_t prompt_len = static_cast<int32_t>(tokens.size());
  while (computed < prompt_len) {
    if (!step(std::min(chunk, prompt_len - computed), StepInput::Logits::kAll)) return 1;
  }
  std::vector<int32_t> greedy;
  for (int i = 0; i < greedy_tokens; ++i) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    greedy.push_back(next);
    tokens.push_back(next);
    if (i + 1 < greedy_tokens && !step(1, StepInput::Logits::kLast)) return 1;
  }
  std::cout << nlohmann::json{{"prompt_logits", prompt_logits},
                              {"greedy", greedy},
                              {"prompt_ids", prompt_ids}}
            << "\n";
  return 0;
}
