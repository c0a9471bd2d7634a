// The kvserve daemon's life: load the model, start the engine loop, the
// metrics endpoint and the gRPC server, print the ready line, serve until a
// signal, drain, exit.
//
// Signals (SIGTERM, SIGINT): the caller blocks them in every thread before
// calling RunDaemon (so no thread is interrupted); a dedicated thread waits
// for them with sigwait. The first one starts the drain: health turns
// NOT_SERVING, new RPCs get UNAVAILABLE, in-flight streams run to completion
// until --drain_timeout_s, then whatever is left is aborted (its clients get
// UNAVAILABLE), and RunDaemon returns 0. A second signal exits the process at
// once with status 1.
#pragma once

#include "server/server_config.h"

namespace kvserve::server {

// The process exit status: 0 after a clean drain, 1 if startup failed (the
// reason is logged to stderr).
int RunDaemon(const ServerConfig& config);

}  // namespace kvserve::server
