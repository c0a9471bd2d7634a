#include "engine/tokenizer/hf_normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvserve::engine {
namespace {

absl::StatusOr<std::string> Unicode(std::string_view text, bool compat) {
  utf8proc_uint8_t* out = nullptr;
  int options = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  if (compat) options |= UTF8PROC_COMPAT;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(compat ? "NFKC: " : "NFC: ", utf8proc_errmsg(n)));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t start = 0;
  for (size_t pos = s.find(from); pos != std::string_view::npos; pos = s.find(from, start)) {
    out.append(s.substr(start, pos - start));
    out.append(to);
    start = pos + from.size();
  }
  out.append(s.substr(start));
  return out;
}

absl::StatusOr<std::string> Normalize(const std::vector<NormalizerStep>& steps,
                                      std::string_view text) {
  std::string s(text);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
      case NormalizerStep::Kind::kNfkc: {
        KVSERVE_ASSIGN_OR_RETURN(s, Unicode(s, step.kind == NormalizerStep::Kind::kNfkc));
        break;
      }
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.pattern);
        break;
      case NormalizerStep::Kind::kReplace:
        s = ReplaceAll(s, step.pattern, step.content);
        break;
    }
  }
  return s;
}

}  // namespace kvserve::engine
