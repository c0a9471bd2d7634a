// The small unary commands of kvserve-client. Each prints its result to
// stdout and returns the exit code: 0, or 1 after printing a non-OK status.
#ifndef KVSERVE_TOOLS_CLIENT_COMMANDS_H_
#define KVSERVE_TOOLS_CLIENT_COMMANDS_H_

#include <string>

#include "kvserve/v1/kvserve.pb.h"
#include "tools/client/connection.h"

namespace kvserve::client {

// GetModelInfo as a JSON object with the proto field names, every field present.
int RunInfo(const Connection& connection);

// The token ids as a JSON list, e.g. [1,15043,29892].
int RunTokenize(const Connection& connection, const kvserve::v1::TokenizeRequest& request);

// The text, followed by a newline.
int RunDetokenize(const Connection& connection, const kvserve::v1::DetokenizeRequest& request);

// grpc.health.v1 Check of `service` ("" = the whole server). Prints the
// serving status (SERVING, NOT_SERVING, ...); returns 0 only for SERVING.
int RunHealth(const Connection& connection, const std::string& service);

}  // namespace kvserve::client

#endif  // KVSERVE_TOOLS_CLIENT_COMMANDS_H_
