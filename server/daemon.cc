#include "server/daemon.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "scheduler/engine_core.h"
#include "scheduler/engine_loop.h"
#include "server/auth.h"
#include "server/backend.h"
#include "server/health_monitor.h"
#include "server/http/http_server.h"
#include "server/http/openai_handlers.h"
#include "server/kv_events/kv_events_publisher.h"
#include "server/kvserve_service.h"
#include "server/metrics.h"
#include "server/metrics_exposer.h"
#include "server/serving_state.h"
#include "spdlog/async.h"
#include "spdlog/sinks/stdout_color_sinks.h"

#ifndef KVSERVE_VERSION
#define KVSERVE_VERSION "dev"
#endif

namespace kvserve::server {
namespace {

using Seconds = std::chrono::duration<double>;

// The process-wide "kvserve" logger, asynchronous: the engine loop logs one
// line per finished request and must never wait on a slow stderr reader. A
// full queue drops the oldest lines rather than block.
void InstallAsyncLogger() {
  spdlog::init_thread_pool(8192, 1);
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::async_logger>(
      "kvserve", sink, spdlog::thread_pool(), spdlog::async_overflow_policy::overrun_oldest);
  spdlog::register_logger(logger);
  spdlog::flush_every(std::chrono::seconds(1));
}

// The PEM files of --tls_cert_file, --tls_key_file and --tls_client_ca_file,
// read once: the gRPC port and the HTTP port serve the same TLS (both, or
// neither, and mTLS on both). nullopt without TLS.
absl::StatusOr<std::optional<http::HttpTlsOptions>> ReadTlsFiles(const ServerConfig& c) {
  if (c.tls_cert_file.empty()) return std::nullopt;
  http::HttpTlsOptions tls;
  KVSERVE_ASSIGN_OR_RETURN(tls.cert_chain, ReadFlagFile(c.tls_cert_file, "tls_cert_file"));
  KVSERVE_ASSIGN_OR_RETURN(tls.private_key, ReadFlagFile(c.tls_key_file, "tls_key_file"));
  if (!c.tls_client_ca_file.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(tls.client_ca,
                             ReadFlagFile(c.tls_client_ca_file, "tls_client_ca_file"));
  }
  return tls;
}

std::shared_ptr<grpc::ServerCredentials> MakeCredentials(
    const std::optional<http::HttpTlsOptions>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({tls->private_key, tls->cert_chain});
  if (!tls->client_ca.empty()) {
    options.pem_root_certs = tls->client_ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

// Tokens the KV pool holds: usable blocks (the null block is never handed
// out) times block size.
int64_t KvCapacityTokens(const scheduler::EngineConfig& engine) {
  return int64_t{engine.num_blocks - 1} * engine.block_size;
}

v1::GetModelInfoResponse MakeModelInfo(const ServerConfig& c, const engine::Model& model,
                                       const scheduler::EngineConfig& engine,
                                       const std::string& backend) {
  v1::GetModelInfoResponse info;
  info.set_model_name(model.name);
  for (const std::string& name : ServedNames(c)) info.add_served_model_names(name);
  info.set_architecture(model.config.architecture);
  info.set_checkpoint_format(model.checkpoint_format);
  info.set_max_model_len(engine.max_model_len);
  info.set_vocab_size(static_cast<int32_t>(model.config.vocab_size));
  info.set_block_size(engine.block_size);
  info.set_num_kv_blocks(engine.num_blocks);
  info.set_kv_cache_dtype(c.kv_cache_dtype);
  info.set_kv_cache_capacity_tokens(KvCapacityTokens(engine));
  info.set_backend(backend);
  info.set_version(KVSERVE_VERSION);
  info.set_max_num_seqs(engine.batch.max_num_seqs);
  info.set_max_num_batched_tokens(engine.batch.max_num_batched_tokens);
  for (int32_t id : model.config.eos_token_ids) info.add_eos_token_ids(id);
  const engine::SamplingDefaults& d = model.sampling_defaults;
  if (!d.empty()) {
    v1::SamplingParams* s = info.mutable_default_sampling();
    if (d.temperature) s->set_temperature(*d.temperature);
    if (d.top_p) s->set_top_p(*d.top_p);
    if (d.top_k) s->set_top_k(*d.top_k);
    if (d.min_p) s->set_min_p(*d.min_p);
    if (d.repetition_penalty) s->set_repetition_penalty(*d.repetition_penalty);
  }
  return info;
}

// The chat template: --chat_template's file, else the checkpoint directory's,
// else the one a GGUF carries (builtin models have none). A checkpoint
// template that cannot be loaded does not stop the server: chat requests
// answer 400 naming the problem (`error`); a --chat_template that cannot be
// read or parsed does.
absl::StatusOr<std::optional<chat::ChatTemplate>> LoadChatTemplate(const ServerConfig& config,
                                                                   const engine::Model& model,
                                                                   std::string* error) {
  std::optional<chat::ChatTemplate> checkpoint;
  std::error_code ec;
  if (model.chat_template.has_value()) {
    nlohmann::json special = nlohmann::json::object();
    if (!model.chat_template->bos_token.empty())
      special["bos_token"] = model.chat_template->bos_token;
    if (!model.chat_template->eos_token.empty())
      special["eos_token"] = model.chat_template->eos_token;
    absl::StatusOr<chat::ChatTemplate> embedded =
        chat::ChatTemplate::FromSource(model.chat_template->source, special);
    if (embedded.ok()) {
      checkpoint = *std::move(embedded);
    } else {
      *error =
          absl::StrCat(config.model, ": tokenizer.chat_template: ", embedded.status().message());
    }
  } else if (std::filesystem::is_directory(config.model, ec)) {
    absl::StatusOr<std::optional<chat::ChatTemplate>> loaded =
        chat::ChatTemplate::FromCheckpoint(config.model);
    if (loaded.ok()) {
      checkpoint = *std::move(loaded);
    } else {
      *error = std::string(loaded.status().message());
    }
  }
  if (config.chat_template.empty()) {
    if (!error->empty()) {
      Log().warn("chat template not loaded (chat requests will answer 400): {}", *error);
    }
    return checkpoint;
  }
  absl::StatusOr<std::string> source = ReadFlagFile(config.chat_template, "chat_template");
  if (!source.ok()) return source.status();
  // The checkpoint's special tokens (bos_token, ...) stay visible to it.
  nlohmann::json special = nlohmann::json::object();
  if (checkpoint) special = nlohmann::json(checkpoint->special_tokens());
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromSource(*source, special);
  if (!tmpl.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chat_template: ", config.chat_template, ": ", tmpl.status().message()));
  }
  error->clear();
  return std::optional<chat::ChatTemplate>(*std::move(tmpl));
}

// --kv_events_*: the publisher's sockets and format (docs/server.md, "KV-cache
// events"). Blocks live in host memory on the cpu backend, in device memory
// on cuda: vLLM's "CPU" and "GPU" media.
KvEventsPublisherOptions KvEventsOptions(const ServerConfig& c, const std::string& backend) {
  KvEventsPublisherOptions o;
  o.endpoint = c.kv_events_endpoint;
  o.connect = c.kv_events_connect;
  o.replay_endpoint = c.kv_events_replay_endpoint;
  o.format.encoding = *ParseKvEventEncoding(c.kv_events_encoding);  // validated
  o.format.medium = backend == "cuda" ? "GPU" : "CPU";
  o.queue_batches = c.kv_events_queue_batches;
  o.replay_buffer_batches = c.kv_events_buffer_steps;
  return o;
}

int StartupFailed(const absl::Status& status) {
  Log().error("startup failed: {}", std::string(status.message()));
  Log().flush();
  spdlog::shutdown();
  return 1;
}

// Waits for SIGTERM/SIGINT (blocked in every thread by main). The first one
// sets *signalled; the second exits the process at once.
void StartSignalThread(std::atomic<bool>* signalled, std::condition_variable* cv, std::mutex* mu) {
  std::thread([signalled, cv, mu] {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    int sig = 0;
    sigwait(&signals, &sig);
    Log().info("received signal {}: draining (a second signal exits at once)", sig);
    {
      std::lock_guard<std::mutex> lock(*mu);
      signalled->store(true);
    }
    cv->notify_all();
    sigwait(&signals, &sig);
    std::fprintf(stderr, "kvserve: second signal %d: exiting without draining\n", sig);
    std::_Exit(1);
  }).detach();
}

}  // namespace

int RunDaemon(const ServerConfig& config) {
  InstallAsyncLogger();
  std::atomic<bool> signalled{false};
  std::mutex signal_mu;
  std::condition_variable signal_cv;
  StartSignalThread(&signalled, &signal_cv, &signal_mu);

  absl::StatusOr<Backend> made = MakeBackend(config);
  if (!made.ok()) return StartupFailed(made.status());
  Backend backend_parts = std::move(*made);
  const std::string backend = backend_parts.name;
  const engine::Model& model = *backend_parts.model;

  scheduler::EngineConfig engine_config;
  engine_config.batch.max_num_seqs = config.max_num_seqs;
  engine_config.batch.max_num_batched_tokens = config.max_num_batched_tokens;
  engine_config.block_size = config.block_size;
  engine_config.num_blocks = backend_parts.num_blocks;
  engine_config.enable_prefix_caching = config.enable_prefix_caching;
  engine_config.enable_kv_events = !config.kv_events_endpoint.empty();
  engine_config.max_waiting_requests = config.max_waiting_requests;
  engine_config.max_waiting_tokens = config.max_waiting_tokens;
  if (config.speculative_method == "ngram") {
    engine_config.speculative = {.num_tokens = config.num_speculative_tokens,
                                 .ngram_min = config.prompt_lookup_min,
                                 .ngram_max = config.prompt_lookup_max,
                                 .max_batch = config.speculative_max_batch};
    if (backend != "cpu") {
      Log().warn(
          "--speculative_method=ngram: off on the {} backend (its device sampler returns "
          "no draft logits)",
          backend);
    }
  }
  const int32_t model_len = static_cast<int32_t>(model.config.max_position_embeddings);
  if (config.max_model_len > model_len) {
    return StartupFailed(absl::InvalidArgumentError(absl::StrCat(
        "--max_model_len=", config.max_model_len, " exceeds the model's ", model_len)));
  }
  engine_config.max_model_len = config.max_model_len > 0 ? config.max_model_len : model_len;

  std::string token;
  if (!config.auth_token_file.empty()) {
    absl::StatusOr<std::string> loaded_token = LoadAuthToken(config.auth_token_file);
    if (!loaded_token.ok()) return StartupFailed(loaded_token.status());
    token = *std::move(loaded_token);
  }
  absl::StatusOr<std::optional<http::HttpTlsOptions>> tls = ReadTlsFiles(config);
  if (!tls.ok()) return StartupFailed(tls.status());

  // Grammar compilations report to the metrics, which exist only once the
  // loop does; the compile thread may outlive them (it stops with the loop).
  struct CompileSink {
    std::mutex mu;
    std::weak_ptr<ServerMetrics> metrics;  // guarded by mu
  };
  auto compile_sink = std::make_shared<CompileSink>();
  engine_config.on_grammar_compiled = [compile_sink](double seconds, bool ok) {
    std::lock_guard<std::mutex> lock(compile_sink->mu);
    if (std::shared_ptr<ServerMetrics> m = compile_sink->metrics.lock()) {
      m->OnGrammarCompiled(seconds, ok);
    }
  };
  // Declared before the loop, which hands it batches until it is destroyed.
  std::unique_ptr<KvEventsPublisher> kv_events;
  if (engine_config.enable_kv_events) {
    if (!config.enable_prefix_caching) {
      Log().warn(
          "--kv_events_endpoint with --enable_prefix_caching=false: nothing is ever "
          "cached, so no event will be published");
    }
    absl::StatusOr<std::unique_ptr<KvEventsPublisher>> started =
        KvEventsPublisher::Start(KvEventsOptions(config, backend));
    if (!started.ok()) return StartupFailed(started.status());
    kv_events = *std::move(started);
  }
  scheduler::EngineLoop loop(std::make_unique<scheduler::EngineCore>(
      engine_config, scheduler::ModelInfoOf(model), std::move(backend_parts.runner)));
  auto metrics = std::make_shared<ServerMetrics>(
      ServerInfoLabels{.model = model.name,
                       .backend = backend,
                       .block_size = config.block_size,
                       .kv_cache_dtype = config.kv_cache_dtype,
                       .kv_cache_capacity_tokens = KvCapacityTokens(engine_config),
                       .num_usable_kv_blocks = engine_config.num_blocks - 1,
                       .eos_token_ids = absl::StrJoin(model.config.eos_token_ids, ","),
                       .version = KVSERVE_VERSION},
      loop);
  loop.SetStepObserver([m = metrics.get()](const scheduler::StepRecord& s) { m->OnStep(s); });
  if (kv_events) {
    loop.SetKvEventSink(
        [p = kv_events.get()](scheduler::KvEventBatch batch) { p->Enqueue(std::move(batch)); });
    metrics->SetKvEventsSource(kv_events.get());
  }
  {
    std::lock_guard<std::mutex> lock(compile_sink->mu);
    compile_sink->metrics = metrics;
  }
  loop.Start();

  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start(config.metrics_host, config.metrics_port);
  if (!exposer.ok()) return StartupFailed(exposer.status());
  (*exposer)->Register(metrics);
  const int metrics_port = (*exposer)->port();

  ServingState state(model, loop, *metrics, BearerAuth(token),
                     MakeModelInfo(config, model, engine_config, backend), config.log_requests);
  KvServeService service(state);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  const std::string address = absl::StrCat(config.host, ":", config.port);
  builder.AddListeningPort(address, MakeCredentials(*tls), &grpc_port);
  builder.SetMaxReceiveMessageSize(config.max_receive_message_bytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    return StartupFailed(
        absl::UnavailableError(absl::StrCat("--host/--port: cannot listen on ", address)));
  }
  // The OpenAI-compatible HTTP API (docs/server.md "HTTP API").
  http::ModelContext http_model;
  std::optional<chat::ChatTemplate> chat_template;
  std::unique_ptr<http::OpenAiHandler> http_handler;
  std::unique_ptr<http::HttpServer> http_server;
  if (config.http_port != 0) {
    absl::StatusOr<std::optional<chat::ChatTemplate>> loaded_template =
        LoadChatTemplate(config, model, &http_model.chat_template_error);
    if (!loaded_template.ok()) return StartupFailed(loaded_template.status());
    chat_template = *std::move(loaded_template);
    http_model.served_model_names = ServedNames(config);
    http_model.model_name = http_model.served_model_names.front();
    http_model.model_root = model.name;
    http_model.checkpoint_format = model.checkpoint_format;
    http_model.tokenizer = model.tokenizer.get();
    http_model.vocab_size = static_cast<int32_t>(model.config.vocab_size);
    http_model.max_model_len = engine_config.max_model_len;
    http_model.kv_capacity_tokens = KvCapacityTokens(engine_config);
    http_model.defaults = model.sampling_defaults;
    http_model.chat_template = chat_template ? &*chat_template : nullptr;
    http_model.tool_call_format =
        config.tool_call_parser != "auto"
            ? *tool_calling::ToolCallFormatFromName(config.tool_call_parser)
            : tool_calling::DetectToolCallFormat(chat_template ? chat_template->source() : "");
    if (chat_template) {
      Log().info("tool calls are parsed as {} (--tool_call_parser={})",
                 tool_calling::ToolCallFormatName(http_model.tool_call_format),
                 config.tool_call_parser);
    }
    http_handler = std::make_unique<http::OpenAiHandler>(state, http_model);
    http::HttpServerOptions options;
    options.host = config.host;
    options.port = config.http_port < 0 ? 0 : config.http_port;
    options.io_threads = config.http_io_threads;
    options.max_body_bytes = static_cast<size_t>(config.max_receive_message_bytes);
    options.tls = *tls;  // HTTPS (and mTLS) exactly when the gRPC port has them
    absl::StatusOr<std::unique_ptr<http::HttpServer>> started =
        http::HttpServer::Start(options, *http_handler, metrics.get());
    if (!started.ok()) return StartupFailed(started.status());
    http_server = *std::move(started);
  }

  HealthMonitor health(
      server->GetHealthCheckService(), &loop,
      std::chrono::duration_cast<Clock::duration>(Seconds(config.health_stall_timeout_s)));
  health.Start();

  Log().info(
      "serving model={} backend={} device={} dtype={} quantization={} matmul_precision={} "
      "host_weights_mb={:.1f} "
      "kv_blocks={} block_size={} kv_cache_dtype={} "
      "kv_cache_capacity_tokens={} max_model_len={} tls={} auth={}",
      model.name, backend, backend_parts.device, config.dtype, config.quantization,
      config.matmul_precision, static_cast<double>(model.weights.TotalBytes()) / (1 << 20),
      engine_config.num_blocks, engine_config.block_size, config.kv_cache_dtype,
      KvCapacityTokens(engine_config), engine_config.max_model_len,
      config.tls_cert_file.empty() ? "off" : "on", token.empty() ? "off" : "on");
  const std::string http_ready =
      http_server ? absl::StrCat(" http=", config.host, ":", http_server->port()) : "";
  std::string kv_events_ready;
  if (kv_events) {
    // No request has run yet, so no event has been sent under another topic.
    const int served_port = http_server ? http_server->port() : grpc_port;
    kv_events->SetTopic(
        config.kv_events_topic.empty()
            ? absl::StrCat("kv@", config.host, ":", served_port, "@", ServedNames(config).front())
            : config.kv_events_topic);
    kv_events_ready = absl::StrCat(" kv_events=", kv_events->endpoint());
    if (!kv_events->replay_endpoint().empty()) {
      absl::StrAppend(&kv_events_ready, " kv_events_replay=", kv_events->replay_endpoint());
    }
  }
  std::printf("kvserve ready grpc=%s:%d metrics=%s:%d%s%s\n", config.host.c_str(), grpc_port,
              config.metrics_host.c_str(), metrics_port, http_ready.c_str(),
              kv_events_ready.c_str());
  std::fflush(stdout);

  {
    std::unique_lock<std::mutex> lock(signal_mu);
    signal_cv.wait(lock, [&] { return signalled.load(); });
  }
  // Drain: refuse new work, let in-flight streams finish until the deadline.
  state.StartDraining();
  health.SetDraining();
  const auto drain_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(Seconds(config.drain_timeout_s));
  const bool drained = state.WaitForStreams(drain_deadline);
  if (!drained) {
    Log().warn("drain timeout ({} s): aborting the requests still running", config.drain_timeout_s);
  }
  // Aborts whatever is left; those streams end with UNAVAILABLE (HTTP: 503,
  // or an error event in an SSE stream).
  loop.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (http_server) {
    // No output is posted after loop.Stop(); give the HTTP streams a moment
    // to write their last events, then close every connection.
    state.WaitForStreams(Clock::now() + std::chrono::seconds(2));
    http_server->Stop();
  }
  health.Stop();
  // From here on no scrape reads the loop (destroyed when this function
  // returns); then /metrics stops, its threads joined (fast: metrics_exposer.h).
  metrics->Detach();
  exposer->reset();
  // The loop has stopped: its last batch (the aborts' frees) is queued.
  if (kv_events) kv_events->Stop();
  Log().info("drained{}; exiting", drained ? "" : " (deadline reached)");
  spdlog::shutdown();
  return 0;
}

}  // namespace kvserve::server
