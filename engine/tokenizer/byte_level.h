// The GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable
// code point, so that byte-level BPE vocabularies are plain strings.
// Bytes that are printable Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF)
// stand for themselves; the other 68 bytes, in increasing order, take
// U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
#pragma once

#include <string>
#include <string_view>

namespace kvserve::engine::byte_level {

char32_t ByteToChar(unsigned char b);
// The byte that `c` stands for, or -1 when `c` is not in the alphabet.
int CharToByte(char32_t c);

// Appends the UTF-8 of the byte-level form of `bytes`.
void Encode(std::string_view bytes, std::string* out);
// Appends the bytes that `text` (valid UTF-8) stands for. Returns false and
// leaves *out unchanged if some code point of `text` is not in the alphabet.
bool Decode(std::string_view text, std::string* out);

}  // namespace kvserve::engine::byte_level
