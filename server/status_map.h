// The one place where absl::Status becomes grpc::Status (docs/architecture.md "Errors").
// Codes map one to one (both follow google.rpc.Code); the message is kept.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kvserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace kvserve::server
