// KvCacheManager: per-request block tables on top of the BlockPool, with
// prefix caching.
//
// Thread affinity: not thread-safe; owned by the EngineLoop thread.
// Ownership: the manager owns the BlockPool; only it changes block references.
//
// Per request the manager keeps its block table, the number of tokens whose
// slots are allocated, and the hashes of its full blocks computed so far. The
// scheduler owns the tokens and num_computed_tokens and passes them in.
//
// Token regions of one request (block_size 4, `|` = block boundary):
//
//   tokens:        | t0 t1 t2 t3 | t4 t5 t6 t7 | t8 t9 .. .. |
//   computed:      [--- prefix hit (shared) --][ own ]           K/V present
//   allocated:     [----------------------------------]          slots exist
//   registered:    [--------------------------]                  full blocks hashed
//
// - Blocks before num_registered_blocks are full: their K/V are final and
//   may be shared with other requests (ref_count > 1); they are never written.
// - Blocks from num_registered_blocks on are held by this request alone
//   (ref_count == 1): only they receive new K/V.
//
// Lifecycle, as the scheduler drives it (one thread, no pool changes between
// a lookup and the allocation that uses it):
//
//   WAITING -> RUNNING:  prefix = GetComputedBlocks(tokens, extra_keys)
//                        AllocateNew(id, prefix, n)      (false: stay waiting)
//                        request.num_computed_tokens = prefix.num_tokens
//   each step:           Allocate(id, num_computed, n)   (false: preempt someone)
//   after each step:     CommitComputed(id, tokens, num_computed)
//   finish/abort/preempt: Free(id)
//
// Chain rule (what KV-cache events rely on, scheduler/kv_events.h): a block
// is registered only while its parent's hash is findable. A full block left
// unregistered because an equal block was cached when it filled becomes the
// chain's copy again (registered, parents first) as soon as that copy is
// evicted and a child of it is registered, or when the request is freed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "scheduler/block_hash.h"
#include "scheduler/block_pool.h"
#include "scheduler/kv_events.h"

namespace kvserve::scheduler {

using RequestId = int64_t;

struct KvCacheConfig {
  int32_t num_blocks = 0;  // the null block included
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  // The secret block hashes are keyed with; random per process when unset.
  std::optional<HashKey> hash_key;
  // Record the pool's cache transitions as KV-cache events (events()).
  bool enable_kv_events = false;
};

// The result of a prefix-cache lookup: full blocks whose K/V the request can
// reuse. Valid only until the pool next changes; pass it to AllocateNew right
// away.
struct CachedPrefix {
  std::vector<BlockId> blocks;  // in order; blocks[i] holds tokens [i*bs, (i+1)*bs)
  int32_t num_tokens = 0;       // blocks.size() * block_size
  // Hashes of the request's full blocks computed during the lookup (the hits
  // and the first miss); kept so no block is hashed twice.
  std::vector<BlockHash> block_hashes;
  BlockHash extra_keys_hash;
  std::string cache_salt;          // the lookup's, for KV-cache events
  int32_t num_queried_tokens = 0;  // tokens.size() of the lookup, for the stats
};

// Prefix-cache counters count admissions (successful AllocateNew calls), not
// lookups: a request retried every step while the pool is short is counted
// once, when it is admitted. A request resumed after preemption is counted
// again (its recompute is real work, or a real hit).
struct KvCacheStats {
  BlockPoolStats pool;
  int64_t prefix_queries = 0;         // admissions
  int64_t prefix_queried_tokens = 0;  // their known tokens at lookup
  int64_t prefix_hit_tokens = 0;      // of which served from the cache
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  int32_t block_size() const { return pool_.block_size(); }
  const BlockPool& pool() const { return pool_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  // Blocks an allocation can take now.
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  // Blocks an AllocateNew(prefix) can take for new blocks: referencing the
  // prefix takes its free-cached blocks off the free list first.
  int32_t FreeBlocksAfterReferencing(const CachedPrefix& prefix) const;

  // Longest run of cached full blocks matching a prefix of `tokens` (all the
  // request's known tokens: prompt, plus output so far when resuming after
  // preemption). Never covers the last token, which must be computed so the
  // step yields logits: at most (tokens.size() - 1) / block_size blocks.
  // Takes no references and changes nothing.
  CachedPrefix GetComputedBlocks(std::span<const int32_t> tokens,
                                 const ExtraKeys& extra_keys) const;

  // Starts tracking request `id` (not tracked yet): references the prefix's
  // blocks (reviving free-cached ones) and allocates new blocks so that
  // prefix.num_tokens + num_new_tokens tokens have slots. All or nothing: on
  // false the pool and the manager are unchanged.
  [[nodiscard]] bool AllocateNew(RequestId id, const CachedPrefix& prefix, int32_t num_new_tokens);

  // Grows a tracked request's table so num_computed_tokens + num_new_tokens
  // tokens have slots. All or nothing, as above.
  [[nodiscard]] bool Allocate(RequestId id, int32_t num_computed_tokens, int32_t num_new_tokens);

  // After a step computed K/V up to num_computed_tokens: hashes the blocks
  // that became full and registers them in the cache. A block whose content is
  // already cached in another block stays in this table, unregistered (no
  // table changes mid-flight, no double registration). tokens: the request's
  // known tokens, at least num_computed_tokens of them.
  void CommitComputed(RequestId id, std::span<const int32_t> tokens, int32_t num_computed_tokens);

  // Shrinks a tracked request's table to the blocks num_tokens slots need
  // (num_tokens >= its registered blocks' tokens), releasing the rest, last
  // first: the slots of rejected speculative tokens. Their blocks were never
  // registered in the cache.
  void Trim(RequestId id, int32_t num_tokens);

  // Releases the request's blocks, last block first, and forgets it. Blocks
  // no one else holds become free; cached ones stay findable until reused. A
  // no-op for a request not tracked (e.g. aborted while waiting).
  void Free(RequestId id);

  bool Contains(RequestId id) const { return requests_.contains(id); }
  // The request's block table; empty if not tracked. Valid until the next
  // call that changes this request.
  std::span<const BlockId> BlockTable(RequestId id) const;
  int32_t num_tracked_requests() const { return static_cast<int32_t>(requests_.size()); }

  KvCacheStats Stats() const;

  // Drops every cached hash (BlockPool::ResetCache): false, and nothing
  // changes, while any request holds blocks.
  [[nodiscard]] bool ResetPrefixCache() { return pool_.ResetCache(); }

  // The recorder of the pool's cache transitions; null unless
  // enable_kv_events. The engine loop takes one batch from it per step.
  KvEventRecorder* events() { return events_.get(); }

  // The pool's invariants with every tracked table, plus per request: the
  // table has exactly ceil(allocated tokens / block_size) blocks, no null
  // block, registered blocks carry the request's own hash when cached, and
  // blocks past the registered ones are held by this request alone.
  absl::Status CheckInvariants() const;

 private:
  struct RequestBlocks {
    std::vector<BlockId> table;
    int32_t num_allocated_tokens = 0;     // tokens with a slot; table covers them
    int32_t num_registered_blocks = 0;    // leading full blocks already offered to the cache
    std::vector<BlockHash> block_hashes;  // hashes of full blocks [0, size)
    BlockHash extra_keys_hash;
    std::string cache_salt;  // for KV-cache events
    // With events on: the tokens of full blocks [0, num_registered_blocks)
    // left unregistered (an equal block was cached), by table index.
    absl::flat_hash_map<int32_t, std::vector<int32_t>> unregistered_tokens;
  };

  int32_t BlocksFor(int32_t num_tokens) const;
  // Allocates blocks so `r` covers num_tokens; false (nothing changed) if the
  // pool is short.
  bool Grow(RequestBlocks& r, int32_t num_tokens);
  // Registers full block i of `r` (tokens: the request's) after making sure
  // its ancestors are findable: walks back over unregistered blocks whose
  // hash no other block holds, and registers them first, oldest first.
  void RegisterChained(RequestBlocks& r, std::span<const int32_t> tokens, int32_t i);
  // Registers full block i of `r` unless it already holds its hash; keeps its
  // tokens while it stays unregistered (events on).
  void RegisterOne(RequestBlocks& r, int32_t i, std::span<const int32_t> block_tokens);

  std::unique_ptr<KvEventRecorder> events_;  // before pool_: the pool points at it
  BlockPool pool_;
  BlockHasher hasher_;
  const bool enable_prefix_caching_;
  absl::flat_hash_map<RequestId, RequestBlocks> requests_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_queried_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace kvserve::scheduler
