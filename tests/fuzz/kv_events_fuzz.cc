// The KV-event msgpack encoder (server/kv_events/event_encoding.h) on
// arbitrary batches, decoded back with msgpack-cxx's own unpacker. Input:
//   Byte()    bit 0: array encoding (else map), bit 1: medium "CPU" (else "GPU")
//   8 Bytes   the timestamp's float64 bits (NaN and infinities included)
//   then events until the input ends, each: Byte() kind % 3
//     0 BlockStored:  Byte() blocks (1 + b % 4), Byte() block_size (1 + b % 8),
//                     Byte() parent (bit 0), 8 Bytes per id (and the parent),
//                     4 Bytes per token (masked to int32 >= 0), Piece() salt
//     1 BlockRemoved: Byte() ids (b % 6), 8 Bytes per id
//     2 AllBlocksCleared
// Properties: the payload is exactly one msgpack object (nothing after it)
// and decodes to the batch: [ts (bit-identical float64), events, 0], every
// event in its encoding's layout with every field equal to the input's.
#include <cstdint>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "msgpack.hpp"
#include "server/kv_events/event_encoding.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kvserve::fuzz::FuzzInput;
using namespace kvserve::scheduler;
using kvserve::server::KvEventEncoding;
using kvserve::server::KvEventFormat;

uint64_t U64(FuzzInput& in) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x |= uint64_t{in.Byte()} << (8 * i);
  return x;
}

KvEventBatch MakeBatch(FuzzInput& in) {
  KvEventBatch batch;
  const uint64_t ts_bits = U64(in);
  std::memcpy(&batch.timestamp_s, &ts_bits, sizeof ts_bits);
  while (!in.empty()) {
    switch (in.Byte() % 3) {
      case 0: {
        BlockStoredEvent e;
        const int blocks = 1 + in.Byte() % 4;
        e.block_size = 1 + in.Byte() % 8;
        if (in.Byte() & 1) e.parent_block_id = U64(in);
        for (int i = 0; i < blocks; ++i) e.block_ids.push_back(U64(in));
        for (int i = 0; i < blocks * e.block_size; ++i) {
          e.token_ids.push_back(static_cast<int32_t>(U64(in) & 0x7fffffff));
        }
        e.cache_salt = std::string(in.Piece());
        batch.events.emplace_back(std::move(e));
        break;
      }
      case 1: {
        BlockRemovedEvent e;
        const int n = in.Byte() % 6;
        for (int i = 0; i < n; ++i) e.block_ids.push_back(U64(in));
        batch.events.emplace_back(std::move(e));
        break;
      }
      default:
        batch.events.emplace_back(AllBlocksClearedEvent{});
    }
  }
  return batch;
}

std::string AsString(const msgpack::object& o) {
  KVSERVE_FUZZ_CHECK(o.type == msgpack::type::STR, "expected a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

std::vector<uint64_t> AsIds(const msgpack::object& o) {
  KVSERVE_FUZZ_CHECK(o.type == msgpack::type::ARRAY, "expected an array of ids");
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    KVSERVE_FUZZ_CHECK(o.via.array.ptr[i].type == msgpack::type::POSITIVE_INTEGER, "id type");
    ids.push_back(o.via.array.ptr[i].via.u64);
  }
  return ids;
}

// The event's fields in declaration order, by name (map) or position (array);
// checks the tag and, for maps, that "type" comes first and the names match.
std::vector<msgpack::object> Fields(const msgpack::object& o, bool map, const std::string& tag,
                                    const std::vector<std::string>& names) {
  std::vector<msgpack::object> fields;
  if (map) {
    KVSERVE_FUZZ_CHECK(o.type == msgpack::type::MAP, "a map event");
    KVSERVE_FUZZ_CHECK(o.via.map.size == names.size() + 1, tag);
    KVSERVE_FUZZ_CHECK(AsString(o.via.map.ptr[0].key) == "type", tag);
    KVSERVE_FUZZ_CHECK(AsString(o.via.map.ptr[0].val) == tag, tag);
    for (size_t i = 0; i < names.size(); ++i) {
      KVSERVE_FUZZ_CHECK(AsString(o.via.map.ptr[i + 1].key) == names[i], names[i]);
      fields.push_back(o.via.map.ptr[i + 1].val);
    }
  } else {
    KVSERVE_FUZZ_CHECK(o.type == msgpack::type::ARRAY, "an array event");
    KVSERVE_FUZZ_CHECK(o.via.array.size == names.size() + 1, tag);
    KVSERVE_FUZZ_CHECK(AsString(o.via.array.ptr[0]) == tag, tag);
    for (size_t i = 0; i < names.size(); ++i) fields.push_back(o.via.array.ptr[i + 1]);
  }
  return fields;
}

void CheckStored(const msgpack::object& o, bool map, const BlockStoredEvent& e,
                 const std::string& medium) {
  const auto f = Fields(o, map, "BlockStored",
                        {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                         "medium", "lora_name", "extra_keys", "group_idx"});
  KVSERVE_FUZZ_CHECK(AsIds(f[0]) == e.block_ids, "block_hashes");
  if (e.parent_block_id.has_value()) {
    KVSERVE_FUZZ_CHECK(
        f[1].type == msgpack::type::POSITIVE_INTEGER && f[1].via.u64 == *e.parent_block_id,
        "parent_block_hash");
  } else {
    KVSERVE_FUZZ_CHECK(f[1].type == msgpack::type::NIL, "parent_block_hash nil");
  }
  KVSERVE_FUZZ_CHECK(f[2].type == msgpack::type::ARRAY && f[2].via.array.size == e.token_ids.size(),
                     "token_ids");
  for (size_t i = 0; i < e.token_ids.size(); ++i) {
    const msgpack::object& t = f[2].via.array.ptr[i];
    KVSERVE_FUZZ_CHECK(t.type == msgpack::type::POSITIVE_INTEGER &&
                           t.via.u64 == static_cast<uint64_t>(e.token_ids[i]),
                       "token id");
  }
  KVSERVE_FUZZ_CHECK(f[3].type == msgpack::type::POSITIVE_INTEGER &&
                         f[3].via.u64 == static_cast<uint64_t>(e.block_size),
                     "block_size");
  KVSERVE_FUZZ_CHECK(f[4].type == msgpack::type::NIL && f[6].type == msgpack::type::NIL, "lora");
  KVSERVE_FUZZ_CHECK(AsString(f[5]) == medium, "medium");
  KVSERVE_FUZZ_CHECK(f[7].type == msgpack::type::ARRAY && f[7].via.array.size == e.block_ids.size(),
                     "extra_keys: one entry per block");
  for (uint32_t i = 0; i < f[7].via.array.size; ++i) {
    const msgpack::object& k = f[7].via.array.ptr[i];
    if (e.cache_salt.empty()) {
      KVSERVE_FUZZ_CHECK(k.type == msgpack::type::NIL, "no extra keys");
    } else {
      KVSERVE_FUZZ_CHECK(k.type == msgpack::type::ARRAY && k.via.array.size == 1 &&
                             AsString(k.via.array.ptr[0]) == e.cache_salt,
                         "extra keys [salt]");
    }
  }
  KVSERVE_FUZZ_CHECK(f[8].type == msgpack::type::POSITIVE_INTEGER && f[8].via.u64 == 0,
                     "group_idx");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const KvEventFormat format{
      .encoding = flags & 1 ? KvEventEncoding::kArray : KvEventEncoding::kMap,
      .medium = flags & 2 ? "CPU" : "GPU"};
  const bool map = format.encoding == KvEventEncoding::kMap;
  const KvEventBatch batch = MakeBatch(in);
  const std::string payload = kvserve::server::EncodeKvEventBatch(batch, format);

  size_t offset = 0;
  msgpack::object_handle handle = msgpack::unpack(payload.data(), payload.size(), offset);
  KVSERVE_FUZZ_CHECK(offset == payload.size(), "bytes after the batch");
  const msgpack::object& top = handle.get();
  KVSERVE_FUZZ_CHECK(top.type == msgpack::type::ARRAY && top.via.array.size == 3,
                     "[ts, events, rank]");
  const msgpack::object& ts = top.via.array.ptr[0];
  KVSERVE_FUZZ_CHECK(ts.type == msgpack::type::FLOAT64, "ts is a float64");
  KVSERVE_FUZZ_CHECK(std::memcmp(&ts.via.f64, &batch.timestamp_s, sizeof(double)) == 0, "ts bits");
  const msgpack::object& events = top.via.array.ptr[1];
  KVSERVE_FUZZ_CHECK(
      events.type == msgpack::type::ARRAY && events.via.array.size == batch.events.size(),
      "event count");
  KVSERVE_FUZZ_CHECK(top.via.array.ptr[2].type == msgpack::type::POSITIVE_INTEGER &&
                         top.via.array.ptr[2].via.u64 == 0,
                     "data_parallel_rank");
  for (size_t i = 0; i < batch.events.size(); ++i) {
    const msgpack::object& o = events.via.array.ptr[i];
    if (const auto* s = std::get_if<BlockStoredEvent>(&batch.events[i])) {
      CheckStored(o, map, *s, format.medium);
    } else if (const auto* r = std::get_if<BlockRemovedEvent>(&batch.events[i])) {
      const auto f = Fields(o, map, "BlockRemoved", {"block_hashes", "medium", "group_idx"});
      KVSERVE_FUZZ_CHECK(AsIds(f[0]) == r->block_ids, "removed block_hashes");
      KVSERVE_FUZZ_CHECK(AsString(f[1]) == format.medium, "removed medium");
    } else {
      Fields(o, map, "AllBlocksCleared", {});
    }
  }
  return 0;
}
