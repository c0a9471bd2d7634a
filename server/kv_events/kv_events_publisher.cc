#include "server/kv_events/kv_events_publisher.h"

#include <array>
#include <chrono>
#include <cstring>
#include <iterator>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvserve::server {
namespace {

constexpr auto kIdleWait = std::chrono::milliseconds(20);
constexpr auto kStopDrainLimit = std::chrono::seconds(1);

std::array<char, 8> BigEndian(uint64_t x) {
  std::array<char, 8> b;
  for (int i = 7; i >= 0; --i, x >>= 8) b[i] = static_cast<char>(x & 0xff);
  return b;
}

uint64_t FromBigEndian(const zmq::message_t& m) {
  uint64_t x = 0;
  const auto* p = static_cast<const unsigned char*>(m.data());
  for (size_t i = 0; i < 8; ++i) x = (x << 8) | p[i];
  return x;
}

// ZeroMQ picks a free port for "*": tcp://host:0 asks for one.
std::string ZmqBindAddress(const std::string& endpoint) {
  if (absl::StartsWith(endpoint, "tcp://") && absl::EndsWith(endpoint, ":0")) {
    return absl::StrCat(endpoint.substr(0, endpoint.size() - 1), "*");
  }
  return endpoint;
}

}  // namespace

struct KvEventsPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;  // ROUTER
  // (seq, payload) of the most recent batches, oldest first.
  std::deque<std::pair<uint64_t, std::string>> buffer;
};

KvEventsPublisher::KvEventsPublisher(KvEventsPublisherOptions options)
    : options_(std::move(options)), sockets_(std::make_unique<Sockets>()) {}

absl::StatusOr<std::unique_ptr<KvEventsPublisher>> KvEventsPublisher::Start(
    KvEventsPublisherOptions options) {
  std::unique_ptr<KvEventsPublisher> p(new KvEventsPublisher(std::move(options)));
  const KvEventsPublisherOptions& o = p->options_;
  Sockets& s = *p->sockets_;
  try {
    s.pub.set(zmq::sockopt::sndhwm, o.send_hwm);
    s.pub.set(zmq::sockopt::linger, 0);
    if (o.connect) {
      s.pub.connect(o.endpoint);
      p->endpoint_ = o.endpoint;
    } else {
      s.pub.bind(ZmqBindAddress(o.endpoint));
      p->endpoint_ = s.pub.get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("--kv_events_endpoint: cannot ",
                                               o.connect ? "connect to " : "bind ", o.endpoint,
                                               ": ", e.what()));
  }
  if (!o.replay_endpoint.empty()) {
    try {
      s.replay.emplace(s.context, zmq::socket_type::router);
      // Room for two full replays (5 frames per batch, and the end marker)
      // before a reply is dropped.
      s.replay->set(zmq::sockopt::sndhwm, 2 * 5 * (o.replay_buffer_batches + 1));
      s.replay->set(zmq::sockopt::linger, 0);
      s.replay->bind(ZmqBindAddress(o.replay_endpoint));
      p->replay_endpoint_ = s.replay->get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(absl::StrCat("--kv_events_replay_endpoint: cannot bind ",
                                                 o.replay_endpoint, ": ", e.what()));
    }
  }
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

KvEventsPublisher::~KvEventsPublisher() { Stop(); }

void KvEventsPublisher::SetTopic(std::string topic) {
  std::lock_guard<std::mutex> lock(mu_);
  topic_ = std::move(topic);
}

bool KvEventsPublisher::Enqueue(scheduler::KvEventBatch batch) {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t seq = next_seq_++;  // a dropped batch's number is skipped
    if (!stopping_ && static_cast<int32_t>(queue_.size()) < options_.queue_batches) {
      queue_.push_back(Queued{.seq = seq, .batch = std::move(batch)});
      queued = true;
    }
  }
  if (queued) {
    cv_.notify_one();
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  return queued;
}

KvEventsCounters KvEventsPublisher::counters() const {
  return KvEventsCounters{.published = published_.load(std::memory_order_relaxed),
                          .dropped = dropped_.load(std::memory_order_relaxed)};
}

void KvEventsPublisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvEventsPublisher::Run() {
  Sockets& s = *sockets_;
  std::deque<Queued> taken;
  std::string topic;
  std::chrono::steady_clock::time_point stop_deadline{};
  while (true) {
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && !stopping_ && !s.replay.has_value()) {
        cv_.wait_for(lock, kIdleWait, [&] { return stopping_ || !queue_.empty(); });
      }
      taken.swap(queue_);
      topic = topic_;
      stopping = stopping_;
    }
    for (Queued& q : taken) {
      std::string payload = EncodeKvEventBatch(q.batch, options_.format);
      const std::array<char, 8> seq = BigEndian(q.seq);
      try {
        // Never blocks: past the high-water mark a PUB socket drops.
        s.pub.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        s.pub.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        s.pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
        published_.fetch_add(1, std::memory_order_relaxed);
      } catch (const zmq::error_t& e) {
        Log().warn("kv events: publishing batch {} failed: {}", q.seq, e.what());
      }
      s.buffer.emplace_back(q.seq, std::move(payload));
      while (static_cast<int32_t>(s.buffer.size()) > options_.replay_buffer_batches) {
        s.buffer.pop_front();
      }
    }
    taken.clear();
    if (s.replay.has_value()) {
      std::array<zmq::pollitem_t, 1> items{{{s.replay->handle(), 0, ZMQ_POLLIN, 0}}};
      try {
        zmq::poll(items.data(), items.size(), stopping ? std::chrono::milliseconds(0) : kIdleWait);
        while (items[0].revents & ZMQ_POLLIN) {
          std::vector<zmq::message_t> request;
          if (!zmq::recv_multipart(*s.replay, std::back_inserter(request),
                                   zmq::recv_flags::dontwait)) {
            break;
          }
          if (request.size() != 3 || request[2].size() != 8) {
            Log().warn("kv events: ignoring a replay request of {} frames", request.size());
            continue;
          }
          const uint64_t start = FromBigEndian(request[2]);
          const std::string identity = request[0].to_string();
          for (const auto& [seq, payload] : s.buffer) {
            if (seq < start) continue;
            const std::array<char, 8> seq_bytes = BigEndian(seq);
            std::array<zmq::const_buffer, 5> reply{zmq::buffer(identity), zmq::const_buffer(),
                                                   zmq::buffer(topic), zmq::buffer(seq_bytes),
                                                   zmq::buffer(payload)};
            zmq::send_multipart(*s.replay, reply, zmq::send_flags::dontwait);
          }
          const std::array<char, 8> end = BigEndian(~uint64_t{0});  // -1, as vLLM's END_SEQ
          std::array<zmq::const_buffer, 5> done{zmq::buffer(identity), zmq::const_buffer(),
                                                zmq::const_buffer(), zmq::buffer(end),
                                                zmq::const_buffer()};
          zmq::send_multipart(*s.replay, done, zmq::send_flags::dontwait);
        }
      } catch (const zmq::error_t& e) {
        Log().warn("kv events: replay failed: {}", e.what());
      }
    }
    if (stopping) {
      // Stop(): everything queued before it has been taken by now, or is
      // taken in the next rounds, bounded by kStopDrainLimit.
      if (stop_deadline == std::chrono::steady_clock::time_point{}) {
        stop_deadline = std::chrono::steady_clock::now() + kStopDrainLimit;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty() || std::chrono::steady_clock::now() > stop_deadline) break;
    }
  }
  s.pub.close();
  if (s.replay.has_value()) s.replay->close();
}

}  // namespace kvserve::server
