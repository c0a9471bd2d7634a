#include "engine/grammar/grammar_vocab.h"

#include <algorithm>

#include "common/check.h"
#include "xgrammar/tokenizer_info.h"

namespace kvserve::engine::grammar {

std::vector<std::string> DecodedVocabulary(const Tokenizer& tokenizer) {
  std::vector<std::string> vocab(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    tokenizer.AppendTokenBytes(id, /*first=*/false, /*skip_special=*/false, &vocab[id]);
  }
  return vocab;
}

xgrammar::TokenizerInfo MakeTokenizerInfo(const Tokenizer& tokenizer, int32_t model_vocab_size,
                                          std::span<const int32_t> stop_ids) {
  std::vector<std::string> vocab = DecodedVocabulary(tokenizer);
  KVSERVE_CHECK(model_vocab_size > 0);
  // Ids past the logits row can never be drawn.
  if (vocab.size() > static_cast<size_t>(model_vocab_size)) vocab.resize(model_vocab_size);
  std::vector<int32_t> stops;
  for (int32_t id : stop_ids) {
    if (id >= 0 && id < model_vocab_size &&
        std::find(stops.begin(), stops.end(), id) == stops.end()) {
      stops.push_back(id);
    }
  }
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, model_vocab_size, stops,
                                 /*add_prefix_space=*/false);
}

}  // namespace kvserve::engine::grammar
