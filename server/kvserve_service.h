// KvServeService: the kvserve.v1.KvServe gRPC service (callback API).
// Generate gets one GenerateReactor per call; the unary RPCs answer inline
// on the gRPC thread (tokenization only, no engine access).
#pragma once

#include "kvserve/v1/kvserve.grpc.pb.h"
#include "server/serving_state.h"

namespace kvserve::server {

class KvServeService final : public v1::KvServe::CallbackService {
 public:
  explicit KvServeService(ServingState& state) : state_(state) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;

 private:
  // UNAVAILABLE while draining, UNAUTHENTICATED without the token, else OK
  // (counting refusals in the metrics).
  grpc::Status Admit(const grpc::CallbackServerContext& context);

  ServingState& state_;
};

}  // namespace kvserve::server
