#include "server/kvserve_service.h"

#include "server/generate_reactor.h"
#include "server/request_convert.h"
#include "server/status_map.h"

namespace kvserve::server {
namespace {

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

grpc::Status KvServeService::Admit(const grpc::CallbackServerContext& context) {
  if (state_.draining()) {
    state_.metrics().OnRejected(Rejection::kUnavailable);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is draining");
  }
  if (absl::Status s = state_.auth().Check(context); !s.ok()) {
    state_.metrics().OnRejected(Rejection::kUnauthenticated);
    return ToGrpcStatus(s);
  }
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* KvServeService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(state_, context, *request);  // deletes itself in OnDone
}

grpc::ServerUnaryReactor* KvServeService::GetModelInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetModelInfoRequest* request,
                                                       v1::GetModelInfoResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return Answer(context, s);
  *response = state_.model_info();
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KvServeService::Tokenize(grpc::CallbackServerContext* context,
                                                   const v1::TokenizeRequest* request,
                                                   v1::TokenizeResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return Answer(context, s);
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeText(state_.tokenizer(), request->text(), "text", request->add_special_tokens());
  if (!ids.ok()) return Answer(context, ToGrpcStatus(ids.status()));
  response->mutable_token_ids()->Add(ids->begin(), ids->end());
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KvServeService::Detokenize(grpc::CallbackServerContext* context,
                                                     const v1::DetokenizeRequest* request,
                                                     v1::DetokenizeResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return Answer(context, s);
  if (state_.tokenizer() == nullptr) {
    return Answer(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        "token_ids: the model has no tokenizer"));
  }
  if (absl::Status s = CheckTokenIds(request->token_ids(), "token_ids", state_.vocab_size());
      !s.ok()) {
    return Answer(context, ToGrpcStatus(s));
  }
  const std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  response->set_text(state_.tokenizer()->Decode(ids, request->skip_special_tokens()));
  return Answer(context, grpc::Status::OK);
}

}  // namespace kvserve::server
