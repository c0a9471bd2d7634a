#include "scheduler/kv_cache_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvserve::scheduler {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : events_(config.enable_kv_events ? std::make_unique<KvEventRecorder>(config.block_size)
                                      : nullptr),
      pool_(config.num_blocks, config.block_size),
      hasher_(config.hash_key.value_or(BlockHasher::RandomKey())),
      enable_prefix_caching_(config.enable_prefix_caching) {
  pool_.SetEventRecorder(events_.get());
}

int32_t KvCacheManager::BlocksFor(int32_t num_tokens) const {
  return (num_tokens + pool_.block_size() - 1) / pool_.block_size();
}

CachedPrefix KvCacheManager::GetComputedBlocks(std::span<const int32_t> tokens,
                                               const ExtraKeys& extra_keys) const {
  CachedPrefix prefix;
  prefix.extra_keys_hash = hasher_.ExtraKeysHash(extra_keys);
  if (events_ != nullptr) prefix.cache_salt = std::string(extra_keys.cache_salt);
  prefix.num_queried_tokens = static_cast<int32_t>(tokens.size());
  if (!enable_prefix_caching_ || tokens.empty()) return prefix;

  const size_t bs = static_cast<size_t>(pool_.block_size());
  // The last token is never served from the cache (its logits are needed).
  const size_t max_blocks = (tokens.size() - 1) / bs;
  BlockHash parent = kRootParentHash;
  for (size_t i = 0; i < max_blocks; ++i) {
    const BlockHash h =
        hasher_.HashBlock(parent, prefix.extra_keys_hash, tokens.subspan(i * bs, bs));
    prefix.block_hashes.push_back(h);
    const std::optional<BlockId> hit = pool_.Lookup(h);
    if (!hit) break;
    prefix.blocks.push_back(*hit);
    parent = h;
  }
  prefix.num_tokens = static_cast<int32_t>(prefix.blocks.size() * bs);
  return prefix;
}

bool KvCacheManager::Grow(RequestBlocks& r, int32_t num_tokens) {
  const int32_t needed = BlocksFor(num_tokens) - static_cast<int32_t>(r.table.size());
  if (needed > 0 && !pool_.Allocate(needed, &r.table)) return false;
  r.num_allocated_tokens = std::max(r.num_allocated_tokens, num_tokens);
  return true;
}

int32_t KvCacheManager::FreeBlocksAfterReferencing(const CachedPrefix& prefix) const {
  int32_t revived = 0;  // free-cached hits leave the free list when referenced
  for (BlockId b : prefix.blocks) revived += pool_.ref_count(b) == 0 ? 1 : 0;
  return pool_.num_free_blocks() - revived;
}

bool KvCacheManager::AllocateNew(RequestId id, const CachedPrefix& prefix, int32_t num_new_tokens) {
  KVSERVE_CHECK(!requests_.contains(id));
  KVSERVE_CHECK(num_new_tokens >= 0);
  const int32_t num_hit = static_cast<int32_t>(prefix.blocks.size());
  KVSERVE_CHECK(prefix.num_tokens == num_hit * pool_.block_size());
  KVSERVE_CHECK(prefix.block_hashes.size() >= prefix.blocks.size());

  // The hits must be what the lookup saw: a stale prefix (an allocation in
  // between evicted one of its blocks) would serve another prefix's K/V.
  // Hit blocks that are free leave the free list before any new block is
  // popped, so they count against the free blocks too.
  int32_t num_revived = 0;
  for (int32_t i = 0; i < num_hit; ++i) {
    KVSERVE_CHECK(pool_.hash(prefix.blocks[i]) == prefix.block_hashes[i]);
    if (pool_.ref_count(prefix.blocks[i]) == 0) ++num_revived;
  }
  const int32_t num_tokens = prefix.num_tokens + num_new_tokens;
  const int32_t num_new_blocks = BlocksFor(num_tokens) - num_hit;
  if (num_revived + num_new_blocks > pool_.num_free_blocks()) return false;

  RequestBlocks r;
  r.table.reserve(static_cast<size_t>(BlocksFor(num_tokens)));
  for (BlockId b : prefix.blocks) {
    pool_.AddRef(b);
    r.table.push_back(b);
  }
  r.num_registered_blocks = num_hit;  // full and cached: never written
  r.block_hashes = prefix.block_hashes;
  r.extra_keys_hash = prefix.extra_keys_hash;
  r.cache_salt = prefix.cache_salt;
  KVSERVE_CHECK(Grow(r, num_tokens));  // cannot fail: counted above
  requests_.emplace(id, std::move(r));
  ++prefix_queries_;
  prefix_queried_tokens_ += prefix.num_queried_tokens;
  prefix_hit_tokens_ += prefix.num_tokens;
  return true;
}

bool KvCacheManager::Allocate(RequestId id, int32_t num_computed_tokens, int32_t num_new_tokens) {
  auto it = requests_.find(id);
  KVSERVE_CHECK(it != requests_.end());
  RequestBlocks& r = it->second;
  KVSERVE_CHECK(num_new_tokens >= 0);
  KVSERVE_CHECK(num_computed_tokens >= r.num_registered_blocks * pool_.block_size());
  KVSERVE_CHECK(num_computed_tokens <= r.num_allocated_tokens);
  return Grow(r, num_computed_tokens + num_new_tokens);
}

void KvCacheManager::CommitComputed(RequestId id, std::span<const int32_t> tokens,
                                    int32_t num_computed_tokens) {
  auto it = requests_.find(id);
  KVSERVE_CHECK(it != requests_.end());
  RequestBlocks& r = it->second;
  const int32_t bs = pool_.block_size();
  KVSERVE_CHECK(num_computed_tokens >= r.num_registered_blocks * bs);
  KVSERVE_CHECK(num_computed_tokens <= r.num_allocated_tokens);
  KVSERVE_CHECK(static_cast<int64_t>(tokens.size()) >= num_computed_tokens);

  const int32_t num_full = num_computed_tokens / bs;
  if (enable_prefix_caching_) {
    for (int32_t i = r.num_registered_blocks; i < num_full; ++i) {
      if (static_cast<int32_t>(r.block_hashes.size()) == i) {
        const BlockHash& parent = i == 0 ? kRootParentHash : r.block_hashes[i - 1];
        r.block_hashes.push_back(hasher_.HashBlock(
            parent, r.extra_keys_hash, tokens.subspan(static_cast<size_t>(i) * bs, bs)));
      }
      // An equal block may already be cached: ours stays in the table,
      // unregistered, and is offered again (RegisterChained, Free).
      RegisterChained(r, tokens, i);
    }
  }
  r.num_registered_blocks = std::max(r.num_registered_blocks, num_full);
}

void KvCacheManager::Trim(RequestId id, int32_t num_tokens) {
  auto it = requests_.find(id);
  KVSERVE_CHECK(it != requests_.end());
  RequestBlocks& r = it->second;
  const size_t keep = static_cast<size_t>(BlocksFor(num_tokens));
  KVSERVE_CHECK(keep >= static_cast<size_t>(r.num_registered_blocks));
  if (keep < r.table.size()) {
    pool_.ReleaseTable(std::span<const BlockId>(r.table).subspan(keep));
    r.table.resize(keep);
  }
  r.num_allocated_tokens = std::min(r.num_allocated_tokens, num_tokens);
}

void KvCacheManager::RegisterOne(RequestBlocks& r, int32_t i,
                                 std::span<const int32_t> block_tokens) {
  if (pool_.hash(r.table[i]).has_value()) return;
  const BlockOrigin origin{.parent = i == 0 ? kRootParentHash : r.block_hashes[i - 1],
                           .tokens = block_tokens,
                           .cache_salt = r.cache_salt};
  if (pool_.RegisterHash(r.table[i], r.block_hashes[i], origin)) {
    r.unregistered_tokens.erase(i);
  } else if (events_ != nullptr) {
    // Its BlockStored, should this copy become the cached one (Free).
    r.unregistered_tokens.try_emplace(i, block_tokens.begin(), block_tokens.end());
  }
}

void KvCacheManager::RegisterChained(RequestBlocks& r, std::span<const int32_t> tokens, int32_t i) {
  const size_t bs = static_cast<size_t>(pool_.block_size());
  // Ancestors j < i are full and hashed. Walk back to the newest one whose
  // hash is findable (ours or an equal block elsewhere), then register
  // forward from there: each block is registered while its parent is.
  int32_t first = i;
  while (first > 0 && !pool_.hash(r.table[first - 1]).has_value() &&
         !pool_.Lookup(r.block_hashes[first - 1]).has_value()) {
    --first;
  }
  for (int32_t j = first; j <= i; ++j) {
    RegisterOne(r, j, tokens.subspan(static_cast<size_t>(j) * bs, bs));
  }
}

void KvCacheManager::Free(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestBlocks& r = it->second;
  if (enable_prefix_caching_) {
    // A full block left unregistered because an equal block was cached when
    // it filled: if that one has been evicted since, keep this copy findable.
    // First block first, so a parent is findable before its child.
    for (int32_t i = 0; i < r.num_registered_blocks; ++i) {
      if (pool_.hash(r.table[i]).has_value() || pool_.Lookup(r.block_hashes[i]).has_value()) {
        continue;
      }
      auto saved = r.unregistered_tokens.find(i);
      // Kept for every block left unregistered while events are on.
      KVSERVE_CHECK(events_ == nullptr || saved != r.unregistered_tokens.end());
      const std::span<const int32_t> block_tokens =
          saved == r.unregistered_tokens.end() ? std::span<const int32_t>() : saved->second;
      RegisterOne(r, i, block_tokens);
    }
  }
  pool_.ReleaseTable(r.table);  // last block first
  requests_.erase(it);
}

std::span<const BlockId> KvCacheManager::BlockTable(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return it->second.table;
}

KvCacheStats KvCacheManager::Stats() const {
  KvCacheStats s;
  s.pool = pool_.Stats();
  s.prefix_queries = prefix_queries_;
  s.prefix_queried_tokens = prefix_queried_tokens_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  return s;
}

absl::Status KvCacheManager::CheckInvariants() const {
  std::vector<std::span<const BlockId>> tables;
  tables.reserve(requests_.size());
  for (const auto& [id, r] : requests_) tables.emplace_back(r.table);
  KVSERVE_RETURN_IF_ERROR(pool_.CheckInvariants(tables));

  const int32_t bs = pool_.block_size();
  for (const auto& [id, r] : requests_) {
    auto fail = [id = id](auto&&... parts) {
      return absl::InternalError(absl::StrCat("request ", id, ": ", parts...));
    };
    if (static_cast<int32_t>(r.table.size()) != BlocksFor(r.num_allocated_tokens)) {
      return fail(r.table.size(), " blocks for ", r.num_allocated_tokens, " allocated tokens");
    }
    if (r.num_registered_blocks * bs > r.num_allocated_tokens) {
      return fail(r.num_registered_blocks, " full blocks beyond ", r.num_allocated_tokens,
                  " allocated tokens");
    }
    if (enable_prefix_caching_ &&
        static_cast<int32_t>(r.block_hashes.size()) < r.num_registered_blocks) {
      return fail("missing hashes of full blocks");
    }
    for (int32_t i = 0; i < static_cast<int32_t>(r.table.size()); ++i) {
      const BlockId b = r.table[i];
      if (b == kNullBlockId) return fail("null block at table index ", i);
      const std::optional<BlockHash> h = pool_.hash(b);
      if (i < r.num_registered_blocks) {
        if (h.has_value() && !(enable_prefix_caching_ && *h == r.block_hashes[i])) {
          return fail("full block ", b, " is cached under another hash");
        }
      } else if (pool_.ref_count(b) != 1 || h.has_value()) {
        // A block still being written must be private and unfindable.
        return fail("writable block ", b, " is shared (ref_count ", pool_.ref_count(b),
                    ") or cached");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::scheduler
