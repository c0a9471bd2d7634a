// The vocabulary as xgrammar sees it: the bytes every token id stands for.
//
// kvserve decodes each token itself (Tokenizer::AppendTokenBytes, as a token
// in the middle of a text: SentencePiece's "▁" is a space, a byte-fallback
// token <0xNN> its byte, a byte-level BPE token its bytes), so xgrammar gets
// the vocabulary as raw bytes (xgrammar::VocabType::RAW) whatever the
// tokenizer's kind, and never re-decodes byte-level or byte-fallback pieces.
// Special tokens (chat markers, <bos>, <eos>) are empty strings: xgrammar
// never allows an empty token inside a grammar, only a stop token at its end.
// Ids the model has beyond the tokenizer's (padding rows of the embedding)
// are never allowed either.
//
// The one text difference: SentencePiece drops the dummy-prefix space of a
// text's first token, which xgrammar sees as a space; a constrained text
// starting with "▁{" decodes to "{" but the grammar must allow the space.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace xgrammar {
class TokenizerInfo;
}

namespace kvserve::engine::grammar {

// The bytes of token id i at [i], for i < tokenizer.vocab_size(); special
// tokens empty.
std::vector<std::string> DecodedVocabulary(const Tokenizer& tokenizer);

// model_vocab_size: the logits row's length (tokenizer ids past it are
// dropped). stop_ids:
// the ids that end a grammar (the model's EOS ids).
xgrammar::TokenizerInfo MakeTokenizerInfo(const Tokenizer& tokenizer, int32_t model_vocab_size,
                                          std::span<const int32_t> stop_ids);

}  // namespace kvserve::engine::grammar
