// DaemonProcess: runs the real `kvserve` binary for an integration test, on
// loopback ephemeral ports, and stops it (SIGTERM) when the test ends.
// Also: a plain HTTP GET of /metrics and a parser for its text format.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvserve::testing {

class DaemonProcess {
 public:
  // Starts KVSERVE_DAEMON_PATH with --host/--port/--metrics_* on loopback
  // plus `extra_flags`, and waits for its ready line (aborts the test binary
  // if it never comes).
  explicit DaemonProcess(const std::vector<std::string>& extra_flags = {});
  ~DaemonProcess();  // Stop()
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }

  void Signal(int sig) const;
  // SIGTERM, then waits; returns the exit status (-1 if killed by a signal).
  int Stop();
  std::string StderrLog() const;

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  std::string grpc_address_;
  std::string metrics_address_;
  std::string stderr_path_;
};

// GET http://address/metrics (kvserve-loadgen's HTTP client); empty on
// failure.
std::string ScrapeMetrics(const std::string& address);

// "name{labels}" -> value, for every sample line.
std::map<std::string, double> ParseMetrics(const std::string& text);

}  // namespace kvserve::testing
