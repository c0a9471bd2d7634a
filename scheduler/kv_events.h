// KV-cache events: what a prefix-aware router needs to mirror the set of
// blocks this replica's cache holds (docs/server.md, "KV-cache events").
//
// The BlockPool reports its own transitions to a KvEventRecorder:
//
//   a full block becomes findable (RegisterHash succeeds)  -> BlockStored
//   a cached block loses its hash (Allocate evicts it)     -> BlockRemoved
//   every cached block loses its hash (ResetCache)         -> AllBlocksCleared
//
// so the events name exactly the hashes the pool's map holds: replaying every
// batch in order rebuilds that set. Nothing else is reported (a prefix hit, a
// reference taken or dropped, does not change what is cached).
//
// Ordering: events are recorded in the order the pool changes. A block is
// stored only while its parent's hash is cached (KvCacheManager keeps the
// chain findable before registering a block), so a consumer always learns a
// parent before its child.
//
// Thread affinity: the recorder lives on the engine loop thread with the pool;
// TakeBatch hands the step's events out by value (to the publisher's queue).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "scheduler/block_hash.h"

namespace kvserve::scheduler {

// The 64-bit id a block is announced under: the low word of the pool's
// 128-bit chained hash. Consumers key on 64 bits (llm-d's index); the pool
// itself never compares these.
inline uint64_t ExternalBlockId(const BlockHash& hash) { return hash.lo; }

// One or more consecutive blocks of one chain that became cached: blocks[i]'s
// parent is blocks[i-1], blocks[0]'s parent is parent_block_id (nullopt: the
// first block of a sequence). token_ids holds block_size tokens per block.
struct BlockStoredEvent {
  std::vector<uint64_t> block_ids;
  std::optional<uint64_t> parent_block_id;
  std::vector<int32_t> token_ids;
  int32_t block_size = 0;
  // The request's cache salt, part of every one of these blocks' hashes
  // (empty: none).
  std::string cache_salt;

  friend bool operator==(const BlockStoredEvent&, const BlockStoredEvent&) = default;
};

// Cached blocks that lost their hash (evicted for reuse).
struct BlockRemovedEvent {
  std::vector<uint64_t> block_ids;

  friend bool operator==(const BlockRemovedEvent&, const BlockRemovedEvent&) = default;
};

// Every cached hash was dropped at once.
struct AllBlocksClearedEvent {
  friend bool operator==(const AllBlocksClearedEvent&, const AllBlocksClearedEvent&) = default;
};

using KvEvent = std::variant<BlockStoredEvent, BlockRemovedEvent, AllBlocksClearedEvent>;

// The events of one engine step, in the order the pool changed.
struct KvEventBatch {
  double timestamp_s = 0;  // Unix time when the step's events were taken
  std::vector<KvEvent> events;
};

// What the caller knows about a block it registers: its chain parent, its
// tokens and the salt mixed into its hash.
struct BlockOrigin {
  BlockHash parent = kRootParentHash;  // kRootParentHash: the first block
  std::span<const int32_t> tokens;     // block_size tokens
  std::string_view cache_salt;
};

class KvEventRecorder {
 public:
  explicit KvEventRecorder(int32_t block_size) : block_size_(block_size) {}

  // A block whose parent is the last block of the previous event, with the
  // same salt, extends that event (one BlockStored per chain run, as vLLM
  // sends one per request per step); otherwise it starts a new one.
  void OnStored(const BlockHash& hash, const BlockOrigin& origin);
  // Consecutive removals share one event.
  void OnRemoved(const BlockHash& hash);
  // Earlier events of the step stay: a consumer applies them, then clears.
  void OnCleared();

  bool empty() const { return events_.empty(); }
  // The events recorded since the last call, stamped with `timestamp_s`.
  KvEventBatch TakeBatch(double timestamp_s);

 private:
  const int32_t block_size_;
  std::vector<KvEvent> events_;
};

}  // namespace kvserve::scheduler
