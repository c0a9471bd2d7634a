#include "scheduler/kv_events.h"

#include <utility>

#include "common/check.h"

namespace kvserve::scheduler {

void KvEventRecorder::OnStored(const BlockHash& hash, const BlockOrigin& origin) {
  KVSERVE_CHECK(static_cast<int32_t>(origin.tokens.size()) == block_size_);
  const std::optional<uint64_t> parent =
      origin.parent == kRootParentHash ? std::nullopt
                                       : std::optional<uint64_t>(ExternalBlockId(origin.parent));
  BlockStoredEvent* run = nullptr;
  if (!events_.empty()) {
    auto* last = std::get_if<BlockStoredEvent>(&events_.back());
    if (last != nullptr && parent.has_value() && last->block_ids.back() == *parent &&
        last->cache_salt == origin.cache_salt) {
      run = last;
    }
  }
  if (run == nullptr) {
    BlockStoredEvent e;
    e.parent_block_id = parent;
    e.block_size = block_size_;
    e.cache_salt = std::string(origin.cache_salt);
    events_.emplace_back(std::move(e));
    run = &std::get<BlockStoredEvent>(events_.back());
  }
  run->block_ids.push_back(ExternalBlockId(hash));
  run->token_ids.insert(run->token_ids.end(), origin.tokens.begin(), origin.tokens.end());
}

void KvEventRecorder::OnRemoved(const BlockHash& hash) {
  if (events_.empty() || !std::holds_alternative<BlockRemovedEvent>(events_.back())) {
    events_.emplace_back(BlockRemovedEvent{});
  }
  std::get<BlockRemovedEvent>(events_.back()).block_ids.push_back(ExternalBlockId(hash));
}

void KvEventRecorder::OnCleared() { events_.emplace_back(AllBlocksClearedEvent{}); }

KvEventBatch KvEventRecorder::TakeBatch(double timestamp_s) {
  KvEventBatch batch;
  batch.timestamp_s = timestamp_s;
  batch.events.swap(events_);
  return batch;
}

}  // namespace kvserve::scheduler
