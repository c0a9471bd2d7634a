// Small UTF-8 helpers shared by the tokenizers. Nothing here allocates
// except the Append* functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvserve::engine::utf8 {

// What sits at the start of a byte string.
enum class Scan {
  kValid,      // a complete, valid UTF-8 sequence of `length` bytes
  kInvalid,    // an invalid maximal subpart of `length` (>= 1) bytes
  kTruncated,  // all `length` remaining bytes are a proper prefix of a valid
               // sequence: more bytes may still complete it
};

struct ScanResult {
  Scan kind;
  size_t length;
};

// Classifies the bytes at the start of `s` (non-empty). A "maximal subpart"
// is the longest prefix of `s` that starts some valid sequence, or one byte if
// none does (Unicode 3.9 "best practice", what Rust's from_utf8_lossy uses).
ScanResult ScanOne(std::string_view s);

bool IsValid(std::string_view s);

// Offset of the start of a trailing kTruncated sequence, or s.size() if there
// is none. Everything before it decodes the same no matter what follows.
size_t CompletePrefixLength(std::string_view s);

// Decodes the code point at s[*pos] (s must be valid UTF-8 there) and
// advances *pos past it.
char32_t DecodeNext(std::string_view s, size_t* pos);
// Decodes the code point that ends at s[pos - 1] (pos > 0, valid UTF-8).
char32_t DecodePrev(std::string_view s, size_t pos);

void AppendCodePoint(char32_t c, std::string* out);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Unicode White_Space (what Rust's and Oniguruma's \s match).
bool IsWhitespace(char32_t c);

}  // namespace kvserve::engine::utf8
