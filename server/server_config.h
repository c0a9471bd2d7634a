// ServerConfig: everything the daemon is told on its command line
// (server/flags.cc defines the flags and documents each one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::server {

struct ServerConfig {
  std::string host = "0.0.0.0";
  int32_t port = 50051;  // 0: an ephemeral port, printed in the ready line
  std::string metrics_host = "0.0.0.0";
  int32_t metrics_port = 9400;  // 0: ephemeral
  // The OpenAI-compatible HTTP API on --host: 0 off (the default), -1 an
  // ephemeral port (printed in the ready line), else the port.
  int32_t http_port = 0;
  int32_t http_io_threads = 2;
  // A Jinja chat template file for /v1/chat/completions, instead of the
  // checkpoint's (empty: the checkpoint's, if any).
  std::string chat_template;
  // How /v1/chat/completions reads tool calls out of the text: hermes,
  // llama3_json, mistral, json, or auto (the format the chat template teaches).
  std::string tool_call_parser = "auto";

  std::string model = "builtin:tiny";
  // The names the APIs serve the model under; the first is the "model" of
  // every HTTP response. Empty: the model value alone.
  std::vector<std::string> served_model_names;
  std::string backend = "auto";  // auto | cpu | cuda

  int32_t num_kv_blocks = 0;         // 0: from kv_cache_memory_mb
  int64_t kv_cache_memory_mb = 256;  // cpu: used when num_kv_blocks == 0
  double gpu_memory_fraction = 0.9;  // cuda: used when num_kv_blocks == 0
  // KV cache row format (engine/kv_cache.h): auto (fp32), bfloat16, float16,
  // fp8_e4m3, int8, int4, fp4_e2m1. cpu only; cuda takes auto.
  std::string kv_cache_dtype = "auto";
  int32_t cuda_device = 0;
  // auto | float32 | bfloat16 | float16. cuda: weights, activations and KV
  // cache; cpu: how the weights are stored (computed in fp32; auto keeps a
  // 16-bit checkpoint's precision): engine/model_weights.h.
  std::string dtype = "auto";
  // cpu: none | int8 (weight-only, per output channel) | w8a8 (and int8 activations per token)
  std::string quantization = "none";
  // cpu: float32 (fp32 FMAs; bit-identical across weight widths) | bfloat16
  // (bf16 weights and inputs, bf16 dot products)
  std::string matmul_precision = "float32";
  bool batch_invariant = false;  // cuda: batch-invariant kernels
  // auto: generation_config.json's sampling values fill a request's unset
  // fields; none: ignore them (its EOS ids are used either way).
  std::string generation_config = "auto";
  int32_t block_size = 16;
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_waiting_requests = 1024;
  int64_t max_waiting_tokens = int64_t{1} << 20;
  int32_t max_model_len = 0;  // 0: the model's
  bool enable_prefix_caching = true;
  std::string speculative_method = "none";  // none | ngram
  int32_t num_speculative_tokens = 3;
  int32_t prompt_lookup_min = 2;
  int32_t prompt_lookup_max = 4;
  int32_t speculative_max_batch = 4;

  std::string tls_cert_file;  // with tls_key_file: TLS
  std::string tls_key_file;
  std::string tls_client_ca_file;  // also: mTLS (client certificates required)
  std::string auth_token_file;     // bearer token for the inference RPCs

  double drain_timeout_s = 30;
  double health_stall_timeout_s = 30;
  int32_t max_receive_message_bytes = 4 << 20;
  bool log_requests = true;

  // KV-cache events (server/kv_events/): off while the endpoint is empty.
  std::string kv_events_endpoint;          // tcp://HOST:PORT or ipc://PATH
  bool kv_events_connect = false;          // connect instead of bind
  std::string kv_events_replay_endpoint;   // empty: no replay socket
  std::string kv_events_topic;             // empty: kv@<host>:<port>@<model>
  std::string kv_events_encoding = "map";  // map | array
  int32_t kv_events_queue_batches = 1024;
  int32_t kv_events_buffer_steps = 10000;
};

// InvalidArgument naming the flag (--name) for values out of range or
// inconsistent combinations. Model-dependent checks happen after loading.
absl::Status ValidateConfig(const ServerConfig& config);

// The contents of the file a flag names (TLS PEM files, the auth token);
// NotFound "--<flag>: cannot read <path>" when it cannot be read.
absl::StatusOr<std::string> ReadFlagFile(const std::string& path, const char* flag);

// The config from the parsed command-line flags, validated. argv (the
// command line as main got it) supplies every occurrence of the flags that
// may be repeated (--served_model_name); without it, their last value.
absl::StatusOr<ServerConfig> ConfigFromFlags(std::span<char* const> argv = {});

// The names a config serves its model under: served_model_names, or the
// model value when none is given.
std::vector<std::string> ServedNames(const ServerConfig& config);

}  // namespace kvserve::server
