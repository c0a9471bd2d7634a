// What transformers 5.23's AutoTokenizer does with tokenizer_config.json,
// beyond reading tokenizer.json (see auto_tokenizer_rules.h).
#include "engine/tokenizer/auto_tokenizer_rules.h"

#include <algorithm>
#include <iterator>
#include <string_view>

namespace kvserve::engine {
namespace {

// config.json model types for which AutoTokenizer 5.23 ignores a declared
// LlamaTokenizer and loads tokenizer.json as it is (TOKENIZER_MAPPING_NAMES
// maps them to TokenizersBackend / MistralCommonBackend), e.g. mistral,
// mixtral, phi3. Llama 2 and TinyLlama ("llama") are not among them.
constexpr std::string_view kFileAsIsModelTypes[] = {"EvollaModel",
                                                    "arctic",
                                                    "aria",
                                                    "beam",
                                                    "bigbird_pegasus",
                                                    "camembertv2-base",
                                                    "canary",
                                                    "chatlm",
                                                    "cohere_asr",
                                                    "ernie4_5",
                                                    "ernie4_5_moe",
                                                    "flex_olmo",
                                                    "fuyu",
                                                    "glm",
                                                    "glm4",
                                                    "glm4_moe",
                                                    "glm4_moe_lite",
                                                    "glm4v",
                                                    "glm4v_moe",
                                                    "glm_image",
                                                    "glmasr",
                                                    "got_ocr2",
                                                    "gpt_bigcode",
                                                    "gradium_phonon_tts",
                                                    "granite",
                                                    "granitemoe",
                                                    "granitemoehybrid",
                                                    "granitemoeshared",
                                                    "h2ovl_chat",
                                                    "hyperclovax",
                                                    "hyperclovax_vlm",
                                                    "internlm2",
                                                    "internlm3",
                                                    "iquestcoder",
                                                    "jamba",
                                                    "kimi_k25",
                                                    "kimi_linear",
                                                    "kosmos-2",
                                                    "llava",
                                                    "llava_next",
                                                    "mimo_v2_flash",
                                                    "minicpm3",
                                                    "minicpm_ocr",
                                                    "minicpmv",
                                                    "minicpmv4_6",
                                                    "minicpmv4_7",
                                                    "minimax_m2",
                                                    "ministral",
                                                    "ministral3",
                                                    "mistral",
                                                    "mistral3",
                                                    "mistral_large4",
                                                    "mixtral",
                                                    "modernbert",
                                                    "modernbert-decoder",
                                                    "molmo",
                                                    "molmo2",
                                                    "nemo_speechlm",
                                                    "nemotron",
                                                    "nvfp4",
                                                    "nystromformer",
                                                    "olmo2",
                                                    "olmo3",
                                                    "olmo_hybrid",
                                                    "opencua",
                                                    "openvla",
                                                    "paddleocr_vl",
                                                    "pegasus_x",
                                                    "persimmon",
                                                    "phi3",
                                                    "phi3_v",
                                                    "phimoe",
                                                    "pix2struct",
                                                    "pixtral",
                                                    "pocket_tts",
                                                    "smolvlm",
                                                    "stablelm",
                                                    "step3_vl",
                                                    "umt5",
                                                    "vipllava",
                                                    "voxtral",
                                                    "voxtral_realtime",
                                                    "xlm-roberta-xl"};

}  // namespace

bool UsesLlamaTokenizerClass(const std::string& tokenizer_class, const std::string& model_type,
                             bool byte_level) {
  if (tokenizer_class != "LlamaTokenizer" && tokenizer_class != "LlamaTokenizerFast") return false;
  if (byte_level) return false;  // AutoTokenizer takes TokenizersBackend for those
  return std::ranges::find(kFileAsIsModelTypes, std::string_view(model_type)) ==
         std::end(kFileAsIsModelTypes);
}

void ApplyLlamaTokenizerClass(bool legacy, bool add_prefix_space, HfBpeSpec* spec) {
  spec->normalizer.clear();
  spec->byte_level = false;
  spec->split_merged_with_previous.clear();
  MetaspaceOptions metaspace;
  metaspace.prepend = !add_prefix_space ? MetaspaceOptions::Prepend::kNever
                      : legacy          ? MetaspaceOptions::Prepend::kAlways
                                        : MetaspaceOptions::Prepend::kFirst;
  metaspace.split = false;
  spec->metaspace = metaspace;
  HfDecoderSpec decoder;
  decoder.per_token.push_back({.pattern = "\xE2\x96\x81", .content = " "});
  decoder.byte_fallback = true;
  if (add_prefix_space) {
    decoder.strip_content = " ";
    decoder.strip_start = 1;
  }
  spec->decoder = decoder;
  spec->bpe.byte_fallback = true;
  spec->bpe.fuse_unk = true;
  spec->bpe.ignore_merges = false;
  spec->bpe.unk_token.reset();
}

}  // namespace kvserve::engine
