#include "tools/client/commands.h"

#include <google/protobuf/util/json_util.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "grpc/health/v1/health.grpc.pb.h"
#include "kvserve/v1/kvserve.grpc.pb.h"

namespace kvserve::client {

int RunInfo(const Connection& connection) {
  auto stub = kvserve::v1::KvServe::NewStub(connection.channel());
  grpc::ClientContext context;
  connection.Prepare(&context);
  kvserve::v1::GetModelInfoResponse response;
  grpc::Status status = stub->GetModelInfo(&context, {}, &response);
  if (!status.ok()) return ReportRpcError(status);

  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;  // a zero is information too
  options.preserve_proto_field_names = true;     // model_name, not modelName
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(response, &json, options).ok()) {
    std::cerr << "kvserve-client: INTERNAL: cannot print the model info as JSON" << std::endl;
    return 1;
  }
  std::cout << json;  // add_whitespace output already ends with a newline
  return 0;
}

int RunTokenize(const Connection& connection, const kvserve::v1::TokenizeRequest& request) {
  auto stub = kvserve::v1::KvServe::NewStub(connection.channel());
  grpc::ClientContext context;
  connection.Prepare(&context);
  kvserve::v1::TokenizeResponse response;
  grpc::Status status = stub->Tokenize(&context, request, &response);
  if (!status.ok()) return ReportRpcError(status);
  std::cout << nlohmann::json(response.token_ids()).dump() << std::endl;
  return 0;
}

int RunDetokenize(const Connection& connection, const kvserve::v1::DetokenizeRequest& request) {
  auto stub = kvserve::v1::KvServe::NewStub(connection.channel());
  grpc::ClientContext context;
  connection.Prepare(&context);
  kvserve::v1::DetokenizeResponse response;
  grpc::Status status = stub->Detokenize(&context, request, &response);
  if (!status.ok()) return ReportRpcError(status);
  std::cout << response.text() << std::endl;
  return 0;
}

int RunHealth(const Connection& connection, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(connection.channel());
  grpc::ClientContext context;
  connection.Prepare(&context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return ReportRpcError(status);
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())
            << std::endl;
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace kvserve::client
