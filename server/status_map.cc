#include "server/status_map.h"

#include <string>

namespace kvserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share the canonical numbering
  // (google.rpc.Code), 1..16.
  const int code = static_cast<int>(status.code());
  const auto grpc_code =
      (code >= 1 && code <= 16) ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

}  // namespace kvserve::server
