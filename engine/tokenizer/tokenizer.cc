// Decode, IncrementalDetokenizer and ToValidUtf8: the parts of decoding that
// are the same for every tokenizer (the rules are in tokenizer.h).
#include "engine/tokenizer/tokenizer.h"

#include "engine/tokenizer/utf8.h"

namespace kvserve::engine {
namespace {

// A finished run of byte tokens: all of it, or one U+FFFD per byte (what
// the ByteFallback decoder of tokenizers does).
std::string RenderByteRun(const std::string& run) {
  if (utf8::IsValid(run)) return run;
  std::string replaced;
  for (size_t i = 0; i < run.size(); ++i) replaced.append(utf8::kReplacement);
  return replaced;
}

}  // namespace

std::string ToValidUtf8(std::string_view bytes, bool per_byte) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const utf8::ScanResult r = utf8::ScanOne(bytes.substr(i));
    if (r.kind == utf8::Scan::kValid) {
      out.append(bytes.substr(i, r.length));
    } else {
      // A truncated tail is one maximal subpart too.
      for (size_t k = 0; k < (per_byte ? r.length : 1); ++k) out.append(utf8::kReplacement);
    }
    i += r.length;
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  IncrementalDetokenizer detok(*this, skip_special);
  std::string text;
  for (const int32_t id : ids) text += detok.Push(id);
  text += detok.Flush();
  return text;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer),
      skip_special_(skip_special),
      per_byte_(tokenizer.ReplacePerByte()),
      strip_(tokenizer.leading_strip()) {
  if (strip_.content.empty()) strip_.count = 0;
}

// Appends valid UTF-8 `text` to *out, minus what the leading strip removes.
void IncrementalDetokenizer::Emit(std::string_view text, std::string* out) {
  while (strip_.count > 0 && !text.empty()) {
    if (!text.starts_with(strip_.content)) {
      strip_.count = 0;  // the text has begun: nothing more is stripped
      break;
    }
    text.remove_prefix(strip_.content.size());
    --strip_.count;
  }
  if (!text.empty()) strip_.count = 0;
  out->append(text);
}

// Invariants between calls: when in_run_, pending_ is the bytes of the byte
// tokens since the last other token (their fate depends on the whole run);
// otherwise pending_ is empty or a proper prefix of a valid UTF-8 sequence
// (at most 3 bytes). Everything before such a tail decodes the same whatever
// follows, so emitting it keeps Push()... + Flush() == Decode().
std::string IncrementalDetokenizer::Push(int32_t id) {
  // A skipped special token is not there at all: it does not end a run.
  if (skip_special_ && tokenizer_.IsSpecial(id)) return {};
  std::string out;
  const bool byte_token = tokenizer_.IsByteToken(id);
  if (in_run_ && !byte_token) {
    Emit(RenderByteRun(pending_), &out);
    pending_.clear();
    in_run_ = false;
  } else if (!in_run_ && byte_token && !pending_.empty()) {
    // Not reached with HF tokens (their texts are valid UTF-8), kept for
    // safety: an open sequence ends where a run starts.
    Emit(ToValidUtf8(pending_, per_byte_), &out);
    pending_.clear();
  }
  const size_t before = pending_.size();
  tokenizer_.AppendTokenBytes(id, first_, skip_special_, &pending_);
  if (first_ && (pending_.size() != before || tokenizer_.EndsFirstPosition(id))) first_ = false;
  if (byte_token) {
    in_run_ = true;
    return out;
  }
  const size_t complete = utf8::CompletePrefixLength(pending_);
  if (complete > 0) {
    Emit(ToValidUtf8(std::string_view(pending_).substr(0, complete), per_byte_), &out);
    pending_.erase(0, complete);
  }
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  if (in_run_) {
    Emit(RenderByteRun(pending_), &out);
  } else {
    Emit(ToValidUtf8(pending_, per_byte_), &out);
  }
  pending_.clear();
  in_run_ = false;
  return out;
}

}  // namespace kvserve::engine
