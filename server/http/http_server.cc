#include "server/http/http_server.h"

#include <chrono>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "common/logging.h"
#include "common/status_macros.h"
#include "openssl/ssl.h"

namespace kvserve::server::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

struct Shared {
  HttpServerOptions options;
  RequestHandler* handler = nullptr;
  ServerMetrics* metrics = nullptr;
};

// One connection. Owned by the asynchronous operations in flight (each holds
// a shared_ptr); every member is touched on the connection's strand only.
// Stream is PlainStream or TlsStream: one code path, TLS adds the handshake
// in front (the timeouts are the TCP layer's, transport(), under both).
//
// States: reading a request -> in a response (in_response_) -> reading the
// next one (keep-alive) ... -> closed. While in a response, a "watch" read
// is pending so that a client that leaves is noticed; if the client sends
// its next request instead, those bytes stay in buffer_ for the next parse.
template <class Stream>
class Session final : public HttpChannel, public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  static_assert(kTls || std::is_same_v<Stream, PlainStream>);

 public:
  // `stream_args`: the accepted socket (and, for TLS, the ssl::context).
  template <class... StreamArgs>
  explicit Session(const Shared& shared, StreamArgs&&... stream_args)
      : stream_(std::forward<StreamArgs>(stream_args)...),
        executor_(beast::get_lowest_layer(stream_).get_executor()),
        idle_timer_(executor_),
        shared_(shared) {
    if (shared_.metrics != nullptr) shared_.metrics->OnHttpConnection(+1);
  }
  ~Session() override {
    if (shared_.metrics != nullptr) shared_.metrics->OnHttpConnection(-1);
  }

  void Start() {
    if constexpr (kTls) {
      net::dispatch(executor_, beast::bind_front_handler(&Session::Handshake, self()));
    } else {
      net::dispatch(executor_, beast::bind_front_handler(&Session::ReadHeader, self()));
    }
  }

  // ---- HttpChannel (strand) ----
  void Respond(int status, std::string content_type, std::string body) override {
    if (closed_ || response_started_) return;
    response_started_ = true;
    if (shared_.metrics != nullptr) shared_.metrics->OnHttpResponse(status);
    std::string head = StatusLine(status);
    absl::StrAppend(&head, "Content-Type: ", content_type, "\r\nContent-Length: ", body.size(),
                    "\r\n", status == 401 ? "WWW-Authenticate: Bearer\r\n" : "",
                    keep_alive_ ? "" : "Connection: close\r\n", "\r\n");
    Queue(std::move(head) + body, /*end=*/true);
  }
  void BeginEventStream() override {
    if (closed_ || response_started_) return;
    response_started_ = true;
    if (shared_.metrics != nullptr) shared_.metrics->OnHttpResponse(200);
    std::string head = StatusLine(200);
    absl::StrAppend(&head,
                    "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                    "Transfer-Encoding: chunked\r\n",
                    keep_alive_ ? "" : "Connection: close\r\n", "\r\n");
    Queue(std::move(head), /*end=*/false);
  }
  void SendEvent(std::string_view data) override {
    QueueEvent(absl::StrCat("data: ", std::string(data), "\n\n"));
  }
  void SendNamedEvent(std::string_view event, std::string_view data) override {
    QueueEvent(absl::StrCat("event: ", std::string(event), "\ndata: ", std::string(data), "\n\n"));
  }
  // One SSE event as one chunk of the chunked body.
  void QueueEvent(const std::string& event) {
    if (closed_ || !response_started_ || end_queued_) return;
    Queue(absl::StrCat(absl::StrFormat("%x", event.size()), "\r\n", event, "\r\n"), /*end=*/false);
  }
  void EndEventStream() override {
    if (closed_ || !response_started_ || end_queued_) return;
    Queue("0\r\n\r\n", /*end=*/true);
  }
  bool closed() const override { return closed_; }
  Poster poster() const override {
    return [executor = executor_](std::function<void()> task) {
      net::post(executor, std::move(task));
    };
  }

 private:
  static std::string StatusLine(int status) {
    const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
    return absl::StrCat("HTTP/1.1 ", status, " ", std::string(reason.data(), reason.size()),
                        "\r\nServer: kvserve\r\n");
  }

  std::shared_ptr<Session> self() { return this->shared_from_this(); }
  beast::tcp_stream& transport() { return beast::get_lowest_layer(stream_); }

  // ---- TLS: the server handshake, under its own timeout; any failure
  // (plain HTTP, no or an untrusted client certificate) closes the
  // connection without an answer, as the gRPC port does ----
  void Handshake() {
    transport().expires_after(Seconds(shared_.options.handshake_timeout_s));
    stream_.async_handshake(net::ssl::stream_base::server,
                            beast::bind_front_handler(&Session::OnHandshake, self()));
  }

  void OnHandshake(beast::error_code ec) {
    if (ec) {
      Log().debug("http: TLS handshake failed: {}", ec.message());
      return Close();
    }
    ReadHeader();
  }

  // ---- reading ----
  void ReadHeader() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(shared_.options.max_header_bytes));
    parser_->body_limit(shared_.options.max_body_bytes);
    transport().expires_after(Seconds(shared_.options.header_timeout_s));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             beast::bind_front_handler(&Session::OnHeader, self()));
  }

  void OnHeader(beast::error_code ec, size_t) {
    if (ec) return ReadFailed(ec);
    if (parser_->is_done()) return OnRequest();
    const auto expect = parser_->get()[bhttp::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      transport().expires_after(Seconds(shared_.options.write_timeout_s));
      net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                       [self = this->shared_from_this()](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    transport().expires_after(Seconds(shared_.options.body_timeout_s));
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Session::OnBody, self()));
  }

  void OnBody(beast::error_code ec, size_t) {
    if (ec) return ReadFailed(ec);
    OnRequest();
  }

  void ReadFailed(beast::error_code ec) {
    // A clean close between requests, a timeout, or a socket error: just
    // close. Malformed HTTP: answer once, then close.
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
        ec == beast::error::timeout ||
        ec.category() != bhttp::make_error_code(bhttp::error::bad_target).category()) {
      return Close();
    }
    keep_alive_ = false;
    int status = 400;
    std::string message = absl::StrCat("malformed HTTP request: ", ec.message());
    if (ec == bhttp::error::body_limit) {
      status = 413;
      message = absl::StrCat("the request body exceeds ", shared_.options.max_body_bytes,
                             " bytes (--max_receive_message_bytes)");
    } else if (ec == bhttp::error::header_limit) {
      status = 431;
      message =
          absl::StrCat("the request header exceeds ", shared_.options.max_header_bytes, " bytes");
    }
    in_response_ = true;
    Respond(status, "application/json",
            absl::StrCat(R"({"error":{"message":")", message,
                         R"(","type":"invalid_request_error","param":null,"code":null}})"));
  }

  void OnRequest() {
    transport().expires_never();
    bhttp::request<bhttp::string_body>& req = parser_->get();
    keep_alive_ = req.keep_alive();
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    request.body = std::move(req.body());
    if (auto it = req.find(bhttp::field::authorization); it != req.end()) {
      request.authorization = std::string(it->value());
    }
    parser_.reset();
    in_response_ = true;
    if (buffer_.size() > 0) {
      next_ready_ = true;  // pipelined: the next request is already here
    } else {
      StartWatch();
    }
    std::shared_ptr<Exchange> exchange = shared_.handler->Handle(std::move(request), *this);
    if (in_response_ && !closed_) exchange_ = std::move(exchange);
  }

  // A read while a response is pending: it ends with an error when the
  // client leaves, or with the first bytes of its next request.
  void StartWatch() {
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            beast::bind_front_handler(&Session::OnWatch, self()));
  }

  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (ec) return Close();
    buffer_.commit(n);
    if (in_response_) {
      next_ready_ = true;
      return;
    }
    idle_timer_.cancel();
    ReadHeader();
  }

  // ---- writing: one write in flight; what is queued meanwhile goes next,
  // as one buffer ----
  void Queue(std::string bytes, bool end) {
    out_ += bytes;
    end_queued_ = end_queued_ || end;
    DoWrite();
  }

  void DoWrite() {
    if (writing_ || out_.empty() || closed_) return;
    writing_ = true;
    write_buf_ = std::move(out_);
    out_.clear();
    write_has_end_ = end_queued_;
    transport().expires_after(Seconds(shared_.options.write_timeout_s));
    net::async_write(stream_, net::buffer(write_buf_),
                     beast::bind_front_handler(&Session::OnWrite, self()));
  }

  void OnWrite(beast::error_code ec, size_t) {
    writing_ = false;
    if (ec) return Close();
    if (write_has_end_) return ResponseComplete();
    DoWrite();
  }

  void ResponseComplete() {
    in_response_ = false;
    response_started_ = false;
    end_queued_ = false;
    write_has_end_ = false;
    exchange_.reset();
    if (!keep_alive_) {
      beast::error_code ignored;
      transport().socket().shutdown(tcp::socket::shutdown_send, ignored);
      return Close();
    }
    if (next_ready_) {
      next_ready_ = false;
      return ReadHeader();
    }
    if (watching_) {  // keep-alive: the watch read waits for the next request
      idle_timer_.expires_after(Seconds(shared_.options.idle_timeout_s));
      idle_timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
        if (!ec && !self->in_response_) self->Close();
      });
      return;
    }
    ReadHeader();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    idle_timer_.cancel();
    beast::error_code ignored;
    transport().socket().shutdown(tcp::socket::shutdown_both, ignored);
    // TLS: no close_notify (an SSL shutdown would need a read and a write of
    // its own, racing the watch read); HTTP's own framing (Content-Length, the
    // last chunk) tells a client that a response is complete.
    transport().close();
    if (exchange_) {
      std::shared_ptr<Exchange> exchange = std::move(exchange_);
      exchange->OnDisconnect();
    }
  }

  Stream stream_;
  const beast::tcp_stream::executor_type executor_;  // the strand
  net::steady_timer idle_timer_;
  const Shared& shared_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<Exchange> exchange_;  // the response in progress, if it completes later
  std::string out_;                     // queued bytes
  std::string write_buf_;               // the bytes of the write in flight
  bool keep_alive_ = true;
  bool in_response_ = false;       // a request was read; its response is not complete
  bool response_started_ = false;  // Respond or BeginEventStream was called
  bool end_queued_ = false;        // the response's last bytes are queued
  bool write_has_end_ = false;     // ... and are in the write in flight
  bool writing_ = false;
  bool watching_ = false;
  bool next_ready_ = false;  // the next request's first bytes are in buffer_
  bool closed_ = false;
};

// The server side of gRPC's SslServerCredentials with the same flags: TLS
// 1.2 or 1.3, the certificate chain and key; with a client CA, a client
// certificate is required and verified against it (and only it).
absl::Status ConfigureTls(const HttpTlsOptions& tls, net::ssl::context& ctx) {
  beast::error_code ec;
  auto bad = [&ec](const char* flag, const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", what, ": ", ec.message()));
  };
  SSL_CTX* native = ctx.native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    return absl::InternalError("TLS: cannot set the minimum protocol version");
  }
  ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_compression |
                      net::ssl::context::single_dh_use,
                  ec);
  if (ec) return bad("tls_cert_file", "TLS options");
  ctx.use_certificate_chain(net::buffer(tls.cert_chain), ec);
  if (ec) return bad("tls_cert_file", "not a PEM certificate chain");
  ctx.use_private_key(net::buffer(tls.private_key), net::ssl::context::pem, ec);
  if (ec) return bad("tls_key_file", "not a PEM private key of the --tls_cert_file certificate");
  if (SSL_CTX_check_private_key(native) != 1) {
    return absl::InvalidArgumentError(
        "--tls_key_file: does not match the certificate of --tls_cert_file");
  }
  if (!tls.client_ca.empty()) {
    ctx.add_certificate_authority(net::buffer(tls.client_ca), ec);
    if (ec) return bad("tls_client_ca_file", "not PEM CA certificates");
    ctx.set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert, ec);
    if (ec) return bad("tls_client_ca_file", "TLS verify mode");
    // OpenSSL refuses to resume a session of a verified client without a
    // session id context.
    static constexpr unsigned char kSessionContext[] = "kvserve-http";
    if (SSL_CTX_set_session_id_context(native, kSessionContext, sizeof(kSessionContext) - 1) != 1) {
      return absl::InternalError("TLS: cannot set the session id context");
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct HttpServer::Impl {
  Shared shared;
  // Before ioc: outlives every Session (each SSL also holds a reference).
  std::optional<net::ssl::context> ssl;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work{ioc.get_executor()};
  tcp::acceptor acceptor{net::make_strand(ioc)};
  net::steady_timer retry{acceptor.get_executor()};
  std::vector<std::thread> threads;
  int port = 0;
  bool stopped = false;

  explicit Impl(int io_threads) : ioc(io_threads) {}

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // E.g. out of file descriptors: try again shortly, never spin.
        Log().warn("http: accept failed: {}", ec.message());
        retry.expires_after(std::chrono::milliseconds(50));
        retry.async_wait([this](beast::error_code wait_ec) {
          if (!wait_ec) Accept();
        });
        return;
      }
      if (ssl) {
        std::make_shared<Session<TlsStream>>(shared, std::move(socket), *ssl)->Start();
      } else {
        std::make_shared<Session<PlainStream>>(shared, std::move(socket))->Start();
      }
      Accept();
    });
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              RequestHandler& handler,
                                                              ServerMetrics* metrics) {
  auto impl = std::make_unique<Impl>(options.io_threads);
  impl->shared = Shared{options, &handler, metrics};
  if (options.tls) {
    impl->ssl.emplace(net::ssl::context::tls_server);
    KVSERVE_RETURN_IF_ERROR(ConfigureTls(*options.tls, *impl->ssl));
  }
  const std::string where = absl::StrCat(options.host, ":", options.port);
  auto fail = [&](const beast::error_code& ec) {
    return absl::UnavailableError(
        absl::StrCat("--host/--http_port: cannot listen on ", where, ": ", ec.message()));
  };
  beast::error_code ec;
  tcp::resolver resolver(impl->ioc);
  const auto endpoints =
      resolver.resolve(options.host, std::to_string(options.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) return fail(ec);
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl->acceptor.open(endpoint.protocol(), ec);
  if (ec) return fail(ec);
  impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (ec) return fail(ec);
  impl->acceptor.bind(endpoint, ec);
  if (ec) return fail(ec);
  impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail(ec);
  impl->port = impl->acceptor.local_endpoint(ec).port();
  if (ec) return fail(ec);
  impl->Accept();
  for (int i = 0; i < options.io_threads; ++i) {
    impl->threads.emplace_back([ioc = &impl->ioc] { ioc->run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->work.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
  // Sessions still referenced by queued handlers are destroyed with the
  // io_context (the Impl), on this thread, their sockets closed.
}

}  // namespace kvserve::server::http
