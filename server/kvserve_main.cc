// kvserve: the inference server daemon. `kvserve --help` lists the flags.
#include <csignal>
#include <cstdio>
#include <span>
#include <string>

#include "absl/flags/parse.h"
#include "common/cli_help.h"
#include "server/daemon.h"
#include "server/server_config.h"

int main(int argc, char** argv) {
  // Before any thread starts: every thread inherits this mask, so SIGTERM and
  // SIGINT reach only the daemon's sigwait thread. SIGPIPE is ignored (a
  // vanished scrape client must not kill the server).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // --help lists the daemon's own flags (defined in server/flags.cc).
  kvserve::common::ConfigureHelp(
      {.usage = "LLM inference server. Serves kvserve.v1.KvServe (gRPC, with health and "
                "reflection) and Prometheus metrics.\n  kvserve --model=builtin:tiny --port=50051 "
                "--metrics_port=9400",
       .flag_files = {"server/flags.cc"}});
  const auto positional = kvserve::common::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "kvserve: unexpected argument \"%s\" (see --help)\n", positional[1]);
    return 2;
  }
  absl::StatusOr<kvserve::server::ServerConfig> config =
      kvserve::server::ConfigFromFlags(std::span<char* const>(argv, static_cast<size_t>(argc)));
  if (!config.ok()) {
    std::fprintf(stderr, "kvserve: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  return kvserve::server::RunDaemon(*config);
}
