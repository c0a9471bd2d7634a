// The msgpack bytes of KV-event batches against hand-decoded expectations
// (format codes written out: 0x93 = array of 3, 0xcb = float64, 0xa4 =
// 4-byte string, 0xc0 = nil, 0xcd = uint16, 0xcf = uint64, ...).
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/kv_events/event_encoding.h"

namespace kvserve::server {
namespace {

using scheduler::AllBlocksClearedEvent;
using scheduler::BlockRemovedEvent;
using scheduler::BlockStoredEvent;
using scheduler::KvEventBatch;

using Bytes = std::vector<uint8_t>;

// A fixstr (at most 31 bytes): 0xa0 | length, then the bytes.
Bytes Str(const std::string& s) {
  Bytes b = {static_cast<uint8_t>(0xa0 | s.size())};
  b.insert(b.end(), s.begin(), s.end());
  return b;
}

Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes AsBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST(KvEventEncodingTest, ArrayEncodingIsPositional) {
  KvEventBatch batch;
  batch.timestamp_s = 1.5;
  batch.events.push_back(BlockStoredEvent{.block_ids = {1, (uint64_t{1} << 63) + 5},
                                          .parent_block_id = std::nullopt,
                                          .token_ids = {7, 300},
                                          .block_size = 1,
                                          .cache_salt = "s"});
  batch.events.push_back(BlockRemovedEvent{.block_ids = {3}});
  batch.events.push_back(AllBlocksClearedEvent{});
  const std::string encoded = EncodeKvEventBatch(
      batch, {.encoding = KvEventEncoding::kArray, .medium = "GPU", .data_parallel_rank = 0});

  const Bytes expected = Cat({
      {0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0},  // [1.5,
      {0x93},                                      //  [
      {0x9a},
      Str("BlockStored"),                                //   [tag,
      {0x92, 0x01, 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0x05},  // block_hashes [1, 2^63 + 5]
      {0xc0},                                            //    parent nil
      {0x92, 0x07, 0xcd, 0x01, 0x2c},                    //    token_ids [7, 300]
      {0x01, 0xc0},
      Str("GPU"),
      {0xc0},  //    block_size 1, lora_id, medium, lora_name
      {0x92, 0x91},
      Str("s"),
      {0x91},
      Str("s"),  //    extra_keys [["s"], ["s"]]
      {0x00},    //    group_idx 0]
      {0x94},
      Str("BlockRemoved"),
      {0x91, 0x03},
      Str("GPU"),
      {0x00},
      {0x91},
      Str("AllBlocksCleared"),  //  ],
      {0x00},                   //  dp rank 0]
  });
  EXPECT_EQ(AsBytes(encoded), expected);
}

TEST(KvEventEncodingTest, MapEncodingNamesTheTypeFirst) {
  KvEventBatch batch;
  batch.events.push_back(
      BlockStoredEvent{.block_ids = {1}, .parent_block_id = 9, .token_ids = {5}, .block_size = 1});
  batch.events.push_back(BlockRemovedEvent{.block_ids = {3}});
  batch.events.push_back(AllBlocksClearedEvent{});
  const std::string encoded = EncodeKvEventBatch(
      batch, {.encoding = KvEventEncoding::kMap, .medium = "CPU", .data_parallel_rank = 2});

  const Bytes expected = Cat({
      {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x93},
      {0x8a},
      Str("type"),
      Str("BlockStored"),  // map of 10
      Str("block_hashes"),
      {0x91, 0x01},
      {0xb1},
      AsBytes("parent_block_hash"),
      {0x09},  // 17 bytes: still a fixstr
      Str("token_ids"),
      {0x91, 0x05},
      Str("block_size"),
      {0x01},
      Str("lora_id"),
      {0xc0},
      Str("medium"),
      Str("CPU"),
      Str("lora_name"),
      {0xc0},
      Str("extra_keys"),
      {0x91, 0xc0},  // one block, no extra keys
      Str("group_idx"),
      {0x00},
      {0x84},
      Str("type"),
      Str("BlockRemoved"),
      Str("block_hashes"),
      {0x91, 0x03},
      Str("medium"),
      Str("CPU"),
      Str("group_idx"),
      {0x00},
      {0x81},
      Str("type"),
      Str("AllBlocksCleared"),
      {0x02},
  });
  EXPECT_EQ(AsBytes(encoded), expected);
}

TEST(KvEventEncodingTest, EncodingNames) {
  EXPECT_EQ(*ParseKvEventEncoding("map"), KvEventEncoding::kMap);
  EXPECT_EQ(*ParseKvEventEncoding("array"), KvEventEncoding::kArray);
  EXPECT_FALSE(ParseKvEventEncoding("json").ok());
}

}  // namespace
}  // namespace kvserve::server
