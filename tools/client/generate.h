// `kvserve-client generate`: one streaming Generate call and how its result
// is printed.
#ifndef KVSERVE_TOOLS_CLIENT_GENERATE_H_
#define KVSERVE_TOOLS_CLIENT_GENERATE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/v1/kvserve.pb.h"
#include "tools/client/connection.h"

namespace kvserve::client {

struct GenerateOutputOptions {
  // Print each text delta to stdout as it arrives (flushed) instead of the
  // whole text at the end. Ignored with `json`.
  bool stream = false;
  // Print one JSON object (GenerateResultToJson) on stdout instead of the text.
  bool json = false;
};

// Everything the stream said, merged: the deltas concatenated, the final
// message's fields kept.
struct GenerateResult {
  std::vector<int> token_ids;
  std::string text;
  std::vector<kvserve::v1::TokenLogprob> logprobs;
  kvserve::v1::GenerateResponse final_message;  // `finished` set once it arrived
};

// "stop", "length", "aborted", "deadline", "error", "unspecified".
const char* FinishReasonName(kvserve::v1::FinishReason reason);

// {"request_id", "token_ids", "text", "finish_reason", "stop_string",
//  "stop_token" (only when set), "usage": {...}, "timings": {...},
//  "logprobs": [{"token_id", "logprob", "top": [{"token_id", "logprob"}]}]
//  (only when `with_logprobs`)}, keys in this order.
nlohmann::ordered_json GenerateResultToJson(const GenerateResult& result, bool with_logprobs);

// One line for stderr: finish reason, token counts and server timings.
std::string GenerateSummary(const GenerateResult& result);

// Runs the call and prints its result. Returns the exit code: 0, or 1 after
// printing a non-OK status (text already streamed stays printed).
int RunGenerate(const Connection& connection, const kvserve::v1::GenerateRequest& request,
                const GenerateOutputOptions& output);

}  // namespace kvserve::client

#endif  // KVSERVE_TOOLS_CLIENT_GENERATE_H_
