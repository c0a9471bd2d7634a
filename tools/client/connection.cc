#include "tools/client/connection.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvserve::client {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::ostringstream content;
  content << in.rdbuf();
  if (content.str().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", path, " is empty"));
  }
  return content.str();
}

}  // namespace

absl::StatusOr<Connection> Connection::Open(const ConnectionOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("--address: must not be empty");
  if (options.timeout_s < 0) return absl::InvalidArgumentError("--timeout_s: must be >= 0");
  if (!options.auth_token.empty() && !options.auth_token_file.empty()) {
    return absl::InvalidArgumentError("--auth_token and --auth_token_file: give at most one");
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file: give both or neither");
  }

  Connection connection;
  connection.timeout_s_ = options.timeout_s;
  connection.auth_token_ = options.auth_token;
  if (!options.auth_token_file.empty()) {
    auto token = ReadFile(options.auth_token_file, "--auth_token_file");
    if (!token.ok()) return token.status();
    // Token files usually end in a newline; it is not part of the token.
    connection.auth_token_ = std::string(absl::StripAsciiWhitespace(*token));
    if (connection.auth_token_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--auth_token_file: ", options.auth_token_file, " holds only whitespace"));
    }
  }

  const bool tls = options.tls || !options.tls_ca_file.empty() || !options.tls_cert_file.empty() ||
                   !options.tls_server_name.empty();
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments arguments;
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      KVSERVE_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(options.tls_ca_file, "--tls_ca_file"));
    }
    if (!options.tls_cert_file.empty()) {
      auto cert = ReadFile(options.tls_cert_file, "--tls_cert_file");
      if (!cert.ok()) return cert.status();
      auto key = ReadFile(options.tls_key_file, "--tls_key_file");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      arguments.SetSslTargetNameOverride(options.tls_server_name);
    }
  }
  connection.channel_ = grpc::CreateCustomChannel(options.address, credentials, arguments);
  return connection;
}

void Connection::Prepare(grpc::ClientContext* context) const {
  if (timeout_s_ > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(timeout_s_)));
  }
  if (!auth_token_.empty()) context->AddMetadata("authorization", "Bearer " + auth_token_);
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

int ReportRpcError(const grpc::Status& status) {
  std::cerr << "kvserve-client: " << StatusCodeName(status.error_code()) << ": "
            << status.error_message() << std::endl;
  return 1;
}

}  // namespace kvserve::client
