#include "engine/tokenizer/metaspace.h"

#include "engine/tokenizer/hf_normalizer.h"

namespace kvserve::engine {

void MetaspacePreTokenize(const MetaspaceOptions& options, std::string_view text,
                          bool at_input_start, std::vector<std::string>* out) {
  if (text.empty()) return;  // an empty piece gets no replacement either
  const std::string_view rep = options.replacement;
  std::string s = ReplaceAll(text, " ", rep);
  const bool prepend = options.prepend == MetaspaceOptions::Prepend::kAlways ||
                       (options.prepend == MetaspaceOptions::Prepend::kFirst && at_input_start);
  if (prepend && !std::string_view(s).starts_with(rep)) s.insert(0, rep);
  if (s.empty()) return;
  if (!options.split) {
    out->push_back(std::move(s));
    return;
  }
  // MergedWithNext: each occurrence starts a new piece.
  size_t start = 0;
  for (size_t pos = s.find(rep, 1); pos != std::string::npos; pos = s.find(rep, pos + rep.size())) {
    if (pos > start) out->push_back(s.substr(start, pos - start));
    start = pos;
  }
  out->push_back(s.substr(start));
}

void SplitMergedWithPrevious(std::string_view text, std::string_view delimiter,
                             std::vector<std::string>* out) {
  size_t start = 0;
  for (size_t pos = text.find(delimiter); pos != std::string_view::npos;
       pos = text.find(delimiter, start)) {
    out->emplace_back(text.substr(start, pos + delimiter.size() - start));
    start = pos + delimiter.size();
  }
  if (start < text.size()) out->emplace_back(text.substr(start));
}

}  // namespace kvserve::engine
