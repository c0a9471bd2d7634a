// The daemon's flags (Abseil). `kvserve --help` prints these texts.
#include <span>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/server_config.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address the gRPC API listens on; 0.0.0.0 (or ::) opens it to other hosts "
          "(the container image does).");
ABSL_FLAG(int32_t, port, 50051, "gRPC API port; 0 picks a free port (see the ready line).");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address of the Prometheus /metrics endpoint (no auth, no TLS); 0.0.0.0 opens it to "
          "other hosts (the container image does).");
ABSL_FLAG(int32_t, metrics_port, 9400, "Prometheus /metrics port; 0 picks a free port.");
ABSL_FLAG(int32_t, http_port, 0,
          "OpenAI-compatible HTTP API port on --host (/v1/completions, /v1/chat/completions, "
          "/v1/models, /tokenize, /detokenize, /health); 0 turns it off, -1 picks a free port "
          "(see the ready line). Same bearer token, drain rules and TLS / mTLS (--tls_*) as gRPC.");
ABSL_FLAG(int32_t, http_io_threads, 2,
          "Threads serving the HTTP API's connections (all of them, streaming or not).");
ABSL_FLAG(std::string, chat_template, "",
          "HTTP API: a Jinja chat template file for /v1/chat/completions, used instead of the "
          "checkpoint's (chat_template.jinja or tokenizer_config.json); the checkpoint's special "
          "tokens stay visible to it.");
ABSL_FLAG(std::string, tool_call_parser, "auto",
          "HTTP API: the format tool calls are parsed in on /v1/chat/completions: hermes "
          "(<tool_call>{...}</tool_call>), llama3_json ({\"name\", \"parameters\"}, after an "
          "optional <|python_tag|>), mistral ([TOOL_CALLS][...]), json (a bare call object or "
          "array), or auto: the one the chat template teaches (hermes when it names <tool_call>, "
          "mistral for [TOOL_CALLS], llama3_json for <|python_tag|> or ipython, else json).");
ABSL_FLAG(std::string, model, "builtin:tiny",
          "builtin:tiny, builtin:small, builtin:llama3-8b (CUDA only), a Hugging Face "
          "checkpoint directory (config.json, "
          "*.safetensors, tokenizer.json or tokenizer.model), or a llama.cpp GGUF file "
          "(*.gguf; dequantized at load to --dtype).");
ABSL_FLAG(std::string, served_model_name, "",
          "Names the APIs serve the model under (HTTP /v1/models, a request's \"model\", "
          "GetModelInfo): one or more, comma-separated or the flag repeated; the first is the "
          "\"model\" of every response. Empty: the --model value.");
ABSL_FLAG(std::string, backend, "auto",
          "auto, cpu or cuda. auto uses CUDA when this build has it and a GPU is present.");
ABSL_FLAG(int32_t, num_kv_blocks, 0,
          "KV cache pool size in blocks; 0 sizes it from --kv_cache_memory_mb (cpu) or "
          "--gpu_memory_fraction (cuda).");
ABSL_FLAG(int64_t, kv_cache_memory_mb, 256,
          "cpu backend: KV cache memory in MiB, used when --num_kv_blocks is 0.");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "KV cache format: auto, bfloat16, float16, fp8_e4m3, int8, int4 or fp4_e2m1; the "
          "scaled ones (fp8, int8, int4, fp4) keep one fp32 scale per token and kv head. auto is "
          "fp32 on the cpu backend and the --dtype of the model on cuda. The pool holds its memory "
          "(--kv_cache_memory_mb on cpu, --gpu_memory_fraction on cuda) / bytes per block blocks, "
          "so the smaller formats hold more tokens.");
ABSL_FLAG(double, gpu_memory_fraction, 0.9,
          "cuda backend: fraction of the GPU's memory kvserve may use (weights, KV cache, "
          "scratch); the KV cache gets what is left, when --num_kv_blocks is 0.");
ABSL_FLAG(int32_t, cuda_device, 0, "cuda backend: the CUDA device index.");
ABSL_FLAG(std::string, dtype, "auto",
          "auto (the checkpoint's), float32, bfloat16 or float16. cuda backend: weights, "
          "activations and KV cache. cpu backend: how the weights are stored (it computes in "
          "float32, widening them in registers): auto keeps a bf16/fp16 checkpoint in 16 bits "
          "(logits bit-identical to float32), float32 widens at load, bfloat16/float16 round "
          "a float32 checkpoint.");
ABSL_FLAG(std::string, quantization, "none",
          "cpu backend: none; int8: weight-only quantization at load (symmetric, one fp32 "
          "scale per output channel; the linear layers and lm_head, about 1/4 of float32's "
          "bytes); or w8a8: the same int8 weights with each layer's input quantized per token "
          "at run time, multiplied as exact int8 dot products (AVX-512 VNNI where present). "
          "The cuda backend takes only none.");
ABSL_FLAG(std::string, matmul_precision, "float32",
          "cpu backend: float32 multiplies in fp32 (the weights widened exactly: a bf16 "
          "checkpoint gives float32's logits bit for bit); bfloat16 stores the linear layers in "
          "bf16, rounds their inputs to bf16 and uses bf16 dot products (AVX512-BF16 vdpbf16ps "
          "where present, fp32 accumulation): about twice the prefill and batched-decode speed, "
          "with bf16 rounding of the activations. Not with --quantization.");
ABSL_FLAG(bool, batch_invariant, false,
          "cuda backend: batch-invariant kernels (a request's output does not depend on the "
          "batch or on prompt chunking), at a speed cost. The cpu backend always is.");
ABSL_FLAG(std::string, generation_config, "auto",
          "auto: the checkpoint's generation_config.json sampling values (temperature, top_p, "
          "top_k, min_p, repetition_penalty) apply to the fields a request leaves unset; none: "
          "they do not. Its eos_token_id list ends generation either way.");
ABSL_FLAG(int32_t, block_size, 16,
          "Tokens per KV cache block, in [1, 256]; at most 64 on the cuda backend.");
ABSL_FLAG(int32_t, max_num_seqs, 64, "Most requests in one batch (the running set).");
ABSL_FLAG(int32_t, max_num_batched_tokens, 2048,
          "Token budget of one engine step (prefill chunks + decodes).");
ABSL_FLAG(int32_t, max_waiting_requests, 1024,
          "Waiting-queue limit in requests; beyond it Generate answers RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_waiting_tokens, int64_t{1} << 20,
          "Waiting-queue limit in tokens; beyond it Generate answers RESOURCE_EXHAUSTED.");
ABSL_FLAG(int32_t, max_model_len, 0,
          "Longest request (prompt + max_tokens); 0 uses the model's max_position_embeddings.");
ABSL_FLAG(bool, enable_prefix_caching, true, "Share KV blocks between equal prompt prefixes.");
ABSL_FLAG(std::string, speculative_method, "none",
          "Speculative decoding: none, or ngram (prompt lookup: drafts are the tokens that "
          "followed the latest earlier occurrence of a request's last n tokens, verified in the "
          "same step; outputs do not change). cpu backend; unconstrained requests.");
ABSL_FLAG(int32_t, num_speculative_tokens, 3,
          "Drafts per step of a speculating request, in [1, 16].");
ABSL_FLAG(int32_t, prompt_lookup_min, 2,
          "ngram: the shortest suffix matched, in [1, prompt_lookup_max].");
ABSL_FLAG(int32_t, prompt_lookup_max, 4, "ngram: the longest suffix matched, in [1, 16].");
ABSL_FLAG(int32_t, speculative_max_batch, 4,
          "Speculation is off in a step where more requests than this decode.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM server certificate chain; enables TLS on the gRPC and the HTTP API ports.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle; when set, clients must present a certificate it signed (mTLS).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a bearer token; when set, Generate/GetModelInfo/Tokenize/Detokenize "
          "require metadata \"authorization: Bearer <token>\" (health and reflection do not).");
ABSL_FLAG(double, drain_timeout_s, 30,
          "On SIGTERM/SIGINT, seconds in-flight requests may run before they are aborted.");
ABSL_FLAG(double, health_stall_timeout_s, 30,
          "Seconds without a completed step (while busy) after which health turns NOT_SERVING.");
ABSL_FLAG(int32_t, max_receive_message_bytes, 4 << 20,
          "Largest request message accepted, in bytes (gRPC messages and HTTP bodies).");
ABSL_FLAG(bool, log_requests, true, "Log one line per finished request.");
ABSL_FLAG(std::string, kv_events_endpoint, "",
          "KV-cache events (vLLM's ZMQ format, for llm-d's precise prefix-cache routing): the "
          "PUB socket's tcp://HOST:PORT (bound: 127.0.0.1 for this host only, 0.0.0.0 or * for "
          "every interface; PORT 0 picks a free port, see the ready line) or ipc://PATH. Empty "
          "(the default): no events.");
ABSL_FLAG(bool, kv_events_connect, false,
          "Connect the KV-events PUB socket to --kv_events_endpoint (a subscriber that binds, "
          "as llm-d's central indexer does) instead of binding it.");
ABSL_FLAG(std::string, kv_events_replay_endpoint, "",
          "tcp://HOST:PORT of a bound ROUTER socket that replays buffered KV-event batches from "
          "a sequence number (the last --kv_events_buffer_steps batches); empty: no replay.");
ABSL_FLAG(std::string, kv_events_topic, "",
          "Topic of every KV-event message; empty: kv@<--host>:<port>@<first served model name>, "
          "the port being the HTTP API's when it is on, else the gRPC port (llm-d reads "
          "kv@<pod>@<model>).");
ABSL_FLAG(
    std::string, kv_events_encoding, "map",
    "map: events as msgpack maps with a \"type\" key (vLLM's current releases, llm-d-kv-cache "
    ">= 0.9); array: positional arrays (older vLLM and llm-d).");
ABSL_FLAG(int32_t, kv_events_queue_batches, 1024,
          "KV-event batches (one per engine step) waiting for the publisher thread; beyond it "
          "a batch is dropped (kvserve_kv_events_dropped_batches_total), never waited for.");
ABSL_FLAG(int32_t, kv_events_buffer_steps, 10000,
          "KV-event batches kept for replay (--kv_events_replay_endpoint).");

namespace kvserve::server {

namespace {

// Every --served_model_name occurrence in argv, in order (Abseil keeps only
// the last one of a repeated flag; vLLM's --served-model-name takes several
// names), each split at commas; an empty value is the default.
std::vector<std::string> ServedModelNames(std::span<char* const> argv) {
  std::vector<std::string> names;
  const auto add = [&](absl::string_view value) {
    if (value.empty()) return;  // --served_model_name= : the default
    for (absl::string_view name : absl::StrSplit(value, ',')) names.emplace_back(name);
  };
  for (size_t i = 1; i < argv.size(); ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
    if (arg == "served_model_name" && i + 1 < argv.size()) {
      add(argv[++i]);
    } else if (absl::ConsumePrefix(&arg, "served_model_name=")) {
      add(arg);
    }
  }
  return names;
}

}  // namespace

absl::StatusOr<ServerConfig> ConfigFromFlags(std::span<char* const> argv) {
  ServerConfig c;
  c.host = absl::GetFlag(FLAGS_host);
  c.port = absl::GetFlag(FLAGS_port);
  c.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  c.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  c.http_port = absl::GetFlag(FLAGS_http_port);
  c.http_io_threads = absl::GetFlag(FLAGS_http_io_threads);
  c.chat_template = absl::GetFlag(FLAGS_chat_template);
  c.tool_call_parser = absl::GetFlag(FLAGS_tool_call_parser);
  c.model = absl::GetFlag(FLAGS_model);
  c.served_model_names = ServedModelNames(argv);
  if (c.served_model_names.empty() && !absl::GetFlag(FLAGS_served_model_name).empty()) {
    // Set without argv (e.g. a --flagfile): its last value.
    for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_served_model_name), ',')) {
      c.served_model_names.emplace_back(name);
    }
  }
  c.backend = absl::GetFlag(FLAGS_backend);
  c.num_kv_blocks = absl::GetFlag(FLAGS_num_kv_blocks);
  c.kv_cache_memory_mb = absl::GetFlag(FLAGS_kv_cache_memory_mb);
  c.gpu_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
  c.kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype);
  c.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  c.dtype = absl::GetFlag(FLAGS_dtype);
  c.quantization = absl::GetFlag(FLAGS_quantization);
  c.matmul_precision = absl::GetFlag(FLAGS_matmul_precision);
  c.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  c.generation_config = absl::GetFlag(FLAGS_generation_config);
  c.block_size = absl::GetFlag(FLAGS_block_size);
  c.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  c.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  c.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  c.max_waiting_tokens = absl::GetFlag(FLAGS_max_waiting_tokens);
  c.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  c.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  c.speculative_method = absl::GetFlag(FLAGS_speculative_method);
  c.num_speculative_tokens = absl::GetFlag(FLAGS_num_speculative_tokens);
  c.prompt_lookup_min = absl::GetFlag(FLAGS_prompt_lookup_min);
  c.prompt_lookup_max = absl::GetFlag(FLAGS_prompt_lookup_max);
  c.speculative_max_batch = absl::GetFlag(FLAGS_speculative_max_batch);
  c.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  c.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  c.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  c.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  c.drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout_s);
  c.health_stall_timeout_s = absl::GetFlag(FLAGS_health_stall_timeout_s);
  c.max_receive_message_bytes = absl::GetFlag(FLAGS_max_receive_message_bytes);
  c.log_requests = absl::GetFlag(FLAGS_log_requests);
  c.kv_events_endpoint = absl::GetFlag(FLAGS_kv_events_endpoint);
  c.kv_events_connect = absl::GetFlag(FLAGS_kv_events_connect);
  c.kv_events_replay_endpoint = absl::GetFlag(FLAGS_kv_events_replay_endpoint);
  c.kv_events_topic = absl::GetFlag(FLAGS_kv_events_topic);
  c.kv_events_encoding = absl::GetFlag(FLAGS_kv_events_encoding);
  c.kv_events_queue_batches = absl::GetFlag(FLAGS_kv_events_queue_batches);
  c.kv_events_buffer_steps = absl::GetFlag(FLAGS_kv_events_buffer_steps);
  KVSERVE_RETURN_IF_ERROR(ValidateConfig(c));
  return c;
}

}  // namespace kvserve::server
