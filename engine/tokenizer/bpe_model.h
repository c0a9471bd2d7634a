// Byte-pair encoding of one pre-tokenized word, as the BPE model of Hugging
// Face tokenizers does it (without dropout, subword prefixes or suffixes):
// start from the word's code points, then repeatedly apply the merge of
// lowest rank among adjacent pairs, the leftmost one on ties. Shared by the
// byte-level pipeline (words in the GPT-2 byte alphabet) and the
// SentencePiece-style one (words with U+2581, byte_fallback).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::engine {

// "<0xAB>" for byte 0xAB: the byte tokens of SentencePiece byte fallback.
std::string ByteTokenName(uint8_t byte);
// The byte a token names ("<0xab>" too, as the ByteFallback decoder reads
// it), or -1.
int ParseByteTokenName(std::string_view token);

class BpeModel {
 public:
  struct Options {
    bool ignore_merges = false;  // a word found whole in the vocab is one token
    std::optional<std::string> unk_token;
    bool fuse_unk = false;  // consecutive unknown code points give one unk
    // A code point not in the vocab becomes the tokens <0xNN> of its UTF-8
    // bytes (SentencePiece-converted models). All 256 must be in the vocab.
    bool byte_fallback = false;
  };

  // merges: in rank order (first = applied first). Fails when a merge names a
  // token, or produces a token, that is not in the vocab.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      std::unordered_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, Options options);

  // Appends the ids of `word` (UTF-8, in the model's alphabet). Thread-safe.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };

  BpeModel() = default;
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  // (left id << 32 | right id) -> merge.
  std::unordered_map<uint64_t, Merge> merges_;
  Options options_;
  std::optional<int32_t> unk_id_;
  std::vector<int32_t> byte_ids_;  // byte_fallback: id of <0xNN> by byte, else empty

  // Per-word cache. Bounded: once full, new words are not added (the same
  // policy as tokenizers), which keeps memory fixed without eviction work.
  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // guarded by cache_mu_
};

}  // namespace kvserve::engine
