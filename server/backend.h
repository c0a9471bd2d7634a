// The model backend the daemon serves with: the loaded model, the StepRunner
// that runs it (CPU ModelRunner or CUDA runner) and the KV pool size the
// scheduler must use (the runner's own, for CUDA sized from GPU memory).
//
// --backend=auto picks cuda when an NVIDIA device node exists, the CUDA
// backend module (engine/cuda_backend.h) loads and a device is usable, else
// cpu (with a warning saying why, when a device node exists). --backend=cuda
// without all three is a startup error that says which is missing; it never
// falls back to the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "scheduler/engine_core.h"
#include "server/server_config.h"

namespace kvserve::server {

struct Backend {
  std::string name;    // "cpu" | "cuda"
  std::string device;  // "cpu", or the GPU's name
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::StepRunner> runner;
  int32_t num_blocks = 0;  // the null block included
  engine::KvCacheDtype kv_cache_dtype = engine::KvCacheDtype::kFloat32;
};

// Errors name the flag at fault (--model, --backend, --dtype, ...).
absl::StatusOr<Backend> MakeBackend(const ServerConfig& config);

}  // namespace kvserve::server
