#include "engine/cuda_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/module/module_loader.h"

#ifndef KVSERVE_CUDA_BACKEND_MODULE_PATH
#define KVSERVE_CUDA_BACKEND_MODULE_PATH ""  // this build has no CUDA backend
#endif

namespace kvserve::engine {

absl::Status CheckCudaSupports(const ModelConfig& c) {
  // The CUDA runner is the Llama-family forward pass (Llama, Mistral, Qwen2):
  // separate q/k/v and gate/up tensors, SiLU, plain RMSNorm, full rotary with
  // default/linear/llama3 scaling, one window for every layer.
  const std::pair<bool, const char*> features[] = {
      {c.qk_norm, "per-head q/k RMSNorm (q_norm / k_norm)"},
      {c.model_type == "phi3", "fused qkv_proj / gate_up_proj checkpoint tensors"},
      {c.partial_rotary_factor != 1.0, "partial rotary (partial_rotary_factor)"},
      {c.rope_scaling.type == RopeScaling::Type::kLongRope, "longrope rope scaling"},
      {c.hidden_act != Activation::kSilu, "the gelu_pytorch_tanh MLP activation"},
      {c.norm_weight_plus_one || c.sandwich_norms, "Gemma's (1 + w) and sandwich RMSNorms"},
      {c.scale_embeddings, "embedding scaling by sqrt(hidden_size)"},
      {c.attn_logit_softcapping > 0.0, "attention logit soft-capping"},
      {c.final_logit_softcapping > 0.0, "final logit soft-capping"},
      {c.query_pre_attn_scalar > 0.0, "query_pre_attn_scalar"},
      {!c.sliding_layers.empty(), "per-layer sliding windows (layer_types)"},
      {c.local_rope_theta > 0.0, "a separate rope for sliding layers (rope_local_base_freq)"},
  };
  for (const auto& [used, feature] : features) {
    if (used) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.architecture, " (model_type ", c.model_type, ") uses ", feature,
                       ", which the CUDA backend does not implement; the CPU backend serves "
                       "this model (--backend=cpu)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const CudaBackendApi*> LoadCudaBackend() {
  struct Loaded {
    const CudaBackendApi* api = nullptr;
    std::string error;
  };
  static const Loaded loaded = [] {
    Loaded l;
    void* entry = nullptr;
    if (LoadModule("libkvserve_cuda_backend.so", "KVSERVE_CUDA_BACKEND_MODULE",
                   KVSERVE_CUDA_BACKEND_MODULE_PATH, kCudaBackendSymbol, /*deepbind=*/false, &entry,
                   &l.error) == nullptr) {
      if (!*KVSERVE_CUDA_BACKEND_MODULE_PATH)
        l.error += "\n  (this kvserve was built without CUDA)";
      return l;
    }
    const CudaBackendApi* api = reinterpret_cast<const CudaBackendApi* (*)()>(entry)();
    if (api == nullptr || api->abi_version != kCudaBackendAbiVersion) {
      l.error = absl::StrCat("libkvserve_cuda_backend.so is from another build (ABI version ",
                             api == nullptr ? -1 : api->abi_version, ", expected ",
                             kCudaBackendAbiVersion, ")");
      return l;
    }
    l.api = api;
    return l;
  }();
  if (loaded.api == nullptr) return absl::FailedPreconditionError(loaded.error);
  return loaded.api;
}

}  // namespace kvserve::engine
