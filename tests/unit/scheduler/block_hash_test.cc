// SipHash-2-4-128 against the reference vectors of its authors (key 00..0f,
// message 00..len-1), and the properties block hashing relies on.
#include "scheduler/block_hash.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::scheduler {
namespace {

HashKey ReferenceKey() {
  // Bytes 00..0f read as two little-endian words.
  return HashKey{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
}

std::string Hex(const BlockHash& h) {
  std::string s;
  char buf[3];
  for (uint64_t word : {h.lo, h.hi}) {
    for (int i = 0; i < 8; ++i) {
      std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned>((word >> (8 * i)) & 0xff));
      s += buf;
    }
  }
  return s;
}

std::vector<uint8_t> Message(size_t len) {
  std::vector<uint8_t> m(len);
  for (size_t i = 0; i < len; ++i) m[i] = static_cast<uint8_t>(i);
  return m;
}

TEST(SipHash128Test, ReferenceVectors) {
  // From vectors.h (vectors_sip128) of the SipHash reference distribution.
  const std::vector<std::pair<size_t, std::string>> expected = {
      {0, "a3817f04ba25a8e66df67214c7550293"}, {1, "da87c1d86b99af44347659119b22fc45"},
      {2, "8177228da4a45dc7fca38bdef60affe4"}, {8, "3b62a9ba6258f5610f83e264f31497b4"},
      {9, "264499060ad9baabc47f8b02bb6d71ed"}, {63, "5150d1772f50834a503e069a973fbd7c"},
  };
  for (const auto& [len, hex] : expected) {
    const std::vector<uint8_t> m = Message(len);
    SipHash128 h(ReferenceKey());
    h.Update(m.data(), m.size());
    EXPECT_EQ(Hex(h.Finish()), hex) << "len " << len;
  }
}

TEST(SipHash128Test, StreamingSplitsAgree) {
  const std::vector<uint8_t> m = Message(63);
  SipHash128 one(ReferenceKey());
  one.Update(m.data(), m.size());
  const BlockHash expected = one.Finish();
  for (size_t step : {1u, 3u, 7u, 8u, 13u}) {
    SipHash128 h(ReferenceKey());
    for (size_t off = 0; off < m.size(); off += step) {
      h.Update(m.data() + off, std::min(step, m.size() - off));
    }
    EXPECT_EQ(h.Finish(), expected) << "step " << step;
  }
  // UpdateU64 is 8 little-endian bytes, aligned or not.
  SipHash128 words(ReferenceKey());
  words.Update(m.data(), 3);
  uint64_t w;
  std::memcpy(&w, m.data() + 3, 8);
  words.UpdateU64(w);
  words.Update(m.data() + 11, m.size() - 11);
  EXPECT_EQ(words.Finish(), expected);
}

TEST(BlockHasherTest, ChainsParentTokensAndExtraKeys) {
  const BlockHasher hasher(ReferenceKey());
  const BlockHash no_salt = hasher.ExtraKeysHash({});
  const BlockHash salt_a = hasher.ExtraKeysHash({.cache_salt = "a"});
  EXPECT_EQ(no_salt, hasher.ExtraKeysHash({.cache_salt = ""}));
  EXPECT_NE(no_salt, salt_a);

  const std::array<int32_t, 4> t = {1, 2, 3, 4};
  const std::array<int32_t, 4> u = {1, 2, 3, 5};
  const BlockHash h = hasher.HashBlock(kRootParentHash, no_salt, t);
  EXPECT_EQ(h, hasher.HashBlock(kRootParentHash, no_salt, t));  // deterministic
  std::set<std::pair<uint64_t, uint64_t>> distinct;
  for (const BlockHash& x :
       {h, hasher.HashBlock(kRootParentHash, no_salt, u),
        hasher.HashBlock(kRootParentHash, salt_a, t), hasher.HashBlock(h, no_salt, t),
        hasher.HashBlock(kRootParentHash, no_salt, std::span(t).first(3))}) {
    distinct.insert({x.lo, x.hi});
  }
  EXPECT_EQ(distinct.size(), 5u);
  // Another key, another hash.
  EXPECT_NE(h, BlockHasher(HashKey{1, 2}).HashBlock(kRootParentHash, no_salt, t));
}

}  // namespace
}  // namespace kvserve::scheduler
