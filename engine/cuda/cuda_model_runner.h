// CudaModelRunner: the CUDA StepRunner (engine/step_runner.h), the GPU twin of
// engine/model_runner.h. One forward step of engine/decoder.h's decoder over
// a flattened batch (StepInput) on one CUDA device:
// weights in GPU memory (DeviceWeights), the paged KV pool in GPU memory in
// the layout of engine/kv_cache.h (in the serving dtype), activations in a
// per-step arena. It returns logits to the host, or, when the step carries
// sample_specs, samples on the device and returns only the chosen ids and
// logprobs (kernels/cuda/sampling.h).
//
// Step data flow (n tokens; every kernel on one stream, one sync at the end):
//   upload metadata (one pinned copy) -> embedding -> input norm ->
//   per layer: qkv GEMM -> RoPE -> KV write -> paged attention -> o GEMM ->
//              add + norm -> gate_up GEMM -> SiLU*up -> down GEMM -> add + norm
//   -> gather the logits rows -> lm_head GEMM (fp32 logits) -> [sample] -> copy back
//
// Batch-invariant mode (options.batch_invariant): attention through the
// split-KV kernel for every token and matrix products through GemmInvariant,
// so a sequence's logits do not depend on the batch or its chunking (bit for
// bit on one GPU and build). Off by default: cuBLASLt and the tensor-core
// prefill kernel are faster. bench/cuda/e2e_decode_bench.cc measures the cost.
//
// This header includes no CUDA header. The daemon reaches the runner through
// the module of engine/cuda_backend.h; tests and benchmarks link it directly.
// Thread affinity: one thread calls Step at a time (the engine loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda_backend.h"
#include "engine/model.h"
#include "engine/step_input.h"
#include "engine/step_runner.h"

namespace kvserve::engine {

// Whether a CUDA device can be used; `why` says why not.
bool CudaDeviceAvailable(std::string* why = nullptr);

class CudaModelRunner final : public StepRunner {
 public:
  // `model` must outlive the runner. It may carry host weights (they are
  // uploaded) or none (LoadModelOptions::host_weights = false: the
  // checkpoint is uploaded, or a builtin's weights generated on the device).
  static absl::StatusOr<std::unique_ptr<CudaModelRunner>> Create(const Model& model,
                                                                 const CudaRunnerOptions& options);
  ~CudaModelRunner() override;

  // InvalidArgument for an ill-formed step (ValidateStepInput) or one past
  // the options' bounds; Internal for a CUDA failure (the runner is then
  // unusable: a sticky CUDA error poisons the context).
  absl::StatusOr<StepOutput> Step(const StepInput& input) override;
  bool SamplesOnDevice() const override { return true; }
  RunnerInfo Info() const override;

  int64_t num_blocks() const;
  int64_t block_size() const;
  std::string device_name() const;
  std::string dtype_name() const;
  int64_t weight_bytes() const;
  int64_t kv_cache_bytes() const;
  // Bytes of weights a decode step streams (the roofline's weight share).
  int64_t streamed_weight_bytes() const;

  // Fills every slot of the given blocks (all layers, K and V) with `value`
  // (tests poison unowned blocks with NaN).
  absl::Status FillKvBlocks(const std::vector<int32_t>& block_ids, float value);

 private:
  struct Impl;
  explicit CudaModelRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::engine
