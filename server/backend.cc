#include "server/backend.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "engine/cuda_backend.h"
#include "engine/kv_cache.h"
#include "engine/model_runner.h"

namespace kvserve::server {
namespace {

absl::Status WithFlag(const char* flag, const std::string& value, const absl::Status& s) {
  return absl::Status(s.code(),
                      absl::StrCat("--", flag, "=", value, ": ", std::string(s.message())));
}

// cpu: blocks from --num_kv_blocks, else --kv_cache_memory_mb over the
// bytes of one block in the chosen format (scales included).
int32_t CpuKvBlocks(const ServerConfig& c, const engine::Model& model, engine::KvCacheDtype dtype) {
  if (c.num_kv_blocks > 0) return c.num_kv_blocks;
  const engine::KvCacheShape shape{.num_layers = model.config.num_layers,
                                   .num_blocks = 1,
                                   .num_kv_heads = model.config.num_kv_heads,
                                   .block_size = c.block_size,
                                   .head_dim = model.config.head_dim,
                                   .dtype = dtype};
  const int64_t blocks = (c.kv_cache_memory_mb << 20) / shape.bytes_per_block();
  return static_cast<int32_t>(std::clamp<int64_t>(blocks, 2, 1 << 24));
}

absl::StatusOr<Backend> MakeCpuBackend(const ServerConfig& c) {
  Backend b;
  b.name = "cpu";
  b.device = "cpu";
  auto weight_dtype = engine::ParseWeightDtype(c.dtype);
  if (!weight_dtype.ok()) return WithFlag("dtype", c.dtype, weight_dtype.status());
  auto quantization = engine::ParseQuantization(c.quantization);
  if (!quantization.ok()) return WithFlag("quantization", c.quantization, quantization.status());
  auto precision = engine::ParseMatmulPrecision(c.matmul_precision);
  if (!precision.ok()) return WithFlag("matmul_precision", c.matmul_precision, precision.status());
  // The served length picks Phi-3 longrope's factors (engine/model.h).
  auto model = engine::LoadModel(
      c.model,
      engine::LoadModelOptions{.weights = {.dtype = *weight_dtype,
                                           .quantization = *quantization,
                                           .matmul_precision = *precision},
                               .generation_sampling_defaults = c.generation_config == "auto",
                               .max_model_len = c.max_model_len});
  if (!model.ok()) return WithFlag("model", c.model, model.status());
  b.model = std::move(*model);
  auto dtype = engine::ParseKvCacheDtype(c.kv_cache_dtype);
  if (!dtype.ok()) return WithFlag("kv_cache_dtype", c.kv_cache_dtype, dtype.status());
  b.kv_cache_dtype = *dtype;
  b.num_blocks = CpuKvBlocks(c, *b.model, *dtype);
  b.runner = std::make_unique<engine::ModelRunner>(
      *b.model,
      engine::RunnerOptions{
          .num_blocks = b.num_blocks, .block_size = c.block_size, .kv_cache_dtype = *dtype});
  return b;
}

absl::StatusOr<Backend> MakeCudaBackend(const ServerConfig& c, const engine::CudaBackendApi& api) {
  if (c.quantization != "none") {  // --backend=auto chose CUDA
    return absl::FailedPreconditionError(
        absl::StrCat("--quantization=", c.quantization,
                     ": the cuda backend has no quantized weights; use --backend=cpu"));
  }
  if (c.matmul_precision != "float32") {
    return absl::FailedPreconditionError(
        absl::StrCat("--matmul_precision=", c.matmul_precision,
                     ": the cuda backend's precision is --dtype; use --backend=cpu"));
  }
  auto dtype = engine::ParseWeightDtype(c.dtype);
  if (!dtype.ok()) return WithFlag("dtype", c.dtype, dtype.status());
  auto kv_dtype = engine::ParseKvCacheDtype(c.kv_cache_dtype);
  if (!kv_dtype.ok()) return WithFlag("kv_cache_dtype", c.kv_cache_dtype, kv_dtype.status());
  Backend b;
  b.name = "cuda";
  b.kv_cache_dtype = *kv_dtype;
  // --kv_cache_dtype=auto (kFloat32, fp32 rows on the CPU) is the serving
  // dtype's cache on CUDA.
  const std::optional<engine::KvCacheDtype> kv_format =
      *kv_dtype == engine::KvCacheDtype::kFloat32 ? std::nullopt : std::optional(*kv_dtype);
  // The device gets the weights; no fp32 host copy. The served length picks
  // Phi-3 longrope's factors here too (the runner uploads the model's).
  auto model = engine::LoadModel(
      c.model,
      engine::LoadModelOptions{.host_weights = false,
                               .weights = {},
                               .generation_sampling_defaults = c.generation_config == "auto",
                               .max_model_len = c.max_model_len});
  if (!model.ok()) return WithFlag("model", c.model, model.status());
  b.model = std::move(*model);
  const int32_t model_len = static_cast<int32_t>(b.model->config.max_position_embeddings);
  auto runner = api.create(
      *b.model,
      engine::CudaRunnerOptions{
          .device = c.cuda_device,
          .block_size = c.block_size,
          .num_blocks = c.num_kv_blocks,
          .gpu_memory_fraction = c.gpu_memory_fraction,
          .dtype = *dtype,
          .kv_cache_dtype = kv_format,
          .batch_invariant = c.batch_invariant,
          .max_num_tokens = c.max_num_batched_tokens,
          .max_num_seqs = c.max_num_seqs,
          .max_model_len = c.max_model_len > 0 ? std::min(c.max_model_len, model_len) : model_len});
  if (!runner.ok()) return WithFlag("backend", "cuda", runner.status());
  const engine::RunnerInfo info = (*runner)->Info();
  b.device = info.device;
  b.num_blocks = static_cast<int32_t>(std::min<int64_t>(info.num_blocks, 1 << 24));
  b.runner = std::move(*runner);
  return b;
}

}  // namespace

absl::StatusOr<Backend> MakeBackend(const ServerConfig& c) {
  if (c.backend == "cpu") return MakeCpuBackend(c);
  // auto: no NVIDIA device node, no GPU; the CUDA module is not even loaded.
  if (c.backend == "auto" && !std::filesystem::exists("/dev/nvidiactl")) return MakeCpuBackend(c);
  absl::StatusOr<const engine::CudaBackendApi*> api = engine::LoadCudaBackend();
  std::string why;
  if (!api.ok()) {
    why = std::string(api.status().message());
  } else if (!(*api)->device_available(&why)) {
    why = "no usable CUDA device (" + why + ")";
  } else {
    return MakeCudaBackend(c, **api);
  }
  if (c.backend == "cuda") return absl::FailedPreconditionError("--backend=cuda: " + why);
  Log().warn("--backend=auto: serving on the CPU: {}", why);
  return MakeCpuBackend(c);
}

}  // namespace kvserve::server
