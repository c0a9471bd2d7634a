#include "engine/cuda/step_arena.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/status_macros.h"
#include "engine/cuda/cuda_model_runner.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/sample_rows.h"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::engine::cuda {
namespace {

using kernels::cuda::CudaSampleRow;
using kernels::cuda::CudaTokenLogprob;
using kernels::cuda::ElemSize;
using kernels::cuda::kCudaMaxLogprobs;

// The runner's KV format as the attention dispatcher takes it: "auto"
// (kFloat32 in the options) is the serving dtype's own cache.
std::optional<kernels::KvDtype> KvFormat(const CudaRunnerOptions& o) {
  if (o.kv_cache_dtype == kernels::KvDtype::kFloat32) return std::nullopt;
  return o.kv_cache_dtype;
}

// The split-KV workspace a step needs: none when the dispatcher sends the
// step to the prefill kernel (kernels/cuda/paged_attention.h), else room for
// every token of the step.
size_t AttentionWorkspace(const ModelConfig& c, const CudaRunnerOptions& o,
                          kernels::cuda::ElemType dtype, int64_t tokens, int32_t max_query_len,
                          int32_t max_seq_len) {
  if (!kernels::cuda::PagedAttentionUsesSplitKv(dtype, static_cast<int>(c.head_dim), max_query_len,
                                                o.batch_invariant, KvFormat(o))) {
    return 0;
  }
  return kernels::cuda::PagedAttentionWorkspaceBytes(static_cast<int>(tokens),
                                                     static_cast<int>(c.num_heads),
                                                     static_cast<int>(c.head_dim), max_seq_len);
}

void FillModelDims(StepShape& s, const ModelConfig& c, kernels::cuda::ElemType dtype) {
  s.dtype = dtype;
  s.hidden = c.hidden_size;
  s.q_width = c.num_heads * c.head_dim;
  s.qkv_width = s.q_width + 2 * c.num_kv_heads * c.head_dim;
  s.inter = c.intermediate_size;
  s.vocab = c.vocab_size;
}

// Carves the arena for `s`. With a null base only counts. Returns the
// buffers and the offsets of the metadata end and of the results.
struct Carved {
  StepBuffers b;
  size_t metadata_bytes = 0;
  size_t results_offset = 0;
  size_t results_bytes = 0;
  size_t total_bytes = 0;
};

Carved CarveStep(void* base, const StepShape& s) {
  Carver cv(base);
  Carved out;
  StepBuffers& b = out.b;
  const int64_t n = s.num_tokens;
  b.slot_mapping = cv.Take<int64_t>(n);
  b.token_ids = cv.Take<int32_t>(n);
  b.positions = cv.Take<int32_t>(n);
  b.token_seq = cv.Take<int32_t>(n);
  b.query_start = cv.Take<int32_t>(s.num_seqs + 1);
  b.block_table_start = cv.Take<int32_t>(s.num_seqs + 1);
  b.block_ids = cv.Take<int32_t>(s.num_block_ids);
  b.logits_indices = cv.Take<int32_t>(s.num_logits);
  if (s.sampling) {
    b.sample_rows = cv.Take<CudaSampleRow>(s.num_logits);
    b.penalty_tokens = cv.Take<int32_t>(s.num_penalty_tokens);
    b.penalty_counts = cv.Take<int32_t>(s.num_penalty_tokens);
    b.masked_tokens = cv.Take<int32_t>(s.num_masked_tokens);
  }
  out.metadata_bytes = cv.used();
  const size_t e = ElemSize(s.dtype);
  b.residual = cv.Take<float>(n * s.hidden);
  b.normed = cv.TakeBytes(n * s.hidden * e);
  b.qkv = cv.TakeBytes(n * s.qkv_width * e);
  b.attn = cv.TakeBytes(n * s.q_width * e);
  b.proj = cv.TakeBytes(n * s.hidden * e);
  b.gate_up = cv.TakeBytes(n * 2 * s.inter * e);
  b.act = cv.TakeBytes(n * s.inter * e);
  b.gathered = cv.TakeBytes(s.num_logits * s.hidden * e);
  b.logits = cv.Take<float>(s.num_logits * s.vocab);
  b.attention_workspace_bytes = s.attention_workspace_bytes;
  b.attention_workspace = cv.TakeBytes(s.attention_workspace_bytes);
  if (s.sampling) {
    b.sampling_workspace_bytes = kernels::cuda::SamplingWorkspaceBytes(
        static_cast<int>(s.num_logits), static_cast<int>(s.vocab));
    b.sampling_workspace = cv.TakeBytes(b.sampling_workspace_bytes);
    out.results_offset = (cv.used() + 255) / 256 * 256;
    b.out_tokens = cv.Take<int32_t>(s.num_logits);
    b.out_logprobs = cv.Take<float>(s.num_logits);
    b.out_top = cv.Take<CudaTokenLogprob>(s.num_logits * kCudaMaxLogprobs);
    out.results_bytes = cv.used() - out.results_offset;
  } else {
    out.results_offset = reinterpret_cast<char*>(b.logits) - static_cast<char*>(base);
    out.results_bytes = s.num_logits * s.vocab * sizeof(float);
  }
  out.total_bytes = cv.used();
  return out;
}

template <typename T>
T* HostAt(void* host_base, const void* device_ptr, const void* device_base) {
  return reinterpret_cast<T*>(
      static_cast<char*>(host_base) +
      (static_cast<const char*>(device_ptr) - static_cast<const char*>(device_base)));
}

}  // namespace

StepShape StepShape::Of(const StepInput& in, const ModelConfig& c, const CudaRunnerOptions& o,
                        kernels::cuda::ElemType dtype) {
  StepShape s;
  FillModelDims(s, c, dtype);
  s.num_tokens = in.num_tokens();
  s.num_seqs = in.num_seqs();
  s.num_block_ids = static_cast<int64_t>(in.block_ids.size());
  s.num_logits = static_cast<int64_t>(in.logits_indices.size());
  for (int32_t q = 0; q < s.num_seqs; ++q) {
    s.max_query_len = std::max(s.max_query_len, in.query_start[q + 1] - in.query_start[q]);
  }
  for (int32_t p : in.positions) s.max_seq_len = std::max(s.max_seq_len, p + 1);
  s.sampling = !in.sample_specs.empty();
  for (const SampleSpec& spec : in.sample_specs) {
    if (AnyPenalty(spec.params)) {
      // An upper bound on the distinct tokens; the exact count is filled in Prepare.
      s.num_penalty_tokens +=
          static_cast<int64_t>(spec.prompt_tokens.size() + spec.output_tokens.size());
    }
    s.num_masked_tokens += static_cast<int64_t>(spec.masked_tokens.size());
  }
  s.attention_workspace_bytes =
      AttentionWorkspace(c, o, dtype, s.num_tokens, s.max_query_len, s.max_seq_len);
  return s;
}

StepShape StepShape::Worst(const ModelConfig& c, const CudaRunnerOptions& o,
                           kernels::cuda::ElemType dtype) {
  StepShape s;
  FillModelDims(s, c, dtype);
  s.num_tokens = o.max_num_tokens;
  s.num_seqs = o.max_num_seqs;
  s.num_block_ids = int64_t{o.max_num_seqs} * ((o.max_model_len + o.block_size - 1) / o.block_size);
  s.num_logits = std::min<int64_t>(o.max_num_seqs, o.max_num_tokens);
  s.max_query_len = o.max_num_tokens;
  s.max_seq_len = o.max_model_len;
  s.sampling = true;
  // Of counts prompt + output tokens of each penalised row, at most
  // max_model_len (the scheduler's admission bound); without this room the
  // first step with a penalty would regrow the whole arena.
  s.num_penalty_tokens = s.num_logits * o.max_model_len;
  // Where chunks longer than one token also go through split-KV (fp32, small
  // head dims, batch-invariant mode, an fp32 KV cache): the whole token budget at
  // full length; else decode-only steps of max_num_seqs tokens at full length.
  const bool chunks_use_split_kv = kernels::cuda::PagedAttentionUsesSplitKv(
      dtype, static_cast<int>(c.head_dim), /*max_query_len=*/2, o.batch_invariant, KvFormat(o));
  s.attention_workspace_bytes = AttentionWorkspace(
      c, o, dtype, chunks_use_split_kv ? o.max_num_tokens : o.max_num_seqs, 1, o.max_model_len);
  return s;
}

absl::Status StepArena::Grow(size_t device_bytes, size_t host_in_bytes, size_t host_out_bytes) {
  if (device_bytes > device_.bytes()) {
    device_ = DeviceBuffer();  // free first: the old one is not needed
    KVSERVE_ASSIGN_OR_RETURN(device_, DeviceBuffer::Allocate(device_bytes, "step scratch"));
  }
  if (host_in_bytes > host_in_.bytes()) {
    host_in_ = PinnedBuffer();
    KVSERVE_ASSIGN_OR_RETURN(host_in_, PinnedBuffer::Allocate(host_in_bytes, "step metadata"));
  }
  if (host_out_bytes > host_out_.bytes()) {
    host_out_ = PinnedBuffer();
    KVSERVE_ASSIGN_OR_RETURN(host_out_, PinnedBuffer::Allocate(host_out_bytes, "step results"));
  }
  return absl::OkStatus();
}

absl::Status StepArena::Reserve(const StepShape& worst) {
  const Carved c = CarveStep(nullptr, worst);
  // Results: the larger of the logits and the samples.
  const size_t logits_bytes = worst.num_logits * worst.vocab * sizeof(float);
  return Grow(c.total_bytes, c.metadata_bytes, std::max(c.results_bytes, logits_bytes));
}

absl::StatusOr<StepBuffers> StepArena::Prepare(const StepShape& shape, const StepInput& in,
                                               cudaStream_t stream) {
  const Carved counted = CarveStep(nullptr, shape);
  if (counted.total_bytes > device_.bytes() || counted.metadata_bytes > host_in_.bytes() ||
      counted.results_bytes > host_out_.bytes()) {
    // Nothing of an earlier step is in flight: Step synchronises at its end.
    KVSERVE_RETURN_IF_ERROR(
        Grow(counted.total_bytes, counted.metadata_bytes, counted.results_bytes));
  }
  const Carved c = CarveStep(device_.get(), shape);
  current_ = c.b;
  results_offset_ = c.results_offset;
  results_bytes_ = c.results_bytes;
  const StepBuffers& b = c.b;
  void* host = host_in_.get();
  const void* dev = device_.get();
  auto copy = [&](auto* device_ptr, const auto& values) {
    if (values.empty()) return;
    using T = std::remove_cvref_t<decltype(values[0])>;
    std::memcpy(HostAt<T>(host, device_ptr, dev), values.data(), values.size() * sizeof(T));
  };
  copy(b.slot_mapping, in.slot_mapping);
  copy(b.token_ids, in.token_ids);
  copy(b.positions, in.positions);
  std::vector<int32_t> token_seq(in.num_tokens());
  for (int32_t s = 0; s < in.num_seqs(); ++s) {
    for (int32_t i = in.query_start[s]; i < in.query_start[s + 1]; ++i) token_seq[i] = s;
  }
  copy(b.token_seq, token_seq);
  copy(b.query_start, in.query_start);
  copy(b.block_table_start, in.block_table_start);
  copy(b.block_ids, in.block_ids);
  copy(b.logits_indices, in.logits_indices);
  if (shape.sampling) {
    SampleRowLists lists;
    for (const SampleSpec& spec : in.sample_specs) AppendSampleRow(spec, shape.vocab, &lists);
    copy(b.sample_rows, lists.rows);
    copy(b.penalty_tokens, lists.penalty_tokens);
    copy(b.penalty_counts, lists.penalty_counts);
    copy(b.masked_tokens, lists.masked_tokens);
  }
  KVSERVE_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(device_.get(), host, c.metadata_bytes, cudaMemcpyHostToDevice, stream),
      "uploading step metadata");
  return c.b;
}

absl::Status StepArena::CopyResults(const StepShape& shape, cudaStream_t stream) {
  if (results_bytes_ == 0) return absl::OkStatus();
  KVSERVE_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(host_out_.get(), static_cast<char*>(device_.get()) + results_offset_,
                      results_bytes_, cudaMemcpyDeviceToHost, stream),
      "copying step results");
  return absl::OkStatus();
}

std::vector<float> StepArena::Logits(const StepShape& shape) const {
  const float* p = static_cast<const float*>(host_out_.get());
  return std::vector<float>(p, p + shape.num_logits * shape.vocab);
}

std::vector<SampleResult> StepArena::Samples(const StepShape& shape, const StepInput& in) const {
  const void* dev = device_.get();
  const char* host = static_cast<const char*>(host_out_.get());
  auto at = [&](const void* device_ptr) {
    return host +
           (static_cast<const char*>(device_ptr) - static_cast<const char*>(dev) - results_offset_);
  };
  const auto* tokens = reinterpret_cast<const int32_t*>(at(current_.out_tokens));
  const auto* logprobs = reinterpret_cast<const float*>(at(current_.out_logprobs));
  const auto* top = reinterpret_cast<const CudaTokenLogprob*>(at(current_.out_top));
  std::vector<SampleResult> results(shape.num_logits);
  for (int64_t r = 0; r < shape.num_logits; ++r) {
    results[r].token = tokens[r];
    results[r].logprob = logprobs[r];
    const int64_t k =
        std::min<int64_t>({in.sample_specs[r].params.num_logprobs, kCudaMaxLogprobs, shape.vocab});
    for (int64_t j = 0; j < k; ++j) {
      const CudaTokenLogprob& t = top[r * kCudaMaxLogprobs + j];
      results[r].top_logprobs.push_back(TokenLogprob{.token = t.token, .logprob = t.logprob});
    }
  }
  return results;
}

}  // namespace kvserve::engine::cuda
