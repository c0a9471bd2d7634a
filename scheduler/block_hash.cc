#include "scheduler/block_hash.h"

#include <bit>
#include <cstring>
#include <random>

namespace kvserve::scheduler {
namespace {

static_assert(std::endian::native == std::endian::little,
              "SipHash words and token bytes are read little-endian");

// Domain tags: the first word of every hashed message, so a block message and
// an extra-keys message can never be the same byte string. A whole word keeps
// the rest of the message word-aligned (the fast path of Update).
constexpr uint64_t kBlockTag = 1;
constexpr uint64_t kExtraKeysTag = 2;

inline void SipRound(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
  v0 += v1;
  v1 = std::rotl(v1, 13);
  v1 ^= v0;
  v0 = std::rotl(v0, 32);
  v2 += v3;
  v3 = std::rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = std::rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = std::rotl(v1, 17);
  v1 ^= v2;
  v2 = std::rotl(v2, 32);
}

}  // namespace

SipHash128::SipHash128(const HashKey& key)
    : v0_(key.k0 ^ 0x736f6d6570736575ULL),
      v1_(key.k1 ^ 0x646f72616e646f6dULL ^ 0xee),  // 0xee: the 128-bit output variant
      v2_(key.k0 ^ 0x6c7967656e657261ULL),
      v3_(key.k1 ^ 0x7465646279746573ULL) {}

void SipHash128::Compress(uint64_t m) {
  v3_ ^= m;
  SipRound(v0_, v1_, v2_, v3_);
  SipRound(v0_, v1_, v2_, v3_);
  v0_ ^= m;
}

void SipHash128::Update(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_size_ += size;
  // Top up a pending partial word first.
  while (tail_size_ != 0 && size != 0) {
    tail_ |= uint64_t{*p++} << (8 * tail_size_);
    --size;
    if (++tail_size_ == 8) {
      Compress(tail_);
      tail_ = 0;
      tail_size_ = 0;
    }
  }
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t m;
    std::memcpy(&m, p, 8);
    Compress(m);
  }
  for (; size != 0; --size) tail_ |= uint64_t{*p++} << (8 * tail_size_++);
}

void SipHash128::UpdateU64(uint64_t x) {
  if (tail_size_ == 0) {
    total_size_ += 8;
    Compress(x);
  } else {
    Update(&x, 8);
  }
}

BlockHash SipHash128::Finish() {
  Compress(tail_ | (total_size_ << 56));
  v2_ ^= 0xee;
  for (int i = 0; i < 4; ++i) SipRound(v0_, v1_, v2_, v3_);
  BlockHash out;
  out.lo = v0_ ^ v1_ ^ v2_ ^ v3_;
  v1_ ^= 0xdd;
  for (int i = 0; i < 4; ++i) SipRound(v0_, v1_, v2_, v3_);
  out.hi = v0_ ^ v1_ ^ v2_ ^ v3_;
  return out;
}

HashKey BlockHasher::RandomKey() {
  std::random_device rd;
  auto word = [&rd] { return (uint64_t{rd()} << 32) ^ uint64_t { rd() }; };
  HashKey key;
  key.k0 = word();
  key.k1 = word();
  return key;
}

BlockHash BlockHasher::ExtraKeysHash(const ExtraKeys& extra) const {
  SipHash128 h(key_);
  h.UpdateU64(kExtraKeysTag);
  // Length-prefixed, so adding fields later cannot make two encodings equal.
  h.UpdateU64(extra.cache_salt.size());
  h.Update(extra.cache_salt.data(), extra.cache_salt.size());
  return h.Finish();
}

BlockHash BlockHasher::HashBlock(const BlockHash& parent, const BlockHash& extra_keys,
                                 std::span<const int32_t> tokens) const {
  SipHash128 h(key_);
  // Fixed layout: tag, parent, extra keys, token count, tokens (int32 LE).
  h.UpdateU64(kBlockTag);
  h.UpdateU64(parent.lo);
  h.UpdateU64(parent.hi);
  h.UpdateU64(extra_keys.lo);
  h.UpdateU64(extra_keys.hi);
  h.UpdateU64(tokens.size());
  h.Update(tokens.data(), tokens.size_bytes());
  return h.Finish();
}

}  // namespace kvserve::scheduler
