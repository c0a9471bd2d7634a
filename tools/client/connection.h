// How kvserve-client reaches the server: one channel (plain or TLS/mTLS) and
// the per-call settings (deadline, bearer token) every RPC gets.
#ifndef KVSERVE_TOOLS_CLIENT_CONNECTION_H_
#define KVSERVE_TOOLS_CLIENT_CONNECTION_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvserve::client {

struct ConnectionOptions {
  std::string address = "localhost:50051";
  double timeout_s = 0;  // per call; 0: no deadline
  // At most one of the two; the file's content is trimmed of surrounding whitespace.
  std::string auth_token;
  std::string auth_token_file;
  // TLS is on when `tls` is set or any other tls_* option is given.
  bool tls = false;
  std::string tls_ca_file;    // empty: the system roots
  std::string tls_cert_file;  // client certificate (mTLS); needs tls_key_file
  std::string tls_key_file;
  std::string tls_server_name;  // overrides the name the server's certificate is checked against
};

class Connection {
 public:
  // Reads the token and PEM files and creates the channel (which connects
  // lazily, on the first call). InvalidArgument for inconsistent options,
  // NotFound / FailedPrecondition for unreadable or empty files.
  static absl::StatusOr<Connection> Open(const ConnectionOptions& options);

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Sets the deadline and the authorization metadata on a call's context.
  void Prepare(grpc::ClientContext* context) const;

 private:
  std::shared_ptr<grpc::Channel> channel_;
  double timeout_s_ = 0;
  std::string auth_token_;
};

// "INVALID_ARGUMENT" for grpc::StatusCode::INVALID_ARGUMENT, and so on.
const char* StatusCodeName(grpc::StatusCode code);

// Prints "kvserve-client: <CODE_NAME>: <message>" to stderr; returns exit code 1.
int ReportRpcError(const grpc::Status& status);

}  // namespace kvserve::client

#endif  // KVSERVE_TOOLS_CLIENT_CONNECTION_H_
