// gRPC request conversion: bytes -> v1::GenerateRequest (protobuf's parser)
// -> the native request, with the byte tokenizer of the builtin models and
// the checkpoint sampling defaults on or off. Property: a request that
// converts has a non-empty prompt of in-vocabulary ids and stop limits in
// range; one that does not has an error naming a field.
#include <cstdint>

#include "engine/tokenizer/tokenizer.h"
#include "kvserve/v1/kvserve.pb.h"
#include "server/request_convert.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<kvserve::engine::Tokenizer> tokenizer =
      kvserve::engine::MakeByteTokenizer();
  if (size == 0) return 0;
  kvserve::engine::SamplingDefaults defaults;
  if (data[0] & 1) {
    defaults.temperature = 0.7f;
    defaults.top_p = 0.9f;
    defaults.top_k = 40;
  }
  kvserve::v1::GenerateRequest request;
  if (!request.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  const int32_t vocab = tokenizer->vocab_size();
  absl::StatusOr<kvserve::scheduler::RequestParams> params =
      kvserve::server::ToRequestParams(request, tokenizer.get(), vocab, defaults);
  if (!params.ok()) {
    KVSERVE_FUZZ_CHECK(!params.status().message().empty(), "errors name the field");
    return 0;
  }
  KVSERVE_FUZZ_CHECK(!params->prompt_tokens.empty(), "non-empty prompt");
  for (int32_t id : params->prompt_tokens) {
    KVSERVE_FUZZ_CHECK(id >= 0 && id < vocab, std::to_string(id));
  }
  KVSERVE_FUZZ_CHECK(params->stop.stop_strings.size() <= kvserve::server::kMaxStopStrings,
                     "stop string count");
  for (const std::string& stop : params->stop.stop_strings) {
    KVSERVE_FUZZ_CHECK(!stop.empty() && stop.size() <= kvserve::server::kMaxStopStringBytes, stop);
  }
  return 0;
}
