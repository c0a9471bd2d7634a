// The decoders of a SentencePiece-converted tokenizer.json (Llama 2,
// Mistral, Gemma, Phi-3), as a checked spec. Supported chains (a Sequence,
// or one decoder alone):
//   per-token steps:  Replace(literal -> content), Metaspace   (any order)
//   then optionally:  ByteFallback
//   then optionally:  Fuse
//   then optionally:  Strip(content, start = n, stop = 0), after a Fuse
// How kvserve applies it (tokenizer.h): each token's text goes through the
// per-token steps (Metaspace drops its replacement characters in the first
// token instead of turning them into spaces, unless prepend_scheme is
// never); with ByteFallback, a token whose result is "<0xNN>" is a byte
// token, and a run of byte tokens decodes to its bytes when they are valid
// UTF-8 and to one U+FFFD per byte otherwise; Strip removes up to n leading
// `content` characters of the whole text (the Fuse before it made the text
// one token). The ByteLevel decoder is the other pipeline (hf_bpe_tokenizer.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::engine {

struct HfDecoderSpec {
  struct Step {
    bool metaspace = false;
    std::string pattern;               // Replace: the literal; Metaspace: the replacement
    std::string content;               // Replace: what it becomes
    bool metaspace_drop_first = true;  // Metaspace: prepend_scheme != never
  };
  std::vector<Step> per_token;
  bool byte_fallback = false;
  std::string strip_content;  // one code point, or empty
  int strip_start = 0;
};

// The text of one token after the per-token steps. `first`: the token is
// the first one decoded.
std::string ApplyPerTokenSteps(const HfDecoderSpec& spec, std::string_view token, bool first);

}  // namespace kvserve::engine
