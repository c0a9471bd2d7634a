#include "tools/loadgen/metrics_scrape.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvserve::loadgen {
namespace {

// Closes the socket on every path out of HttpGet.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& url, double timeout_s) {
  constexpr absl::string_view kScheme = "http://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat("metrics url must start with http://: ", url));
  }
  std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  const std::string hostport = rest.substr(0, slash);
  const size_t colon = hostport.rfind(':');
  std::string host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  const std::string port = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", hostport, ": ", gai_strerror(rc)));
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  Fd sock;
  std::string connect_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd s;
    s.fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (s.fd < 0) continue;
    if (connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      connect_error = std::strerror(errno);
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (!WaitFd(s.fd, POLLOUT, deadline) ||
        getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      connect_error = err != 0 ? std::strerror(err) : "timed out";
      continue;
    }
    std::swap(sock.fd, s.fd);
    break;
  }
  freeaddrinfo(res);
  if (sock.fd < 0)
    return absl::UnavailableError(absl::StrCat("connect ", hostport, ": ", connect_error));

  // HTTP/1.0 + Connection: close: the body ends at EOF, never chunked.
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", hostport,
                                           "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    if (!WaitFd(sock.fd, POLLOUT, deadline)) return absl::DeadlineExceededError("send timed out");
    const ssize_t n = send(sock.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[16384];
  for (;;) {
    if (!WaitFd(sock.fd, POLLIN, deadline)) return absl::DeadlineExceededError("read timed out");
    const ssize_t n = recv(sock.fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    response.append(buf, static_cast<size_t>(n));
  }
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::DataLossError("no HTTP header in the response");
  const std::string status_line = response.substr(0, response.find("\r\n"));
  // "HTTP/1.x 200 OK"
  const size_t sp = status_line.find(' ');
  if (sp == std::string::npos || status_line.compare(sp + 1, 3, "200") != 0) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", status_line));
  }
  return response.substr(header_end + 4);
}

std::map<std::string, double> ParsePrometheusSums(const std::string& text) {
  std::map<std::string, double> sums;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    // name[{labels}] value [timestamp]; label values may hold spaces and '}'
    // inside quotes, so skip the label block by tracking quotes.
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    const std::string name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      bool quoted = false;
      for (++i; i < line.size(); ++i) {
        if (quoted && line[i] == '\\') {
          ++i;
        } else if (line[i] == '"') {
          quoted = !quoted;
        } else if (!quoted && line[i] == '}') {
          ++i;
          break;
        }
      }
    }
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t end = line.find(' ', i);
    double value = 0;
    const std::string token =
        line.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (name.empty() || !absl::SimpleAtod(token, &value)) continue;
    sums[name] += value;
  }
  return sums;
}

absl::StatusOr<std::map<std::string, double>> ScrapeMetrics(const std::string& url) {
  auto body = HttpGet(url);
  if (!body.ok()) return body.status();
  return ParsePrometheusSums(*body);
}

}  // namespace kvserve::loadgen
