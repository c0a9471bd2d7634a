// ModelRunner (CPU backend): the StepRunner (engine/step_runner.h) that runs
// one forward step of a decoder-only model (engine/decoder.h) over a
// flattened batch, writing the new tokens' K/V into the paged KvCache it
// owns, and returns logits for the requested tokens.
//
// It knows nothing about requests: which blocks a sequence owns and which
// tokens to compute are the scheduler's decisions, passed in every step.
//
// Batch invariance (docs/architecture.md): every kernel computes a token's values with a
// reduction order that depends only on that token's own data, so a sequence's
// logits are bit-identical alone, in any batch, under any chunking, and
// after recomputation.
//
// Thread affinity: one thread calls Step at a time (the engine loop).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/step_input.h"
#include "engine/step_runner.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::engine {

struct RunnerOptions {
  int64_t num_blocks = 256;
  int64_t block_size = 16;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kFloat32;  // row format (engine/kv_cache.h)
  kernels::ThreadPool* pool = nullptr;                   // nullptr: ThreadPool::Default()
};

class ModelRunner final : public StepRunner {
 public:
  // `model` must outlive the runner.
  ModelRunner(const Model& model, const RunnerOptions& options);

  // InvalidArgument (naming the sequence and token) for an ill-formed step:
  // token id outside the vocabulary, slot or block id outside the cache,
  // positions that are not contiguous, or a block table shorter than needed.
  absl::StatusOr<StepOutput> Step(const StepInput& input) override;
  kernels::ThreadPool* HostPool() const override { return pool_; }
  RunnerInfo Info() const override;

  const Model& model() const { return model_; }
  KvCache& kv_cache() { return cache_; }
  int64_t block_size() const { return cache_.shape().block_size; }
  int64_t num_blocks() const { return cache_.shape().num_blocks; }
  // The pool every kernel of a step runs on (owned elsewhere; see RunnerOptions).
  kernels::ThreadPool* pool() const { return pool_; }

 private:
  class Ops;  // engine/decoder.h's operations on the CPU kernels

  const Model& model_;
  KvCache cache_;
  kernels::ThreadPool* pool_;

  // Per-step scratch, reused across steps (sized for the largest step so far).
  std::vector<int32_t> token_seq_;
  std::vector<float> residual_, normed_, qkv_, attn_, proj_, gate_up_, act_, gathered_;
};

}  // namespace kvserve::engine
