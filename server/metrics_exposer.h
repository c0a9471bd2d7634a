// MetricsExposer: the Prometheus /metrics HTTP endpoint (prometheus-cpp's
// Exposer on civetweb), started on --metrics_host:--metrics_port and stopped
// cleanly and fast.
//
// Why a wrapper: civetweb's listener thread notices the stop request only
// when its poll() on the listening socket returns, which without traffic is
// its 2 s timeout, so a plain destructor made every daemon exit wait ~1.7 s.
// The destructor here stops civetweb on a helper thread and meanwhile opens
// short-lived loopback connections to the endpoint, which wake the poll at
// once (~15 ms). Every thread and socket is released: nothing is left to the
// OS, so LeakSanitizer sees a clean exit.
//
// Ownership: owns the Exposer; the collectables registered stay owned by the
// caller (weak references), and must stop reading anything the caller frees
// before this object is destroyed (ServerMetrics::Detach).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}

namespace kvserve::server {

class MetricsExposer {
 public:
  // Unavailable naming the flags when it cannot listen. port 0: ephemeral.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(const std::string& host, int port);
  ~MetricsExposer();
  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  void Register(const std::weak_ptr<prometheus::Collectable>& collectable);
  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, std::string host, int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;  // as given (a wildcard address is woken on loopback)
  int port_;
};

}  // namespace kvserve::server
