#include "engine/model_runner.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/decoder.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

namespace kvserve::engine {
namespace {

KvCacheShape ShapeFor(const ModelConfig& c, const RunnerOptions& o) {
  return KvCacheShape{.num_layers = c.num_layers,
                      .num_blocks = o.num_blocks,
                      .num_kv_heads = c.num_kv_heads,
                      .block_size = o.block_size,
                      .head_dim = c.head_dim,
                      .dtype = o.kv_cache_dtype};
}

}  // namespace

ModelRunner::ModelRunner(const Model& model, const RunnerOptions& options)
    : model_(model),
      cache_(ShapeFor(model.config, options)),
      pool_(options.pool != nullptr ? options.pool : &kernels::ThreadPool::Default()) {}

// engine/decoder.h's operations over the CPU kernels, for one step. Every
// operation runs over the step's n tokens on the runner's pool; none fails.
class ModelRunner::Ops {
 public:
  Ops(ModelRunner& runner, const StepInput& in)
      : r_(runner),
        c_(runner.model_.config),
        in_(in),
        n_(in.num_tokens()),
        eps_(static_cast<float>(c_.rms_norm_eps)) {}

  float* At(float* base, int64_t elements) const { return base + elements; }

  absl::Status Embed(float* residual) {
    kernels::EmbeddingLookup(r_.model_.weights.embedding(), in_.token_ids.data(), n_, residual);
    return absl::OkStatus();
  }
  absl::Status ScaleResidual(float* residual, float factor) {
    kernels::Scale(residual, n_ * c_.hidden_size, factor);
    return absl::OkStatus();
  }
  absl::Status Norm(const float* in, const kernels::AlignedBuffer& norm, float* out, const char*) {
    kernels::RmsNorm(in, norm.data(), out, n_, c_.hidden_size, eps_, r_.pool_);
    return absl::OkStatus();
  }
  absl::Status HeadNorm(float* x, int64_t stride, int64_t heads, const kernels::AlignedBuffer& norm,
                        const char*) {
    kernels::HeadRmsNorm(x, stride, n_, heads, norm.data(), c_.head_dim, eps_, r_.pool_);
    return absl::OkStatus();
  }
  absl::Status NormInPlace(float* x, const kernels::AlignedBuffer& norm, const char* what) {
    return Norm(x, norm, x, what);
  }
  absl::Status AddNorm(float* residual, const float* x, const kernels::AlignedBuffer& norm,
                       float* normed, const char*) {
    kernels::AddRmsNorm(residual, x, norm.data(), normed, n_, c_.hidden_size, eps_, r_.pool_);
    return absl::OkStatus();
  }
  absl::Status Linear(const float* in, int64_t k, const kernels::PackedMatrix& w,
                      const std::vector<float>& bias, int64_t n, float* out, const char* what) {
    return Product(in, n_, k, w, bias.empty() ? nullptr : bias.data(), n, out);
  }
  absl::Status Linear(const float* in, int64_t k, const kernels::PackedMatrix& w, std::nullptr_t,
                      int64_t n, float* out, const char*) {
    return Product(in, n_, k, w, nullptr, n, out);
  }
  absl::Status Rope(float* q, float* k, int64_t stride, bool local) {
    kernels::ApplyRope(
        {.q = q,
         .k = k,
         .q_stride = stride,
         .k_stride = stride,
         .positions = in_.positions.data(),
         .inv_freq = local ? r_.model_.local_rope_inv_freq.data() : r_.model_.rope_inv_freq.data(),
         .attention_scaling = local ? 1.0f : r_.model_.rope_attention_scaling,
         .num_tokens = static_cast<int>(n_),
         .num_heads = static_cast<int>(c_.num_heads),
         .num_kv_heads = static_cast<int>(c_.num_kv_heads),
         .head_dim = static_cast<int>(c_.head_dim),
         .rotary_dim = static_cast<int>(c_.RotaryDim())},
        r_.pool_);
    return absl::OkStatus();
  }
  bool KvRowsRotated() const { return kernels::KvRowsRotated(r_.cache_.shape().dtype); }
  absl::Status RotateHeads(float* x, int64_t stride, int64_t heads) {
    kernels::RotateHeads(x, stride, n_, heads, c_.head_dim, r_.pool_);
    return absl::OkStatus();
  }
  absl::Status WriteKv(int64_t layer, const float* k, const float* v, int64_t stride) {
    KvCache& cache = r_.cache_;
    kernels::WriteKvCache({.k = k,
                           .v = v,
                           .src_stride = stride,
                           .k_cache = cache.k(layer),
                           .v_cache = cache.v(layer),
                           .kv_dtype = cache.shape().dtype,
                           .k_scales = cache.k_scales(layer),
                           .v_scales = cache.v_scales(layer),
                           .slot_mapping = in_.slot_mapping.data(),
                           .num_tokens = static_cast<int>(n_),
                           .num_kv_heads = static_cast<int>(c_.num_kv_heads),
                           .head_dim = static_cast<int>(c_.head_dim),
                           .block_size = static_cast<int>(r_.block_size())});
    return absl::OkStatus();
  }
  absl::Status Attention(int64_t layer, const float* q, int64_t stride, const AttentionShape& shape,
                         float* out) {
    KvCache& cache = r_.cache_;
    kernels::PagedAttention({.q = q,
                             .q_stride = stride,
                             .out = out,
                             .k_cache = cache.k(layer),
                             .v_cache = cache.v(layer),
                             .kv_dtype = cache.shape().dtype,
                             .k_scales = cache.k_scales(layer),
                             .v_scales = cache.v_scales(layer),
                             .num_tokens = static_cast<int>(n_),
                             .num_heads = static_cast<int>(c_.num_heads),
                             .num_kv_heads = static_cast<int>(c_.num_kv_heads),
                             .head_dim = static_cast<int>(c_.head_dim),
                             .block_size = static_cast<int>(r_.block_size()),
                             .token_seq = r_.token_seq_.data(),
                             .token_pos = in_.positions.data(),
                             .block_table_start = in_.block_table_start.data(),
                             .block_ids = in_.block_ids.data(),
                             .scale = shape.scale,
                             .sliding_window = shape.sliding_window,
                             .softcap = shape.softcap},
                            r_.pool_);
    return absl::OkStatus();
  }
  absl::Status GatedActivation(Activation act, const float* gate_up, float* out) {
    if (act == Activation::kGeluTanh) {
      kernels::GeluTanhMul(gate_up, out, n_, c_.intermediate_size, r_.pool_);
    } else {
      kernels::SiluMul(gate_up, out, n_, c_.intermediate_size, r_.pool_);
    }
    return absl::OkStatus();
  }
  absl::Status GatherLogitRows(const float* normed, float* gathered) {
    const int64_t hidden = c_.hidden_size;
    for (size_t r = 0; r < in_.logits_indices.size(); ++r) {
      std::copy_n(normed + in_.logits_indices[r] * hidden, hidden, gathered + r * hidden);
    }
    return absl::OkStatus();
  }
  absl::Status Logits(const float* gathered, int64_t rows, float* logits) {
    return Product(gathered, rows, c_.hidden_size, r_.model_.weights.lm_head, nullptr,
                   c_.vocab_size, logits);
  }
  absl::Status SoftCap(float* logits, int64_t count, float cap) {
    kernels::SoftCap(logits, count, cap);
    return absl::OkStatus();
  }

 private:
  // y[m, w.n] = x[m, k] W^T (+ bias); n and k are the weight's own.
  absl::Status Product(const float* x, int64_t m, int64_t k, const kernels::PackedMatrix& w,
                       const float* bias, int64_t n, float* y) {
    kernels::Gemm({.x = x, .ldx = k, .w = &w, .bias = bias, .y = y, .ldy = n, .m = m}, r_.pool_);
    return absl::OkStatus();
  }

  ModelRunner& r_;
  const ModelConfig& c_;
  const StepInput& in_;
  const int64_t n_;
  const float eps_;
};

absl::StatusOr<StepOutput> ModelRunner::Step(const StepInput& in) {
  const ModelConfig& c = model_.config;
  KVSERVE_RETURN_IF_ERROR(ValidateStepInput(in, c.vocab_size, num_blocks(), block_size()));
  if (!in.sample_specs.empty()) {
    return absl::InvalidArgumentError(
        "step input: the CPU runner returns logits; it does not sample");
  }
  const int64_t n = in.num_tokens();
  const int64_t hidden = c.hidden_size;
  const int64_t q_width = c.num_heads * c.head_dim;
  const int64_t qkv_width = q_width + 2 * c.num_kv_heads * c.head_dim;
  const int64_t rows = static_cast<int64_t>(in.logits_indices.size());

  token_seq_.resize(n);
  for (int32_t s = 0; s < in.num_seqs(); ++s) {
    for (int32_t i = in.query_start[s]; i < in.query_start[s + 1]; ++i) token_seq_[i] = s;
  }
  residual_.resize(n * hidden);
  normed_.resize(n * hidden);
  qkv_.resize(n * qkv_width);
  attn_.resize(n * q_width);
  proj_.resize(n * hidden);
  gate_up_.resize(n * 2 * c.intermediate_size);
  act_.resize(n * c.intermediate_size);
  gathered_.resize(rows * hidden);
  StepOutput out;
  out.vocab_size = c.vocab_size;
  out.logits.resize(rows * c.vocab_size);

  Ops ops(*this, in);
  const DecoderActivations<float*> a{.residual = residual_.data(),
                                     .normed = normed_.data(),
                                     .qkv = qkv_.data(),
                                     .attn = attn_.data(),
                                     .proj = proj_.data(),
                                     .gate_up = gate_up_.data(),
                                     .act = act_.data(),
                                     .gathered = gathered_.data(),
                                     .logits = out.logits.data()};
  KVSERVE_RETURN_IF_ERROR(RunDecoder(ops, c, model_.weights, a, rows));
  return out;
}

RunnerInfo ModelRunner::Info() const {
  const KvCacheShape& shape = cache_.shape();
  return RunnerInfo{.device = "cpu",
                    .num_blocks = shape.num_blocks,
                    .block_size = shape.block_size,
                    .weight_bytes = model_.weights.TotalBytes(),
                    .kv_cache_bytes = shape.bytes_per_block() * shape.num_blocks,
                    .streamed_weight_bytes = model_.weights.StreamedBytesPerToken()};
}

}  // namespace kvserve::engine
