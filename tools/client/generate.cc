#include "tools/client/generate.h"

#include <cstdio>
#include <iostream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "kvserve/v1/kvserve.grpc.pb.h"

namespace kvserve::client {

using kvserve::v1::FinishReason;

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case kvserve::v1::FINISH_REASON_STOP:
      return "stop";
    case kvserve::v1::FINISH_REASON_LENGTH:
      return "length";
    case kvserve::v1::FINISH_REASON_ABORTED:
      return "aborted";
    case kvserve::v1::FINISH_REASON_DEADLINE:
      return "deadline";
    case kvserve::v1::FINISH_REASON_ERROR:
      return "error";
    default:
      return "unspecified";
  }
}

nlohmann::ordered_json GenerateResultToJson(const GenerateResult& result, bool with_logprobs) {
  const kvserve::v1::GenerateResponse& last = result.final_message;
  nlohmann::ordered_json json;
  json["request_id"] = last.request_id();
  json["token_ids"] = result.token_ids;
  json["text"] = result.text;
  json["finish_reason"] = FinishReasonName(last.finish_reason());
  json["stop_string"] = last.stop_string();
  if (last.has_stop_token()) json["stop_token"] = last.stop_token();
  json["usage"] = {{"prompt_tokens", last.usage().prompt_tokens()},
                   {"cached_prompt_tokens", last.usage().cached_prompt_tokens()},
                   {"completion_tokens", last.usage().completion_tokens()}};
  json["timings"] = {{"queue_s", last.timings().queue_s()},
                     {"time_to_first_token_s", last.timings().time_to_first_token_s()},
                     {"e2e_s", last.timings().e2e_s()}};
  if (with_logprobs) {
    nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();
    for (const kvserve::v1::TokenLogprob& token : result.logprobs) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const kvserve::v1::TopLogprob& alt : token.top()) {
        top.push_back({{"token_id", alt.token_id()}, {"logprob", alt.logprob()}});
      }
      logprobs.push_back(
          {{"token_id", token.token_id()}, {"logprob", token.logprob()}, {"top", std::move(top)}});
    }
    json["logprobs"] = std::move(logprobs);
  }
  return json;
}

std::string GenerateSummary(const GenerateResult& result) {
  const kvserve::v1::GenerateResponse& last = result.final_message;
  std::string stop;
  if (!last.stop_string().empty()) {
    stop = absl::StrFormat(" stop_string=\"%s\"", absl::Utf8SafeCEscape(last.stop_string()));
  } else if (last.has_stop_token()) {
    stop = absl::StrFormat(" stop_token=%d", last.stop_token());
  }
  return absl::StrFormat(
      "request_id=%s finish_reason=%s%s prompt_tokens=%d cached_prompt_tokens=%d "
      "completion_tokens=%d ttft=%.3fms e2e=%.3fms",
      last.request_id(), FinishReasonName(last.finish_reason()), stop, last.usage().prompt_tokens(),
      last.usage().cached_prompt_tokens(), last.usage().completion_tokens(),
      last.timings().time_to_first_token_s() * 1e3, last.timings().e2e_s() * 1e3);
}

int RunGenerate(const Connection& connection, const kvserve::v1::GenerateRequest& request,
                const GenerateOutputOptions& output) {
  auto stub = kvserve::v1::KvServe::NewStub(connection.channel());
  grpc::ClientContext context;
  connection.Prepare(&context);
  std::unique_ptr<grpc::ClientReader<kvserve::v1::GenerateResponse>> reader =
      stub->Generate(&context, request);

  const bool stream_text = output.stream && !output.json;
  GenerateResult result;
  kvserve::v1::GenerateResponse message;
  while (reader->Read(&message)) {
    result.token_ids.insert(result.token_ids.end(), message.token_ids().begin(),
                            message.token_ids().end());
    result.text += message.text();
    result.logprobs.insert(result.logprobs.end(), message.logprobs().begin(),
                           message.logprobs().end());
    if (stream_text && !message.text().empty()) {
      std::fwrite(message.text().data(), 1, message.text().size(), stdout);
      std::fflush(stdout);
    }
    if (message.finished()) result.final_message = message;
  }
  const grpc::Status status = reader->Finish();
  // Streamed text ends with a newline, like the printed whole text; after an
  // error only when a line was started, so the error gets its own line.
  if (stream_text && (status.ok() || !result.text.empty())) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!status.ok()) return ReportRpcError(status);
  if (!result.final_message.finished()) {
    // The API promises a final message before an OK status.
    std::cerr << "kvserve-client: INTERNAL: the stream ended without a final message" << std::endl;
    return 1;
  }

  if (output.json) {
    std::cout << GenerateResultToJson(result, request.has_logprobs())
                     .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
              << std::endl;
  } else if (!stream_text) {
    std::cout << result.text << std::endl;
  }
  std::cerr << GenerateSummary(result) << std::endl;
  return 0;
}

}  // namespace kvserve::client
