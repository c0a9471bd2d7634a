// Optional bearer-token auth for the inference RPCs and the HTTP API. Health and reflection
// are separate services and never check it (Kubernetes probes carry no
// token).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace kvserve::server {

// The token in `path`, surrounding whitespace removed; an error if the file
// is unreadable or holds no token.
absl::StatusOr<std::string> LoadAuthToken(const std::string& path);

class BearerAuth {
 public:
  explicit BearerAuth(std::string token) : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  // OK when auth is disabled or the call's "authorization" metadata is
  // "Bearer <token>"; Unauthenticated otherwise. Constant time in the token.
  absl::Status Check(const grpc::ServerContextBase& context) const;
  // The same for an HTTP request's Authorization header (nullopt: absent).
  absl::Status CheckHeader(std::optional<std::string_view> authorization) const;

 private:
  absl::Status CheckValue(std::string_view value) const;
  const std::string token_;
};

}  // namespace kvserve::server
