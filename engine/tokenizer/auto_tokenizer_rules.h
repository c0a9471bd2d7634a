// transformers 5.23's AutoTokenizer does not always encode with the
// pipeline that tokenizer.json spells out. kvserve follows it (its token ids
// are what the model was served with through transformers), in these cases:
//  - tokenizer_config.json says tokenizer_class LlamaTokenizer(Fast), the
//    tokenizer.json is not byte-level, and config.json's model_type is not
//    one transformers loads with its generic backend (mistral, phi3, ...):
//    the LlamaTokenizer class rebuilds the pipeline from vocab and merges:
//    no normalizer, Metaspace(prepend_scheme = add_prefix_space ? (legacy ?
//    always : first) : never, split = false), decoder Replace, ByteFallback,
//    Fuse (+ Strip(1) with add_prefix_space), BPE with byte_fallback and
//    fuse_unk and no unk token. legacy defaults to false and
//    add_prefix_space to true, so the Prepend + Replace normalizer of Llama
//    2's tokenizer.json is replaced by Metaspace "first".
//  - add_bos_token / add_eos_token in tokenizer_config.json replace the
//    post-processor by "[bos] $A [eos]" (see ApplyTokenizerConfig).
// Added tokens stay those of tokenizer.json (transformers takes them from
// tokenizer_config.json's added_tokens_decoder; save_pretrained writes both).
#pragma once

#include <string>

#include "engine/tokenizer/hf_bpe_tokenizer.h"

namespace kvserve::engine {

bool UsesLlamaTokenizerClass(const std::string& tokenizer_class, const std::string& model_type,
                             bool byte_level);
void ApplyLlamaTokenizerClass(bool legacy, bool add_prefix_space, HfBpeSpec* spec);

}  // namespace kvserve::engine
