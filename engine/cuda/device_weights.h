// DeviceWeights: a Llama-family model's parameters in GPU memory, in one
// allocation, in the serving dtype (the checkpoint's own unless overridden),
// in the checkpoint's layout: every linear weight row-major [out, in] as
// nn.Linear stores it (kernels/cuda/gemm.h takes that as is), with q/k/v and
// gate/up fused by stacking rows exactly as the CPU weights are
// (engine/model_weights.h):
//
//   qkv:     rows [0, H*D) = q_proj, [H*D, (H+KV)*D) = k_proj, then v_proj
//   gate_up: rows [0, I) = gate_proj, [I, 2I) = up_proj
//
// Phi-3 checkpoints hold these fused already (qkv_proj, gate_up_proj) in the
// same row order. Norm weights and biases are stored in the same dtype, as
// the checkpoint has them (Gemma's 1 + w is added inside the norm kernels).
// A tied lm_head points at the embedding table.
//
// Ownership: DeviceWeights owns the allocation; the pointers below point into
// it and live as long as it does.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"
#include "kernels/cuda/cuda_types.h"

namespace kvserve::engine::cuda {

struct DeviceLayerWeights {
  void* input_norm = nullptr;           // [hidden]
  void* qkv = nullptr;                  // [(H + 2 KV) * D, hidden]
  void* qkv_bias = nullptr;             // [(H + 2 KV) * D] or nullptr
  void* o_proj = nullptr;               // [hidden, H * D]
  void* o_proj_bias = nullptr;          // [hidden] or nullptr
  void* q_norm = nullptr;               // [D], qk_norm models (Qwen3, Gemma 3)
  void* k_norm = nullptr;               // [D]
  void* attn_output_norm = nullptr;     // [hidden], sandwich_norms (Gemma)
  void* mlp_input_norm = nullptr;       // [hidden]
  void* mlp_output_norm = nullptr;      // [hidden], sandwich_norms (Gemma)
  void* gate_up = nullptr;              // [2 I, hidden]
  void* down = nullptr;                 // [hidden, I]
};

struct DeviceWeights {
  kernels::cuda::ElemType dtype = kernels::cuda::ElemType::kBF16;
  DeviceBuffer storage;
  void* embed_tokens = nullptr;  // [vocab, hidden]
  std::vector<DeviceLayerWeights> layers;
  void* final_norm = nullptr;  // [hidden]
  void* lm_head = nullptr;     // [vocab, hidden] (== embed_tokens when tied)

  // Bytes a decode step reads from the weights (every matrix and norm once,
  // the embedding table not: a lookup reads one row): the roofline's share.
  int64_t streamed_bytes = 0;
};

// The device element type of a checkpoint dtype.
kernels::cuda::ElemType ElemTypeOf(DType dtype);

// Uploads from a checkpoint (fp32, fp16 or bf16 tensors), converting to
// `dtype` on the device in bounded chunks. Errors name the tensor.
absl::StatusOr<DeviceWeights> UploadWeights(const ModelConfig& config,
                                            const SafetensorsCheckpoint& checkpoint,
                                            kernels::cuda::ElemType dtype);

// Generates a builtin model's weights on the device (engine/builtin_models.h:
// the same tensors, bit for bit in fp32, as MakeBuiltinCheckpoint), then
// stores them as `dtype`. Needs no host memory, whatever the shape.
absl::StatusOr<DeviceWeights> GenerateBuiltinWeights(const ModelConfig& config, uint64_t seed,
                                                     kernels::cuda::ElemType dtype);

}  // namespace kvserve::engine::cuda
