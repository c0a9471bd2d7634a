// StepRunner: the one interface every backend's runner implements and the
// scheduler drives. A runner owns the model's physical KV storage on its
// backend and runs one forward step over a flattened batch (StepInput),
// returning logits, or samples when it samples on its device.
//
// Implementations: engine::ModelRunner (CPU, engine/model_runner.h) and
// engine::CudaModelRunner (engine/cuda/cuda_model_runner.h, reached by the
// daemon through the module of engine/cuda_backend.h). Tests drive the
// scheduler through cheap fakes of it.
//
// Thread affinity: one thread calls Step at a time (the engine loop).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/step_input.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::engine {

// What a runner reports about itself (GetModelInfo, the startup line,
// benchmarks' rooflines). Fakes leave it empty.
struct RunnerInfo {
  std::string device;  // "cpu", or the GPU's name
  std::string dtype;   // the serving dtype of weights and activations ("" on the CPU)
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t weight_bytes = 0;
  int64_t kv_cache_bytes = 0;
  // Bytes of weights a decode step streams (the roofline's weight share).
  int64_t streamed_weight_bytes = 0;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  // InvalidArgument for an ill-formed step (ValidateStepInput) or one the
  // runner cannot take; a device runner's Internal error leaves it unusable.
  virtual absl::StatusOr<StepOutput> Step(const StepInput& input) = 0;

  // True for a runner that samples on its device: it is handed
  // StepInput::sample_specs and returns StepOutput::samples, not logits.
  virtual bool SamplesOnDevice() const { return false; }
  // The host thread pool the runner's steps use, which the scheduler may use
  // between steps on the same thread (it samples the rows of a step on it);
  // nullptr: the scheduler keeps to the calling thread.
  virtual kernels::ThreadPool* HostPool() const { return nullptr; }
  virtual RunnerInfo Info() const { return {}; }
};

}  // namespace kvserve::engine
