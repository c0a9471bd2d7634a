#include "scheduler/block_pool.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvserve::scheduler {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      blocks_(static_cast<size_t>(num_blocks) + 1),
      sentinel_(num_blocks) {
  KVSERVE_CHECK(num_blocks >= 1);
  KVSERVE_CHECK(block_size >= 1);
  blocks_[sentinel_].prev = sentinel_;
  blocks_[sentinel_].next = sentinel_;
  // Initially every usable block is free-uncached, in id order: the first
  // allocations return 1, 2, 3, ...
  for (BlockId id = 1; id < num_blocks; ++id) PushTail(id);
  num_free_ = num_blocks - 1;
}

size_t BlockPool::Index(BlockId id) const {
  KVSERVE_CHECK(id > kNullBlockId && id < num_blocks_);
  return static_cast<size_t>(id);
}

void BlockPool::PushTail(BlockId id) {
  Block& b = blocks_[id];
  Block& s = blocks_[sentinel_];
  b.prev = s.prev;
  b.next = sentinel_;
  blocks_[s.prev].next = id;
  s.prev = id;
}

void BlockPool::Unlink(BlockId id) {
  Block& b = blocks_[id];
  blocks_[b.prev].next = b.next;
  blocks_[b.next].prev = b.prev;
  b.prev = -1;
  b.next = -1;
}

bool BlockPool::Allocate(int32_t n, std::vector<BlockId>* out) {
  KVSERVE_CHECK(n >= 0);
  if (n > num_free_) return false;
  out->reserve(out->size() + static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const BlockId id = blocks_[sentinel_].next;
    Block& b = blocks_[id];
    Unlink(id);
    --num_free_;
    if (b.cached) {
      // Lazy eviction happens here, and only here.
      cached_.erase(b.hash);
      if (events_ != nullptr) events_->OnRemoved(b.hash);
      b.cached = false;
      b.hash = BlockHash{};
      --num_free_cached_;
      ++num_evicted_;
    }
    b.ref_count = 1;
    out->push_back(id);
  }
  num_allocated_ += n;
  return true;
}

std::optional<BlockId> BlockPool::Lookup(const BlockHash& hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::AddRef(BlockId id) {
  Block& b = blocks_[Index(id)];
  if (b.ref_count == 0) {
    // Only a cached block may be revived: an uncached free block's content is
    // garbage to any new holder.
    KVSERVE_CHECK(b.cached);
    Unlink(id);
    --num_free_;
    --num_free_cached_;
  }
  ++b.ref_count;
}

bool BlockPool::RegisterHash(BlockId id, const BlockHash& hash, const BlockOrigin& origin) {
  Block& b = blocks_[Index(id)];
  KVSERVE_CHECK(b.ref_count > 0);
  if (b.cached) {
    KVSERVE_CHECK(b.hash == hash);  // a block's content never changes once full
    return true;
  }
  auto [it, inserted] = cached_.try_emplace(hash, id);
  if (!inserted) return false;
  b.cached = true;
  b.hash = hash;
  if (events_ != nullptr) events_->OnStored(hash, origin);
  return true;
}

bool BlockPool::ResetCache() {
  if (num_free_ != num_blocks_ - 1) return false;
  for (const auto& [h, id] : cached_) {
    Block& b = blocks_[id];
    b.cached = false;
    b.hash = BlockHash{};
  }
  cached_.clear();
  num_free_cached_ = 0;
  if (events_ != nullptr) events_->OnCleared();
  return true;
}

void BlockPool::ReleaseTable(std::span<const BlockId> table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    if (*it == kNullBlockId) continue;
    Block& b = blocks_[Index(*it)];
    KVSERVE_CHECK(b.ref_count > 0);
    if (--b.ref_count == 0) {
      PushTail(*it);
      ++num_free_;
      if (b.cached) ++num_free_cached_;
    }
  }
}

std::optional<BlockHash> BlockPool::hash(BlockId id) const {
  const Block& b = blocks_[Index(id)];
  if (!b.cached) return std::nullopt;
  return b.hash;
}

BlockPoolStats BlockPool::Stats() const {
  BlockPoolStats s;
  s.num_blocks = num_blocks_;
  s.num_free_cached = num_free_cached_;
  s.num_free_uncached = num_free_ - num_free_cached_;
  s.num_in_use = num_blocks_ - 1 - num_free_;
  s.num_cached = static_cast<int32_t>(cached_.size());
  s.num_evicted = num_evicted_;
  s.num_allocated = num_allocated_;
  return s;
}

absl::Status BlockPool::CheckInvariants(
    std::span<const std::span<const BlockId>> live_tables) const {
  auto fail = [](auto&&... parts) { return absl::InternalError(absl::StrCat(parts...)); };

  // Null block: untouched.
  const Block& null_block = blocks_[kNullBlockId];
  if (null_block.ref_count != 0 || null_block.cached || null_block.prev != -1 ||
      null_block.next != -1) {
    return fail("null block was handed out, cached or linked");
  }

  // Walk the free list forward, checking the back links and membership.
  std::vector<char> in_list(blocks_.size(), 0);
  int32_t listed = 0;
  int32_t listed_cached = 0;
  BlockId prev = sentinel_;
  for (BlockId id = blocks_[sentinel_].next; id != sentinel_; id = blocks_[id].next) {
    if (id <= kNullBlockId || id >= num_blocks_) return fail("free list holds id ", id);
    if (in_list[id]) return fail("free list revisits block ", id);
    if (blocks_[id].prev != prev) return fail("broken back link at block ", id);
    if (blocks_[id].ref_count != 0) {
      return fail("free block ", id, " has ref_count ", blocks_[id].ref_count);
    }
    in_list[id] = 1;
    ++listed;
    if (blocks_[id].cached) ++listed_cached;
    prev = id;
  }
  if (blocks_[sentinel_].prev != prev) return fail("sentinel back link is not the tail");
  if (listed != num_free_) return fail("free list has ", listed, " blocks, counter ", num_free_);
  if (listed_cached != num_free_cached_) {
    return fail("free list has ", listed_cached, " cached blocks, counter ", num_free_cached_);
  }

  // Reference counts against the live tables.
  std::vector<int32_t> holders(blocks_.size(), 0);
  for (std::span<const BlockId> table : live_tables) {
    for (BlockId id : table) {
      if (id == kNullBlockId) continue;
      if (id < 0 || id >= num_blocks_) return fail("a table holds invalid id ", id);
      ++holders[id];
    }
  }
  int32_t num_cached = 0;
  for (BlockId id = 1; id < num_blocks_; ++id) {
    const Block& b = blocks_[id];
    if (b.ref_count < 0) return fail("block ", id, " has ref_count ", b.ref_count);
    if ((b.ref_count == 0) != (in_list[id] != 0)) {
      return fail("block ", id, " with ref_count ", b.ref_count, in_list[id] ? " is" : " is not",
                  " on the free list");
    }
    if (b.ref_count != holders[id]) {
      return fail("block ", id, " has ref_count ", b.ref_count, " but ", holders[id],
                  " table entries");
    }
    if (b.cached) {
      ++num_cached;
      auto it = cached_.find(b.hash);
      if (it == cached_.end() || it->second != id) {
        return fail("cached block ", id, " is not the map's entry for its hash");
      }
    }
  }
  // Every map entry is a cached block with that hash; with the loop above this
  // makes map entries and cached blocks one to one.
  if (static_cast<int32_t>(cached_.size()) != num_cached) {
    return fail("map has ", cached_.size(), " entries for ", num_cached, " cached blocks");
  }
  for (const auto& [h, id] : cached_) {
    if (id <= kNullBlockId || id >= num_blocks_ || !blocks_[id].cached ||
        !(blocks_[id].hash == h)) {
      return fail("map entry points at block ", id, " which does not hold that hash");
    }
  }
  return absl::OkStatus();
}

std::vector<BlockId> BlockPool::FreeListForTesting() const {
  std::vector<BlockId> ids;
  for (BlockId id = blocks_[sentinel_].next; id != sentinel_; id = blocks_[id].next) {
    ids.push_back(id);
  }
  return ids;
}

}  // namespace kvserve::scheduler
