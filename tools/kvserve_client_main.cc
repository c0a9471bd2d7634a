// kvserve-client: a command-line client for the kvserve gRPC API
// (proto/kvserve/v1/kvserve.proto) and the standard grpc.health.v1 service.
// This file owns the flags and turns them into requests; tools/client/ does
// the calls and the printing.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/cli_help.h"
#include "kvserve/v1/kvserve.pb.h"
#include "tools/client/commands.h"
#include "tools/client/connection.h"
#include "tools/client/generate.h"

// Stop strings: each --stop adds one, verbatim (commas included, since ", "
// is a plausible stop string); an empty --stop= drops those given before it.
// absl parses every occurrence into a fresh copy of the default value, so the
// occurrences are collected in AllStops().
struct StopStrings {
  std::vector<std::string> values;
};

static std::vector<std::string>& AllStops() {
  static auto* stops = new std::vector<std::string>();
  return *stops;
}

bool AbslParseFlag(absl::string_view text, StopStrings* stops, std::string* /*error*/) {
  if (text.empty()) {
    AllStops().clear();
  } else {
    AllStops().emplace_back(text);
  }
  stops->values = AllStops();
  return true;
}

std::string AbslUnparseFlag(const StopStrings& stops) { return absl::StrJoin(stops.values, ","); }

// Connection.
ABSL_FLAG(std::string, address, "localhost:50051", "Server address, host:port.");
ABSL_FLAG(double, timeout_s, 0, "Deadline of each call in seconds; 0: none.");
ABSL_FLAG(std::string, auth_token, "",
          "Bearer token, sent as `authorization: Bearer TOKEN` metadata.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the bearer token (surrounding whitespace is dropped). Instead of "
          "--auth_token.");
ABSL_FLAG(bool, tls, false,
          "Connect with TLS (implied by any other --tls_* flag). Without --tls_ca_file the "
          "system roots verify the server.");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM file with the CA certificate(s) to verify the server.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate chain for mTLS (with --tls_key_file).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to verify the server's certificate against, instead of the host in --address.");

// generate: sampling. Unset (the default) leaves the server's default in place: the
// checkpoint's generation_config.json value where it has one (GetModelInfo.default_sampling).
ABSL_FLAG(std::optional<float>, temperature, std::nullopt,
          "generate: [0, 100]; 0: greedy. Unset: the model's default, else 1.0.");
ABSL_FLAG(
    std::optional<int32_t>, top_k, std::nullopt,
    "generate: keep the k most likely tokens; 0 or -1: off. Unset: the model's default, else off.");
ABSL_FLAG(std::optional<float>, top_p, std::nullopt,
          "generate: nucleus sampling, (0, 1]; 1: off. Unset: the model's default, else 1.0.");
ABSL_FLAG(std::optional<float>, min_p, std::nullopt,
          "generate: [0, 1], drop tokens below min_p x the top probability. Unset: the model's "
          "default, else 0.");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "generate: sampling seed; the same seed gives the same tokens. Server default 0.");
ABSL_FLAG(std::optional<float>, repetition_penalty, std::nullopt,
          "generate: (0, 2]; 1: off. Unset: the model's default, else 1.0.");
ABSL_FLAG(std::optional<float>, presence_penalty, std::nullopt,
          "generate: [-2, 2]; 0: off. Server default 0.");
ABSL_FLAG(std::optional<float>, frequency_penalty, std::nullopt,
          "generate: [-2, 2]; 0: off. Server default 0.");

// generate: stopping.
ABSL_FLAG(std::optional<int32_t>, max_tokens, std::nullopt,
          "generate: tokens to generate at most. Server default 16.");
ABSL_FLAG(std::optional<int32_t>, min_tokens, std::nullopt,
          "generate: stop tokens are masked until this many were generated. Server default 0.");
ABSL_FLAG(StopStrings, stop, {},
          "generate: a string that ends the output (not returned). Repeat the flag for several; "
          "each value is taken verbatim, commas included.");
ABSL_FLAG(std::vector<std::string>, stop_token_ids, {},
          "generate: comma-separated token ids that end the output.");
ABSL_FLAG(bool, ignore_eos, false, "generate: keep generating past the end-of-sequence token.");
ABSL_FLAG(std::optional<bool>, skip_special_tokens, std::nullopt,
          "generate, detokenize: true/false, leave special tokens out of the text. Server "
          "default true.");

// generate: prompt and request.
ABSL_FLAG(std::vector<std::string>, token_ids, {},
          "generate: comma-separated token ids to use as the prompt instead of text.");
ABSL_FLAG(std::optional<bool>, add_special_tokens, std::nullopt,
          "generate, tokenize: true/false, let the tokenizer add its special tokens (e.g. BOS). "
          "Server default true.");
ABSL_FLAG(std::optional<int32_t>, logprobs, std::nullopt,
          "generate: return each token's logprob and this many top alternatives, [0, 20] "
          "(shown with --json).");
ABSL_FLAG(int32_t, priority, 0, "generate: lower is served first and preempted last.");
ABSL_FLAG(std::string, cache_salt, "",
          "generate: prefix-cache blocks are shared only among requests with the same salt.");
ABSL_FLAG(std::string, request_id, "", "generate: request id; empty: the server assigns one.");

// generate: output.
ABSL_FLAG(bool, stream, false,
          "generate: print the text as it arrives, piece by piece, instead of at the end.");
ABSL_FLAG(bool, json, false,
          "generate: print one JSON object (request_id, token_ids, text, finish_reason, "
          "stop_string, usage, timings, logprobs) instead of the text.");

namespace {

using kvserve::client::Connection;
using kvserve::client::ConnectionOptions;

constexpr char kUsage[] = R"(a command-line client for the kvserve gRPC API.

Usage: kvserve-client [flags] COMMAND [ARGS...]
Flags may come before or after the command; `--` ends the flags.

Commands:
  generate PROMPT    Generate a completion of PROMPT ("-": the prompt is stdin, verbatim), or of
                     --token_ids=1,2,3 instead. Prints the whole text at the end, or each piece as
                     it arrives with --stream, or one JSON object with --json; then a summary line
                     on stderr (request id, finish reason, token counts, ttft, e2e).
                       sampling: --temperature --top_k --top_p --min_p --seed
                                 --repetition_penalty --presence_penalty --frequency_penalty
                       stopping: --max_tokens --min_tokens --stop (repeatable) --stop_token_ids
                                 --ignore_eos --skip_special_tokens
                       request:  --logprobs --add_special_tokens --priority --cache_salt
                                 --request_id
                     A flag left unset leaves the server's default in place.
  info               The served model (GetModelInfo) as JSON.
  tokenize TEXT      The token ids of TEXT as a JSON list. --add_special_tokens=false: no BOS.
  detokenize ID...   The text of the token ids (separated by spaces or commas).
                     --skip_special_tokens=false keeps special tokens in the text.
  health [SERVICE]   grpc.health.v1 Check of SERVICE (default: the whole server); prints
                     SERVING, NOT_SERVING, ...

Connection flags (every command): --address --timeout_s --auth_token | --auth_token_file
  --tls --tls_ca_file --tls_cert_file --tls_key_file (mTLS) --tls_server_name

Exit status: 0 success; 1 the server answered with an error (printed on stderr as
`kvserve-client: CODE: message`) or health is not SERVING; 2 bad usage.

Examples:
  kvserve-client generate "Hello, kvserve!" --max_tokens=32 --stream
  kvserve-client generate "Once upon a time" --temperature=0 --stop=. --json
  kvserve-client --address=10.0.0.5:50051 --auth_token_file=token.txt info
  kvserve-client tokenize "Hello" && kvserve-client detokenize 1 15043)";

constexpr int kExitUsage = 2;

// --help lists the flags of this file (absl's default looks for a file named
// after the binary, which a hyphenated name cannot match).
void ConfigureUsage() {
  kvserve::common::ConfigureHelp({.usage = kUsage,
                                  .flag_files = {"tools/kvserve_client_main.cc"},
                                  .version = "kvserve-client " KVSERVE_VERSION});
}

[[noreturn]] void UsageError(const std::string& message) {
  std::cerr << "kvserve-client: " << message << "\n\nUsage: kvserve-client [flags] COMMAND "
            << "[ARGS...]; commands: generate, info, tokenize, detokenize, health.\n"
            << "Run `kvserve-client --help` for the details." << std::endl;
  std::exit(kExitUsage);
}

// Parses "1,2,3" (and "1 2 3" split over several arguments) into `ids`.
void AppendTokenIds(const std::vector<std::string>& parts, const char* what,
                    google::protobuf::RepeatedField<int32_t>* ids) {
  for (const std::string& part : parts) {
    for (absl::string_view piece : absl::StrSplit(part, ',', absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(piece, &id)) {
        UsageError(absl::StrCat(what, ": not a token id: \"", piece, "\""));
      }
      ids->Add(id);
    }
  }
}

kvserve::v1::GenerateRequest BuildGenerateRequest(const std::vector<std::string>& args) {
  kvserve::v1::GenerateRequest request;
  const std::vector<std::string> token_ids = absl::GetFlag(FLAGS_token_ids);
  if (!token_ids.empty()) {
    if (!args.empty()) UsageError("generate: give a prompt or --token_ids, not both");
    AppendTokenIds(token_ids, "--token_ids", request.mutable_token_ids()->mutable_ids());
  } else {
    if (args.size() != 1) UsageError("generate: expects one prompt argument (quote it)");
    if (args[0] == "-") {
      request.set_text(std::string(std::istreambuf_iterator<char>(std::cin), {}));
    } else {
      request.set_text(args[0]);
    }
  }
  if (auto v = absl::GetFlag(FLAGS_add_special_tokens)) request.set_add_special_tokens(*v);

  // Only flags the user gave are set: an unset optional field means "server default".
  kvserve::v1::SamplingParams& sampling = *request.mutable_sampling();
  if (auto v = absl::GetFlag(FLAGS_temperature)) sampling.set_temperature(*v);
  if (auto v = absl::GetFlag(FLAGS_top_k)) sampling.set_top_k(*v);
  if (auto v = absl::GetFlag(FLAGS_top_p)) sampling.set_top_p(*v);
  if (auto v = absl::GetFlag(FLAGS_min_p)) sampling.set_min_p(*v);
  if (auto v = absl::GetFlag(FLAGS_seed)) sampling.set_seed(*v);
  if (auto v = absl::GetFlag(FLAGS_repetition_penalty)) sampling.set_repetition_penalty(*v);
  if (auto v = absl::GetFlag(FLAGS_presence_penalty)) sampling.set_presence_penalty(*v);
  if (auto v = absl::GetFlag(FLAGS_frequency_penalty)) sampling.set_frequency_penalty(*v);

  kvserve::v1::StoppingParams& stopping = *request.mutable_stopping();
  if (auto v = absl::GetFlag(FLAGS_max_tokens)) stopping.set_max_tokens(*v);
  if (auto v = absl::GetFlag(FLAGS_min_tokens)) stopping.set_min_tokens(*v);
  if (absl::GetFlag(FLAGS_ignore_eos)) stopping.set_ignore_eos(true);
  if (auto v = absl::GetFlag(FLAGS_skip_special_tokens)) stopping.set_skip_special_tokens(*v);
  for (const std::string& stop : absl::GetFlag(FLAGS_stop).values) stopping.add_stop(stop);
  AppendTokenIds(absl::GetFlag(FLAGS_stop_token_ids), "--stop_token_ids",
                 stopping.mutable_stop_token_ids());

  if (auto v = absl::GetFlag(FLAGS_logprobs)) request.set_logprobs(*v);
  request.set_priority(absl::GetFlag(FLAGS_priority));
  request.set_cache_salt(absl::GetFlag(FLAGS_cache_salt));
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  return request;
}

ConnectionOptions ConnectionOptionsFromFlags() {
  ConnectionOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  options.auth_token = absl::GetFlag(FLAGS_auth_token);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.tls = absl::GetFlag(FLAGS_tls);
  options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  ConfigureUsage();
  const std::vector<char*> positional =
      kvserve::common::ParseCommandLine(argc, argv, /*bad_flag_exit_code=*/kExitUsage);

  if (positional.size() < 2) UsageError("no command given");
  const std::string command = positional[1];
  const std::vector<std::string> args(positional.begin() + 2, positional.end());

  // Validate the command line fully before connecting.
  kvserve::v1::GenerateRequest generate;
  kvserve::v1::TokenizeRequest tokenize;
  kvserve::v1::DetokenizeRequest detokenize;
  if (command == "generate") {
    generate = BuildGenerateRequest(args);
  } else if (command == "info") {
    if (!args.empty()) UsageError("info: takes no arguments");
  } else if (command == "tokenize") {
    if (args.size() != 1) UsageError("tokenize: expects one text argument (quote it)");
    tokenize.set_text(args[0]);
    if (auto v = absl::GetFlag(FLAGS_add_special_tokens)) tokenize.set_add_special_tokens(*v);
  } else if (command == "detokenize") {
    if (args.empty()) UsageError("detokenize: expects token ids");
    AppendTokenIds(args, "detokenize", detokenize.mutable_token_ids());
    if (auto v = absl::GetFlag(FLAGS_skip_special_tokens)) detokenize.set_skip_special_tokens(*v);
  } else if (command == "health") {
    if (args.size() > 1) UsageError("health: takes at most one service name");
  } else {
    UsageError("unknown command \"" + command + "\"");
  }

  absl::StatusOr<Connection> connection = Connection::Open(ConnectionOptionsFromFlags());
  if (!connection.ok()) UsageError(absl::StrCat(connection.status().message()));

  if (command == "generate") {
    return kvserve::client::RunGenerate(
        *connection, generate,
        {.stream = absl::GetFlag(FLAGS_stream), .json = absl::GetFlag(FLAGS_json)});
  }
  if (command == "info") return kvserve::client::RunInfo(*connection);
  if (command == "tokenize") return kvserve::client::RunTokenize(*connection, tokenize);
  if (command == "detokenize") return kvserve::client::RunDetokenize(*connection, detokenize);
  return kvserve::client::RunHealth(*connection, args.empty() ? "" : args[0]);
}
