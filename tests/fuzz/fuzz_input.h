// FuzzInput: splits one fuzzer input into the pieces a target needs, the same
// way for libFuzzer runs and for the corpus replay test, so a seed file and a
// crash file mean the same thing to both.
//
// Encoding (what seed files are written in): a piece is a little-endian u16
// length followed by that many bytes (clamped to what is left); Byte() takes
// one byte; Rest() takes everything left. Reading past the end gives empty
// pieces and zero bytes, never an error: every input is valid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  uint8_t Byte() {
    if (pos_ >= size_) return 0;
    return static_cast<uint8_t>(data_[pos_++]);
  }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  std::string_view Piece() {
    const size_t want = U16();
    const size_t n = want < size_ - pos_ ? want : size_ - pos_;
    std::string_view piece(data_ + pos_, n);
    pos_ += n;
    return piece;
  }
  std::string_view Rest() {
    std::string_view rest(data_ + pos_, size_ - pos_);
    pos_ = size_;
    return rest;
  }
  bool empty() const { return pos_ >= size_; }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A property a target checks failed: prints it and aborts, so libFuzzer
// saves the input and the replay test fails.
[[noreturn]] void PropertyFailed(const char* what, std::string_view detail = {});

}  // namespace kvserve::fuzz

#define KVSERVE_FUZZ_CHECK(cond, detail)                         \
  do {                                                           \
    if (!(cond)) ::kvserve::fuzz::PropertyFailed(#cond, detail); \
  } while (0)
