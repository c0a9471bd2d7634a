// HttpServer: the HTTP/1.1 listener of the OpenAI-compatible API, on
// Boost.Beast + Boost.Asio (Debian's libboost-dev, header-only).
//
// Threads: `io_threads` threads run one io_context. Every connection has its
// own strand, so its handlers never run concurrently, and no thread is tied
// to a connection or a stream: thousands of idle or streaming connections
// cost memory (a socket, a buffer, a parser), not threads.
//
// Per connection (http_server.cc, Session): read a request (header and body
// timeouts, a header and a body size limit), hand it to the RequestHandler,
// write the response (one write in flight; a write timeout drops a reader
// that stalls), then read the next one (keep-alive, an idle timeout). While
// a response is pending, a read on the socket notices a client that goes
// away (the Exchange is told, which aborts the engine requests). Malformed
// HTTP gets a 400 (413 for a body over the limit, 431 for headers) and the
// connection is closed; nothing on the wire can end the process.
//
// TLS (HttpServerOptions::tls): the same Session, templated on its stream
// (plain TCP or Asio SSL over it), first runs the server handshake under a
// timeout; a failed handshake (plain HTTP, an untrusted or missing client
// certificate under mTLS) just closes that connection.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/http/http_channel.h"
#include "server/metrics.h"

namespace kvserve::server::http {

// PEM contents (not paths), as the gRPC credentials take them.
struct HttpTlsOptions {
  std::string cert_chain;   // --tls_cert_file: the server's certificate (chain)
  std::string private_key;  // --tls_key_file
  // --tls_client_ca_file; non-empty: every client must present a certificate
  // that verifies against these CAs (mTLS), as gRPC's
  // REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY.
  std::string client_ca;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port (see port())
  int io_threads = 2;
  size_t max_body_bytes = 4 << 20;
  size_t max_header_bytes = 16 << 10;
  double header_timeout_s = 30;       // a request's header, from its first byte
  double body_timeout_s = 60;         // its body, after the header
  double idle_timeout_s = 60;         // keep-alive: between requests
  double write_timeout_s = 60;        // one write to a client that does not read
  double handshake_timeout_s = 30;    // TLS: the handshake, from the accept
  std::optional<HttpTlsOptions> tls;  // absent: plain HTTP
};

class HttpServer {
 public:
  // Binds and starts serving. `handler` and `metrics` (nullable) outlive the
  // server. Unavailable naming the address when it cannot listen;
  // InvalidArgument naming the flag when a TLS PEM does not load.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           RequestHandler& handler,
                                                           ServerMetrics* metrics);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Stops accepting, closes every connection and joins the io threads; tasks
  // still queued (engine outputs of requests already finished) are dropped.
  // Call after the engine loop stopped (no more outputs are posted).
  // Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::server::http
