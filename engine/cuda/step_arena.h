// StepArena: the CUDA runner's per-step device memory (metadata, activations,
// kernel workspaces, results) carved out of one allocation, and the pinned
// host buffers its copies go through.
//
// Layout of the device allocation, front to back (each piece 256-byte
// aligned, sized by the step's StepShape):
//
//   [ metadata: slot_mapping, token_ids, positions, token_seq, query_start,
//     block_table_start, block_ids, logits_indices, sample rows, penalty
//     tokens/counts, masked tokens ]        <- one host->device copy
//   [ activations: residual (fp32), normed, qkv, attn, proj, gate_up, act,
//     gathered ]
//   [ logits (fp32) ] [ attention workspace ] [ sampling workspace ]
//   [ results: out_tokens, out_logprobs, out_top ]  <- one device->host copy
//
// The metadata prefix is built in pinned host memory with the same carving,
// so one cudaMemcpyAsync moves it. The allocation grows (after a stream
// sync) when a step needs more than any step before; Reserve sizes it for
// the worst step the runner's options allow, so in practice it never does.
//
// Ownership: pointers in StepBuffers are valid until the next Prepare.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"
#include "engine/loader/model_config.h"
#include "engine/step_input.h"
#include "kernels/cuda/cuda_types.h"
#include "kernels/cuda/sampling.h"

namespace kvserve::engine {
struct CudaRunnerOptions;
}

namespace kvserve::engine::cuda {

struct StepShape {
  int64_t num_tokens = 0;
  int32_t num_seqs = 0;
  int64_t num_block_ids = 0;
  int64_t num_logits = 0;
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  bool sampling = false;
  int64_t num_penalty_tokens = 0;
  int64_t num_masked_tokens = 0;
  size_t attention_workspace_bytes = 0;
  // Model dimensions (copied so that sizes are computable from the shape).
  kernels::cuda::ElemType dtype = kernels::cuda::ElemType::kF32;
  int64_t hidden = 0, q_width = 0, qkv_width = 0, inter = 0, vocab = 0;

  static StepShape Of(const StepInput& in, const ModelConfig& c, const CudaRunnerOptions& o,
                      kernels::cuda::ElemType dtype);
  // The largest step `o` allows (sizes the arena once, up front).
  static StepShape Worst(const ModelConfig& c, const CudaRunnerOptions& o,
                         kernels::cuda::ElemType dtype);
};

// Device pointers into the arena for one step.
struct StepBuffers {
  int64_t* slot_mapping = nullptr;
  int32_t *token_ids = nullptr, *positions = nullptr, *token_seq = nullptr;
  int32_t *query_start = nullptr, *block_table_start = nullptr, *block_ids = nullptr;
  int32_t* logits_indices = nullptr;
  kernels::cuda::CudaSampleRow* sample_rows = nullptr;
  int32_t *penalty_tokens = nullptr, *penalty_counts = nullptr, *masked_tokens = nullptr;
  float* residual = nullptr;
  void *normed = nullptr, *qkv = nullptr, *attn = nullptr, *proj = nullptr;
  void *gate_up = nullptr, *act = nullptr, *gathered = nullptr;
  float* logits = nullptr;
  void* attention_workspace = nullptr;
  size_t attention_workspace_bytes = 0;
  void* sampling_workspace = nullptr;
  size_t sampling_workspace_bytes = 0;
  int32_t* out_tokens = nullptr;
  float* out_logprobs = nullptr;
  kernels::cuda::CudaTokenLogprob* out_top = nullptr;
};

class StepArena {
 public:
  // Allocates for `worst` (device and pinned host).
  absl::Status Reserve(const StepShape& worst);

  // Grows if needed, fills the metadata from `in` and queues its upload on
  // `stream`. The host metadata buffer is reused by the next step: the
  // caller synchronises the stream before calling Prepare again (Step does).
  absl::StatusOr<StepBuffers> Prepare(const StepShape& shape, const StepInput& in,
                                      cudaStream_t stream);

  // Queues the device->host copy of the step's results (logits, or samples).
  absl::Status CopyResults(const StepShape& shape, cudaStream_t stream);

  // After the stream is synchronised: the results in host form.
  std::vector<float> Logits(const StepShape& shape) const;
  std::vector<SampleResult> Samples(const StepShape& shape, const StepInput& in) const;

 private:
  absl::Status Grow(size_t device_bytes, size_t host_in_bytes, size_t host_out_bytes);

  DeviceBuffer device_;
  PinnedBuffer host_in_;
  PinnedBuffer host_out_;
  StepBuffers current_;
  size_t results_offset_ = 0;  // of out_tokens (or logits) in device_
  size_t results_bytes_ = 0;
};

}  // namespace kvserve::engine::cuda
