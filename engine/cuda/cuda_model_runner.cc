#include "engine/cuda/cuda_model_runner.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/builtin_models.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/step_arena.h"
#include "engine/decoder.h"
#include "engine/kv_cache.h"
#include "kernels/cpu/elementwise.h"
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

// kAuto: the checkpoint's embedding dtype; builtin llama3-8b is bf16, the
// small builtins fp32 (as their CPU weights).
absl::StatusOr<ElemType> ServingDtype(const Model& model, WeightDtype requested) {
  switch (requested) {
    case WeightDtype::kFloat32:
      return ElemType::kF32;
    case WeightDtype::kBfloat16:
      return ElemType::kBF16;
    case WeightDtype::kFloat16:
      return ElemType::kF16;
    case WeightDtype::kAuto:
      break;
  }
  if (model.checkpoint != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(const TensorInfo* info,
                             model.checkpoint->Find("model.embed_tokens.weight"));
    return cuda::ElemTypeOf(info->dtype);
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
  // The cache's row format: options.kv_cache_dtype, auto (nullopt) resolved
  // to the serving dtype's (bf16 serving keeps a bf16 cache).
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
  class Ops;  // engine/decoder.h's operations, for one step
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
  KVSERVE_ASSIGN_OR_RETURN(dtype, ServingDtype(model, options.dtype));
  kv_format = options.kv_cache_dtype.value_or(kernels::cuda::KvDtypeOf(dtype));

  KVSERVE_RETURN_IF_CUDA_ERROR(cudaSetDevice(options.device),
                               absl::StrCat("selecting device ", options.device));
  cudaDeviceProp prop{};
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, options.device),
                               "reading device properties");
  device_name = prop.name;
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                               "creating the step stream");

  if (model.checkpoint != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(weights, cuda::UploadWeights(model.config, *model.checkpoint, dtype));
  } else if (model.builtin_seed.has_value()) {
    KVSERVE_ASSIGN_OR_RETURN(
        weights, cuda::GenerateBuiltinWeights(model.config, *model.builtin_seed, dtype));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", model.name, "\" has neither a checkpoint nor a builtin seed"));
  }

  KVSERVE_ASSIGN_OR_RETURN(
      inv_freq, DeviceBuffer::Allocate(model.rope_inv_freq.size() * sizeof(float), "rope"));
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
  KVSERVE_ASSIGN_OR_RETURN(cublas_workspace,
                           DeviceBuffer::Allocate(kCublasWorkspaceBytes, "cuBLASLt workspace"));
  cublas.workspace = cublas_workspace.get();
  cublas.workspace_bytes = cublas_workspace.bytes();

  // Scratch for the largest step the options allow, before the KV pool takes
  // what is left.
  const StepShape worst = StepShape::Worst(model.config, options, dtype);
  KVSERVE_RETURN_IF_ERROR(arena.Reserve(worst));
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
  KVSERVE_ASSIGN_OR_RETURN(kv, DeviceBuffer::Allocate(kv_bytes, "the KV cache"));
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

// engine/decoder.h's operations over the CUDA kernels, for one step: every
// kernel queued on the runner's stream over the step's n tokens, activations
// in the serving dtype (the residual stream in fp32), each error naming the
// operation.
class CudaModelRunner::Impl::Ops {
 public:
  Ops(Impl& m, const StepShape& shape, const cuda::StepBuffers& b)
      : m_(m),
        c_(m.model.config),
        b_(b),
        shape_(shape),
        n_(shape.num_tokens),
        eps_(static_cast<float>(c_.rms_norm_eps)),
        norm_offset_(NormOffset(c_)) {}

  void* At(void* base, int64_t elements) const { return engine::At(base, elements, m_.dtype); }

  absl::Status Embed(void* residual) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::EmbeddingLookup(m_.weights.embed_tokens, m_.dtype, c_.hidden_size,
                                       b_.token_ids, n_, static_cast<float*>(residual), m_.stream),
        "embedding lookup");
    return absl::OkStatus();
  }
  absl::Status ScaleResidual(void* residual, float factor) {
    KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::ScaleF32(static_cast<float*>(residual),
                                                         n_ * c_.hidden_size, factor, m_.stream),
                                 "embedding scaling");
    return absl::OkStatus();
  }
  absl::Status Norm(void* in, const void* norm, void* out, const char* what) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::RmsNorm(static_cast<const float*>(in), norm, m_.dtype, out, m_.dtype, n_,
                               c_.hidden_size, eps_, m_.stream, norm_offset_),
        what);
    return absl::OkStatus();
  }
  absl::Status HeadNorm(void* x, int64_t stride, int64_t heads, const void* norm,
                        const char* what) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::HeadRmsNorm(x, m_.dtype, stride, n_, heads, norm, c_.head_dim, eps_,
                                   norm_offset_, m_.stream),
        what);
    return absl::OkStatus();
  }
  // One "head" as wide as the hidden state: the row's RMSNorm, in place.
  absl::Status NormInPlace(void* x, const void* norm, const char* what) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::HeadRmsNorm(x, m_.dtype, c_.hidden_size, n_, 1, norm, c_.hidden_size, eps_,
                                   norm_offset_, m_.stream),
        what);
    return absl::OkStatus();
  }
  absl::Status AddNorm(void* residual, void* x, const void* norm, void* normed, const char* what) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::AddRmsNorm(static_cast<float*>(residual), x, norm, m_.dtype, normed,
                                  m_.dtype, n_, c_.hidden_size, eps_, m_.stream, norm_offset_),
        what);
    return absl::OkStatus();
  }
  absl::Status Linear(const void* in, int64_t k, const void* w, const void* bias, int64_t n,
                      void* out, const char* what) {
    return m_.Linear(in, n_, w, bias, n, k, out, m_.dtype, what);
  }
  absl::Status Rope(void* q, void* k, int64_t stride, bool local) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::ApplyRope(
            {.dtype = m_.dtype,
             .q = q,
             .k = k,
             .q_stride = stride,
             .k_stride = stride,
             .positions = b_.positions,
             .inv_freq =
                 static_cast<const float*>(local ? m_.local_inv_freq.get() : m_.inv_freq.get()),
             .attention_scaling = local ? 1.0f : m_.model.rope_attention_scaling,
             .num_tokens = static_cast<int>(n_),
             .num_heads = static_cast<int>(c_.num_heads),
             .num_kv_heads = static_cast<int>(c_.num_kv_heads),
             .head_dim = static_cast<int>(c_.head_dim),
             .rotary_dim = static_cast<int>(c_.RotaryDim())},
            m_.stream),
        "rope");
    return absl::OkStatus();
  }
  bool KvRowsRotated() const { return kernels::KvRowsRotated(m_.kv_format); }
  absl::Status RotateHeads(void* x, int64_t stride, int64_t heads) {
    const int64_t block = kernels::HadamardBlock(c_.head_dim);
    const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
    KVSERVE_RETURN_IF_CUDA_ERROR(kernels::cuda::RotateHeads(x, m_.dtype, stride, n_, heads,
                                                            c_.head_dim, block, norm, m_.stream),
                                 "kv rotation");
    return absl::OkStatus();
  }
  absl::Status WriteKv(int64_t layer, void* k, void* v, int64_t stride) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::WriteKvCache({.dtype = m_.dtype,
                                     .k = k,
                                     .v = v,
                                     .src_stride = stride,
                                     .k_cache = m_.k_cache[layer],
                                     .v_cache = m_.v_cache[layer],
                                     .kv_dtype = m_.kv_format,
                                     .k_scales = m_.k_scales[layer],
                                     .v_scales = m_.v_scales[layer],
                                     .slot_mapping = b_.slot_mapping,
                                     .num_tokens = static_cast<int>(n_),
                                     .num_kv_heads = static_cast<int>(c_.num_kv_heads),
                                     .head_dim = static_cast<int>(c_.head_dim),
                                     .block_size = static_cast<int>(m_.options.block_size)},
                                    m_.stream),
        "kv cache write");
    return absl::OkStatus();
  }
  absl::Status Attention(int64_t layer, void* q, int64_t stride, const AttentionShape& attention,
                         void* out) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::PagedAttention({.dtype = m_.dtype,
                                       .q = q,
                                       .q_stride = stride,
                                       .out = out,
                                       .k_cache = m_.k_cache[layer],
                                       .v_cache = m_.v_cache[layer],
                                       .kv_dtype = m_.kv_format,
                                       .k_scales = m_.k_scales[layer],
                                       .v_scales = m_.v_scales[layer],
                                       .num_tokens = static_cast<int>(n_),
                                       .num_heads = static_cast<int>(c_.num_heads),
                                       .num_kv_heads = static_cast<int>(c_.num_kv_heads),
                                       .head_dim = static_cast<int>(c_.head_dim),
                                       .block_size = static_cast<int>(m_.options.block_size),
                                       .num_seqs = shape_.num_seqs,
                                       .token_seq = b_.token_seq,
                                       .token_pos = b_.positions,
                                       .query_start = b_.query_start,
                                       .block_table_start = b_.block_table_start,
                                       .block_ids = b_.block_ids,
                                       .max_query_len = shape_.max_query_len,
                                       .max_seq_len = shape_.max_seq_len,
                                       .scale = attention.scale,
                                       .sliding_window = attention.sliding_window,
                                       .softcap = attention.softcap,
                                       .batch_invariant = m_.options.batch_invariant,
                                       .workspace = b_.attention_workspace,
                                       .workspace_bytes = b_.attention_workspace_bytes},
                                      m_.stream),
        "paged attention");
    return absl::OkStatus();
  }
  absl::Status GatedActivation(Activation act, void* gate_up, void* out) {
    const int64_t inter = c_.intermediate_size;
    KVSERVE_RETURN_IF_CUDA_ERROR(
        act == Activation::kGeluTanh
            ? kernels::cuda::GeluTanhMul(gate_up, out, m_.dtype, n_, inter, m_.stream)
            : kernels::cuda::SiluMul(gate_up, out, m_.dtype, n_, inter, m_.stream),
        "gated activation");
    return absl::OkStatus();
  }
  absl::Status GatherLogitRows(void* normed, void* gathered) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::GatherRows(normed, b_.logits_indices, shape_.num_logits,
                                  c_.hidden_size * static_cast<int64_t>(ElemSize(m_.dtype)),
                                  gathered, m_.stream),
        "gathering the logits rows");
    return absl::OkStatus();
  }
  absl::Status Logits(void* gathered, int64_t rows, void* logits) {
    return m_.Linear(gathered, rows, m_.weights.lm_head, nullptr, c_.vocab_size, c_.hidden_size,
                     logits, ElemType::kF32, "lm_head");
  }
  absl::Status SoftCap(void* logits, int64_t count, float cap) {
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::SoftCapF32(static_cast<float*>(logits), count, cap, m_.stream),
        "final logit soft-capping");
    return absl::OkStatus();
  }

 private:
  Impl& m_;
  const ModelConfig& c_;
  const cuda::StepBuffers& b_;
  const StepShape& shape_;
  const int64_t n_;
  const float eps_;
  const float norm_offset_;
};

absl::StatusOr<StepOutput> CudaModelRunner::Impl::Step(const StepInput& in) {
  const ModelConfig& c = model.config;
  KVSERVE_RETURN_IF_ERROR(ValidateStepInput(in, c.vocab_size, num_blocks, options.block_size));
  if (in.num_tokens() > options.max_num_tokens || in.num_seqs() > options.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("step input: ", in.num_tokens(), " tokens in ", in.num_seqs(),
                     " sequences exceed the runner's bounds (max_num_tokens ",
                     options.max_num_tokens, ", max_num_seqs ", options.max_num_seqs, ")"));
  }
  for (const SampleSpec& spec : in.sample_specs) {
    // The sampler trusts its rows (num_logprobs sizes the out_top writes).
    KVSERVE_RETURN_IF_ERROR(spec.params.Validate());
  }
  StepOutput out;
  out.vocab_size = c.vocab_size;
  if (in.num_tokens() == 0) return out;

  const StepShape shape = StepShape::Of(in, c, options, dtype);
  KVSERVE_ASSIGN_OR_RETURN(const cuda::StepBuffers b, arena.Prepare(shape, in, stream));
  Ops ops(*this, shape, b);
  const DecoderActivations<void*> a{.residual = b.residual,
                                    .normed = b.normed,
                                    .qkv = b.qkv,
                                    .attn = b.attn,
                                    .proj = b.proj,
                                    .gate_up = b.gate_up,
                                    .act = b.act,
                                    .gathered = b.gathered,
                                    .logits = b.logits};
  KVSERVE_RETURN_IF_ERROR(RunDecoder(ops, c, weights, a, shape.num_logits));
  if (shape.num_logits > 0 && shape.sampling) {
    const kernels::cuda::CudaSamplingParams sp{.logits = b.logits,
                                               .num_rows = static_cast<int>(shape.num_logits),
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
  KVSERVE_RETURN_IF_ERROR(arena.CopyResults(shape, stream));
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream), "running the step");
  if (shape.sampling) {
    out.samples = arena.Samples(shape, in);
  } else {
    out.logits = arena.Logits(shape);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CudaModelRunner>> CudaModelRunner::Create(
    const Model& model, const CudaRunnerOptions& options) {
  KVSERVE_RETURN_IF_ERROR(CheckCudaSupports(model.config));
  std::string why;
  if (!CudaDeviceAvailable(&why)) {
    return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", why));
  }
  auto impl = std::make_unique<Impl>(model);
  impl->options = options;
  KVSERVE_RETURN_IF_ERROR(impl->Init());
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

RunnerInfo CudaModelRunner::Info() const {
  return RunnerInfo{.device = device_name(),
                    .dtype = dtype_name(),
                    .num_blocks = num_blocks(),
                    .block_size = block_size(),
                    .weight_bytes = weight_bytes(),
                    .kv_cache_bytes = kv_cache_bytes(),
                    .streamed_weight_bytes = streamed_weight_bytes()};
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
