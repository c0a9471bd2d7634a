#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/utf8.h"

namespace kvserve::engine::byte_level {
namespace {

constexpr int kAlphabetEnd = 256 + 68;  // every alphabet code point is below

struct Tables {
  std::array<char32_t, 256> byte_to_char;
  std::array<std::string, 256> byte_to_utf8;
  std::array<int, kAlphabetEnd> char_to_byte;

  Tables() {
    char_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_char[b] = printable ? b : next++;
      char_to_byte[byte_to_char[b]] = b;
      utf8::AppendCodePoint(byte_to_char[b], &byte_to_utf8[b]);
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

char32_t ByteToChar(unsigned char b) { return GetTables().byte_to_char[b]; }

int CharToByte(char32_t c) { return c < kAlphabetEnd ? GetTables().char_to_byte[c] : -1; }

void Encode(std::string_view bytes, std::string* out) {
  const Tables& t = GetTables();
  for (const char c : bytes) out->append(t.byte_to_utf8[static_cast<unsigned char>(c)]);
}

bool Decode(std::string_view text, std::string* out) {
  const size_t start = out->size();
  size_t pos = 0;
  while (pos < text.size()) {
    const int b = CharToByte(utf8::DecodeNext(text, &pos));
    if (b < 0) {
      out->resize(start);
      return false;
    }
    out->push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace kvserve::engine::byte_level
