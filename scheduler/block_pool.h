// BlockPool: host-side bookkeeping of the KV cache's fixed set of blocks
// (the physical storage is engine::KvCache; ids here index it).
//
// Thread affinity: not thread-safe. Owned by the EngineLoop thread, like all
// scheduling state; only Stats() snapshots leave that thread (by value).
//
// Every block id in [0, num_blocks) is in exactly one state:
//
//   null          id 0 only. Never handed out, never free, never cached. Block
//                 tables may use it as padding; it is not counted below.
//   in use        ref_count > 0: held by that many block tables. May be cached.
//   free-cached   ref_count == 0, still holds a content hash and is findable
//                 through Lookup until Allocate pops it for reuse.
//   free-uncached ref_count == 0, no hash.
//
//   num_free_uncached + num_free_cached + num_in_use == num_blocks - 1
//
// Free blocks (cached or not) sit in one intrusive doubly linked LRU list:
//
//   sentinel <-> head (evicted first) <-> ... <-> tail (freed last) <-> sentinel
//
// Allocate pops from the head; a block whose last reference goes is pushed at
// the tail; a prefix hit on a free-cached block unlinks it from the middle in
// O(1). Eviction is lazy: a cached block keeps its hash, and its entry in the
// hash -> block map, until Allocate pops it; only then is the entry erased.
//
// A hash maps to at most one block. A block registered with a hash is full
// and is never written again (its K/V are shared by every table that holds
// it); the caller (KvCacheManager) only writes blocks it holds alone.
//
// Events (optional, SetEventRecorder): every change of the hash -> block map
// is reported as it happens: an entry added by RegisterHash (BlockStored), one
// erased by Allocate (BlockRemoved), all erased by ResetCache
// (AllBlocksCleared). Nothing else changes the map, so the reported hashes are
// the map's keys (scheduler/kv_events.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "scheduler/block_hash.h"
#include "scheduler/kv_events.h"

namespace kvserve::scheduler {

using BlockId = int32_t;
inline constexpr BlockId kNullBlockId = 0;

struct BlockPoolStats {
  int32_t num_blocks = 0;  // all ids, the null block included
  int32_t num_free_uncached = 0;
  int32_t num_free_cached = 0;
  int32_t num_in_use = 0;
  int32_t num_cached = 0;     // blocks holding a hash: free-cached + cached in use
  int64_t num_evicted = 0;    // cached blocks whose hash was dropped on reuse, ever
  int64_t num_allocated = 0;  // blocks handed out by Allocate, ever
};

class BlockPool {
 public:
  // num_blocks counts the null block: the pool hands out num_blocks - 1.
  BlockPool(int32_t num_blocks, int32_t block_size);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  // Blocks Allocate can hand out now: free-uncached + free-cached.
  int32_t num_free_blocks() const { return num_free_; }

  // Pops n blocks from the LRU head, each with ref_count 1 and no hash (a
  // cached one is evicted: its map entry erased), and appends them to *out in
  // pop order. All or nothing: with fewer than n free blocks it returns false
  // and changes nothing.
  [[nodiscard]] bool Allocate(int32_t n, std::vector<BlockId>* out);

  // The block holding `hash`, free or in use. Does not change any state.
  std::optional<BlockId> Lookup(const BlockHash& hash) const;

  // Takes one more reference on an in-use block, or on a free-cached block
  // found by Lookup (unlinking it from the free list, keeping its hash).
  void AddRef(BlockId id);

  // Registers the content hash of the in-use, full block `id`, making it
  // findable. Returns false, and leaves `id` uncached, if another block
  // already holds `hash` (the two have equal content; one entry suffices).
  // Idempotent for a block that already holds `hash`. `origin` (parent hash,
  // tokens, salt) is only read for the BlockStored event of a new entry.
  bool RegisterHash(BlockId id, const BlockHash& hash, const BlockOrigin& origin = {});

  // Drops every cached hash (free-cached blocks become free-uncached), as
  // vLLM's reset_prefix_cache does: only while no block is in use, so no
  // table holds a block whose hash disappears. Returns false, changing
  // nothing, when some block is in use.
  [[nodiscard]] bool ResetCache();

  // Reports map changes to `recorder` from now on (null: stop). Not owned;
  // must outlive the pool or be unset first.
  void SetEventRecorder(KvEventRecorder* recorder) { events_ = recorder; }

  // Drops one reference per entry of a block table, last entry first. Blocks
  // whose count reaches zero are pushed at the LRU tail in that order, so a
  // table's first blocks (a prefix other requests may share) end up nearest
  // the tail and are evicted last. Null entries are skipped.
  void ReleaseTable(std::span<const BlockId> table);

  int32_t ref_count(BlockId id) const { return blocks_[Index(id)].ref_count; }
  std::optional<BlockHash> hash(BlockId id) const;

  BlockPoolStats Stats() const;

  // Verifies every invariant above, given every live block table (the null
  // block may appear in a table and is ignored): list integrity and order
  // links, free <=> ref_count 0, counters, the map and the block hashes agree
  // one to one, and each block's ref_count equals the number of its
  // occurrences in live_tables. O(num_blocks + map + table entries).
  absl::Status CheckInvariants(std::span<const std::span<const BlockId>> live_tables) const;

  // The free list from head (next to evict) to tail. For tests.
  std::vector<BlockId> FreeListForTesting() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    // Free-list links (block ids, or the sentinel id); meaningful only while
    // the block is free.
    BlockId prev = -1;
    BlockId next = -1;
    bool cached = false;
    BlockHash hash;
  };

  size_t Index(BlockId id) const;  // checks 0 < id < num_blocks_
  void PushTail(BlockId id);
  void Unlink(BlockId id);

  const int32_t num_blocks_;
  const int32_t block_size_;
  // blocks_[num_blocks_] is the sentinel of the circular free list.
  std::vector<Block> blocks_;
  const BlockId sentinel_;
  absl::flat_hash_map<BlockHash, BlockId> cached_;
  int32_t num_free_ = 0;
  int32_t num_free_cached_ = 0;
  int64_t num_evicted_ = 0;
  int64_t num_allocated_ = 0;
  KvEventRecorder* events_ = nullptr;
};

}  // namespace kvserve::scheduler
