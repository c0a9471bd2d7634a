#include "engine/cuda/cuda_model_runner.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "engine/builtin_models.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/step_arena.h"
#include "engine/kv_cache.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/sampling.h"

namespace kvserve::engine {
namespace {

using cuda::CudaStatus;
using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
using cuda::StepArena;
using cuda::StepShape;
using kernels::KvDtype;
using kernels::cuda::ElemSize;
using kernels::cuda::ElemType;

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// Device memory left out of the KV pool besides the measured scratch: the
// CUDA context's own allocations, cuBLASLt internals, fragmentation.
constexpr size_t kReserveBytes = size_t{512} << 20;
// A pool sized from memory holds at most this many blocks: small models would
// otherwise get millions, and the scheduler's host bookkeeping grows with them.
constexpr int64_t kMaxAutoBlocks = int64_t{1} << 20;
// Each layer's K data, V data, K scales and V scales start on this boundary
// in the pool's one allocation (the attention kernels load 16-byte chunks).
constexpr int64_t kKvRegionAlign = 256;

int64_t AlignUp(int64_t x) { return (x + kKvRegionAlign - 1) / kKvRegionAlign * kKvRegionAlign; }

absl::StatusOr<ElemType> ParseDtype(const std::string& name) {
  if (name == "float32") return ElemType::kF32;
  if (name == "bfloat16") return ElemType::kBF16;
  if (name == "float16") return ElemType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype must be auto, float32, bfloat16 or float16, got \"", name, "\""));
}

// "auto": the checkpoint's embedding dtype; builtin llama3-8b is bf16, the
// small builtins fp32 (as their CPU weights).
absl::StatusOr<ElemType> ServingDtype(const Model& model, const std::string& requested) {
  if (requested != "auto") return ParseDtype(requested);
  if (model.checkpoint != nullptr) {
    auto info = model.checkpoint->Find("model.embed_tokens.weight");
    if (!info.ok()) return info.status();
    return cuda::ElemTypeOf((*info)->dtype);
  }
  return model.name == "builtin:llama3-8b" ? ElemType::kBF16 : ElemType::kF32;
}

// Gemma's RMSNorms multiply by 1 + w (added in fp32 inside the kernels).
float NormOffset(const ModelConfig& c) { return c.norm_weight_plus_one ? 1.0f : 0.0f; }

const void* At(const void* base, int64_t elems, ElemType t) {
  return static_cast<const char*>(base) + elems * static_cast<int64_t>(ElemSize(t));
}
void* At(void* base, int64_t elems, ElemType t) {
  return static_cast<char*>(base) + elems * static_cast<int64_t>(ElemSize(t));
}

}  // namespace

bool CudaDeviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why != nullptr) {
      *why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    }
    return false;
  }
  return true;
}

struct CudaModelRunner::Impl {
  const Model& model;
  CudaRunnerOptions options;
  ElemType dtype = ElemType::kF32;
  std::string device_name;
  cudaStream_t stream = nullptr;
  cuda::DeviceWeights weights;
  DeviceBuffer inv_freq;        // [rotary_dim / 2] fp32
  DeviceBuffer local_inv_freq;  // Gemma 3 sliding layers' rope; empty otherwise
  // The cache's row format: options.kv_cache_dtype, "auto" resolved to the
  // serving dtype's (so bf16 serving keeps today's bf16 cache).
  KvDtype kv_format = KvDtype::kFloat32;
  // Per layer: K rows, V rows (engine/kv_cache.h layout, kv_format rows),
  // then the K and V row scales for the scaled formats; each region aligned.
  DeviceBuffer kv;
  std::vector<void*> k_cache, v_cache;
  std::vector<float*> k_scales, v_scales;  // nullptr for the unscaled formats
  int64_t num_blocks = 0;
  int64_t kv_bytes = 0;
  kernels::cuda::CublasLtContext cublas;
  DeviceBuffer cublas_workspace;
  StepArena arena;

  explicit Impl(const Model& m) : model(m) {}
  ~Impl() {
    // The runner may be destroyed on another thread than the one that made it.
    if (stream != nullptr) cudaSetDevice(options.device);
    if (cublas.handle != nullptr) cublasLtDestroy(cublas.handle);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  int64_t ElementsPerBlock() const {
    return model.config.num_kv_heads * options.block_size * model.config.head_dim;
  }
  // One block of every layer in kv_format: the CPU's KvCacheShape, so both
  // backends count the same bytes (scales included).
  KvCacheShape Shape(int64_t blocks) const {
    return KvCacheShape{.num_layers = model.config.num_layers,
                        .num_blocks = blocks,
                        .num_kv_heads = model.config.num_kv_heads,
                        .block_size = options.block_size,
                        .head_dim = model.config.head_dim,
                        .dtype = kv_format};
  }

  absl::Status Init();
  absl::Status SizeKvPool();
  absl::StatusOr<StepOutput> Step(const StepInput& in);
  absl::Status RunLayer(int64_t layer, const StepShape& shape, const cuda::StepBuffers& b);
  absl::Status Linear(const void* x, int64_t m, const void* w, const void* bias, int64_t n,
                      int64_t k, void* y, ElemType out_type, const char* what);
};

absl::Status CudaModelRunner::Impl::Init() {
  if (options.block_size < 1 || options.block_size > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be in [1, 64] on CUDA, got ", options.block_size));
  }
  if (options.max_model_len <= 0) {
    options.max_model_len = static_cast<int32_t>(model.config.max_position_embeddings);
  }
  auto dt = ServingDtype(model, options.dtype);
  if (!dt.ok()) return dt.status();
  dtype = *dt;
  kv_format = options.kv_cache_dtype == KvDtype::kFloat32 ? kernels::cuda::KvDtypeOf(dtype)
                                                          : options.kv_cache_dtype;

  KVSERVE_RETURN_IF_CUDA_ERROR(cudaSetDevice(options.device),
                               absl::StrCat("selecting device ", options.device));
  cudaDeviceProp prop{};
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, options.device),
                               "reading device properties");
  device_name = prop.name;
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                               "creating the step stream");

  if (model.checkpoint != nullptr) {
    auto w = cuda::UploadWeights(model.config, *model.checkpoint, dtype);
    if (!w.ok()) return w.status();
    weights = std::move(*w);
  } else if (model.builtin_seed.has_value()) {
    auto w = cuda::GenerateBuiltinWeights(model.config, *model.builtin_seed, dtype);
    if (!w.ok()) return w.status();
    weights = std::move(*w);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", model.name, "\" has neither a checkpoint nor a builtin seed"));
  }

  auto freq = DeviceBuffer::Allocate(model.rope_inv_freq.size() * sizeof(float), "rope");
  if (!freq.ok()) return freq.status();
  inv_freq = std::move(*freq);
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaMemcpy(inv_freq.get(), model.rope_inv_freq.data(),
                                          inv_freq.bytes(), cudaMemcpyHostToDevice),
                               "uploading rope frequencies");
  if (!model.local_rope_inv_freq.empty()) {
    auto local = DeviceBuffer::Allocate(model.local_rope_inv_freq.size() * sizeof(float), "rope");
    if (!local.ok()) return local.status();
    local_inv_freq = std::move(*local);
    KVSERVE_RETURN_IF_CUDA_ERROR(cudaMemcpy(local_inv_freq.get(), model.local_rope_inv_freq.data(),
                                            local_inv_freq.bytes(), cudaMemcpyHostToDevice),
                                 "uploading the local rope frequencies");
  }

  if (cublasStatus_t st = cublasLtCreate(&cublas.handle); st != CUBLAS_STATUS_SUCCESS) {
    cublas.handle = nullptr;
    return cuda::CublasStatus(st, "creating the cuBLASLt handle");
  }
  auto ws = DeviceBuffer::Allocate(kCublasWorkspaceBytes, "cuBLASLt workspace");
  if (!ws.ok()) return ws.status();
  cublas_workspace = std::move(*ws);
  cublas.workspace = cublas_workspace.get();
  cublas.workspace_bytes = cublas_workspace.bytes();

  // Scratch for the largest step the options allow, before the KV pool takes
  // what is left.
  const StepShape worst = StepShape::Worst(model.config, options, dtype);
  if (absl::Status s = arena.Reserve(worst); !s.ok()) return s;
  return SizeKvPool();
}

absl::Status CudaModelRunner::Impl::SizeKvPool() {
  const ModelConfig& c = model.config;
  const int64_t block_bytes = Shape(1).bytes_per_block();
  // Alignment padding between the 2 or 4 regions of each layer, at most.
  const int64_t padding = 4 * c.num_layers * kKvRegionAlign;
  num_blocks = options.num_blocks;
  if (num_blocks <= 0) {
    size_t free_bytes = 0, total_bytes = 0;
    KVSERVE_RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "reading memory info");
    // What this process may still take: its share of the total, minus what
    // is already in use on the device (ours and anyone else's), minus a reserve.
    const double allowed = options.gpu_memory_fraction * static_cast<double>(total_bytes) -
                           static_cast<double>(total_bytes - free_bytes) -
                           static_cast<double>(kReserveBytes + padding);
    num_blocks = allowed > 0 ? static_cast<int64_t>(allowed / static_cast<double>(block_bytes)) : 0;
    num_blocks = std::min(num_blocks, kMaxAutoBlocks);
    if (num_blocks < 2) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no room for a KV cache on ", device_name, ": ", total_bytes - free_bytes,
                       " bytes in use of ", total_bytes, " with gpu_memory_fraction ",
                       options.gpu_memory_fraction));
    }
  }
  const KvCacheShape shape = Shape(num_blocks);
  const int64_t rows = num_blocks * shape.rows_per_block();
  const int64_t data_bytes = AlignUp(rows * shape.row_bytes());
  const bool scaled = kernels::KvHasScale(kv_format);
  const int64_t scale_bytes = scaled ? AlignUp(rows * int64_t{sizeof(float)}) : 0;
  const int64_t layer_bytes = 2 * data_bytes + 2 * scale_bytes;
  kv_bytes = c.num_layers * layer_bytes;
  auto kv_buffer = DeviceBuffer::Allocate(kv_bytes, "the KV cache");
  if (!kv_buffer.ok()) return kv_buffer.status();
  kv = std::move(*kv_buffer);
  auto* base = static_cast<char*>(kv.get());
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    char* l = base + layer * layer_bytes;
    k_cache.push_back(l);
    v_cache.push_back(l + data_bytes);
    k_scales.push_back(scaled ? reinterpret_cast<float*>(l + 2 * data_bytes) : nullptr);
    v_scales.push_back(scaled ? reinterpret_cast<float*>(l + 2 * data_bytes + scale_bytes)
                              : nullptr);
  }
  return absl::OkStatus();
}

absl::Status CudaModelRunner::Impl::Linear(const void* x, int64_t m, const void* w,
                                           const void* bias, int64_t n, int64_t k, void* y,
                                           ElemType out_type, const char* what) {
  const kernels::cuda::CudaGemmParams p{.in_type = dtype,
                                        .out_type = out_type,
                                        .x = x,
                                        .ldx = k,
                                        .w = w,
                                        .bias = bias,
                                        .y = y,
                                        .ldy = n,
                                        .m = m,
                                        .n = n,
                                        .k = k};
  if (options.batch_invariant) {
    return CudaStatus(kernels::cuda::GemmInvariant(p, stream), what);
  }
  return cuda::CublasStatus(kernels::cuda::GemmCublasLt(cublas, p, stream), what);
}

absl::StatusOr<StepOutput> CudaModelRunner::Impl::Step(const StepInput& in) {
  const ModelConfig& c = model.config;
  if (absl::Status s = ValidateStepInput(in, c.vocab_size, num_blocks, options.block_size);
      !s.ok()) {
    return s;
  }
  if (in.num_tokens() > options.max_num_tokens || in.num_seqs() > options.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("step input: ", in.num_tokens(), " tokens in ", in.num_seqs(),
                     " sequences exceed the runner's bounds (max_num_tokens ",
                     options.max_num_tokens, ", max_num_seqs ", options.max_num_seqs, ")"));
  }
  for (const SampleSpec& spec : in.sample_specs) {
    // The sampler trusts its rows (num_logprobs sizes the out_top writes).
    if (absl::Status s = spec.params.Validate(); !s.ok()) return s;
  }
  StepOutput out;
  out.vocab_size = c.vocab_size;
  if (in.num_tokens() == 0) return out;

  const StepShape shape = StepShape::Of(in, c, options, dtype);
  auto buffers = arena.Prepare(shape, in, stream);
  if (!buffers.ok()) return buffers.status();
  const cuda::StepBuffers& b = *buffers;
  const int64_t n = shape.num_tokens;
  const int64_t hidden = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::EmbeddingLookup(weights.embed_tokens, dtype, hidden,
                                                              b.token_ids, n, b.residual, stream),
                               "embedding lookup");
  if (c.scale_embeddings) {  // Gemma: times hidden_size**0.5, as the CPU runner
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::ScaleF32(b.residual, n * hidden,
                                static_cast<float>(std::sqrt(static_cast<double>(hidden))), stream),
        "embedding scaling");
  }
  KVSERVE_RETURN_IF_CUDA_ERROR(
      kernels::cuda::RmsNorm(b.residual, weights.layers[0].input_norm, dtype, b.normed, dtype, n,
                             hidden, eps, stream, NormOffset(c)),
      "input norm");
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (absl::Status s = RunLayer(layer, shape, b); !s.ok()) return s;
  }
  // normed = the final norm of the residual stream.

  const int64_t rows = shape.num_logits;
  if (rows > 0) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::GatherRows(b.normed, b.logits_indices, rows,
                                  hidden * static_cast<int64_t>(ElemSize(dtype)), b.gathered,
                                  stream),
        "gathering the logits rows");
    if (absl::Status s = Linear(b.gathered, rows, weights.lm_head, nullptr, c.vocab_size, hidden,
                                b.logits, ElemType::kF32, "lm_head");
        !s.ok()) {
      return s;
    }
    if (c.final_logit_softcapping > 0.0) {
      KVSERVE_RETURN_IF_CUDA_ERROR(
          kernels::cuda::SoftCapF32(b.logits, rows * c.vocab_size,
                                    static_cast<float>(c.final_logit_softcapping), stream),
          "final logit soft-capping");
    }
    if (shape.sampling) {
      const kernels::cuda::CudaSamplingParams sp{.logits = b.logits,
                                                 .num_rows = static_cast<int>(rows),
                                                 .vocab = static_cast<int>(c.vocab_size),
                                                 .rows = b.sample_rows,
                                                 .penalty_tokens = b.penalty_tokens,
                                                 .penalty_counts = b.penalty_counts,
                                                 .masked_tokens = b.masked_tokens,
                                                 .out_tokens = b.out_tokens,
                                                 .out_logprobs = b.out_logprobs,
                                                 .out_top = b.out_top,
                                                 .workspace = b.sampling_workspace,
                                                 .workspace_bytes = b.sampling_workspace_bytes};
      KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::SampleRows(sp, stream), "sampling");
    }
  }
  if (absl::Status s = arena.CopyResults(shape, stream); !s.ok()) return s;
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream), "running the step");
  if (shape.sampling) {
    out.samples = arena.Samples(shape, in);
  } else {
    out.logits = arena.Logits(shape);
  }
  return out;
}

// One decoder layer, the CPU runner's (engine/model_runner.cc) step for step.
// On entry b.normed = input_norm(residual); on exit the residual has both
// sublayers added and b.normed = the next norm of it (the next layer's input
// norm, or the final norm after the last layer). Gemma (sandwich_norms) norms
// each sublayer's output (in place, in the serving dtype) before the add.
absl::Status CudaModelRunner::Impl::RunLayer(int64_t layer, const StepShape& shape,
                                             const cuda::StepBuffers& b) {
  const ModelConfig& c = model.config;
  const cuda::DeviceLayerWeights& lw = weights.layers[layer];
  const int64_t n = shape.num_tokens;
  const int64_t hidden = c.hidden_size;
  const int64_t d = c.head_dim;
  const int64_t q_width = c.num_heads * d;
  const int64_t kv_width = c.num_kv_heads * d;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const int64_t inter = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  void* q = b.qkv;
  void* k = At(b.qkv, q_width, dtype);
  void* v = At(b.qkv, q_width + kv_width, dtype);
  const float norm_offset = NormOffset(c);

  if (absl::Status s =
          Linear(b.normed, n, lw.qkv, lw.qkv_bias, qkv_width, hidden, b.qkv, dtype, "qkv_proj");
      !s.ok()) {
    return s;
  }
  if (c.qk_norm) {  // Qwen3, Gemma 3: per-head norms before RoPE
    KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::HeadRmsNorm(q, dtype, qkv_width, n, c.num_heads,
                                                            lw.q_norm, d, eps, norm_offset, stream),
                                 "q norm");
    KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::HeadRmsNorm(k, dtype, qkv_width, n, c.num_kv_heads,
                                                            lw.k_norm, d, eps, norm_offset, stream),
                                 "k norm");
  }
  const bool local_rope = c.LayerUsesLocalRope(layer);
  KVSERVE_RETURN_IF_CUDA_ERROR(
      kernels::cuda::ApplyRope(
          {.dtype = dtype,
           .q = q,
           .k = k,
           .q_stride = qkv_width,
           .k_stride = qkv_width,
           .positions = b.positions,
           .inv_freq =
               static_cast<const float*>(local_rope ? local_inv_freq.get() : inv_freq.get()),
           .attention_scaling = local_rope ? 1.0f : model.rope_attention_scaling,
           .num_tokens = static_cast<int>(n),
           .num_heads = static_cast<int>(c.num_heads),
           .num_kv_heads = static_cast<int>(c.num_kv_heads),
           .head_dim = static_cast<int>(d),
           .rotary_dim = static_cast<int>(c.RotaryDim())},
          stream),
      "rope");
  KVSERVE_RETURN_IF_CUDA_ERROR(
      kernels::cuda::WriteKvCache({.dtype = dtype,
                                   .k = k,
                                   .v = v,
                                   .src_stride = qkv_width,
                                   .k_cache = k_cache[layer],
                                   .v_cache = v_cache[layer],
                                   .kv_dtype = kv_format,
                                   .k_scales = k_scales[layer],
                                   .v_scales = v_scales[layer],
                                   .slot_mapping = b.slot_mapping,
                                   .num_tokens = static_cast<int>(n),
                                   .num_kv_heads = static_cast<int>(c.num_kv_heads),
                                   .head_dim = static_cast<int>(d),
                                   .block_size = static_cast<int>(options.block_size)},
                                  stream),
      "kv cache write");
  KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::PagedAttention(
                                   {.dtype = dtype,
                                    .q = q,
                                    .q_stride = qkv_width,
                                    .out = b.attn,
                                    .k_cache = k_cache[layer],
                                    .v_cache = v_cache[layer],
                                    .kv_dtype = kv_format,
                                    .k_scales = k_scales[layer],
                                    .v_scales = v_scales[layer],
                                    .num_tokens = static_cast<int>(n),
                                    .num_heads = static_cast<int>(c.num_heads),
                                    .num_kv_heads = static_cast<int>(c.num_kv_heads),
                                    .head_dim = static_cast<int>(d),
                                    .block_size = static_cast<int>(options.block_size),
                                    .num_seqs = shape.num_seqs,
                                    .token_seq = b.token_seq,
                                    .token_pos = b.positions,
                                    .query_start = b.query_start,
                                    .block_table_start = b.block_table_start,
                                    .block_ids = b.block_ids,
                                    .max_query_len = shape.max_query_len,
                                    .max_seq_len = shape.max_seq_len,
                                    .scale = c.AttentionScale(),
                                    .sliding_window = static_cast<int>(c.LayerSlidingWindow(layer)),
                                    .softcap = static_cast<float>(c.attn_logit_softcapping),
                                    .batch_invariant = options.batch_invariant,
                                    .workspace = b.attention_workspace,
                                    .workspace_bytes = b.attention_workspace_bytes},
                                   stream),
                               "paged attention");
  if (absl::Status s =
          Linear(b.attn, n, lw.o_proj, lw.o_proj_bias, hidden, q_width, b.proj, dtype, "o_proj");
      !s.ok()) {
    return s;
  }
  if (c.sandwich_norms) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::HeadRmsNorm(b.proj, dtype, hidden, n, 1, lw.attn_output_norm, hidden, eps,
                                   norm_offset, stream),
        "attention output norm");
  }
  KVSERVE_RETURN_IF_CUDA_ERROR(
      kernels::cuda::AddRmsNorm(b.residual, b.proj, lw.mlp_input_norm, dtype, b.normed, dtype, n,
                                hidden, eps, stream, norm_offset),
      "mlp input norm");
  if (absl::Status s = Linear(b.normed, n, lw.gate_up, nullptr, 2 * inter, hidden, b.gate_up, dtype,
                              "gate_up_proj");
      !s.ok()) {
    return s;
  }
  KVSERVE_RETURN_IF_CUDA_ERROR(
      c.hidden_act == Activation::kGeluTanh
          ? kernels::cuda::GeluTanhMul(b.gate_up, b.act, dtype, n, inter, stream)
          : kernels::cuda::SiluMul(b.gate_up, b.act, dtype, n, inter, stream),
      "gated activation");
  if (absl::Status s =
          Linear(b.act, n, lw.down, nullptr, hidden, inter, b.proj, dtype, "down_proj");
      !s.ok()) {
    return s;
  }
  if (c.sandwich_norms) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::HeadRmsNorm(b.proj, dtype, hidden, n, 1, lw.mlp_output_norm, hidden, eps,
                                   norm_offset, stream),
        "mlp output norm");
  }
  const bool last = layer + 1 == c.num_layers;
  const void* next_norm = last ? weights.final_norm : weights.layers[layer + 1].input_norm;
  KVSERVE_RETURN_IF_CUDA_ERROR(
      kernels::cuda::AddRmsNorm(b.residual, b.proj, next_norm, dtype, b.normed, dtype, n, hidden,
                                eps, stream, norm_offset),
      "post-mlp norm");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaModelRunner>> CudaModelRunner::Create(
    const Model& model, const CudaRunnerOptions& options) {
  if (absl::Status s = CheckCudaSupports(model.config); !s.ok()) return s;
  std::string why;
  if (!CudaDeviceAvailable(&why)) {
    return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", why));
  }
  auto impl = std::make_unique<Impl>(model);
  impl->options = options;
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<CudaModelRunner>(new CudaModelRunner(std::move(impl)));
}

CudaModelRunner::CudaModelRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModelRunner::~CudaModelRunner() = default;

absl::StatusOr<StepOutput> CudaModelRunner::Step(const StepInput& input) {
  // The current device is per thread, and Step runs on the engine loop's
  // thread, not the one that called Create.
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaSetDevice(impl_->options.device), "selecting the device");
  auto out = impl_->Step(input);
  if (!out.ok()) {
    // A step that failed part way may have left work queued, the metadata
    // upload reading the pinned buffer the next Prepare refills among it.
    cudaStreamSynchronize(impl_->stream);
  }
  return out;
}

int64_t CudaModelRunner::num_blocks() const { return impl_->num_blocks; }
int64_t CudaModelRunner::block_size() const { return impl_->options.block_size; }
std::string CudaModelRunner::device_name() const { return impl_->device_name; }
std::string CudaModelRunner::dtype_name() const { return kernels::cuda::ElemName(impl_->dtype); }
int64_t CudaModelRunner::weight_bytes() const {
  return static_cast<int64_t>(impl_->weights.storage.bytes());
}
int64_t CudaModelRunner::kv_cache_bytes() const { return impl_->kv_bytes; }
int64_t CudaModelRunner::streamed_weight_bytes() const { return impl_->weights.streamed_bytes; }

absl::Status CudaModelRunner::FillKvBlocks(const std::vector<int32_t>& block_ids, float value) {
  Impl& m = *impl_;
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaSetDevice(m.options.device), "selecting the device");
  for (int32_t block : block_ids) {
    if (block < 0 || block >= m.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("block ", block, " outside the cache"));
    }
  }
  if (m.kv_format == kernels::cuda::KvDtypeOf(m.dtype)) {  // the serving dtype's cache
    const int64_t per_block = m.ElementsPerBlock();
    for (int32_t block : block_ids) {
      for (size_t layer = 0; layer < m.k_cache.size(); ++layer) {
        for (void* cache : {m.k_cache[layer], m.v_cache[layer]}) {
          KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::Fill(At(cache, block * per_block, m.dtype),
                                                           m.dtype, per_block, value, m.stream),
                                       "filling KV blocks");
        }
      }
    }
    KVSERVE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(m.stream), "filling KV blocks");
    return absl::OkStatus();
  }
  // Other formats: one block's rows of `value` encoded on the host by the CPU
  // encoder (the device's is bit-identical), copied into every block named.
  const KvCacheShape shape = m.Shape(1);
  const int64_t rows = shape.rows_per_block(), row_bytes = shape.row_bytes();
  const std::vector<float> values(static_cast<size_t>(shape.head_dim), value);
  std::vector<uint8_t> data(static_cast<size_t>(rows * row_bytes));
  const float scale = kernels::QuantizeKvRow(m.kv_format, values.data(),
                                             static_cast<int>(shape.head_dim), data.data());
  for (int64_t r = 1; r < rows; ++r) {
    std::memcpy(data.data() + r * row_bytes, data.data(), static_cast<size_t>(row_bytes));
  }
  const std::vector<float> scales(static_cast<size_t>(rows), scale);
  for (int32_t block : block_ids) {
    for (size_t layer = 0; layer < m.k_cache.size(); ++layer) {
      for (int kv = 0; kv < 2; ++kv) {
        char* cache = static_cast<char*>(kv == 0 ? m.k_cache[layer] : m.v_cache[layer]);
        KVSERVE_RETURN_IF_CUDA_ERROR(cudaMemcpy(cache + block * rows * row_bytes, data.data(),
                                                data.size(), cudaMemcpyHostToDevice),
                                     "filling KV blocks");
        float* sc = kv == 0 ? m.k_scales[layer] : m.v_scales[layer];
        if (sc != nullptr) {
          KVSERVE_RETURN_IF_CUDA_ERROR(
              cudaMemcpy(sc + block * rows, scales.data(), scales.size() * sizeof(float),
                         cudaMemcpyHostToDevice),
              "filling KV blocks");
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
