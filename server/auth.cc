#include "server/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/server_config.h"

namespace kvserve::server {
namespace {

// Compares without an early exit, so the time taken does not reveal how
// many leading bytes matched.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::string> LoadAuthToken(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFlagFile(path, "auth_token_file");
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--auth_token_file: ", path, " is empty"));
  }
  return token;
}

absl::Status BearerAuth::Check(const grpc::ServerContextBase& context) const {
  if (!enabled()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing \"authorization: Bearer <token>\" metadata");
  }
  return CheckValue(std::string_view(it->second.data(), it->second.size()));
}

absl::Status BearerAuth::CheckHeader(std::optional<std::string_view> authorization) const {
  if (!enabled()) return absl::OkStatus();
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError("missing \"Authorization: Bearer <token>\" header");
  }
  return CheckValue(*authorization);
}

absl::Status BearerAuth::CheckValue(std::string_view value) const {
  constexpr std::string_view kPrefix = "Bearer ";
  if (value.substr(0, kPrefix.size()) != kPrefix ||
      !ConstantTimeEquals(value.substr(kPrefix.size()), token_)) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace kvserve::server
