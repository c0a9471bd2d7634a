#include "server/server_config.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/kv_cache.h"
#include "server/tool_calling/tool_call_parser.h"

namespace kvserve::server {
namespace {

absl::Status Bad(const char* flag, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

template <typename T>
absl::Status CheckRange(const char* flag, T value, T lo, T hi) {
  if (!(lo <= value && value <= hi)) {  // NaN fails too
    return Bad(flag, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

// tcp://HOST:PORT (PORT in [0, 65535]) or ipc://PATH.
absl::Status CheckZmqEndpoint(const char* flag, const std::string& endpoint) {
  const absl::string_view e = endpoint;
  if (absl::StartsWith(e, "ipc://") && e.size() > 6) return absl::OkStatus();
  if (!absl::StartsWith(e, "tcp://")) {
    return Bad(flag, absl::StrCat("must be tcp://HOST:PORT or ipc://PATH, got \"", endpoint, "\""));
  }
  const size_t colon = e.rfind(':');
  int port = -1;
  if (colon <= 6 || !absl::SimpleAtoi(e.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return Bad(flag, absl::StrCat("must be tcp://HOST:PORT with PORT in [0, 65535], got \"",
                                  endpoint, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFlagFile(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::Status ValidateConfig(const ServerConfig& c) {
  for (absl::Status s : {
           CheckRange("port", c.port, 0, 65535),
           CheckRange("metrics_port", c.metrics_port, 0, 65535),
           CheckRange("http_port", c.http_port, -1, 65535),
           CheckRange("http_io_threads", c.http_io_threads, 1, 64),
           CheckRange("num_kv_blocks", c.num_kv_blocks, 0, 1 << 24),
           CheckRange<int64_t>("kv_cache_memory_mb", c.kv_cache_memory_mb, 1, int64_t{1} << 24),
           CheckRange("block_size", c.block_size, 1, 256),
           CheckRange("gpu_memory_fraction", c.gpu_memory_fraction, 0.05, 1.0),
           CheckRange("cuda_device", c.cuda_device, 0, 1023),
           CheckRange("max_num_seqs", c.max_num_seqs, 1, 1 << 16),
           CheckRange("max_num_batched_tokens", c.max_num_batched_tokens, 1, 1 << 20),
           CheckRange("max_waiting_requests", c.max_waiting_requests, 0, 1 << 24),
           CheckRange<int64_t>("max_waiting_tokens", c.max_waiting_tokens, 1, int64_t{1} << 40),
           CheckRange("max_model_len", c.max_model_len, 0, 1 << 24),
           CheckRange("num_speculative_tokens", c.num_speculative_tokens, 1, 16),
           CheckRange("prompt_lookup_max", c.prompt_lookup_max, 1, 16),
           CheckRange("prompt_lookup_min", c.prompt_lookup_min, 1, c.prompt_lookup_max),
           CheckRange("speculative_max_batch", c.speculative_max_batch, 1, 1 << 16),
           CheckRange("drain_timeout_s", c.drain_timeout_s, 0.0, 86400.0),
           CheckRange("health_stall_timeout_s", c.health_stall_timeout_s, 0.1, 86400.0),
           CheckRange("max_receive_message_bytes", c.max_receive_message_bytes, 1024, 1 << 30),
           CheckRange("kv_events_queue_batches", c.kv_events_queue_batches, 1, 1 << 20),
           CheckRange("kv_events_buffer_steps", c.kv_events_buffer_steps, 0, 1 << 20),
       }) {
    if (!s.ok()) return s;
  }
  if (c.tool_call_parser != "auto" &&
      !tool_calling::ToolCallFormatFromName(c.tool_call_parser).has_value()) {
    return Bad("tool_call_parser",
               absl::StrCat("must be auto, hermes, llama3_json, mistral or json, got \"",
                            c.tool_call_parser, "\""));
  }
  if (c.speculative_method != "none" && c.speculative_method != "ngram") {
    return Bad("speculative_method",
               absl::StrCat("must be none or ngram, got \"", c.speculative_method, "\""));
  }
  if (c.backend != "auto" && c.backend != "cpu" && c.backend != "cuda") {
    return Bad("backend", absl::StrCat("must be auto, cpu or cuda, got \"", c.backend, "\""));
  }
  if (c.dtype != "auto" && c.dtype != "float32" && c.dtype != "bfloat16" && c.dtype != "float16") {
    return Bad("dtype",
               absl::StrCat("must be auto, float32, bfloat16 or float16, got \"", c.dtype, "\""));
  }
  if (c.quantization != "none" && c.quantization != "int8" && c.quantization != "w8a8") {
    return Bad("quantization",
               absl::StrCat("must be none, int8 or w8a8, got \"", c.quantization, "\""));
  }
  if (c.matmul_precision != "float32" && c.matmul_precision != "bfloat16") {
    return Bad("matmul_precision",
               absl::StrCat("must be float32 or bfloat16, got \"", c.matmul_precision, "\""));
  }
  if (c.matmul_precision != "float32" && c.quantization != "none") {
    return Bad("matmul_precision",
               absl::StrCat("bfloat16 takes bf16 weights; it cannot be combined "
                            "with --quantization=",
                            c.quantization));
  }
  if (c.backend == "cuda" && c.matmul_precision != "float32") {
    return Bad("matmul_precision",
               "the cuda backend's precision is --dtype; use --backend=cpu for bfloat16");
  }
  if (c.backend == "cuda" && c.quantization != "none") {
    return Bad("quantization", absl::StrCat("the cuda backend has no quantized weights, got \"",
                                            c.quantization, "\"; use --backend=cpu"));
  }
  if (auto dtype = engine::ParseKvCacheDtype(c.kv_cache_dtype); !dtype.ok()) {
    return Bad("kv_cache_dtype", std::string(dtype.status().message()));
  }
  if (c.generation_config != "auto" && c.generation_config != "none") {
    return Bad("generation_config",
               absl::StrCat("must be auto or none, got \"", c.generation_config, "\""));
  }
  if (c.backend == "cuda" && c.block_size > 64) {
    return Bad("block_size",
               absl::StrCat("must be at most 64 with --backend=cuda, got ", c.block_size));
  }
  if (c.host.empty()) return Bad("host", "empty");
  if (c.metrics_host.empty()) return Bad("metrics_host", "empty");
  if (c.model.empty()) return Bad("model", "empty");
  for (size_t i = 0; i < c.served_model_names.size(); ++i) {
    const std::string& name = c.served_model_names[i];
    if (name.empty())
      return Bad("served_model_name", "an empty name (two commas, or a trailing one)");
    for (size_t j = 0; j < i; ++j) {
      if (c.served_model_names[j] == name) {
        return Bad("served_model_name", absl::StrCat("\"", name, "\" given twice"));
      }
    }
  }
  if (!c.kv_events_endpoint.empty()) {
    KVSERVE_RETURN_IF_ERROR(CheckZmqEndpoint("kv_events_endpoint", c.kv_events_endpoint));
  }
  if (!c.kv_events_replay_endpoint.empty()) {
    if (c.kv_events_endpoint.empty()) {
      return Bad("kv_events_replay_endpoint", "replays events: needs --kv_events_endpoint");
    }
    KVSERVE_RETURN_IF_ERROR(
        CheckZmqEndpoint("kv_events_replay_endpoint", c.kv_events_replay_endpoint));
  }
  if (c.kv_events_encoding != "map" && c.kv_events_encoding != "array") {
    return Bad("kv_events_encoding",
               absl::StrCat("must be map or array, got \"", c.kv_events_encoding, "\""));
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return Bad(c.tls_cert_file.empty() ? "tls_cert_file" : "tls_key_file",
               "TLS needs both --tls_cert_file and --tls_key_file");
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    return Bad("tls_client_ca_file", "mTLS needs --tls_cert_file and --tls_key_file too");
  }
  return absl::OkStatus();
}

std::vector<std::string> ServedNames(const ServerConfig& config) {
  if (config.served_model_names.empty()) return {config.model};
  return config.served_model_names;
}

}  // namespace kvserve::server
