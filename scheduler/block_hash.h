// Content hashes of full KV blocks, for prefix caching.
//
// A full block's hash is chained over everything that determines its K/V:
//
//   hash(block i) = H(tag, hash(block i-1) or kRootParentHash, extra_keys, tokens of block i)
//   extra_keys    = H(tag, cache salt [, later: adapter id, ...])
//
// so two blocks hash alike only if the whole token prefix up to and including
// them, and the extra keys, are the same.
//
// H is SipHash-2-4 with a 128-bit output (Aumasson & Bernstein), keyed with a
// 128-bit secret chosen at random per process unless a config fixes it:
// - 128 bits: an accidental collision (which would serve another prefix's K/V
//   and silently change outputs) needs ~2^64 distinct blocks; we do not also
//   store and compare tokens on a hit.
// - keyed: a client cannot craft colliding prompts offline to poison another
//   user's cache entries, as it could with an unkeyed fast hash.
// Hashes are therefore only meaningful inside one process (nothing persists).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

namespace kvserve::scheduler {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& x) {
    // Already uniformly distributed; feeding one word is enough for a table.
    return H::combine(std::move(h), x.lo);
  }
};

// The parent of a request's first block.
inline constexpr BlockHash kRootParentHash{};

struct HashKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

// Streaming SipHash-2-4 with the 128-bit output. Bytes are consumed in order;
// Update may be called with any split of the message.
class SipHash128 {
 public:
  explicit SipHash128(const HashKey& key);

  void Update(const void* data, size_t size);
  void UpdateU64(uint64_t x);  // 8 little-endian bytes
  // Ends the message. The object must not be used afterwards.
  BlockHash Finish();

 private:
  void Compress(uint64_t m);

  uint64_t v0_, v1_, v2_, v3_;
  uint64_t tail_ = 0;     // pending bytes, little-endian
  size_t tail_size_ = 0;  // 0..7
  uint64_t total_size_ = 0;
};

// What besides the tokens decides a block's K/V. Room for an adapter id and
// multimodal inputs later; each new field goes into ExtraKeysHash.
struct ExtraKeys {
  std::string_view cache_salt;
};

// Stateless apart from its key; cheap to copy.
class BlockHasher {
 public:
  explicit BlockHasher(const HashKey& key) : key_(key) {}

  // A fresh secret from std::random_device.
  static HashKey RandomKey();

  // Digest of the extra keys, computed once per request and mixed into every
  // block hash (so requests with different salts never share a block).
  BlockHash ExtraKeysHash(const ExtraKeys& extra) const;
  BlockHash HashBlock(const BlockHash& parent, const BlockHash& extra_keys,
                      std::span<const int32_t> tokens) const;

 private:
  HashKey key_;
};

}  // namespace kvserve::scheduler
