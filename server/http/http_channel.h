// The seam between the HTTP transport (http_server.cc, Boost.Beast) and the
// endpoints (openai_handlers.cc): plain types, no Beast.
//
// Thread affinity: every connection has a strand (an Asio serial executor).
// RequestHandler::Handle, every HttpChannel method and every Exchange method
// run on it; nothing else touches the connection. Work from other threads
// (engine outputs, on the engine loop thread) reaches it through the
// Poster, which queues a task on the strand and never blocks.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kvserve::server::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::string body;
  std::optional<std::string> authorization;  // the Authorization header
};

// Runs a task on the connection's strand; callable from any thread, even
// after the connection closed (the task then runs and finds it closed).
// Tasks still queued when the server stops are dropped, not run.
using Poster = std::function<void(std::function<void()>)>;

// One response on one connection. Either Respond once, or BeginEventStream,
// then SendEvent any number of times, then EndEventStream. Calls after the
// connection closed are no-ops (closed() says so).
class HttpChannel {
 public:
  virtual ~HttpChannel() = default;
  virtual void Respond(int status, std::string content_type, std::string body) = 0;
  // 200, text/event-stream, chunked transfer encoding.
  virtual void BeginEventStream() = 0;
  // Sends "data: <data>\n\n" as one chunk.
  virtual void SendEvent(std::string_view data) = 0;
  // Sends "event: <event>\ndata: <data>\n\n" as one chunk (the Responses
  // API names its events).
  virtual void SendNamedEvent(std::string_view event, std::string_view data) = 0;
  virtual void EndEventStream() = 0;
  virtual bool closed() const = 0;
  virtual Poster poster() const = 0;
};

// A response that completes later (a generation). The connection owns it
// (the only strong reference) until its response is written or the client
// goes away; it must not outlive the channel it was given.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // The client closed the connection (or a write failed) before the
  // response completed: stop the work behind it.
  virtual void OnDisconnect() = 0;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Answers through `channel`, now or later; returns the Exchange to keep
  // alive when the answer comes later (nullptr when it was given now).
  virtual std::shared_ptr<Exchange> Handle(HttpRequest request, HttpChannel& channel) = 0;
};

}  // namespace kvserve::server::http
