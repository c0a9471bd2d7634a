// Serving a GGUF file (llama.cpp's format): its metadata as a ModelConfig and
// its tensors as a checkpoint under transformers' names, so that the one
// weight loader (engine/model_weights.h) and both runners read it as they
// read safetensors. The parser is gguf_file.h; the tokenizer is built from
// the same file by engine/tokenizer/gguf_tokenizer.h.
//
// Architectures (general.architecture): llama (incl. Mistral-style), qwen2,
// qwen3, phi3, gemma2, gemma3. The metadata is turned into the config.json
// transformers' GGUF loader would write, and parsed by ParseModelConfig, so a
// GGUF model gets exactly the family features a safetensors one does. What
// the file does not store, llama.cpp derives from the architecture, and so
// does this loader: Gemma 2 slides on every other layer, Gemma 3 on five of
// every six with a local rope theta of 10000, Gemma's attention scale is
// key_length^-0.5 (hidden_size / num_heads for the 27B models, by layer count).
//
// Tensors (llama.cpp name -> transformers name):
//   token_embd -> model.embed_tokens     output_norm -> model.norm
//   output -> lm_head (absent: tied)     blk.N. -> model.layers.N.
//   attn_norm -> input_layernorm         attn_{q,k,v} -> self_attn.{q,k,v}_proj
//   attn_output -> self_attn.o_proj      attn_{q,k}_norm -> self_attn.{q,k}_norm
//   ffn_{gate,up,down} -> mlp.{gate,up,down}_proj
//   ffn_norm -> post_attention_layernorm (Gemma: pre_feedforward_layernorm)
//   post_attention_norm -> post_attention_layernorm (Gemma)
//   post_ffw_norm -> post_feedforward_layernorm (Gemma)
//   phi3: attn_qkv -> self_attn.qkv_proj, ffn_up (gate and up) -> mlp.gate_up_proj
// Every tensor is dequantized to fp32 when found (exactly, gguf_dequant.h)
// and freed when released, and then undoes what llama.cpp's converter did:
//   - llama: q and k rows were permuted for llama.cpp's interleaved rope;
//     within each head of 2 * h rows, GGUF row 2i + a is transformers row
//     a * h + i (a in {0, 1}), restored here (weights and biases);
//   - gemma2 / gemma3: every "*norm" weight was stored as 1 + w; w is
//     restored in fp32 (transformers' GGUF loader does the same; the weight
//     loader adds the 1 back, model_weights.h).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/loader/gguf_file.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"

namespace kvserve::engine {

// The config.json transformers' GGUF loader would write for this file (as a
// JSON object; exposed for tests), and the validated config parsed from it.
absl::StatusOr<nlohmann::json> GgufConfigJson(const GgufFile& file);
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

// The file's tensors under transformers' names (see above). The checkpoint
// shares ownership of the file. `config` must be GgufModelConfig(*file).
std::unique_ptr<SafetensorsCheckpoint> MakeGgufCheckpoint(std::shared_ptr<const GgufFile> file,
                                                          const ModelConfig& config);

}  // namespace kvserve::engine
