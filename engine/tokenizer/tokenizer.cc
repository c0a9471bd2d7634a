// Decode, IncrementalDetokenizer and ToValidUtf8: the parts of decoding that
// are the same for every tokenizer.
#include "engine/tokenizer/tokenizer.h"

#include "engine/tokenizer/utf8.h"

namespace kvserve::engine {
namespace {

// Appends the bytes of `id` and advances the first-position state the way
// Tokenizer::EndsFirstPosition describes.
void AppendAndAdvance(const Tokenizer& tokenizer, int32_t id, bool skip_special, bool* first,
                      std::string* out) {
  const size_t before = out->size();
  tokenizer.AppendTokenBytes(id, *first, skip_special, out);
  if (*first && (out->size() != before || tokenizer.EndsFirstPosition(id))) *first = false;
}

}  // namespace

std::string ToValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const utf8::ScanResult r = utf8::ScanOne(bytes.substr(i));
    if (r.kind == utf8::Scan::kValid) {
      out.append(bytes.substr(i, r.length));
    } else {
      // One U+FFFD per maximal invalid subpart; a truncated tail is one subpart.
      out.append(utf8::kReplacement);
    }
    i += r.length;
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bool first = true;
  for (const int32_t id : ids) AppendAndAdvance(*this, id, skip_special, &first, &bytes);
  return ToValidUtf8(bytes);
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

// Invariant: pending_ is empty or a proper prefix of a valid UTF-8 sequence
// (at most 3 bytes). Everything before such a tail decodes the same whatever
// bytes follow, so emitting it now keeps Push()... + Flush() == Decode().
std::string IncrementalDetokenizer::Push(int32_t id) {
  AppendAndAdvance(tokenizer_, id, skip_special_, &first_, &pending_);
  const size_t complete = utf8::CompletePrefixLength(pending_);
  if (complete == 0) return {};
  const std::string_view pending = pending_;
  std::string text = ToValidUtf8(pending.substr(0, complete));
  pending_.erase(0, complete);
  return text;
}

std::string IncrementalDetokenizer::Flush() {
  std::string text = ToValidUtf8(pending_);
  pending_.clear();
  return text;
}

}  // namespace kvserve::engine
