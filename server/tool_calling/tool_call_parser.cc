#include "server/tool_calling/tool_call_parser.h"

#include <utility>

#include "common/check.h"

namespace kvserve::server::tool_calling {
namespace {

constexpr std::string_view kHermesBegin = "<tool_call>";
constexpr std::string_view kHermesEnd = "</tool_call>";
constexpr std::string_view kMistralBegin = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t SkipSpace(std::string_view text, size_t pos) {
  while (pos < text.size() && IsSpace(text[pos])) ++pos;
  return pos;
}

bool AllSpace(std::string_view text) { return SkipSpace(text, 0) == text.size(); }

// The length of the longest proper prefix of `marker` that `text` ends with:
// bytes that may still become the marker.
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// `text` is a non-empty proper prefix of `word`.
bool ProperPrefixOf(std::string_view text, std::string_view word) {
  return !text.empty() && text.size() < word.size() && word.substr(0, text.size()) == text;
}

enum class Scan { kCalls, kNeedMore, kMalformed };

// A JSON object or array at text[pos] (after spaces): its calls (an object
// is one call, an array a list of them) and where it ends.
Scan ScanCalls(std::string_view text, size_t pos, bool final, bool allow_array,
               std::vector<ToolCall>* calls, size_t* end) {
  pos = SkipSpace(text, pos);
  if (pos == text.size()) return final ? Scan::kMalformed : Scan::kNeedMore;
  if (text[pos] == '[' && !allow_array) return Scan::kMalformed;
  switch (ScanJsonValue(text, pos, end)) {
    case JsonScan::kIncomplete:
      return final ? Scan::kMalformed : Scan::kNeedMore;
    case JsonScan::kInvalid:
      return Scan::kMalformed;
    case JsonScan::kComplete:
      break;
  }
  std::optional<Json> value = ParseJson(text.substr(pos, *end - pos));
  if (!value.has_value()) return Scan::kMalformed;
  const Json items = value->is_array() ? *value : Json::array({*value});
  if (items.empty()) return Scan::kMalformed;  // "[]" calls nothing: it stays content
  for (const Json& item : items) {
    std::optional<ToolCall> call = CallFromJson(item);
    if (!call.has_value()) return Scan::kMalformed;
    calls->push_back(*std::move(call));
  }
  return Scan::kCalls;
}

// text starts with <tool_call>: one call and its </tool_call> (or the end of
// the text, when final).
Scan ScanHermesCall(std::string_view text, bool final, std::vector<ToolCall>* calls,
                    size_t* consumed) {
  size_t end = 0;
  const Scan scan = ScanCalls(text, kHermesBegin.size(), final, /*allow_array=*/false, calls, &end);
  if (scan != Scan::kCalls) return scan;
  const size_t after = SkipSpace(text, end);
  const std::string_view rest = text.substr(after);
  if (rest.substr(0, kHermesEnd.size()) == kHermesEnd) {
    *consumed = after + kHermesEnd.size();
    return Scan::kCalls;
  }
  if (rest.empty() || ProperPrefixOf(rest, kHermesEnd)) {
    if (!final) return Scan::kNeedMore;
    if (rest.empty()) {
      *consumed = text.size();  // unclosed last call: the text ended after it
      return Scan::kCalls;
    }
  }
  return Scan::kMalformed;
}

// The whole text's calls: Llama 3's objects separated by ";" after an
// optional <|python_tag|>, or JSON's one object or array.
bool ParseWholeText(ToolCallFormat format, std::string_view text, std::vector<ToolCall>* calls) {
  size_t pos = SkipSpace(text, 0);
  if (format == ToolCallFormat::kJson) {
    size_t end = 0;
    if (ScanCalls(text, pos, true, /*allow_array=*/true, calls, &end) != Scan::kCalls) return false;
    return SkipSpace(text, end) == text.size();
  }
  if (text.substr(pos, kPythonTag.size()) == kPythonTag) pos += kPythonTag.size();
  bool first = true;
  while (true) {
    pos = SkipSpace(text, pos);
    if (pos == text.size()) return !first;
    if (!first) {
      if (text[pos] != ';') return false;
      pos = SkipSpace(text, pos + 1);
      if (pos == text.size()) return true;  // a trailing ";"
    }
    size_t end = 0;
    if (ScanCalls(text, pos, true, /*allow_array=*/false, calls, &end) != Scan::kCalls) {
      return false;
    }
    pos = end;
    first = false;
  }
}

}  // namespace

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kJson:
      return "json";
  }
  return "json";
}

std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                           ToolCallFormat::kMistral, ToolCallFormat::kJson}) {
    if (name == ToolCallFormatName(f)) return f;
  }
  return std::nullopt;
}

std::string_view ToolCallMarker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return kHermesBegin;
    case ToolCallFormat::kMistral:
      return kMistralBegin;
    case ToolCallFormat::kLlama3Json:
      return kPythonTag;
    case ToolCallFormat::kJson:
      break;
  }
  return {};
}

ToolCallFormat DetectToolCallFormat(std::string_view chat_template) {
  if (chat_template.find(kHermesBegin) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (chat_template.find(kMistralBegin) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (chat_template.find(kPythonTag) != std::string_view::npos ||
      chat_template.find("ipython") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kJson;
}

void ToolCallParser::EmitContent(std::string_view text, ToolCallDelta* out) {
  if (text.empty()) return;
  if (!content_started_) {
    if (AllSpace(text)) {
      held_space_.append(text);
      return;
    }
    out->content += held_space_;
    held_space_.clear();
    content_started_ = true;
  }
  out->content.append(text);
}

void ToolCallParser::EmitCall(ToolCall call, ToolCallDelta* out) {
  ++num_calls_;
  out->calls.push_back(std::move(call));
}

void ToolCallParser::StepTagged(bool final, ToolCallDelta* out) {
  const std::string_view marker = format_ == ToolCallFormat::kHermes ? kHermesBegin : kMistralBegin;
  while (!pending_.empty()) {
    if (content_only_) {
      EmitContent(pending_, out);
      pending_.clear();
      return;
    }
    const size_t at = pending_.find(marker);
    if (at == std::string::npos) {
      const size_t keep = final ? 0 : MarkerPrefixAtEnd(pending_, marker);
      EmitContent(std::string_view(pending_).substr(0, pending_.size() - keep), out);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    EmitContent(std::string_view(pending_).substr(0, at), out);
    pending_.erase(0, at);
    // Invariant: pending_ starts with the marker.
    std::vector<ToolCall> calls;
    size_t consumed = 0;
    Scan scan = Scan::kMalformed;
    if (format_ == ToolCallFormat::kHermes) {
      scan = ScanHermesCall(pending_, final, &calls, &consumed);
    } else {
      scan = ScanCalls(pending_, marker.size(), final, /*allow_array=*/true, &calls, &consumed);
    }
    if (scan == Scan::kNeedMore) return;
    if (scan == Scan::kMalformed) {
      malformed_ = true;
      content_only_ = true;
      continue;
    }
    for (ToolCall& call : calls) EmitCall(std::move(call), out);
    pending_.erase(0, consumed);
  }
}

void ToolCallParser::StepWhole(bool final, ToolCallDelta* out) {
  if (!content_only_) {
    const size_t start = SkipSpace(pending_, 0);
    if (start == pending_.size() && !final) return;  // only spaces so far: undecided
    const std::string_view rest = std::string_view(pending_).substr(start);
    bool call_start = false;
    if (format_ == ToolCallFormat::kJson) {
      call_start = !rest.empty() && (rest[0] == '{' || rest[0] == '[');
    } else {
      if (ProperPrefixOf(rest, kPythonTag) && !final) return;  // undecided
      call_start =
          !rest.empty() && (rest[0] == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag);
    }
    if (call_start) {
      if (!final) return;  // the whole text decides
      std::vector<ToolCall> calls;
      if (ParseWholeText(format_, pending_, &calls)) {
        for (ToolCall& call : calls) EmitCall(std::move(call), out);
        pending_.clear();
        return;
      }
      malformed_ = true;
    }
    content_only_ = true;
  }
  EmitContent(pending_, out);
  pending_.clear();
}

void ToolCallParser::Step(bool final, ToolCallDelta* out) {
  if (format_ == ToolCallFormat::kHermes || format_ == ToolCallFormat::kMistral) {
    StepTagged(final, out);
  } else {
    StepWhole(final, out);
  }
}

ToolCallDelta ToolCallParser::Feed(std::string_view text) {
  KVSERVE_CHECK(!finished_);
  ToolCallDelta out;
  pending_.append(text);
  Step(/*final=*/false, &out);
  return out;
}

ToolCallDelta ToolCallParser::Finish() {
  KVSERVE_CHECK(!finished_);
  finished_ = true;
  ToolCallDelta out;
  Step(/*final=*/true, &out);
  KVSERVE_CHECK(pending_.empty());
  if (num_calls_ == 0) out.content += held_space_;  // content that is all spaces, kept
  held_space_.clear();
  return out;
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text) {
  ToolCallParser parser(format);
  ToolCallDelta fed = parser.Feed(text);
  ToolCallDelta last = parser.Finish();
  ParsedToolCalls out;
  out.content = std::move(fed.content) + last.content;
  out.calls = std::move(fed.calls);
  for (ToolCall& call : last.calls) out.calls.push_back(std::move(call));
  out.malformed = parser.malformed();
  return out;
}

}  // namespace kvserve::server::tool_calling
