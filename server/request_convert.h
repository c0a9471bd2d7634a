// Protobuf <-> native conversion for the v1 API. Protobuf types stop here
// (docs/architecture.md): below server/ everything is scheduler and engine types.
// The field checks that do not depend on protobuf (UTF-8, token ids, stop
// strings, tokenization) are shared with the OpenAI HTTP API
// (server/http/openai_protocol.cc), so both frontends refuse the same input.
//
// Validation split: this file checks what only the API knows (oneof presence,
// string sizes and UTF-8, list lengths, token ids against the vocabulary) and
// names fields as the proto does; CapacityPolicy::CheckSubmission (at Submit)
// checks ranges and whether the request can ever run.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/grammar/constraint.h"
#include "engine/loader/generation_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/support/status.h"
#include "kvserve/v1/kvserve.pb.h"
#include "scheduler/request.h"

namespace kvserve::server {

// Limits on request fields (documented in kvserve.proto).
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopStringBytes = 256;
inline constexpr int kMaxStopTokenIds = 64;
inline constexpr int kMaxRequestIdBytes = 128;
inline constexpr int kMaxCacheSaltBytes = 256;
inline constexpr int kMaxConstraintBytes = 65536;  // a schema, regex or grammar; all choices
inline constexpr int kMaxConstraintChoices = 256;

// InvalidArgument "<field>: not valid UTF-8 (byte offset N)" unless valid.
absl::Status CheckUtf8(std::string_view text, std::string_view field);

// The native request; InvalidArgument naming the field on bad input.
// tokenizer may be null (then text prompts and stop strings are invalid).
// `defaults` (the checkpoint's generation_config.json values) fill the
// sampling fields the request leaves unset.
absl::StatusOr<scheduler::RequestParams> ToRequestParams(
    const v1::GenerateRequest& request, const engine::Tokenizer* tokenizer, int32_t vocab_size,
    const engine::SamplingDefaults& defaults = {});

// Token ids for Tokenize / Detokenize, checked the same way.
absl::StatusOr<std::vector<int32_t>> TokenizeText(const engine::Tokenizer* tokenizer,
                                                  std::string_view text, std::string_view field,
                                                  bool add_special_tokens);
absl::Status CheckTokenIds(const google::protobuf::RepeatedField<int32_t>& ids,
                           std::string_view field, int32_t vocab_size);
absl::Status CheckTokenIds(std::span<const int32_t> ids, std::string_view field,
                           int32_t vocab_size);
// logit_bias entries, as both APIs take them: each id inside the vocabulary,
// each bias in [-engine::kMaxLogitBias, engine::kMaxLogitBias]. Errors name
// `field` and the token id.
absl::Status CheckLogitBias(std::span<const engine::TokenBias> logit_bias, std::string_view field,
                            int32_t vocab_size);
// Stop strings, as both APIs take them: at most kMaxStopStrings, each
// non-empty, valid UTF-8 and at most kMaxStopStringBytes; a model without a
// tokenizer takes none. Errors name "<field>[i]".
absl::Status CheckStopStrings(std::span<const std::string> stops,
                              const engine::Tokenizer* tokenizer, std::string_view field);

// A structured-output constraint, as both APIs take it: its text at most
// kMaxConstraintBytes of UTF-8 (the choices together too), at most
// kMaxConstraintChoices choices, each non-empty, and a grammar xgrammar
// accepts (engine::grammar::BuildGrammar). Errors name `field`.
absl::Status CheckConstraint(const engine::grammar::Constraint& constraint, std::string_view field);

// The proto's constraint oneof (none when unset), checked by CheckConstraint.
absl::StatusOr<std::optional<engine::grammar::Constraint>> ToConstraint(
    const v1::GenerateRequest& request);

v1::FinishReason ToProto(scheduler::FinishReason reason);

// Appends one engine output (the deltas, and the final fields when it is the
// final message) to `response`; several outputs may be merged into one
// response, in order.
void AppendOutput(const scheduler::RequestOutput& output, v1::GenerateResponse* response);

// The RPC status a stream ends with, given its final output: OK for
// stop/length; DEADLINE_EXCEEDED for an expired request; UNAVAILABLE for one
// aborted by shutdown; INTERNAL for a failed step.
grpc::Status FinalStatus(const scheduler::RequestOutput& final_output);

}  // namespace kvserve::server
