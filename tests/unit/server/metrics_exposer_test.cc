// MetricsExposer serves registered metrics and, once destroyed, has released
// its listening socket and threads (the port refuses connections).
#include "server/metrics_exposer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace kvserve::server {
namespace {

// -1 when the connection is refused; else the fd.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string Scrape(int port) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  close(fd);
  return response;
}

TEST(MetricsExposer, ServesThenReleasesItsPort) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("kvserve_test_total")
      .Help("test")
      .Register(*registry)
      .Add({})
      .Increment(3);
  auto exposer = MetricsExposer::Start("127.0.0.1", 0);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();
  ASSERT_GT(port, 0);
  (*exposer)->Register(registry);
  EXPECT_NE(Scrape(port).find("kvserve_test_total 3"), std::string::npos);

  exposer->reset();
  EXPECT_EQ(ConnectLoopback(port), -1) << "the listener is closed once the exposer is gone";
}

TEST(MetricsExposer, WildcardHostStopsToo) {
  auto exposer = MetricsExposer::Start("0.0.0.0", 0);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();
  exposer->reset();
  EXPECT_EQ(ConnectLoopback(port), -1);
}

TEST(MetricsExposer, BusyPortIsAClearError) {
  auto first = MetricsExposer::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = MetricsExposer::Start("127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--metrics_host/--metrics_port"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::server
