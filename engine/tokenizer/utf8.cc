#include "engine/tokenizer/utf8.h"

#include <cstdint>

namespace kvserve::engine::utf8 {
namespace {

// Allowed range of the second byte for a lead byte, and the sequence length.
// Later continuation bytes are always 0x80..0xBF (RFC 3629, table 3-7 of the
// Unicode standard). Length 0 marks a byte that can never start a sequence.
struct Lead {
  int length;
  uint8_t lo;
  uint8_t hi;
};

Lead LeadOf(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

ScanResult ScanOne(std::string_view s) {
  const Lead lead = LeadOf(static_cast<uint8_t>(s[0]));
  if (lead.length == 0) return {Scan::kInvalid, 1};
  for (int i = 1; i < lead.length; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return {Scan::kTruncated, s.size()};
    const uint8_t b = static_cast<uint8_t>(s[i]);
    const uint8_t lo = i == 1 ? lead.lo : 0x80;
    const uint8_t hi = i == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) return {Scan::kInvalid, static_cast<size_t>(i)};
  }
  return {Scan::kValid, static_cast<size_t>(lead.length)};
}

bool IsValid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path.
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const ScanResult r = ScanOne(s.substr(i));
    if (r.kind != Scan::kValid) return false;
    i += r.length;
  }
  return true;
}

size_t CompletePrefixLength(std::string_view s) {
  // A truncated sequence is at most 3 bytes long, so only the tail matters,
  // but the scan must start on a boundary of the left-to-right decoding.
  // Start at most 3 bytes back, at a byte that is not a continuation byte.
  size_t start = s.size() >= 3 ? s.size() - 3 : 0;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  // `start` is a lead byte (or 0): a decoding boundary unless an earlier
  // sequence swallowed it, which valid continuation bytes cannot do, since
  // a lead byte is never a continuation byte. So scanning from it is exact.
  size_t i = start;
  while (i < s.size()) {
    const ScanResult r = ScanOne(s.substr(i));
    if (r.kind == Scan::kTruncated) return i;
    i += r.length;
  }
  return s.size();
}

char32_t DecodeNext(std::string_view s, size_t* pos) {
  const uint8_t b0 = static_cast<uint8_t>(s[*pos]);
  if (b0 < 0x80) {
    ++*pos;
    return b0;
  }
  const int n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t c = b0 & (0x7F >> n);
  for (int i = 1; i < n; ++i) c = (c << 6) | (static_cast<uint8_t>(s[*pos + i]) & 0x3F);
  *pos += n;
  return c;
}

char32_t DecodePrev(std::string_view s, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  return DecodeNext(s, &start);
}

void AppendCodePoint(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace kvserve::engine::utf8
