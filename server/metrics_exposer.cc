#include "server/metrics_exposer.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace kvserve::server {
namespace {

// Where a connection reaches a listener bound to `host`.
std::string WakeAddress(const std::string& host) {
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::" || host == "[::]") return "::1";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// One connection opened and closed at once; failures are ignored (the stop
// then simply waits for civetweb's poll timeout).
void Poke(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

// civetweb serves one connection per worker thread, and by default waits 30 s
// for a request on each: two idle connections used to block every scrape.
// More workers, a short request timeout and a deep accept queue keep scrapes
// answered while clients hold connections open or send headers slowly
// (bench/soak: `metrics` scenario). A scrape sends its request at once.
std::vector<std::string> CivetwebOptions(const std::string& host, int port) {
  return {"listening_ports",       absl::StrCat(host, ":", port),
          "num_threads",           "64",
          "request_timeout_ms",    "1000",
          "keep_alive_timeout_ms", "2000",
          "connection_queue",      "1024",
          "listen_backlog",        "1024"};
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(const std::string& host,
                                                                      int port) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(CivetwebOptions(host, port));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("--metrics_host/--metrics_port: cannot listen on ",
                                               host, ":", port, ": ", e.what()));
  }
  const int bound = exposer->GetListeningPorts().at(0);
  return std::unique_ptr<MetricsExposer>(new MetricsExposer(std::move(exposer), host, bound));
}

MetricsExposer::MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, std::string host,
                               int port)
    : exposer_(std::move(exposer)), host_(std::move(host)), port_(port) {}

void MetricsExposer::Register(const std::weak_ptr<prometheus::Collectable>& collectable) {
  exposer_->RegisterCollectable(collectable);
}

MetricsExposer::~MetricsExposer() {
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    exposer_.reset();  // joins civetweb's threads, closes its sockets
    stopped.store(true);
  });
  // A poke that lands before civetweb has seen the stop request is served
  // (a closed connection) and the next one wakes it: keep poking until done.
  const std::string wake = WakeAddress(host_);
  while (!stopped.load()) {
    Poke(wake, port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stopper.join();
}

}  // namespace kvserve::server
