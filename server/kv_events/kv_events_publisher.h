// KvEventsPublisher: publishes the engine's KV-cache event batches over
// ZeroMQ as vLLM's ZmqEventPublisher does (docs/server.md, "KV-cache events").
//
//   PUB (endpoint):  multipart [topic, seq: 8 bytes big-endian, payload]
//   ROUTER (replay_endpoint, optional): a request [identity, "", start seq
//     (8 bytes big-endian)] is answered with every buffered batch whose seq
//     is >= start, one message each [identity, "", topic, seq, payload], then
//     the end marker [identity, "", "", seq -1 (8 bytes 0xff), ""].
//   payload: server/kv_events/event_encoding.h.
//
// Threads and ownership:
// - Enqueue runs on the engine loop thread and never waits on I/O: it stamps
//   the batch with the next sequence number and appends it to a bounded
//   queue under a mutex the publisher thread holds only to take batches. A
//   full queue drops the batch (counted): its sequence number is never sent,
//   so subscribers see the gap.
// - The publisher thread owns both sockets: it encodes, sends with
//   ZMQ_DONTWAIT (a PUB socket drops what a slow subscriber's high-water mark
//   cannot take, it never blocks), keeps the last replay_buffer_batches
//   payloads for replay and answers replay requests.
// Sequence numbers start at 0 and increase by 1 per batch handed to Enqueue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "scheduler/kv_events.h"
#include "server/kv_events/event_encoding.h"

namespace kvserve::server {

struct KvEventsPublisherOptions {
  // tcp://HOST:PORT (PORT 0: a free port; see endpoint()) or ipc://PATH.
  std::string endpoint;
  bool connect = false;         // connect the PUB socket instead of binding it
  std::string replay_endpoint;  // bound ROUTER; empty: no replay
  KvEventFormat format;
  int32_t queue_batches = 1024;            // batches waiting for the publisher thread
  int32_t replay_buffer_batches = 10'000;  // most recent batches kept for replay
  int32_t send_hwm = 100'000;              // the PUB socket's high-water mark, in messages
};

struct KvEventsCounters {
  int64_t published = 0;  // batches sent on the PUB socket
  int64_t dropped = 0;    // batches dropped because the queue was full
};

class KvEventsPublisher {
 public:
  // Binds (or connects) the sockets and starts the thread; Unavailable
  // naming the endpoint when a socket cannot bind.
  static absl::StatusOr<std::unique_ptr<KvEventsPublisher>> Start(KvEventsPublisherOptions options);
  ~KvEventsPublisher();  // Stop()
  KvEventsPublisher(const KvEventsPublisher&) = delete;
  KvEventsPublisher& operator=(const KvEventsPublisher&) = delete;

  // The bound endpoints, ports resolved (the configured one when connecting).
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

  // The topic of every message from now on (vLLM: kv@<host>:<port>@<model>).
  void SetTopic(std::string topic);
  // Engine loop thread; never blocks on I/O. Returns false if dropped.
  bool Enqueue(scheduler::KvEventBatch batch);
  KvEventsCounters counters() const;
  // Sends what is queued (up to a second), closes the sockets, joins. Idempotent.
  void Stop();

 private:
  struct Queued {
    uint64_t seq = 0;
    scheduler::KvEventBatch batch;
  };
  struct Sockets;  // the ZeroMQ context and sockets (publisher thread)

  explicit KvEventsPublisher(KvEventsPublisherOptions options);
  void Run();

  const KvEventsPublisherOptions options_;
  std::unique_ptr<Sockets> sockets_;
  std::string endpoint_;
  std::string replay_endpoint_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;  // guarded by mu_
  std::string topic_;         // guarded by mu_
  uint64_t next_seq_ = 0;     // guarded by mu_
  bool stopping_ = false;     // guarded by mu_

  std::atomic<int64_t> published_{0};
  std::atomic<int64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace kvserve::server
