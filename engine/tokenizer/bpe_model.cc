#include "engine/tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t CodePointLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;  // stray continuation byte: treat as its own unit
}

}  // namespace

std::string ByteTokenName(uint8_t byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name = "<0x00>";
  name[3] = kHex[byte >> 4];
  name[4] = kHex[byte & 15];
  return name;
}

int ParseByteTokenName(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    std::unordered_map<std::string, int32_t> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, Options options) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  model->vocab_ = std::move(vocab);
  model->options_ = std::move(options);
  if (model->options_.unk_token.has_value()) {
    auto it = model->vocab_.find(*model->options_.unk_token);
    if (it == model->vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unk_token \"", *model->options_.unk_token, "\" is not in the vocab"));
    }
    model->unk_id_ = it->second;
  }
  if (model->options_.byte_fallback) {
    // tokenizers refuses such a model too (ByteFallbackOutOfVocabulary).
    model->byte_ids_.resize(256);
    for (int b = 0; b < 256; ++b) {
      const std::string name = ByteTokenName(static_cast<uint8_t>(b));
      auto it = model->vocab_.find(name);
      if (it == model->vocab_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte_fallback is set but the vocab has no token ", name));
      }
      model->byte_ids_[b] = it->second;
    }
  }
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = model->vocab_.find(left);
    auto r = model->vocab_.find(right);
    auto m = model->vocab_.find(left + right);
    if (l == model->vocab_.end() || r == model->vocab_.end() || m == model->vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " (\"", left, "\" \"", right,
                                                     "\") uses a token not in the vocab"));
    }
    // A repeated pair keeps its first (lowest) rank.
    model->merges_.try_emplace(PairKey(l->second, r->second),
                               Merge{static_cast<int32_t>(rank), m->second});
  }
  return model;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> word_ids;
  MergeWord(word, &word_ids);
  ids->insert(ids->end(), word_ids.begin(), word_ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_mu_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(word_ids));
  }
}

void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  // Symbols form a doubly linked list over a vector; a merged-away symbol
  // keeps its slot with id -1. prev/next are indices, -1 at the ends.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
  };
  // Split into code points; unknown ones become their byte tokens
  // (byte_fallback), else unk (fused when asked), else are dropped, as
  // tokenizers does.
  bool last_was_unk = false;
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len =
        std::min(CodePointLength(static_cast<unsigned char>(word[pos])), word.size() - pos);
    piece.assign(word.substr(pos, len));
    pos += len;
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      add(it->second);
      last_was_unk = false;
    } else if (!byte_ids_.empty()) {
      for (const char c : piece) add(byte_ids_[static_cast<uint8_t>(c)]);
      last_was_unk = false;
    } else if (unk_id_.has_value()) {
      if (!(options_.fuse_unk && last_was_unk)) add(*unk_id_);
      last_was_unk = true;
    }
  }

  // Candidate merges, lowest (rank, position) first. Entries go stale when a
  // neighbour changes; they are checked again when popped.
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(PairKey(left.id, right.id));
    // Stale: the pair at this position changed since it was queued.
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    ids->push_back(symbols[i].id);
  }
}

}  // namespace kvserve::engine
