#include "engine/tokenizer/hf_decoder.h"

#include "engine/tokenizer/hf_normalizer.h"

namespace kvserve::engine {

std::string ApplyPerTokenSteps(const HfDecoderSpec& spec, std::string_view token, bool first) {
  std::string s(token);
  for (const HfDecoderSpec::Step& step : spec.per_token) {
    if (!step.metaspace) {
      s = ReplaceAll(s, step.pattern, step.content);
    } else {
      // tokenizers drops every replacement character of token 0, not only
      // a leading one.
      const bool drop = first && step.metaspace_drop_first;
      s = ReplaceAll(s, step.pattern, drop ? "" : " ");
    }
  }
  return s;
}

}  // namespace kvserve::engine
