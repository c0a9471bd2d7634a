// The msgpack payload of one KV-cache event batch, as vLLM's ZMQ publisher
// sends it and llm-d's kv-cache indexer decodes it (docs/server.md,
// "KV-cache events").
//
// A batch is always a positional array (vLLM's EventBatch is array_like):
//
//   [ts: float64, events: [event, ...], data_parallel_rank: int]
//
// Each event, in one of two encodings:
//
//   kMap (vLLM's current releases, the default; llm-d-kv-cache >= 0.9): a map whose
//   first key "type" names the event, then the fields by name in declaration
//   order:
//     {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash":
//      u64|nil, "token_ids": [int...], "block_size": int, "lora_id": nil,
//      "medium": str, "lora_name": nil, "extra_keys": [[salt]|nil per block],
//      "group_idx": 0}
//     {"type": "BlockRemoved", "block_hashes": [u64...], "medium": str,
//      "group_idx": 0}
//     {"type": "AllBlocksCleared"}
//   kArray (vLLM before it dropped msgspec's array_like; older llm-d): the
//   same fields by position after the tag:
//     ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//      lora_id, medium, lora_name, extra_keys, group_idx]
//     ["BlockRemoved", block_hashes, medium, group_idx]
//     ["AllBlocksCleared"]
//
// Block hashes are unsigned 64-bit integers (vLLM's int form of a block
// hash, which every llm-d version reads), never byte strings.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "scheduler/kv_events.h"

namespace kvserve::server {

enum class KvEventEncoding { kMap, kArray };

// "map" or "array"; InvalidArgument otherwise.
absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(std::string_view name);

struct KvEventFormat {
  KvEventEncoding encoding = KvEventEncoding::kMap;
  std::string medium = "GPU";  // vLLM's MEDIUM_GPU / MEDIUM_CPU: where the blocks live
  int32_t data_parallel_rank = 0;
};

std::string EncodeKvEventBatch(const scheduler::KvEventBatch& batch, const KvEventFormat& format);

}  // namespace kvserve::server
