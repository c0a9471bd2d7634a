#include "server/kv_events/event_encoding.h"

#include <cstring>
#include <variant>

#include "absl/strings/str_cat.h"
#include "msgpack.hpp"

namespace kvserve::server {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// Always float64 (0xcb), as msgspec writes a float: msgpack-cxx's
// pack_double writes an integral value as an integer.
void PackFloat64(msgpack::sbuffer& buffer, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  char bytes[9] = {static_cast<char>(0xcb)};
  for (int i = 8; i >= 1; --i, bits >>= 8) bytes[i] = static_cast<char>(bits & 0xff);
  buffer.write(bytes, sizeof bytes);
}

void PackIds(Packer& pk, const std::vector<uint64_t>& ids) {
  pk.pack_array(static_cast<uint32_t>(ids.size()));
  for (uint64_t id : ids) pk.pack_uint64(id);
}

// Writes the key in map encoding; nothing in array encoding (the position
// names the field).
class EventWriter {
 public:
  EventWriter(Packer& pk, KvEventEncoding encoding)
      : pk_(pk), map_(encoding == KvEventEncoding::kMap) {}

  void Begin(std::string_view tag, uint32_t num_fields) {
    if (map_) {
      pk_.pack_map(num_fields + 1);
      PackStr(pk_, "type");
    } else {
      pk_.pack_array(num_fields + 1);
    }
    PackStr(pk_, tag);
  }
  Packer& Field(std::string_view name) {
    if (map_) PackStr(pk_, name);
    return pk_;
  }

 private:
  Packer& pk_;
  const bool map_;
};

void PackStored(EventWriter& w, const scheduler::BlockStoredEvent& e, const KvEventFormat& f) {
  w.Begin("BlockStored", 9);
  PackIds(w.Field("block_hashes"), e.block_ids);
  Packer& parent = w.Field("parent_block_hash");
  if (e.parent_block_id.has_value()) {
    parent.pack_uint64(*e.parent_block_id);
  } else {
    parent.pack_nil();
  }
  Packer& tokens = w.Field("token_ids");
  tokens.pack_array(static_cast<uint32_t>(e.token_ids.size()));
  for (int32_t t : e.token_ids) tokens.pack_int32(t);
  w.Field("block_size").pack_int32(e.block_size);
  w.Field("lora_id").pack_nil();
  PackStr(w.Field("medium"), f.medium);
  w.Field("lora_name").pack_nil();
  // One entry per block: the extra keys of its hash (the cache salt), or nil.
  Packer& extra = w.Field("extra_keys");
  extra.pack_array(static_cast<uint32_t>(e.block_ids.size()));
  for (size_t i = 0; i < e.block_ids.size(); ++i) {
    if (e.cache_salt.empty()) {
      extra.pack_nil();
    } else {
      extra.pack_array(1);
      PackStr(extra, e.cache_salt);
    }
  }
  w.Field("group_idx").pack_int32(0);
}

void PackRemoved(EventWriter& w, const scheduler::BlockRemovedEvent& e, const KvEventFormat& f) {
  w.Begin("BlockRemoved", 3);
  PackIds(w.Field("block_hashes"), e.block_ids);
  PackStr(w.Field("medium"), f.medium);
  w.Field("group_idx").pack_int32(0);
}

}  // namespace

absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(std::string_view name) {
  if (name == "map") return KvEventEncoding::kMap;
  if (name == "array") return KvEventEncoding::kArray;
  return absl::InvalidArgumentError(
      absl::StrCat("must be map or array, got \"", std::string(name), "\""));
}

std::string EncodeKvEventBatch(const scheduler::KvEventBatch& batch, const KvEventFormat& format) {
  msgpack::sbuffer buffer;
  Packer pk(&buffer);
  pk.pack_array(3);
  PackFloat64(buffer, batch.timestamp_s);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  EventWriter writer(pk, format.encoding);
  for (const scheduler::KvEvent& event : batch.events) {
    if (const auto* stored = std::get_if<scheduler::BlockStoredEvent>(&event)) {
      PackStored(writer, *stored, format);
    } else if (const auto* removed = std::get_if<scheduler::BlockRemovedEvent>(&event)) {
      PackRemoved(writer, *removed, format);
    } else {
      writer.Begin("AllBlocksCleared", 0);
    }
  }
  pk.pack_int32(format.data_parallel_rank);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvserve::server
